/* mode="max" over CPU bags: the forward, which keeps the row that gave each maximum, and its
 * backward (lookuplinear/ops/_bagmax.py calls them; where this library was not built the
 * caller runs ATen's embedding_bag max, which computes the same thing).
 *
 * Dense equivalent, for CSR offsets (bag b is indices[offsets[b]:offsets[b + 1]]):
 *
 *   forward:  out[b, j] = max(W[i, j] for i in bag b), 0 for an empty bag;
 *             arg[b, j] = the row i that gave it, -1 for an empty bag;
 *   backward: W.grad[arg[b, j], j] += grad_out[b, j] wherever arg[b, j] >= 0.
 *
 * As in ATen, a bag's first entry is taken as it is and a later one only where it is strictly
 * greater: ties keep the first entry, and a later NaN never wins (a first NaN stays).
 *
 * Why C: ATen's CPU embedding_bag computes max outside its fast kernel, many times slower than
 * sum on the same bags; this is one pass (benchmarks/bench_layer.py times it inside the layer
 * against ATen's max; docs/performance.md).
 */
#include "common.h"

/* entries ahead whose rows are requested before they are read: the rows are scattered over
 * the table, and without it each costs a memory round trip in turn */
enum { AHEAD = 16 };

/* W (rows x dim, row-major), n_bags bags of indices (valid CSR offsets) into out and arg
 * (n_bags x dim each). Returns -1, or the first entry whose index is outside [0, rows): nothing
 * outside the table is read, and the caller raises IndexError naming that entry. */
#define LL_BAG_MAX(T, I, SFX)                                                                    \
    LL_EXPORT int64_t ll_bag_max_##SFX(const T *restrict w, int64_t rows, int64_t dim,           \
                                       const I *restrict idx, const I *restrict offsets,        \
                                       int64_t n_bags, T *restrict out, int64_t *restrict arg) { \
        int64_t nnz = offsets[n_bags], row_bytes = dim * (int64_t)sizeof(T);                     \
        for (int64_t k = 0; k < AHEAD && k < nnz; k++)                                           \
            if (idx[k] >= 0 && idx[k] < rows) prefetch_row(w + (int64_t)idx[k] * dim, row_bytes); \
        for (int64_t b = 0; b < n_bags; b++) {                                                   \
            int64_t lo = offsets[b], hi = offsets[b + 1];                                        \
            T *o = out + b * dim;                                                                \
            int64_t *a = arg + b * dim;                                                          \
            if (lo == hi) {                                                                      \
                for (int64_t j = 0; j < dim; j++) o[j] = 0, a[j] = -1;                           \
                continue;                                                                        \
            }                                                                                    \
            for (int64_t k = lo; k < hi; k++) {                                                  \
                if (k + AHEAD < nnz) {                                                           \
                    int64_t p = idx[k + AHEAD];                                                  \
                    if (p >= 0 && p < rows) prefetch_row(w + p * dim, row_bytes);                \
                }                                                                                \
                int64_t r = idx[k];                                                              \
                if (r < 0 || r >= rows) return k;                                                \
                const T *src = w + r * dim;                                                      \
                if (k == lo) {                                                                   \
                    for (int64_t j = 0; j < dim; j++) o[j] = src[j], a[j] = r;                   \
                } else {                                                                         \
                    for (int64_t j = 0; j < dim; j++) {                                          \
                        /* strict: ties keep the first, a later NaN loses (the max is x86's     \
                         * maxps). The row is blended in with a mask, not chosen: written as a   \
                         * choice, GCC stores through a branch on "any lane greater", which      \
                         * mispredicts early in a bag (slower for a table in cache). */          \
                        T v = src[j], cur = o[j];                                                \
                        int64_t take = -(int64_t)(v > cur);                                      \
                        o[j] = v > cur ? v : cur;                                                \
                        a[j] ^= (a[j] ^ r) & take;                                               \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
        return -1;                                                                               \
    }

LL_BAG_MAX(float, int32_t, f32_i32)
LL_BAG_MAX(float, int64_t, f32_i64)
LL_BAG_MAX(double, int32_t, f64_i32)
LL_BAG_MAX(double, int64_t, f64_i64)

/* grad_w (the table's shape, zeroed by the caller) += grad_out scattered to the rows in arg
 * (n x dim, -1: an empty bag, no gradient). Sequential: two bags may name the same row. */
#define LL_BAG_MAX_BACKWARD(T, SFX)                                                              \
    LL_EXPORT void ll_bag_max_backward_##SFX(T *grad_w, const int64_t *arg, const T *grad_out,   \
                                             int64_t n, int64_t dim) {                           \
        for (int64_t b = 0; b < n; b++)                                                          \
            for (int64_t j = 0; j < dim; j++) {                                                  \
                int64_t r = arg[b * dim + j];                                                    \
                if (r >= 0) grad_w[r * dim + j] += grad_out[b * dim + j];                        \
            }                                                                                    \
    }

LL_BAG_MAX_BACKWARD(float, f32)
LL_BAG_MAX_BACKWARD(double, f64)
