/* The forward of an index lookup in C (lookuplinear/ops/_rows.py calls it; torch's
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
    LL_CLONED void gather_range_##SFX(const T *w, const int64_t *rows, int64_t n, T *out,        \
                                      int64_t dim) {                                             \
        LL_BY_DIM(gather_dim_##SFX, w, rows, n, out)                                             \
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
        const int nt = ll_threads(n);                                                            \
        _Pragma("omp parallel num_threads(nt)")                                                  \
        {                                                                                        \
            const int64_t a = ll_part(n, ll_thread(), ll_team());                                \
            const int64_t b = ll_part(n, ll_thread() + 1, ll_team());                            \
            gather_range_##SFX(w, rows + a, b - a, out + a * dim, dim);                          \
        }                                                                                        \
        return -1;                                                                               \
    }

LL_GATHER(float, f32)
LL_GATHER(double, f64)

/* -1, or the position of the first of rows[0:n] outside [0, num_rows): one vectorized pass,
 * then, only where a row is outside, one that finds it (the operators' range checks, ops.cpp,
 * before a kernel reads a row) */
LL_EXPORT int64_t ll_first_outside(const int64_t *rows, int64_t n, int64_t num_rows) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= (int64_t)((uint64_t)rows[i] >= (uint64_t)num_rows);
    if (bad) {
        for (int64_t i = 0; i < n; i++)
            if ((uint64_t)rows[i] >= (uint64_t)num_rows) return i;
    }
    return -1;
}

/* out[i * ld + cols[j] : ... + dim] = w[rows[i * f + j]] for i < n, j < f: the rows of an
 * (n, f) index input written straight into column ranges of a wider (n, ld) output; for
 * n_tables tables in one call (a collection's features of several widths), table t's operands
 * at position t of each array. The rows are checked by the caller. */
#define LL_GATHER_INTO(T, SFX)                                                                   \
    LL_INLINE void gather_into_dim_##SFX(const T *w, const int64_t *rows, int64_t n, int64_t f,  \
                                         const int64_t *cols, T *out, int64_t ld,                \
                                         const int64_t dim) {                                    \
        const int64_t total = n * f;                                                             \
        for (int64_t i = 0, k = 0; i < n; i++) {                                                 \
            for (int64_t j = 0; j < f; j++, k++) {                                               \
                if (k + PREFETCH_ROWS < total)                                                   \
                    prefetch_row(w + rows[k + PREFETCH_ROWS] * dim, dim * (int64_t)sizeof(T));   \
                memcpy(out + i * ld + cols[j], w + rows[k] * dim, sizeof(T) * (size_t)dim);      \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    LL_CLONED void gather_into_range_##SFX(const T *w, const int64_t *rows, int64_t n,         \
                                           int64_t f, const int64_t *cols, T *out, int64_t ld,   \
                                           int64_t dim) {                                        \
        LL_BY_DIM(gather_into_dim_##SFX, w, rows, n, f, cols, out, ld)                           \
    }                                                                                            \
    LL_EXPORT void ll_gather_into_##SFX(int64_t n_tables, const T *const *ws,                    \
                                        const int64_t *dims, const int64_t *const *rows,         \
                                        int64_t n, const int64_t *f,                             \
                                        const int64_t *const *cols, T *out, int64_t ld) {        \
        int64_t work = 0;                                                                        \
        for (int64_t t = 0; t < n_tables; t++) work += n * f[t];                                 \
        const int nt = ll_threads(work);                                                         \
        _Pragma("omp parallel num_threads(nt)")                                                  \
        {                                                                                        \
            const int64_t a = ll_part(n, ll_thread(), ll_team());                                \
            const int64_t b = ll_part(n, ll_thread() + 1, ll_team());                            \
            for (int64_t t = 0; t < n_tables; t++)                                               \
                gather_into_range_##SFX(ws[t], rows[t] + a * f[t], b - a, f[t], cols[t],         \
                                        out + a * ld, ld, dims[t]);                              \
        }                                                                                        \
    }

LL_GATHER_INTO(float, f32)
LL_GATHER_INTO(double, f64)

/* ---------------------------------------------------------------- columns of blocks */

/* len bytes from s to d, as a few vector moves for the row widths of common tables */
LL_INLINE void copy_row(char *restrict d, const char *restrict s, int64_t len) {
    switch (len) {
    case 32: memcpy(d, s, 32); break;
    case 64: memcpy(d, s, 64); break;
    case 128: memcpy(d, s, 128); break;
    case 256: memcpy(d, s, 256); break;
    default: memcpy(d, s, (size_t)len); break;
    }
}

/* The rows of n x out_ld bytes of `out` made of segments of the rows of blocks: segment s is
 * seg_len[s] bytes at byte seg_off[s] of each row of blocks[seg_block[s]] (rows of
 * block_ld[b] bytes), and the segments follow each other in a row of out. to_out != 0 copies
 * the blocks into out, else out into the blocks.
 *
 * Dense equivalent: out = cat([blocks[seg_block[s]][:, seg_off[s]:][:, :seg_len[s]] for s], 1)
 * (in bytes), and its inverse. */
LL_EXPORT void ll_interleave(int64_t n, int64_t n_seg, char *const *blocks,
                             const int64_t *block_ld, const int64_t *seg_block,
                             const int64_t *seg_off, const int64_t *seg_len, char *out,
                             int64_t out_ld, int64_t to_out) {
    for (int64_t i = 0; i < n; i++) {
        char *row = out + i * out_ld;
        for (int64_t s = 0; s < n_seg; s++) {
            const int64_t b = seg_block[s];
            char *part = blocks[b] + i * block_ld[b] + seg_off[s];
            if (to_out)
                copy_row(row, part, seg_len[s]);
            else
                copy_row(part, row, seg_len[s]);
            row += seg_len[s];
        }
    }
}
