/* Path selectors over the DFlash 2 lattice: which B-1 tokens to send to verify.
 *
 * What it is: five ways to pick one candidate per path position from the K x K
 * transition scores the draft graph computed (layout in flashdesk.h):
 *   walk     upstream llama.cpp's greedy walk (the selector was trained for it),
 *   viterbi  the max-product path under p_t(b|a) = softmax_b score_t[a][b],
 *   dp       the path with the most expected accepted tokens (docs/llama-cpp.md, The lattice),
 *   top1     DFlash v1: each position's best unary logit, ignoring transitions,
 *   sample   the walk with draws instead of argmaxes, for temperature > 0.
 * What it is not: the draft forward, the top-K or the scores (llama.cpp's graph does
 * those on CPU/CUDA/Metal), nor acceptance (fd_accept.c).
 *
 * Work arrays live on the stack (T, K <= 64: backpointers 4 KiB), so no function
 * allocates. Ties of computed values go to the lowest index, as upstream's
 * std::max_element does; the NumPy reference is tests/native/numpy_reference.py.
 */
#include "fd_lattice.h"

#include <math.h>
#include <stddef.h>

fd_status fd_select_walk(const float *lattice, int64_t stride, int32_t T, int32_t K,
                         float temperature, int32_t *idx, int32_t *ids, float *q) {
    fd_status st = fd_lat_check(lattice, stride, T, K, idx, ids);
    if (st != FD_OK) {
        return st;
    }
    if (q != NULL && !fd_lat_temperature_ok(temperature)) {
        return FD_ERR_ARG;
    }
    int32_t pred = 0; /* the anchor: slot 1's K rows are identical, row 0 stands for them */
    for (int32_t t = 0; t < T; t++) {
        pred = fd_lat_argmax(fd_lat_row(lattice, stride, K, t, pred), K);
        idx[t] = pred;
    }
    fd_lat_finish(lattice, stride, T, K, temperature, idx, ids, q);
    return FD_OK;
}

fd_status fd_select_viterbi(const float *lattice, int64_t stride, int32_t T, int32_t K,
                            float temperature, int32_t *idx, int32_t *ids, float *q) {
    fd_status st = fd_lat_check(lattice, stride, T, K, idx, ids);
    if (st != FD_OK) {
        return st;
    }
    if (q != NULL && !fd_lat_temperature_ok(temperature)) {
        return FD_ERR_ARG;
    }
    /* delta[b] = best log-probability of any path ending in candidate b at position t.
     * Log space: a product of up to 64 small probabilities can underflow, a sum cannot. */
    double delta[FD_MAX_K], next[FD_MAX_K], lse[FD_MAX_K];
    uint8_t back[FD_MAX_T][FD_MAX_K]; /* back[t][b]: best predecessor of b at t (t >= 1) */

    const float *row0 = fd_lat_row(lattice, stride, K, 0, 0);
    const double lse0 = fd_lat_logsumexp(row0, K);
    for (int32_t b = 0; b < K; b++) {
        delta[b] = (double)row0[b] - lse0;
    }
    for (int32_t t = 1; t < T; t++) {
        for (int32_t a = 0; a < K; a++) {
            lse[a] = fd_lat_logsumexp(fd_lat_row(lattice, stride, K, t, a), K);
        }
        for (int32_t b = 0; b < K; b++) {
            double best = 0.0;
            int32_t arg = 0;
            for (int32_t a = 0; a < K; a++) {
                const double v = delta[a] + ((double)fd_lat_row(lattice, stride, K, t, a)[b] - lse[a]);
                if (a == 0 || v > best) {
                    best = v;
                    arg = a;
                }
            }
            next[b] = best;
            back[t][b] = (uint8_t)arg;
        }
        for (int32_t b = 0; b < K; b++) {
            delta[b] = next[b];
        }
    }
    int32_t b = 0;
    for (int32_t c = 1; c < K; c++) {
        if (delta[c] > delta[b]) {
            b = c;
        }
    }
    for (int32_t t = T - 1; t >= 0; t--) {
        idx[t] = b;
        if (t > 0) {
            b = back[t][b];
        }
    }
    fd_lat_finish(lattice, stride, T, K, temperature, idx, ids, q);
    return FD_OK;
}

