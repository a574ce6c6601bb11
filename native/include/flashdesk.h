/* flashdesk native library: the host-side math of the speculative step.
 *
 * What it is: path selectors over the DFlash 2 lattice, token acceptance and the
 * gather of captured target features for KV injection,
 * callable through a small C API (llama.cpp style: fd_<noun>_<verb>, sized ints,
 * status codes, never aborts on bad input). What it is not: anything that touches
 * llama.cpp or a model; callers pass plain arrays. No allocation, no RNG, no
 * global state: every function is reentrant and reproducible.
 *
 * Words as in docs/architecture.md, Words. Each entry point has a NumPy reference in
 * tests/native/numpy_reference.py (the specification the tests hold this code to).
 */
#ifndef FLASHDESK_H
#define FLASHDESK_H

#include <stdint.h>

#if defined(_WIN32) && defined(FD_BUILD)
#  define FD_API __declspec(dllexport)
#elif defined(_WIN32)
#  define FD_API __declspec(dllimport)
#elif defined(FD_BUILD)
#  define FD_API __attribute__((visibility("default")))
#else
#  define FD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FD_OK = 0,
    FD_ERR_ARG = -1,   /* a NULL pointer, a size out of range */
    FD_ERR_VALUE = -2, /* a NaN or otherwise unusable number in the input */
} fd_status;

/* Limits of the selectors (stack-sized work arrays, no allocation). */
#define FD_MAX_T 64 /* path positions per block (B - 1) */
#define FD_MAX_K 64 /* candidates per position */

/* Version of this library's API; bump on any change of a signature. */
FD_API int32_t fd_api_version(void);

/* ---------------------------------------------------------------------------
 * Path selectors (fd_select.c)
 *
 * The lattice, read in place from the draft's output buffer:
 *   `lattice` points at the block's slot-0 (anchor) row, which is never read;
 *   slot i's row starts at lattice + i*stride (stride = the draft's n_embd);
 *   path position t (0-based, 0 <= t < T) is slot t+1. A row holds
 *   [K candidate ids as float32 | K*K scores | padding], scores predecessor-major:
 *   score_t[a][b] = row[K + a*K + b] = score of candidate b at position t given
 *   candidate a at position t-1. At t = 0 the predecessor is the anchor and every
 *   selector reads score row a = 0 (the draft writes K identical rows there).
 *   p_t(b|a) = softmax over b of score_t[a][:].
 *   The caller guarantees T+1 rows of `stride` floats are readable.
 *
 * Common arguments and checks (FD_ERR_ARG): lattice, idx, ids non-NULL;
 *   1 <= T <= FD_MAX_T; 1 <= K <= FD_MAX_K; stride >= K + K*K; q != NULL needs a
 *   finite temperature > 0 (temperature is not read when q is NULL).
 * Value checks (FD_ERR_VALUE): every one of the T*K*K scores must be finite; every
 *   one of the T*K candidate ids must be an integer in [0, 2^31).
 * Outputs: idx[T] = chosen candidate index per position, ids[T] = its token id;
 *   q[T*K] (optional) = softmax(score_t[idx[t-1]][:] / temperature) along the
 *   chosen path (idx[-1] = row 0). For the deterministic selectors q is
 *   informational only: rejection sampling is lossless only against the
 *   distribution a token was drawn from (fd_select_sample's q, or a point mass).
 * Ties: exact ties of the computed values go to the lowest index (like
 *   std::max_element / numpy.argmax). Outputs are unspecified on error.
 * ------------------------------------------------------------------------- */

/* Upstream llama.cpp's greedy walk: from the anchor, at each position the argmax of
 * score_t[pred][:], which becomes the next predecessor. The parity baseline. */
FD_API fd_status fd_select_walk(const float *lattice, int64_t stride, int32_t T, int32_t K,
                                float temperature, int32_t *idx, int32_t *ids, float *q);

/* Max-product path: argmax over paths of prod_t p_t(x_t | x_{t-1}) (in log space). */
FD_API fd_status fd_select_viterbi(const float *lattice, int64_t stride, int32_t T, int32_t K,
                                   float temperature, int32_t *idx, int32_t *ids, float *q);

/* The path with the most expected accepted tokens (if the target agreed with the
 * draft's p): V_T = 0, V_t(a) = max_b p_t(b|a) * (1 + V_{t+1}(b)), then forward from
 * the anchor taking each argmax. expected (optional) = V_0, in [0, T]. */
FD_API fd_status fd_select_dp(const float *lattice, int64_t stride, int32_t T, int32_t K,
                              float temperature, int32_t *idx, int32_t *ids, float *q, float *expected);

/* DFlash v1: each position's best unary candidate, independently. unary[T*K] holds
 * the draft's logit of each candidate (gathered by the caller); must be finite. */
