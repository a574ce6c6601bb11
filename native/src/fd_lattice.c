/* Lattice access, checks and row softmax for the path selectors (see fd_lattice.h).
 *
 * Why the checks read everything: a NaN score or a non-integer "id" means the caller
 * passed the wrong buffer (logits instead of the nextn rows, a wrong stride); refusing
 * it costs T*K*(K+1) reads, about a microsecond, and turns a silent wrong path into
 * an error the engine can report.
 */
#include "fd_lattice.h"

#include <math.h>
#include <stddef.h>

fd_status fd_lat_check(const float *lattice, int64_t stride, int32_t T, int32_t K,
                       const int32_t *idx, const int32_t *ids) {
    if (lattice == NULL || idx == NULL || ids == NULL) {
        return FD_ERR_ARG;
    }
    if (T < 1 || T > FD_MAX_T || K < 1 || K > FD_MAX_K || stride < (int64_t)K + (int64_t)K * K) {
        return FD_ERR_ARG;
    }
    for (int32_t t = 0; t < T; t++) {
        const float *cands = fd_lat_cands(lattice, stride, t);
        for (int32_t k = 0; k < K; k++) {
            const float v = cands[k];
            /* NaN fails the range test; 2^31 is exact in float32. */
            if (!(v >= 0.0f && v < 2147483648.0f) || v != floorf(v)) {
                return FD_ERR_VALUE;
            }
        }
        const float *scores = fd_lat_row(lattice, stride, K, t, 0);
        for (int32_t j = 0; j < K * K; j++) {
            if (!isfinite(scores[j])) {
                return FD_ERR_VALUE;
            }
        }
    }
    return FD_OK;
}

double fd_lat_softmax(const float *row, int32_t K, double temperature, double *w) {
    double m = row[0];
    for (int32_t b = 1; b < K; b++) {
        m = row[b] > m ? row[b] : m;
    }
    double z = 0.0;
    for (int32_t b = 0; b < K; b++) {
        w[b] = exp(((double)row[b] - m) / temperature);
        z += w[b];
    }
    return z;
}

double fd_lat_logsumexp(const float *row, int32_t K) {
    double w[FD_MAX_K];
    double m = row[0];
    for (int32_t b = 1; b < K; b++) {
        m = row[b] > m ? row[b] : m;
    }
    return m + log(fd_lat_softmax(row, K, 1.0, w));
}

int32_t fd_lat_argmax(const float *row, int32_t K) {
    int32_t best = 0;
    for (int32_t b = 1; b < K; b++) {
        if (row[b] > row[best]) {
            best = b;
        }
    }
    return best;
}

void fd_lat_finish(const float *lattice, int64_t stride, int32_t T, int32_t K, double temperature,
                   const int32_t *idx, int32_t *ids, float *q) {
    double w[FD_MAX_K];
    for (int32_t t = 0; t < T; t++) {
        ids[t] = (int32_t)fd_lat_cands(lattice, stride, t)[idx[t]];
        if (q != NULL) {
            const int32_t pred = t == 0 ? 0 : idx[t - 1];
            const double z = fd_lat_softmax(fd_lat_row(lattice, stride, K, t, pred), K, temperature, w);
            for (int32_t b = 0; b < K; b++) {
                q[(int64_t)t * K + b] = (float)(w[b] / z);
            }
        }
    }
}