fd_status fd_select_dp(const float *lattice, int64_t stride, int32_t T, int32_t K,
                       float temperature, int32_t *idx, int32_t *ids, float *q, float *expected) {
    fd_status st = fd_lat_check(lattice, stride, T, K, idx, ids);
    if (st != FD_OK) {
        return st;
    }
    if (q != NULL && !fd_lat_temperature_ok(temperature)) {
        return FD_ERR_ARG;
    }
    /* Backward: value[a] = V_{t+1}(a) on entry to step t, the expected number of
     * accepted tokens from position t+1 on when position t holds candidate a (the
     * draft's p stands in for the target's). Position t's token is accepted only if
     * all before it were, hence p * (1 + V): the token itself plus what follows. */
    double value[FD_MAX_K], prev[FD_MAX_K], w[FD_MAX_K];
    uint8_t choice[FD_MAX_T][FD_MAX_K]; /* choice[t][a]: best b at t after a at t-1 */
    for (int32_t b = 0; b < K; b++) {
        value[b] = 0.0; /* V_T */
    }
    for (int32_t t = T - 1; t >= 0; t--) {
        const int32_t n_pred = t == 0 ? 1 : K; /* position 0 has the anchor only */
        for (int32_t a = 0; a < n_pred; a++) {
            const double z = fd_lat_softmax(fd_lat_row(lattice, stride, K, t, a), K, 1.0, w);
            double best = -1.0;
            int32_t arg = 0;
            for (int32_t b = 0; b < K; b++) {
                const double v = (w[b] / z) * (1.0 + value[b]);
                if (v > best) {
                    best = v;
                    arg = b;
                }
            }
            prev[a] = best;
            choice[t][a] = (uint8_t)arg;
        }
        for (int32_t a = 0; a < n_pred; a++) {
            value[a] = prev[a];
        }
    }
    /* Forward from the anchor along the argmaxes. */
    int32_t a = 0;
    for (int32_t t = 0; t < T; t++) {
        a = choice[t][a];
        idx[t] = a;
    }
    if (expected != NULL) {
        *expected = (float)value[0];
    }
    fd_lat_finish(lattice, stride, T, K, temperature, idx, ids, q);
    return FD_OK;
}

fd_status fd_select_top1(const float *lattice, int64_t stride, int32_t T, int32_t K,
                         const float *unary, float temperature,
                         int32_t *idx, int32_t *ids, float *q) {
    fd_status st = fd_lat_check(lattice, stride, T, K, idx, ids);
    if (st != FD_OK) {
        return st;
    }
    if (unary == NULL || (q != NULL && !fd_lat_temperature_ok(temperature))) {
        return FD_ERR_ARG;
    }
    for (int64_t j = 0; j < (int64_t)T * K; j++) {
        if (!isfinite(unary[j])) {
            return FD_ERR_VALUE;
        }
    }
    for (int32_t t = 0; t < T; t++) {
        idx[t] = fd_lat_argmax(unary + (int64_t)t * K, K);
    }
    fd_lat_finish(lattice, stride, T, K, temperature, idx, ids, q);
    return FD_OK;
}

fd_status fd_select_sample(const float *lattice, int64_t stride, int32_t T, int32_t K,
                           float temperature, const float *uniforms,
                           int32_t *idx, int32_t *ids, float *q) {
    fd_status st = fd_lat_check(lattice, stride, T, K, idx, ids);
    if (st != FD_OK) {
        return st;
    }
    if (uniforms == NULL || !fd_lat_temperature_ok(temperature)) {
        return FD_ERR_ARG;
    }
    for (int32_t t = 0; t < T; t++) {
        if (!(uniforms[t] >= 0.0f && uniforms[t] < 1.0f)) {
            return FD_ERR_VALUE;
        }
    }
    double w[FD_MAX_K];
    int32_t pred = 0;
    for (int32_t t = 0; t < T; t++) {
        const double z = fd_lat_softmax(fd_lat_row(lattice, stride, K, t, pred), K, temperature, w);
        /* Inverse CDF in candidate order: the first b whose running sum passes u*z.
         * u < 1 and the same sums as z, so some b passes; the fallback (the last b
         * with mass) only guards against a compiler reordering the sums. */
        const double target = (double)uniforms[t] * z;
        double cum = 0.0;
        int32_t pick = -1, last = 0;
        for (int32_t b = 0; b < K; b++) {
            cum += w[b];
            if (w[b] > 0.0) {
                last = b;
            }
            if (cum > target) {
                pick = b;
                break;
            }
        }
        pred = pick >= 0 ? pick : last;
        idx[t] = pred;
        if (q != NULL) {
            for (int32_t b = 0; b < K; b++) {
                q[(int64_t)t * K + b] = (float)(w[b] / z);
            }
        }
    }
    fd_lat_finish(lattice, stride, T, K, temperature, idx, ids, NULL);
    return FD_OK;
}
