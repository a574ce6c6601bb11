/* Acceptance: how much of the verified path the target keeps, and its next token.
 *
 * What it is: greedy acceptance (temperature 0: exact token-for-token parity with
 * plain decoding), the row argmax that feeds it, and speculative (rejection)
 * sampling for temperature > 0, which keeps each emitted token distributed exactly
 * as the target's sampler would draw it.
 * What it is not: the target's sampler (temperature, top-k, top-p, grammar masks are
 * applied by the caller before these functions see p), nor any RNG: the caller
 * passes uniforms, so every result is reproducible and testable.
 *
 * References: Leviathan, Kalman, Matias, "Fast Inference from Transformers via
 * Speculative Decoding" (2023), Algorithm 1 and Appendix A.1 (the proof that
 * accept-with-min(1, p/q), else draw from norm(max(0, p - q)), yields p);
 * Chen et al., "Accelerating LLM Decoding with Speculative Sampling" (2023).
 * NumPy reference: tests/native/numpy_reference.py.
 */
#include "flashdesk.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

fd_status fd_accept_greedy(const int32_t *path, int32_t T, const int32_t *target_argmax,
                           int32_t *n_accepted, int32_t *bonus) {
    if (target_argmax == NULL || n_accepted == NULL || bonus == NULL || T < 0 || (T > 0 && path == NULL)) {
        return FD_ERR_ARG;
    }
    int32_t n = 0;
    while (n < T && path[n] == target_argmax[n]) {
        n++;
    }
    *n_accepted = n;
    *bonus = target_argmax[n];
    return FD_OK;
}

/* First index of the maximum of row[0..n-1] (numpy.argmax), or -1 if any entry is NaN.
 * The target's logits row is the whole vocabulary (49152 for SmolLM2) at every verify
 * position, so this loop is hot. With GCC/Clang it runs on 4 independent SIMD chains
 * of 4 floats (vector extensions: SSE on x86-64, NEON on ARM); each lane keeps its
 * maximum and the index where it last rose strictly, so the first occurrence wins
 * within a lane and the smallest index among the lanes holding the maximum wins
 * overall. The blends keep `v > m ? v : m`, exact and fast-math free. A dependent
 * scalar chain was 9x slower than numpy.argmax, and -O2 does not vectorise it.
 * Other compilers get the scalar loop. */
#if defined(__GNUC__)
typedef float fd_f4 __attribute__((vector_size(16)));
typedef int32_t fd_i4 __attribute__((vector_size(16)));

#  define FD_ARGMAX_STEP(m, at, bad, pos, where)                       \
    do {                                                               \
        fd_f4 v_;                                                      \
        memcpy(&v_, (where), sizeof v_); /* an unaligned load */       \
        const fd_i4 gt_ = v_ > (m);                                    \
        (m) = (fd_f4)((gt_ & (fd_i4)v_) | (~gt_ & (fd_i4)(m)));       \
        (at) = (gt_ & (pos)) | (~gt_ & (at));                          \
        (bad) |= v_ != v_;                                             \
    } while (0)
#endif

static int32_t row_argmax(const float *row, int32_t n) {
    float best = row[0];
    int32_t arg = 0, nan = row[0] != row[0];
    int32_t j = 1;
#if defined(__GNUC__)
    if (n >= 16) {
        fd_f4 m0 = {best, best, best, best}, m1 = m0, m2 = m0, m3 = m0;
        fd_i4 a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0, bad = a0;
        fd_i4 pos = {0, 1, 2, 3};
        const fd_i4 four = {4, 4, 4, 4}, sixteen = {16, 16, 16, 16};
        for (j = 0; j + 16 <= n; j += 16, pos += sixteen) {
            FD_ARGMAX_STEP(m0, a0, bad, pos, row + j);
            FD_ARGMAX_STEP(m1, a1, bad, pos + four, row + j + 4);
            FD_ARGMAX_STEP(m2, a2, bad, pos + 2 * four, row + j + 8);
            FD_ARGMAX_STEP(m3, a3, bad, pos + 3 * four, row + j + 12);
        }
        for (int l = 0; l < 4; l++) {
            const float lane_max[4] = {m0[l], m1[l], m2[l], m3[l]};
            const int32_t lane_arg[4] = {a0[l], a1[l], a2[l], a3[l]};
            for (int k = 0; k < 4; k++) {
                if (lane_max[k] > best || (lane_max[k] == best && lane_arg[k] < arg)) {
                    best = lane_max[k];
                    arg = lane_arg[k];
                }
            }
            nan |= bad[l] != 0;
        }
    }
#endif
    for (; j < n; j++) { /* the tail (all of a short or non-GNU row): index order */
        if (row[j] > best) {
            best = row[j];
            arg = j;
        }
        nan |= row[j] != row[j];
    }
    return nan ? -1 : arg;
}

fd_status fd_argmax_rows(const float *logits, int32_t n_rows, int32_t n_vocab, int64_t row_stride,
                         int32_t *out) {
    if (n_rows < 0 || n_vocab < 1 || row_stride < n_vocab) {
        return FD_ERR_ARG;
    }
    if (n_rows > 0 && (logits == NULL || out == NULL)) {
        return FD_ERR_ARG;
    }
    for (int32_t r = 0; r < n_rows; r++) {
        const float *row = logits + (int64_t)r * row_stride;
        out[r] = row_argmax(row, n_vocab);
        if (out[r] < 0) {
            return FD_ERR_VALUE;
        }
    }
    return FD_OK;
}