FD_API fd_status fd_select_top1(const float *lattice, int64_t stride, int32_t T, int32_t K,
                                const float *unary, float temperature,
                                int32_t *idx, int32_t *ids, float *q);

/* Sampling walk for temperature > 0: from the anchor, draw b ~ q_t =
 * softmax(score_t[pred][:] / temperature) by inverse CDF (candidate order) with
 * the caller's uniforms[T] in [0, 1) (FD_ERR_VALUE otherwise). temperature must be
 * finite and > 0 here even when q is NULL. */
FD_API fd_status fd_select_sample(const float *lattice, int64_t stride, int32_t T, int32_t K,
                                  float temperature, const float *uniforms,
                                  int32_t *idx, int32_t *ids, float *q);

/* ---------------------------------------------------------------------------
 * Acceptance (fd_accept.c)
 * ------------------------------------------------------------------------- */

/* Greedy verify: n_accepted = the longest prefix of path[T] equal to the target's
 * argmax at each verify position; bonus = target_argmax[n_accepted].
 * target_argmax has T+1 entries. T >= 0 (T = 0: no path, only the bonus). */
FD_API fd_status fd_accept_greedy(const int32_t *path, int32_t T, const int32_t *target_argmax,
                                  int32_t *n_accepted, int32_t *bonus);

/* out[r] = argmax of row r (logits + r*row_stride, n_vocab floats), ties and
 * +inf to the first, all -inf -> 0: exactly numpy.argmax. A NaN -> FD_ERR_VALUE
 * (a broken model; numpy would return the NaN's index). n_rows >= 0,
 * n_vocab >= 1, row_stride >= n_vocab (in floats). */
FD_API fd_status fd_argmax_rows(const float *logits, int32_t n_rows, int32_t n_vocab, int64_t row_stride,
                                int32_t *out);

/* Speculative (rejection) sampling, lossless: each emitted token is distributed as p.
 *   p[(T+1)*V]: the target sampler's full distribution at each verify position (rows
 *     sum to 1; temperature/top-k/top-p/min-p already applied by the caller).
 *   path[T]: the proposed tokens; cand_ids[T*K], cand_q[T*K]: the proposal q_t at
 *     each position over K candidate ids (q of any other token is 0; duplicate ids
 *     add up). A deterministic path is a point mass: K = 1, cand_ids = path, q = 1.
 *   uniforms[2*(T+1)] in [0, 1): uniforms[2t] decides acceptance at position t,
 *     uniforms[2t+1] draws its replacement; uniforms[2T+1] draws the bonus
 *     (uniforms[2T] is not read).
 * For t = 0..T-1: accept path[t] if uniforms[2t] < p_t(x)/q_t(x); on the first
 * rejection draw the replacement from normalize(max(0, p_t - q_t)) and stop; if
 * all T are accepted draw the bonus from p_T. Draws are by inverse CDF in token-id
 * order, two passes over the row (normaliser, then draw): no workspace.
 * If the residual is all zero (p <= q everywhere: rejection had probability ~0 and
 * only rounding got here) the replacement is drawn from p_t.
 * Outputs: n_accepted in [0, T], token = the replacement or the bonus.
 * Checks: T >= 0, 1 <= K <= FD_MAX_K, V >= 1, pointers non-NULL (FD_ERR_ARG);
 * path/candidate ids in [0, V), q >= 0 and finite, q_t(path[t]) > 0, the p entries
 * read finite and >= 0, a drawn-from row not all zero, uniforms in [0, 1)
 * (FD_ERR_VALUE). Only the p rows it needs are read in full. */
FD_API fd_status fd_accept_sample(const float *p, int32_t V, const int32_t *path, int32_t T,
                                  const int32_t *cand_ids, const float *cand_q, int32_t K,
                                  const float *uniforms, int32_t *n_accepted, int32_t *token);

/* ---------------------------------------------------------------------------
 * Feature staging for KV injection (fd_features.c)
 * ------------------------------------------------------------------------- */

/* out[r] = [layers[0][rows[r]] | layers[1][rows[r]] | ...], n_layers * n_embd floats per
 * row: the captured inputs of the draft's tapped target layers for the batch rows the
 * target committed. layers[l] points at a [n_src_rows x n_embd] float buffer (llama.cpp's
 * layer-input capture of the last decode). Checks (FD_ERR_ARG, nothing written): NULL
 * pointers, n_layers >= 1, n_embd >= 1, n_src_rows >= 1, n_rows >= 0, every row id in
 * [0, n_src_rows). out holds n_rows * n_layers * n_embd floats. */
FD_API fd_status fd_gather_features(const float *const *layers, int32_t n_layers, int64_t n_embd, int32_t n_src_rows,
                                    const int32_t *rows, int32_t n_rows, float *out);

#ifdef __cplusplus
}
#endif

#endif /* FLASHDESK_H */
