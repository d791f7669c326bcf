/* Row-wise backward and optimizer kernels in C, built by the package's install (setup.py) and
 * loaded with ctypes by lookuplinear/_kernels/_clib.py; torch ops compute the same thing
 * where this library was not built (lookuplinear/_kernels).
 *
 * The dense equivalent of every kernel: the weight gradient of a bag lookup is
 * densify(x).T @ grad_out, whose non-zero rows are the unique indices of the batch; an update
 * changes only those rows of the table and of the optimizer state.
 *
 * Why C: for a table of 64 float32 columns the compiler keeps a row's gradient in four vector
 * registers when the width is a compile-time constant, and the sort packs (row, entry) into one
 * 64-bit key (benchmarks/bench_kernels.py times each kernel against the torch-op path).
 *
 * Determinism: built without -ffast-math (no reassociation), and the one reduction (row-wise
 * Adagrad's mean of squares) adds 16 fixed lanes in a fixed order, so that the fused kernels
 * (gradient in registers) and the unfused ones (gradient in memory) give the same bits.
 * Multiply-adds are fused where the CPU has FMA (-ffp-contract=fast), as PyTorch's dense
 * backward does: the weighted sums then equal the dense gradient to the bit.
 */
#include "common.h"

enum { RADIX_BITS = 11, RADIX = 1 << RADIX_BITS, LINES_AHEAD = 192, LINE = 64 };

LL_INLINE void prefetch_bytes(const void *p, int64_t nbytes) {
    const char *c = (const char *)p;
    for (int64_t o = 0; o < nbytes; o += LINE) __builtin_prefetch(c + o, 1, 3);
    if (nbytes % LINE) __builtin_prefetch(c + nbytes - 1, 1, 3); /* a row may end in one more */
}

/* The entries of a batch grouped by row: ``keys[i] = row << 32 | entry``, sorted by row and,
 * within a row, by entry (a stable LSD radix sort on 11-bit digits, as many passes as the
 * largest row needs); padding entries are left out. ``bag[entry]`` is the entry's output row.
 * Returns the number of keys, or -1 when out of memory; the caller frees ``*keys`` and ``*bag``
 * either way. */
static int64_t sort_entries(const int64_t *idx, int64_t n, const int64_t *offsets,
                            int64_t n_bags, int64_t padding_idx, uint64_t **keys,
                            int32_t **bag) {
    uint64_t *a = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    uint64_t *b = malloc(sizeof(uint64_t) * (size_t)(n + 1));
    int32_t *g = malloc(sizeof(int32_t) * (size_t)(n + 1));
    int64_t count[RADIX + 1];
    *keys = NULL;
    *bag = g;
    if (!a || !b || !g) {
        free(a);
        free(b);
        return -1;
    }
    if (n_bags < 0) {
        for (int64_t k = 0; k < n; k++) g[k] = (int32_t)k;
    } else {
        for (int64_t q = 0; q < n_bags; q++)
            for (int64_t k = offsets[q]; k < offsets[q + 1]; k++) g[k] = (int32_t)q;
    }
    int64_t m = 0;
    uint64_t top = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t v = idx[k];
        if (v == padding_idx) continue;
        a[m++] = ((uint64_t)v << 32) | (uint64_t)k;
        top |= (uint64_t)v;
    }
    for (int shift = 32; (top >> (shift - 32)) > 0 && shift < 64; shift += RADIX_BITS) {
        memset(count, 0, sizeof(count));
        for (int64_t i = 0; i < m; i++) count[((a[i] >> shift) & (RADIX - 1)) + 1]++;
        for (int d = 0; d < RADIX; d++) count[d + 1] += count[d];
        for (int64_t i = 0; i < m; i++) {
            uint64_t x = a[i];
            b[count[(x >> shift) & (RADIX - 1)]++] = x;
        }
        uint64_t *t = a;
        a = b;
        b = t;
    }
    free(b);
    *keys = a;
    return m;
}

/* the two halves of a vector, added: the order of the sum is fixed by the code */
#define LL_FOLD(HALF, x)                                             \
    ({                                                               \
        HALF lo_, hi_;                                               \
        memcpy(&lo_, &(x), sizeof lo_);                              \
        memcpy(&hi_, (const char *)&(x) + sizeof lo_, sizeof hi_);   \
        lo_ + hi_;                                                   \
    })

/* where row i's state starts (STATE_BYTES in _rowkernels_impl.h: how many bytes of it a step
 * touches) */
#define SGD_STATE(s, i, dim) ((s) + (i) * (dim))
#define ADAGRAD_STATE(s, i, dim) ((s) + (i) * (dim))
#define ROWWISE_ADAGRAD_STATE(s, i, dim) ((s) + (i))
#define ADAM_STATE(s, i, dim) ((s) + (i) * 2 * (dim))

/* F(..., dim) with the widths below compiled for a constant (the loops unrolled, a row held in
 * registers), any other width as it comes */
#define LL_BY_DIM(F, ...)                                \
    switch (dim) {                                       \
    case 16: F(__VA_ARGS__, 16); break;                  \
    case 32: F(__VA_ARGS__, 32); break;                  \
    case 64: F(__VA_ARGS__, 64); break;                  \
    case 128: F(__VA_ARGS__, 128); break;                \
    default: F(__VA_ARGS__, dim); break;                 \
    }

#define T float
#define SFX(name) name##_f32
#define SQRT sqrtf
#include "rowkernels_impl.h"
#undef T
#undef SFX
#undef SQRT

#define T double
#define SFX(name) name##_f64
#define SQRT sqrt
#include "rowkernels_impl.h"
#undef T
#undef SFX
#undef SQRT
