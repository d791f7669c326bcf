/* Per-call input checks and input preparation of a bag lookup, for CPU input
 * (lookuplinear/ops/_inputs.py calls them; torch ops compute the same where this library
 * was not built).
 *
 * Dense equivalents, for CSR offsets (bag b is indices[offsets[b]:offsets[b + 1]]):
 *
 *   ll_offsets_ok:   offsets[0] == 0 && all(diff(offsets) >= 0) && offsets[-1] == nnz
 *                    (or offsets[-1] <= nnz: the N start offsets of torch's EmbeddingBag);
 *   ll_count_equal:  (indices == value).sum();
 *   ll_drop_entries: keep = indices != value; kept = nonzero(keep);
 *                    new_indices = indices[kept]; new_offsets = cumsum([0] + keep)[offsets];
 *   ll_mode_weights: out[k] = w[k] / sum(w[bag]) (sqrt: w[k] / sqrt(sum(w[bag] ** 2))), w = 1
 *                    without weights and 0 where the denominator is 0, summed in double;
 *   ll_one_id_rows:  all(offsets == arange(F * N + 1)) and then, for values of shape (F, N)
 *                    (feature-major) with all(0 <= values[f] < limit[f]),
 *                    rows = (values + shift[:, None]).T, of shape (N, F);
 *   ll_shifted_rows: out[k] = values[k] + shift[f] for the entries k of feature f's N bags
 *                    (offsets[f * N] <= k < offsets[(f + 1) * N]), all in [0, limit[f]).
 *
 * Why C: the offsets check runs on every forward call, next to the lookup. With numpy or
 * torch ops it costs a noticeable share of a small lookup and runs their dispatch machinery
 * between two lookups, which evicts the lookup's data and code from the core's caches and
 * slows the next lookup; one loop reads the offsets once, without temporaries
 * (benchmarks/bench_layer.py, "F.embedding_bag after the compiled offsets check").
 */
#include "common.h"

/* ---------------------------------------------------------------- offsets check */

/* One pass with no early exit: the comparison folds into `bad` without a branch, so the loop
 * vectorizes (an early exit would make it scalar, and slower on the valid offsets that every
 * call passes). */
#define LL_OFFSETS_OK(I, SFX)                                                                    \
    LL_EXPORT int64_t ll_offsets_ok_##SFX(const I *o, int64_t n, int64_t nnz,                   \
                                          int64_t include_last) {                               \
        if (n <= 0) return 0; /* no first offset to be 0 */                                      \
        int64_t last = o[n - 1];                                                                 \
        /* the flag as wide as an offset: the comparisons' lanes are or-ed as they come */     \
        I bad = (I)((o[0] != 0) | (include_last ? last != nnz : last > nnz));                   \
        for (int64_t k = 1; k < n; k++) bad |= (I)(o[k] < o[k - 1]);                             \
        return !bad;                                                                             \
    }

LL_OFFSETS_OK(int32_t, i32)
LL_OFFSETS_OK(int64_t, i64)

/* ---------------------------------------------------------------- dropping an index */

/* How many of the n indices equal `value` (a value outside I's range equals none): one
 * vectorized pass, so that a batch without the index costs no more than a read of it, and the
 * caller can size the outputs of ll_drop_entries exactly. */
#define LL_COUNT_EQUAL(I, SFX, LO, HI)                                                           \
    LL_EXPORT int64_t ll_count_equal_##SFX(const I *indices, int64_t n, int64_t value) {         \
        if (value < (LO) || value > (HI)) return 0;                                              \
        I v = (I)value;                                                                          \
        int64_t count = 0;                                                                       \
        for (int64_t k = 0; k < n; k++) count += indices[k] == v;                                \
        return count;                                                                            \
    }

LL_COUNT_EQUAL(int32_t, i32, INT32_MIN, INT32_MAX)
LL_COUNT_EQUAL(int64_t, i64, INT64_MIN, INT64_MAX)

/* The entries of n_bags bags (valid CSR offsets) not equal to `value`: their positions in
 * `kept`, their indices in `new_indices` (as many as ll_count_equal leaves, the exact size of
 * both), the new offsets (n_bags + 1) in `new_offsets`. Returns how many were kept. */
#define LL_DROP_ENTRIES(I, SFX)                                                                  \
    LL_EXPORT int64_t ll_drop_entries_##SFX(const I *indices, const I *offsets, int64_t n_bags,  \
                                            int64_t value, int64_t *kept, I *new_indices,        \
                                            I *new_offsets) {                                    \
        int64_t j = 0;                                                                           \
        new_offsets[0] = 0;                                                                      \
        for (int64_t b = 0; b < n_bags; b++) {                                                   \
            for (int64_t k = offsets[b]; k < offsets[b + 1]; k++) {                              \
                I v = indices[k];                                                                \
                if ((int64_t)v != value) {                                                       \
                    kept[j] = k;                                                                 \
                    new_indices[j++] = v;                                                        \
                }                                                                                \
            }                                                                                    \
            new_offsets[b + 1] = (I)j;                                                           \
        }                                                                                        \
        return j;                                                                                \
    }

LL_DROP_ENTRIES(int32_t, i32)
LL_DROP_ENTRIES(int64_t, i64)

/* ---------------------------------------------------------------- mean / sqrtn weights */

/* out (offsets[n_bags] entries, type T) from weights w (type T, or NULL: all 1). One loop per
 * case, none branching inside; the sums are plain left-to-right double sums (no -ffast-math),
 * with a multiply-add fused where the CPU has one. */
