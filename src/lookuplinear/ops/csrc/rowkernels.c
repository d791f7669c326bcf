/* Row-wise backward and optimizer kernels in C, built by the package's install (setup.py) and
 * loaded with ctypes by lookuplinear/ops/_clib.py; torch ops compute the same thing
 * where this library was not built (lookuplinear/ops).
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

enum { RADIX_BITS = 11, RADIX = 1 << RADIX_BITS, LINES_AHEAD = 192, SLOTS_AHEAD = 16 };

/* A fused update sums a row's entries in a slot of its own; where grad_out stays in the cache
 * (at most LAZY_BYTES), a row's first entry is only noted, copied into the slot when a second
 * comes, and a row of one entry is updated from its grad_out row: a batch of rows seen once
 * (bags over a large table) then copies no gradient. A larger grad_out would be read from
 * memory again for those rows, so its rows' first entries are copied as they are read. */
enum { LAZY_BYTES = 512 << 10 };

/* The memory of a sort or of a fused update's slots, kept between calls: faulting in fresh
 * pages for every batch takes longer than the sort itself (the multi-hot step of
 * benchmarks/bench_collection.py). One buffer of at most SCRATCH_KEEP bytes is kept; a call
 * that needs more, or that runs while another thread holds the kept one, allocates its own. */
enum { SCRATCH_KEEP = 64 << 20 };
static char *kept;
static size_t kept_bytes;
static char kept_busy;

typedef struct {
    uint64_t *keys; /* row << 32 | entry, sorted */
    int32_t *bag;   /* bag[entry]: the entry's output row; NULL: entry k is output row k */
    int64_t m;      /* how many keys (padding left out); -1: out of memory */
    char *mem;
    int owned;
} Sorted;

/* bytes from the line's start (a scratch's parts are laid out on whole cache lines) */
static char *line_alloc(size_t bytes) {
    void *p = NULL;
    return posix_memalign(&p, LL_LINE, bytes ? bytes : 1) ? NULL : p;
}

static char *scratch_take(size_t bytes, int *owned) {
    *owned = 1;
    if (bytes > SCRATCH_KEEP || __atomic_test_and_set(&kept_busy, __ATOMIC_ACQUIRE))
        return line_alloc(bytes);
    if (kept_bytes < bytes) {
        free(kept);
        kept = line_alloc(bytes);
        kept_bytes = kept ? bytes : 0;
    }
    if (!kept) {
        __atomic_clear(&kept_busy, __ATOMIC_RELEASE);
        return NULL;
    }
    *owned = 0;
    return kept;
}

static void scratch_give(char *mem, int owned) {
    if (owned)
        free(mem);
    else
        __atomic_clear(&kept_busy, __ATOMIC_RELEASE);
}

static void sorted_free(Sorted *s) { scratch_give(s->mem, s->owned); }

LL_INLINE int64_t bag_of(const int32_t *bag, uint64_t key) {
    uint32_t k = (uint32_t)key;
    return bag ? (int64_t)bag[k] : (int64_t)k;
}

/* The entries of a batch grouped by row: ``keys[i] = row << 32 | entry``, sorted by row and,
 * within a row, by entry (a stable LSD radix sort: as few passes of at most RADIX_BITS bits as
 * the largest row needs; on one thread their histograms counted in one read, on several each
 * pass counts each thread's part, then each thread scatters its part after those before it);
 * padding entries are left out. The caller calls sorted_free. */
static Sorted sort_entries(const int64_t *idx, int64_t n, const int64_t *offsets, int64_t n_bags,
                           int64_t padding_idx) {
    Sorted s = {NULL, NULL, -1, NULL, 1};
    size_t bytes = sizeof(uint64_t) * 2 * (size_t)(n + 1) +
                   (n_bags < 0 ? 0 : sizeof(int32_t) * (size_t)(n + 1));
    s.mem = scratch_take(bytes, &s.owned);
    if (!s.mem) return s;
    uint64_t *a = (uint64_t *)s.mem, *b = a + n + 1;
    if (n_bags >= 0) {
        s.bag = (int32_t *)(b + n + 1);
        for (int64_t q = 0; q < n_bags; q++)
            for (int64_t k = offsets[q]; k < offsets[q + 1]; k++) s.bag[k] = (int32_t)q;
    }
    int64_t m = 0;
    uint64_t top = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t v = idx[k];
        if (v == padding_idx) continue;
        a[m++] = ((uint64_t)v << 32) | (uint64_t)k;
        top |= (uint64_t)v;
    }
    int bits = 0;
    while (bits < 32 && (top >> bits)) bits++;
    const int passes = (bits + RADIX_BITS - 1) / RADIX_BITS;
    const int width = passes ? (bits + passes - 1) / passes : 0;
    const uint64_t mask = ((uint64_t)1 << width) - 1;
    const int nt = ll_threads(m);
    if (nt == 1) { /* every pass's histogram counted in one read, the passes unrolled */
        int64_t count[(32 + RADIX_BITS - 1) / RADIX_BITS][RADIX];
        memset(count, 0, sizeof(int64_t) * RADIX * (size_t)passes);
        if (passes == 1) {
            for (int64_t i = 0; i < m; i++) count[0][(a[i] >> 32) & mask]++;
        } else if (passes == 2) {
            for (int64_t i = 0; i < m; i++) {
                uint64_t row = a[i] >> 32;
                count[0][row & mask]++;
                count[1][(row >> width) & mask]++;
            }
        } else {
            for (int64_t i = 0; i < m; i++) {
                uint64_t row = a[i] >> 32;
                count[0][row & mask]++;
                count[1][(row >> width) & mask]++;
                count[2][(row >> 2 * width) & mask]++;
            }
        }
        for (int p = 0; p < passes; p++) {
            int64_t *c = count[p], at = 0;
            for (uint64_t d = 0; d <= mask; d++) {
                int64_t here = c[d];
                c[d] = at;
                at += here;
            }
            const int shift = 32 + p * width;
            for (int64_t i = 0; i < m; i++) {
                uint64_t x = a[i];
                b[c[(x >> shift) & mask]++] = x;
            }
            uint64_t *t = a;
            a = b;
            b = t;
        }
    } else if (passes) { /* each thread counts its part, then scatters it after the parts
                          * before it: the same stable order as one thread */
        int64_t *count = malloc(sizeof(int64_t) * (size_t)nt * (mask + 1));
        if (!count) return s; /* m = -1: out of memory (the caller frees s) */
        for (int p = 0; p < passes; p++) {
            const int shift = 32 + p * width;
            const uint64_t *src = a;
            uint64_t *dst = b;
            _Pragma("omp parallel num_threads(nt)")
            {
                const int t = ll_thread(), k = ll_team();
                const int64_t lo = ll_part(m, t, k), hi = ll_part(m, t + 1, k);
                int64_t *c = count + (size_t)t * (mask + 1);
                memset(c, 0, sizeof(int64_t) * (mask + 1));
                for (int64_t i = lo; i < hi; i++) c[(src[i] >> shift) & mask]++;
                _Pragma("omp barrier")
                _Pragma("omp single")
                {
                    int64_t at = 0;
                    for (uint64_t d = 0; d <= mask; d++)
                        for (int q = 0; q < k; q++) {
                            int64_t here = count[(size_t)q * (mask + 1) + d];
                            count[(size_t)q * (mask + 1) + d] = at;
                            at += here;
                        }
                }
                for (int64_t i = lo; i < hi; i++) {
                    uint64_t x = src[i];
                    dst[c[(x >> shift) & mask]++] = x;
                }
            }
            uint64_t *t = a;
            a = b;
            b = t;
        }
        free(count);
    }
    s.keys = a;
    s.m = m;
    return s;
}

