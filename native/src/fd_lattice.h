/* Internal helpers shared by the selectors: reading the DFlash 2 lattice in place,
 * checking it, and the row softmax every selector's probabilities come from.
 *
 * Not public API (hidden symbols); the layout is documented in flashdesk.h.
 * All arithmetic is in double, summed in index order, so the NumPy reference
 * (tests/native/numpy_reference.py) can follow the same steps.
 */
#ifndef FD_LATTICE_H
#define FD_LATTICE_H

#include "flashdesk.h"

/* The K candidate ids (as float32) of path position t = slot t+1. */
static inline const float *fd_lat_cands(const float *lattice, int64_t stride, int32_t t) {
    return lattice + (int64_t)(t + 1) * stride;
}

/* score_t[a][:], the K scores of every candidate b at position t after candidate a. */
static inline const float *fd_lat_row(const float *lattice, int64_t stride, int32_t K, int32_t t, int32_t a) {
    return lattice + (int64_t)(t + 1) * stride + K + (int64_t)a * K;
}

/* Argument and value checks common to every selector (see flashdesk.h). Reads every
 * candidate id and score of positions 0..T-1 once, never the anchor row or padding. */
fd_status fd_lat_check(const float *lattice, int64_t stride, int32_t T, int32_t K,
                       const int32_t *idx, const int32_t *ids);

/* w[b] = exp((row[b] - max(row)) / temperature), returns their sum (>= 1, since the
 * maximum contributes exp(0)). w[b] / sum is the softmax. */
double fd_lat_softmax(const float *row, int32_t K, double temperature, double *w);

/* log(sum_b exp(row[b])), computed as max + log(sum exp(row - max)). */
double fd_lat_logsumexp(const float *row, int32_t K);

/* Index of the first maximum of row[0..K-1] (strict >, like std::max_element). */
int32_t fd_lat_argmax(const float *row, int32_t K);

/* Fill ids[t] from idx[t], and when q != NULL the proposal along the path:
 * q[t*K + b] = softmax(score_t[idx[t-1]][:] / temperature)[b], idx[-1] = 0. */
void fd_lat_finish(const float *lattice, int64_t stride, int32_t T, int32_t K, double temperature,
                   const int32_t *idx, int32_t *ids, float *q);

/* q requested: the temperature must be a finite number > 0. */
static inline int fd_lat_temperature_ok(float temperature) {
    return temperature > 0.0f && temperature <= 3.4028234e38f;
}

#endif /* FD_LATTICE_H */
