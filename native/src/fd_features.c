/* KV-injection staging: the target's captured layer inputs -> one feature row per token.
 *
 * What it is: the copy that runs after every target decode while a DFlash 2 draft is
 * attached. llama.cpp keeps each tapped layer's inputs of the last batch in its own
 * [n_batch x n_embd] buffer; the draft's injection batch wants, per committed token, the
 * taps side by side ([n_taps * n_embd]). Done in Python this was a third of a millisecond
 * per step (array views, fancy indexing, a concatenate); here it is a few memcpys.
 * What it is not: the injection itself (a llama_decode of the draft, engine/speculative/drafters/dflash.py).
 */
#include "flashdesk.h"

#include <stddef.h>
#include <string.h>

fd_status fd_gather_features(const float *const *layers, int32_t n_layers, int64_t n_embd, int32_t n_src_rows,
                             const int32_t *rows, int32_t n_rows, float *out) {
    if (layers == NULL || rows == NULL || out == NULL || n_layers < 1 || n_embd < 1 || n_src_rows < 1 ||
        n_rows < 0) {
        return FD_ERR_ARG;
    }
    for (int32_t l = 0; l < n_layers; l++) {
        if (layers[l] == NULL) {
            return FD_ERR_ARG;
        }
    }
    for (int32_t r = 0; r < n_rows; r++) {
        if (rows[r] < 0 || rows[r] >= n_src_rows) {
            return FD_ERR_ARG; /* checked before anything is written */
        }
    }
    const size_t row_bytes = (size_t)n_embd * sizeof(float);
    for (int32_t r = 0; r < n_rows; r++) {
        float *dst = out + (size_t)r * (size_t)n_layers * (size_t)n_embd;
        for (int32_t l = 0; l < n_layers; l++) {
            memcpy(dst + (size_t)l * (size_t)n_embd, layers[l] + (size_t)rows[r] * (size_t)n_embd, row_bytes);
        }
    }
    return FD_OK;
}