/* Candidates of one position merged by id and sorted ascending, so the vocabulary
 * can be walked in id order against them without a full-vocabulary workspace. */
typedef struct {
    int32_t n;
    int32_t id[FD_MAX_K];
    double q[FD_MAX_K];
} fd_cands;

static fd_status cands_load(const int32_t *ids, const float *q, int32_t K, int32_t V, fd_cands *c) {
    c->n = 0;
    for (int32_t k = 0; k < K; k++) {
        const int32_t id = ids[k];
        if (id < 0 || id >= V || !(q[k] >= 0.0f) || !isfinite(q[k])) {
            return FD_ERR_VALUE;
        }
        int32_t j = 0;
        while (j < c->n && c->id[j] < id) {
            j++;
        }
        if (j < c->n && c->id[j] == id) {
            c->q[j] += q[k]; /* a duplicate id: q of a token is the sum of its entries */
            continue;
        }
        for (int32_t m = c->n; m > j; m--) {
            c->id[m] = c->id[m - 1];
            c->q[m] = c->q[m - 1];
        }
        c->id[j] = id;
        c->q[j] = q[k];
        c->n++;
    }
    return FD_OK;
}

static double cands_q(const fd_cands *c, int32_t id) {
    for (int32_t j = 0; j < c->n; j++) {
        if (c->id[j] == id) {
            return c->q[j];
        }
    }
    return 0.0;
}

/* Draw y with probability r(y) / sum(r), r(y) = max(0, p(y) - q(y)) (q = NULL: r = p),
 * by inverse CDF in id order with uniform u. Two passes over the row: the first
 * checks p and sums, the second repeats the same sums until they pass u * sum. */
static fd_status draw_residual(const float *p, int32_t V, const fd_cands *c, float u, int32_t *token) {
    double z = 0.0;
    int32_t last = -1;
    for (int32_t y = 0, j = 0; y < V; y++) {
        const float py = p[y];
        if (!(py >= 0.0f) || !isfinite(py)) {
            return FD_ERR_VALUE;
        }
        double r = py;
        if (c != NULL && j < c->n && c->id[j] == y) {
            r = r - c->q[j++];
            r = r > 0.0 ? r : 0.0;
        }
        if (r > 0.0) {
            last = y;
        }
        z += r;
    }
    if (last < 0) {
        return FD_ERR_VALUE; /* nothing to draw from */
    }
    const double target = (double)u * z;
    double cum = 0.0;
    for (int32_t y = 0, j = 0; y < V; y++) {
        double r = p[y];
        if (c != NULL && j < c->n && c->id[j] == y) {
            r = r - c->q[j++];
            r = r > 0.0 ? r : 0.0;
        }
        cum += r;
        if (cum > target) {
            *token = y;
            return FD_OK;
        }
    }
    *token = last; /* unreachable with u < 1 and identical sums; a guard, not a path */
    return FD_OK;
}

fd_status fd_accept_sample(const float *p, int32_t V, const int32_t *path, int32_t T,
                           const int32_t *cand_ids, const float *cand_q, int32_t K,
                           const float *uniforms, int32_t *n_accepted, int32_t *token) {
    if (p == NULL || uniforms == NULL || n_accepted == NULL || token == NULL || T < 0 || V < 1 ||
        K < 1 || K > FD_MAX_K) {
        return FD_ERR_ARG;
    }
    if (T > 0 && (path == NULL || cand_ids == NULL || cand_q == NULL)) {
        return FD_ERR_ARG;
    }
    for (int64_t j = 0; j < 2 * (int64_t)T + 2; j++) {
        if (j != 2 * (int64_t)T && !(uniforms[j] >= 0.0f && uniforms[j] < 1.0f)) {
            return FD_ERR_VALUE;
        }
    }
    fd_cands c;
    for (int32_t t = 0; t < T; t++) {
        const float *pt = p + (int64_t)t * V;
        fd_status st = cands_load(cand_ids + (int64_t)t * K, cand_q + (int64_t)t * K, K, V, &c);
        if (st != FD_OK) {
            return st;
        }
        const int32_t x = path[t];
        if (x < 0 || x >= V) {
            return FD_ERR_VALUE;
        }
        const double qx = cands_q(&c, x);
        const float px = pt[x];
        if (!(qx > 0.0) || !(px >= 0.0f) || !isfinite(px)) {
            return FD_ERR_VALUE; /* a path token q could not have proposed, or a broken p */
        }
        if ((double)uniforms[2 * t] < (double)px / qx) {
            continue; /* accepted with probability min(1, p/q) */
        }
        *n_accepted = t;
        st = draw_residual(pt, V, &c, uniforms[2 * t + 1], token);
        if (st == FD_ERR_VALUE) {
            /* Residual all zero: p <= q everywhere, so rejecting had probability ~0 and
             * only rounding of p/q got here; p itself is then the right law. */
            st = draw_residual(pt, V, NULL, uniforms[2 * t + 1], token);
        }
        return st;
    }
    *n_accepted = T;
    return draw_residual(p + (int64_t)T * V, V, NULL, uniforms[2 * T + 1], token);
}