#define LL_MODE_WEIGHTS(T, I, SFX)                                                               \
    LL_EXPORT void ll_mode_weights_##SFX(const I *offsets, int64_t n_bags, const T *w,           \
                                         int64_t sqrt_, T *out) {                                \
        for (int64_t b = 0; b < n_bags; b++) {                                                   \
            int64_t lo = offsets[b], hi = offsets[b + 1];                                        \
            double total = 0.0;                                                                  \
            if (!w) {                                                                            \
                total = (double)(hi - lo); /* every weight is 1, and so is its square */          \
            } else if (sqrt_) {                                                                  \
                for (int64_t k = lo; k < hi; k++) total += (double)w[k] * (double)w[k];          \
            } else {                                                                             \
                for (int64_t k = lo; k < hi; k++) total += (double)w[k];                         \
            }                                                                                    \
            if (sqrt_) total = sqrt(total);                                                      \
            double inv = total == 0.0 ? 0.0 : 1.0 / total; /* an empty bag gives the bias */     \
            if (!w) {                                                                            \
                for (int64_t k = lo; k < hi; k++) out[k] = (T)inv;                               \
            } else {                                                                             \
                for (int64_t k = lo; k < hi; k++) out[k] = (T)((double)w[k] * inv);              \
            }                                                                                    \
        }                                                                                        \
    }

LL_MODE_WEIGHTS(float, int32_t, f32_i32)
LL_MODE_WEIGHTS(float, int64_t, f32_i64)
LL_MODE_WEIGHTS(double, int32_t, f64_i32)
LL_MODE_WEIGHTS(double, int64_t, f64_i64)

/* ---------------------------------------------------------------- one ID per bag */

/* A keyed batch of F features x N examples whose every bag holds one ID, as the rows of one
 * table holding the features' tables one after another: rows[n * F + f] = values[f * N + n] +
 * shift[f], the (N, F) index input of one lookup whose output is already in example order.
 * With `place` (2F values), feature f's rows go to rows[place[2f] + n * place[2f + 1]]
 * instead (several such inputs side by side, one per table parameter). Returns -2 when a bag
 * does not hold exactly one ID (offsets[k] != k: nothing written), the position in values of
 * the first ID outside [0, limit[f]) (rows then undefined), or -1. The checks fold into flags
 * without branches, so the loops vectorize; only a batch that fails is read again, to find
 * its first bad ID. */
#define LL_ONE_ID_ROWS(I, SFX)                                                                   \
    LL_EXPORT int64_t ll_one_id_rows_##SFX(const I *values, const I *offsets, int64_t F,         \
                                           int64_t N, const int64_t *shift,                      \
                                           const int64_t *limit, const int64_t *place,           \
                                           int64_t *rows) {                                      \
        I not_one = 0;                                                                           \
        for (int64_t k = 0; k <= F * N; k++) not_one |= (I)(offsets[k] != (I)k);                 \
        if (not_one) return -2;                                                                  \
        for (int64_t f = 0; f < F; f++) {                                                        \
            const I *v = values + f * N;                                                         \
            const int64_t s = shift[f], hi = limit[f];                                           \
            const int64_t at = place ? place[2 * f] : f, step = place ? place[2 * f + 1] : F;     \
            int64_t bad = 0;                                                                     \
            for (int64_t n = 0; n < N; n++) {                                                    \
                int64_t x = (int64_t)v[n];                                                       \
                bad |= (int64_t)((uint64_t)x >= (uint64_t)hi); /* x < 0 wraps above hi */        \
                rows[at + n * step] = x + s;                                                     \
            }                                                                                    \
            if (bad) {                                                                           \
                for (int64_t n = 0; n < N; n++)                                                  \
                    if ((uint64_t)(int64_t)v[n] >= (uint64_t)hi) return f * N + n;               \
            }                                                                                    \
        }                                                                                        \
        return -1;                                                                               \
    }

LL_ONE_ID_ROWS(int32_t, i32)
LL_ONE_ID_ROWS(int64_t, i64)

/* The entries of a keyed batch of F features x N bags (CSR offsets, feature-major) as rows of
 * the table holding the features' tables one after another: out[k] = values[k] + shift[f] for
 * feature f's entries. Returns -1, or the position of the first ID outside [0, limit[f]) (out
 * then undefined). */
#define LL_SHIFTED_ROWS(I, SFX)                                                                  \
    LL_EXPORT int64_t ll_shifted_rows_##SFX(const I *values, const I *offsets, int64_t F,        \
                                            int64_t N, const int64_t *shift,                     \
                                            const int64_t *limit, int64_t *out) {                \
        for (int64_t f = 0; f < F; f++) {                                                        \
            const int64_t a = (int64_t)offsets[f * N], b = (int64_t)offsets[(f + 1) * N];       \
            const int64_t s = shift[f], hi = limit[f];                                           \
            int64_t bad = 0;                                                                     \
            for (int64_t k = a; k < b; k++) {                                                    \
                int64_t x = (int64_t)values[k];                                                  \
                bad |= (int64_t)((uint64_t)x >= (uint64_t)hi);                                   \
                out[k] = x + s;                                                                  \
            }                                                                                    \
            if (bad) {                                                                           \
                for (int64_t k = a; k < b; k++)                                                  \
                    if ((uint64_t)(int64_t)values[k] >= (uint64_t)hi) return k;                  \
            }                                                                                    \
        }                                                                                        \
        return -1;                                                                               \
    }

LL_SHIFTED_ROWS(int32_t, i32)
LL_SHIFTED_ROWS(int64_t, i64)