/* bytes rounded up to whole cache lines */
#define LL_LINE_UP(bytes) (((size_t)(bytes) + LL_LINE - 1) & ~(size_t)(LL_LINE - 1))

/* a position of a fused update's hash table: a row (plus one; 0: empty) and its slot side by
 * side, so that a probe reads one cache line */
typedef struct {
    uint32_t row1;
    int32_t slot;
} RowPos;

/* The rows a fused update changes, each given a slot (0, 1, ... in the order the rows first
 * appear in the batch) where its gradient is summed as the entries come. Rows few beside the
 * entries (direct) index an array of slots; others are looked up in an open-addressing hash
 * table of at least twice as many positions as rows (RowPos). */
typedef struct {
    RowPos *pos;   /* hashed: the positions; direct: NULL */
    int32_t *slot; /* direct: the slot of each row; -1: none yet */
    uint64_t mask; /* hashed: positions - 1 */
    int shift;     /* hashed: 64 - log2(positions) */
} RowMap;

LL_INLINE uint64_t row_hash(const RowMap *m, int64_t row) {
    return ((uint64_t)row * UINT64_C(0x9E3779B97F4A7C15)) >> m->shift;
}

/* where row's slot is kept (its row inserted where the table is hashed, its slot -1) */
LL_INLINE int32_t *row_slot(const RowMap *m, int64_t row) {
    if (!m->pos) return m->slot + row;
    const uint32_t key = (uint32_t)row + 1;
    uint64_t h = row_hash(m, row);
    while (m->pos[h].row1 != key) {
        if (!m->pos[h].row1) {
            m->pos[h].row1 = key;
            m->pos[h].slot = -1;
            break;
        }
        h = (h + 1) & m->mask;
    }
    return &m->pos[h].slot;
}

/* which of parts (the threads of a fused update) updates row: the rows hashed, so parts of
 * similar sizes whatever the rows, without a division */
LL_INLINE int row_part(int64_t row, int parts) {
    const uint64_t h = ((uint64_t)row * UINT64_C(0x9E3779B97F4A7C15)) >> 32;
    return (int)((h * (uint64_t)parts) >> 32);
}

/* the line of row's slot (or of its first probe), requested ahead */
LL_INLINE void prefetch_slot(const RowMap *m, int64_t row) {
    if (m->pos) {
        __builtin_prefetch(m->pos + row_hash(m, row), 1, 3);
    } else {
        __builtin_prefetch(m->slot + row, 1, 3);
    }
}

/* where chunk t of k of the sorted keys starts: at a row's first key, so that each row is
 * updated by one thread, with the same sums in the same order whatever k is */
static int64_t chunk_start(const uint64_t *keys, int64_t m, int t, int k) {
    int64_t i = ll_part(m, t, k);
    while (i > 0 && i < m && keys[i] >> 32 == keys[i - 1] >> 32) i++;
    return i;
}

/* where part t of k of a stored gradient's n rows starts: at a run's first row, so that each
 * row (whose entries are one run) is updated by one thread, from the same sum whatever k is */
static int64_t run_start(const int64_t *rows, int64_t n, int t, int k) {
    int64_t i = ll_part(n, t, k);
    while (i > 0 && i < n && rows[i] == rows[i - 1]) i++;
    return i;
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

#define T float
#define SFX(name) name##_f32
#define SQRT sqrtf
#define FMA fmaf
#include "rowkernels_impl.h"
#undef T
#undef SFX
#undef SQRT
#undef FMA

#define T double
#define SFX(name) name##_f64
#define SQRT sqrt
#define FMA fma
#include "rowkernels_impl.h"
#undef T
#undef SFX
#undef SQRT
#undef FMA
