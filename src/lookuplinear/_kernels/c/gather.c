/* The forward of an index lookup in C (lookuplinear/_kernels/_rows.py calls it; torch's
 * embedding runs where this library was not built).
 *
 * Dense equivalent: out = one_hot(rows, num_rows) @ w, that is out[i] = w[rows[i]], for n
 * rows of a (num_rows, dim) table.
 *
 * Why C: torch's CPU embedding (index_select) copies each row with a call to memmove, which
 * profiles of a training step show as its largest part after the optimizer's update. A table
 * of millions of rows is read at random, so each row is a cache miss; here a row of a width
 * compiled as a constant is a few vector moves, and the rows PREFETCH_ROWS ahead are requested
 * while the current one is copied (benchmarks/bench_kernels.py times both).
 */
#include "common.h"

enum { PREFETCH_ROWS = 16 };

#define LL_GATHER(T, SFX)                                                                        \
    LL_INLINE void gather_dim_##SFX(const T *w, const int64_t *rows, int64_t n, T *out,          \
                                    const int64_t dim) {                                         \
        for (int64_t i = 0; i < n; i++) {                                                        \
            if (i + PREFETCH_ROWS < n)                                                           \
                prefetch_row(w + rows[i + PREFETCH_ROWS] * dim, dim * (int64_t)sizeof(T));       \
            memcpy(out + i * dim, w + rows[i] * dim, sizeof(T) * (size_t)dim);                   \
        }                                                                                        \
    }                                                                                            \
    /* out[i] = w[rows[i]] for i < n. Returns -1, or the position of the first row outside      \
     * [0, num_rows) (nothing written then: the rows are checked first, in one vectorized pass) */ \
    LL_EXPORT int64_t ll_gather_rows_##SFX(const T *w, int64_t num_rows, int64_t dim,            \
                                           const int64_t *rows, int64_t n, T *out) {             \
        int64_t bad = 0;                                                                         \
        for (int64_t i = 0; i < n; i++) bad |= (int64_t)((uint64_t)rows[i] >= (uint64_t)num_rows); \
        if (bad) {                                                                               \
            for (int64_t i = 0; i < n; i++)                                                      \
                if ((uint64_t)rows[i] >= (uint64_t)num_rows) return i;                           \
        }                                                                                        \
        LL_BY_DIM(gather_dim_##SFX, w, rows, n, out)                                             \
        return -1;                                                                               \
    }

LL_GATHER(float, f32)
LL_GATHER(double, f64)
