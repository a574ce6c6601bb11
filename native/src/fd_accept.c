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
 * NumPy reference: engine/spec/reference.py.
 */
#include "flashdesk.h"

#include <math.h>
#include <stddef.h>

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
        float best = row[0];
        int32_t arg = 0;
        if (best != best) {
            return FD_ERR_VALUE;
        }
        for (int32_t j = 1; j < n_vocab; j++) {
            /* One compare per element on the common path: !(v <= best) is v > best or v NaN. */
            const float v = row[j];
            if (!(v <= best)) {
                if (v != v) {
                    return FD_ERR_VALUE;
                }
                best = v;
                arg = j;
            }
        }
        out[r] = arg;
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
