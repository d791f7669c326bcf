/* The kernels of _rowkernels.c for one element type: included once with T = float and
 * SFX(x) = x_f32, once with T = double and SFX(x) = x_f64.
 *
 * Exported, per optimizer OPT in sgd, adagrad, rowwise_adagrad, adam:
 *   ll_rows_OPT_f32(w, s, rows, n, values, dim, params): the update of each row of rows by
 *       the sum of its gradient rows (values[r] for rows[r]; a row's entries in one run, next
 *       to each other, summed in entry order: sum_run), lookuplinear.optim's step on a stored
 *       row-sparse gradient; returns n, or -1 out of memory (nothing written);
 *   ll_fused_OPT_f32(n_tables, idx[], n[], offsets[], n_bags[], padding_idx[], weights[],
 *       grad_out[], dim[], w[], s[], params, groups): the same update straight from bag
 *       lookups' grad_out (fused=True), for several tables (of any widths) in one call;
 * and ll_group_rows_f32(...): the row-sparse gradient itself, rows sorted. ``params`` are the
 * optimizer's scalars in the order its ``_kernel_args`` gives them (lookuplinear/optim);
 * ``s`` is its state: the momentum buffer or the squared sums (one row per table row), the
 * row-wise sums (one value per row), or Adam's moments (m and v of a row next to each other).
 */

/* ---- one row of each optimizer; ``g`` is the row's gradient, ``dim`` its width ---- */

LL_INLINE void SFX(sgd_row)(T *restrict w, T *restrict buf, const T *restrict g,
                            const int64_t dim, const T *p) {
    const T lr = p[0], wd = p[1], mom = p[2], omd = p[3];
    if (mom == 0 && wd == 0) {
        for (int64_t d = 0; d < dim; d++) w[d] -= lr * g[d];
        return;
    }
    for (int64_t d = 0; d < dim; d++) {
        /* no decay term without decay (torch.optim's): 0 * inf would make an inf weight NaN */
        T x = wd != 0 ? g[d] + wd * w[d] : g[d];
        if (mom != 0) {
            T b = FMA(mom, buf[d], omd * x); /* see adam_row */
            buf[d] = b;
            x = p[4] != 0 ? x + mom * b : b;
        }
        w[d] -= lr * x;
    }
}

LL_INLINE void SFX(adagrad_row)(T *restrict w, T *restrict sum, const T *restrict g,
                                const int64_t dim, const T *p) {
    const T clr = p[0], eps = p[1], wd = p[2];
    for (int64_t d = 0; d < dim; d++) {
        T x = wd != 0 ? g[d] + wd * w[d] : g[d]; /* see sgd_row */
        T s = sum[d] + x * x;
        sum[d] = s;
        w[d] -= clr * x / (SQRT(s) + eps);
    }
}

/* vectors of 16, 8, 4 and 2 elements (GCC and clang vector extensions; split or scalarised where
 * the machine's vectors are shorter) */
typedef T SFX(v16) __attribute__((vector_size(16 * sizeof(T))));
typedef T SFX(v8) __attribute__((vector_size(8 * sizeof(T))));
typedef T SFX(v4) __attribute__((vector_size(4 * sizeof(T))));
typedef T SFX(v2) __attribute__((vector_size(2 * sizeof(T))));

/* sum((g + wd * w)**2) over a row: its first 16k elements in 16 lanes (element d in lane
 * d % 16) folded in halves, then the rest one by one. The order is fixed by the code, so a row
 * gives the same bits whether ``g`` is in registers or in memory. (Adding the rest through a
 * 16-lane buffer instead stalled every row of a narrow table on a store-to-load forward.) */
LL_INLINE T SFX(sum_of_squares)(const T *restrict g, const T *restrict w, const T wd,
                                const int64_t dim) {
    T total = 0;
    int64_t d0 = 0;
    if (dim >= 16) {
        SFX(v16) acc = {0}, x, y;
        for (; d0 + 16 <= dim; d0 += 16) {
            memcpy(&x, g + d0, sizeof x);
            if (wd != 0) {
                memcpy(&y, w + d0, sizeof y);
                x += wd * y;
            }
            acc += x * x;
        }
        SFX(v8) a8 = LL_FOLD(SFX(v8), acc);
        SFX(v4) a4 = LL_FOLD(SFX(v4), a8);
        SFX(v2) a2 = LL_FOLD(SFX(v2), a4);
        total = a2[0] + a2[1];
    }
    for (int64_t d = d0; d < dim; d++) { /* fused explicitly: left to -ffp-contract, a
                                           * vectorised tail rounds the products apart */
        T e = wd != 0 ? FMA(wd, w[d], g[d]) : g[d];
        total = FMA(e, e, total);
    }
    return total;
}

LL_INLINE void SFX(rowwise_adagrad_row)(T *restrict w, T *restrict sum, const T *restrict g,
                                        const int64_t dim, const T *p) {
    const T lr = p[0], eps = p[1], wd = p[2], inv_dim = p[3];
    T s = FMA(SFX(sum_of_squares)(g, w, wd, dim), inv_dim, sum[0]);
    sum[0] = s;
    T mult = lr / (SQRT(s) + eps);
    if (wd == 0) {
        for (int64_t d = 0; d < dim; d++) w[d] -= mult * g[d];
    } else {
        for (int64_t d = 0; d < dim; d++) w[d] -= mult * (g[d] + wd * w[d]);
    }
}

LL_INLINE void SFX(adam_row)(T *restrict w, T *restrict mv, const T *restrict g,
                             const int64_t dim, const T *p) {
    /* l2: the coupled (Adam) weight decay; decay: the decoupled (AdamW) factor */
    const T b1 = p[0], omb1 = p[1], b2 = p[2], omb2 = p[3], eps = p[4], step = p[5], l2 = p[6],
            decay = p[7];
    T *restrict m = mv;
    T *restrict v = mv + dim;
    for (int64_t d = 0; d < dim; d++) {
        T x = w[d] * decay;
        /* an infinite weight adds no decay term (0 * inf would make the moments NaN, where
         * torch.optim adds none without decay); a test on the value, not on l2: a loop
         * unswitched on l2 == 0 would fuse x's product into the update below */
        T y = g[d] + l2 * (__builtin_isfinite(x) ? x : 0);
        /* a sum of two products, fused explicitly: left to -ffp-contract, a compiler may fuse
         * either product, and two inlined copies of this row (the fused and the stored-gradient
         * kernel) then differ in the last bit */
        T mm = FMA(b1, m[d], omb1 * y);
        T vv = FMA(b2, v[d], omb2 * y * y);
        m[d] = mm;
        v[d] = vv;
        w[d] = x - step * mm / (SQRT(vv) + eps);
    }
}

/* ---- the gradient of one row: the sum of its entries' grad_out rows, in entry order ---- */

LL_INLINE void SFX(sum_entries)(T *restrict acc, const uint64_t *keys, int64_t a, int64_t b,
                                const int32_t *bag, const T *weights,
                                const T *restrict grad_out, const int64_t dim) {
    uint32_t k = (uint32_t)keys[a];
    const T *src = grad_out + bag_of(bag, keys[a]) * dim;
    if (weights) {
        /* fused explicitly: where acc stays in registers, a compiler left to -ffp-contract may
         * fuse the first entry's product instead of the next one's, and the fused kernel (acc
         * in registers) and the grouping (acc in memory) then differ in the last bit */
        T wk = weights[k];
        for (int64_t d = 0; d < dim; d++) acc[d] = wk * src[d];
        for (int64_t i = a + 1; i < b; i++) {
            k = (uint32_t)keys[i];
            src = grad_out + bag_of(bag, keys[i]) * dim;
            wk = weights[k];
            for (int64_t d = 0; d < dim; d++) acc[d] = FMA(wk, src[d], acc[d]);
        }
    } else {
        for (int64_t d = 0; d < dim; d++) acc[d] = src[d];
        for (int64_t i = a + 1; i < b; i++) {
            src = grad_out + bag_of(bag, keys[i]) * dim;
            for (int64_t d = 0; d < dim; d++) acc[d] += src[d];
        }
    }
}

LL_INLINE int64_t SFX(group_dim)(const uint64_t *keys, int64_t m, const int32_t *bag,
                                 const T *weights, const T *grad_out, int64_t *rows_out,
                                 T *values_out, const int64_t dim) {
    int64_t j = 0;
    for (int64_t i = 0; i < m; j++) {
        int64_t a = i;
        uint64_t row = keys[i] >> 32;
        while (i < m && keys[i] >> 32 == row) i++;
        rows_out[j] = (int64_t)row;
        SFX(sum_entries)(values_out + j * dim, keys, a, i, bag, weights, grad_out, dim);
    }
    return j;
}

LL_CLONED int64_t SFX(group_range)(const uint64_t *keys, int64_t m, const int32_t *bag,
                                   const T *weights, const T *grad_out, int64_t *rows_out,
                                   T *values_out, int64_t dim) {
    int64_t j = 0;
    LL_BY_DIM(j = SFX(group_dim), keys, m, bag, weights, grad_out, rows_out, values_out)
    return j;
}

/* Split over threads, each thread groups a part of the sorted keys that starts at a row's
 * first key, and writes its rows after those of the parts before it (counted first). */
LL_EXPORT int64_t SFX(ll_group_rows)(const int64_t *idx, int64_t n, const int64_t *offsets,
                                     int64_t n_bags, int64_t padding_idx, const T *weights,
                                     const T *grad_out, int64_t dim, int64_t *rows_out,
                                     T *values_out) {
    Sorted e = sort_entries(idx, n, offsets, n_bags, padding_idx);
    const int nt = ll_threads(e.m);
    int64_t *base = e.m >= 0 ? malloc(sizeof(int64_t) * (size_t)(nt + 1)) : NULL;
    int64_t j = -1;
    int team = 1; /* the threads the region got (at most nt) */
    if (base) {
        _Pragma("omp parallel num_threads(nt)")
        {
            const int t = ll_thread(), k = ll_team();
            const int64_t a = chunk_start(e.keys, e.m, t, k);
            const int64_t b = chunk_start(e.keys, e.m, t + 1, k);
            int64_t rows = 0;
            for (int64_t i = a; i < b; i++)
                rows += i == a || e.keys[i] >> 32 != e.keys[i - 1] >> 32;
            base[t + 1] = rows;
            _Pragma("omp barrier")
            _Pragma("omp single")
            {
                base[0] = 0;
                for (int q = 0; q < k; q++) base[q + 1] += base[q];
                team = k;
            }
            SFX(group_range)(e.keys + a, b - a, e.bag, weights, grad_out, rows_out + base[t],
                             values_out + base[t] * dim, dim);
        }
        j = base[team];
    }
    sorted_free(&e);
    free(base);
    return j;
}

/* ---- a run of a stored gradient's value rows (one row's), summed in entry order ---- */

/* acc = v[0] + v[1] + ... + v[count - 1], each v[j] a row of dim values at values + j * dim,
 * added in that order: a coalesce's sum (index_add_ of the run onto -0.0, which adds nothing:
 * -0.0 + x is x, to the bit) */
LL_INLINE void SFX(sum_run)(T *restrict acc, const T *restrict values, int64_t count,
                            const int64_t dim) {
    for (int64_t d = 0; d < dim; d++) acc[d] = values[d];
    for (int64_t j = 1; j < count; j++) {
        const T *src = values + j * dim;
        for (int64_t d = 0; d < dim; d++) acc[d] += src[d];
    }
}

/* how many rows ahead the updates prefetch: about LINES_AHEAD cache lines of table and state
 * (a row, its state and one line for a row that straddles lines), between 4 and 64 rows. A
 * fixed number of rows fits one kernel's row size and leaves the others slower
 * (benchmarks/bench_kernels.py times each kernel). */
LL_INLINE int64_t SFX(ahead_rows)(const int64_t dim, const int64_t state_bytes) {
    int64_t lines = (dim * (int64_t)sizeof(T) + state_bytes + LL_LINE - 1) / LL_LINE + 1;
    int64_t d = LINES_AHEAD / lines;
    return d < 4 ? 4 : d > 64 ? 64 : d;
}

/* the bytes of a fused update's part before its rows' sums: its hash table's positions (1 <<
 * bits of them; bits 0: none, the slots direct), and for each of its rows (cap of them) the
 * row and, where first entries are noted (lazy), its first entry's grad_out row and weight,
 * up to a line */
LL_INLINE size_t SFX(part_head)(int64_t cap, int64_t bits, int lazy) {
    return LL_LINE_UP((bits ? sizeof(RowPos) << bits : 0) +
                      (sizeof(int64_t) + (lazy ? sizeof(const T *) + sizeof(T) : 0)) *
                          (size_t)cap);
}

/* ll_rows_OPT and ll_fused_OPT for one optimizer: STATE(s, i, dim) is where row i's state
 * starts, STATE_BYTES how many bytes of it a step touches */
#define LL_OPTIMIZER(OPT, STATE, STATE_BYTES)                                                 \
    LL_INLINE void SFX(OPT##_rows_dim)(T *w, T *s, const int64_t *rows, int64_t n,            \
                                       const T *values, T *restrict acc, const T *p,          \
                                       const int64_t dim) {                                   \
        const int64_t dist = SFX(ahead_rows)(dim, (STATE_BYTES));                             \
        int64_t ahead = 0, pending = 0;                                                       \
        for (int64_t r = 0; r < n;) {                                                         \
            for (; ahead < n && pending < dist; pending++) { /* rows of runs ahead */         \
                int64_t next = rows[ahead];                                                   \
                prefetch_row_w(w + next * dim, dim * (int64_t)sizeof(T));                     \
                prefetch_row_w(STATE(s, next, dim), (STATE_BYTES));                           \
                while (ahead < n && rows[ahead] == next) ahead++;                             \
            }                                                                                 \
            const int64_t a = r, i = rows[r];                                                 \
            while (r < n && rows[r] == i) r++;                                                \
            const T *g = values + a * dim;                                                    \
            if (r > a + 1) { /* else the row's gradient is its one value row */              \
                SFX(sum_run)(acc, g, r - a, dim);                                             \
                g = acc;                                                                      \
            }                                                                                 \
            SFX(OPT##_row)(w + i * dim, STATE(s, i, dim), g, dim, p);                         \
            pending--;                                                                        \
        }                                                                                     \
    }                                                                                         \
    LL_CLONED void SFX(OPT##_rows_range)(T *w, T *s, const int64_t *rows, int64_t n,          \
                                         const T *values, T *acc, const T *p, int64_t dim) {  \
        LL_BY_DIM(SFX(OPT##_rows_dim), w, s, rows, n, values, acc, p)                         \
    }                                                                                         \
    LL_EXPORT int64_t SFX(ll_rows_##OPT)(T *w, T *s, const int64_t *rows, int64_t n,          \
                                         const T *values, int64_t dim,                        \
                                         const double *params) {                              \
        T p[8];                                                                               \
        for (int q = 0; q < 8; q++) p[q] = (T)params[q];                                      \
        const int nt = ll_threads(n);                                                         \
        T *accs = malloc(sizeof(T) * (size_t)(dim + 1) * (size_t)nt); /* runs' sums */        \
        if (!accs) return -1;                                                                 \
        _Pragma("omp parallel num_threads(nt)")                                               \
        {                                                                                     \
            const int t = ll_thread(), k = ll_team();                                         \
            const int64_t a = run_start(rows, n, t, k), b = run_start(rows, n, t + 1, k);     \
            SFX(OPT##_rows_range)(w, s, rows + a, b - a, values + a * dim,                    \
                                  accs + (size_t)t * (size_t)(dim + 1), p, dim);              \
        }                                                                                     \
        free(accs);                                                                           \
        return n;                                                                             \
    }                                                                                         \
    /* the update of the rows of part `part` of `parts` (row % parts == part) from a lookup's \
     * entries: each entry's grad_out row added to its row's slot in entry order, grad_out    \
     * read once, in order (lazy: a row's first entry only noted, and copied into the slot    \
     * when a second comes, a row of one entry updated from its grad_out row); then each row  \
     * updated from its sum (the sort's sums: the same bits), its table and state rows        \
     * requested ahead */                                                                     \
    LL_INLINE int64_t SFX(OPT##_fused_dim)(T *w, T *s, const int64_t *idx, int64_t n,         \
                                           const int64_t *offsets, int64_t n_bags,            \
                                           int64_t padding_idx, const T *weights,             \
                                           const T *grad_out, RowMap map, int part,           \
                                           int parts, int64_t *urows, int lazy,               \
                                           const T **first, T *first_w, T *restrict acc,      \
                                           const T *p, const int64_t dim) {                   \
        int64_t u = 0;                                                                        \
        const int64_t nb = n_bags < 0 ? n : n_bags;                                           \
        for (int64_t q = 0; q < nb; q++) {                                                    \
            const T *restrict g = grad_out + q * dim;                                         \
            const int64_t k1 = n_bags < 0 ? q + 1 : offsets[q + 1];                           \
            for (int64_t k = n_bags < 0 ? q : offsets[q]; k < k1; k++) {                      \
                if (k + SLOTS_AHEAD < n) prefetch_slot(&map, idx[k + SLOTS_AHEAD]);           \
                const int64_t r = idx[k];                                                     \
                if (r == padding_idx || (parts > 1 && row_part(r, parts) != part))            \
                    continue;                                                                 \
                int32_t *c = row_slot(&map, r);                                               \
                const T wk = weights ? weights[k] : 1;                                        \
                if (*c < 0) { /* the row's first entry: noted, or copied */                  \
                    *c = (int32_t)u;                                                          \
                    urows[u] = r;                                                             \
                    if (lazy) {                                                               \
                        first[u] = g;                                                         \
                        if (weights) first_w[u] = wk;                                         \
                    } else {                                                                  \
                        T *a = acc + u * dim;                                                 \
                        /* weighted: fused explicitly, as in sum_entries */                  \
                        if (weights)                                                          \
                            for (int64_t d = 0; d < dim; d++) a[d] = wk * g[d];               \
                        else                                                                  \
                            for (int64_t d = 0; d < dim; d++) a[d] = g[d];                    \
                    }                                                                         \
                    u++;                                                                      \
                } else {                                                                      \
                    T *a = acc + (int64_t)*c * dim;                                           \
                    const T *g0 = lazy ? first[*c] : NULL;                                    \
                    if (g0) { /* its second: the sum starts from the first */                \
                        first[*c] = NULL;                                                     \
                        /* weighted: fused explicitly, as in sum_entries */                  \
                        if (weights)                                                          \
                            for (int64_t d = 0; d < dim; d++) a[d] = first_w[*c] * g0[d];     \
                        else                                                                  \
                            for (int64_t d = 0; d < dim; d++) a[d] = g0[d];                   \
                    }                                                                         \
                    if (weights)                                                              \
                        for (int64_t d = 0; d < dim; d++) a[d] = FMA(wk, g[d], a[d]);         \
                    else                                                                      \
                        for (int64_t d = 0; d < dim; d++) a[d] += g[d];                       \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        const int64_t dist = SFX(ahead_rows)(dim, (STATE_BYTES));                             \
        for (int64_t j = 0; j < u; j++) {                                                     \
            if (j + dist < u) {                                                               \
                prefetch_row_w(w + urows[j + dist] * dim, dim * (int64_t)sizeof(T));          \
                prefetch_row_w(STATE(s, urows[j + dist], dim), (STATE_BYTES));                \
            }                                                                                 \
            const int64_t row = urows[j];                                                     \
            const T *g = lazy ? first[j] : NULL;                                              \
            if (!g) {                                                                         \
                g = acc + j * dim;                                                            \
            } else if (weights) { /* one weighted entry: its product, as a sum of one */     \
                T *a = acc + j * dim;                                                         \
                for (int64_t d = 0; d < dim; d++) a[d] = first_w[j] * g[d];                   \
                g = a;                                                                        \
            }                                                                                 \
            SFX(OPT##_row)(w + row * dim, STATE(s, row, dim), g, dim, p);                     \
        }                                                                                     \
        return u;                                                                             \
    }                                                                                         \
    LL_CLONED int64_t SFX(OPT##_fused_range)(T *w, T *s, const int64_t *idx, int64_t n,       \
                                             const int64_t *offsets, int64_t n_bags,          \
                                             int64_t padding_idx, const T *weights,           \
                                             const T *grad_out, RowMap map, int part,         \
                                             int parts, int64_t *urows, int lazy,             \
                                             const T **first, T *first_w, T *acc, const T *p, \
                                             int64_t dim) {                                   \
        int64_t groups = 0;                                                                   \
        if (lazy) /* a constant in each: the other way's code left out */                    \
            LL_BY_DIM(groups = SFX(OPT##_fused_dim), w, s, idx, n, offsets, n_bags,           \
                      padding_idx, weights, grad_out, map, part, parts, urows, 1, first,      \
                      first_w, acc, p)                                                        \
        else                                                                                  \
            LL_BY_DIM(groups = SFX(OPT##_fused_dim), w, s, idx, n, offsets, n_bags,           \
                      padding_idx, weights, grad_out, map, part, parts, urows, 0, first,      \
                      first_w, acc, p)                                                        \
        return groups;                                                                        \
    }                                                                                         \
    /* one table's update, its rows split over the threads by row % threads (each row's sum  \
     * in entry order whatever their number: the same bits) */                                \
    LL_INLINE int64_t SFX(OPT##_fused_table)(const int64_t *idx, int64_t n,                   \
                                             const int64_t *offsets, int64_t n_bags,          \
                                             int64_t padding_idx, const T *weights,           \
                                             const T *grad_out, int64_t dim, T *w, T *s,      \
                                             const double *params) {                          \
        T p[8];                                                                               \
        for (int q = 0; q < 8; q++) p[q] = (T)params[q];                                      \
        if (n == 0) return 0;                                                                 \
        int64_t top = -1;                                                                     \
        for (int64_t k = 0; k < n; k++) top = idx[k] > top ? idx[k] : top;                    \
        const int64_t most = n < top + 1 ? n : top + 1; /* rows at most */                    \
        int hbits = 1;                                                                        \
        while (((int64_t)1 << hbits) < 2 * most) hbits++;                                     \
        const int direct = top + 1 <= 4 * ((int64_t)1 << hbits);                              \
        /* a grad_out that stays in the cache: a row's first entry only noted (LAZY_BYTES) */ \
        const int lazy = (n_bags < 0 ? n : n_bags) * dim * (int64_t)sizeof(T) <= LAZY_BYTES;  \
        /* the rows split in parts by row_part, one per thread; each part's scratch holds as  \
         * many rows as the part has entries (or the table has): all together what one would */\
        const int nt = ll_threads(n);                                                         \
        /* each part's rows at most, then log2 of its positions; where each part starts */    \
        int64_t *cap = calloc((size_t)nt * 2, sizeof(int64_t));                               \
        size_t *at = malloc(sizeof(size_t) * (size_t)(nt + 1));                               \
        if (!cap || !at) {                                                                    \
            free(cap);                                                                        \
            free(at);                                                                         \
            return -1;                                                                        \
        }                                                                                     \
        if (nt == 1)                                                                          \
            cap[0] = n;                                                                       \
        else                                                                                  \
            for (int64_t k = 0; k < n; k++) cap[row_part(idx[k], nt)]++;                      \
        /* direct: the shared slots first; each part on its own cache lines: (hashed) its     \
         * positions, its rows, then its rows' sums from a line's start */                   \
        at[0] = direct ? sizeof(int32_t) * (size_t)(top + 1) : 0;                             \
        at[0] = LL_LINE_UP(at[0]);                                                            \
        for (int q = 0; q < nt; q++) {                                                        \
            cap[q] = cap[q] < top + 1 ? cap[q] : top + 1;                                     \
            int bits = 1;                                                                     \
            while (((int64_t)1 << bits) < 2 * cap[q]) bits++;                                 \
            cap[nt + q] = direct ? 0 : bits;                                                  \
            at[q + 1] = at[q] + SFX(part_head)(cap[q], cap[nt + q], lazy) +                   \
                        sizeof(T) * (size_t)dim * (size_t)cap[q];                             \
            at[q + 1] = LL_LINE_UP(at[q + 1]);                                                \
        }                                                                                     \
        int owned;                                                                            \
        char *mem = scratch_take(at[nt], &owned);                                             \
        if (!mem) {                                                                           \
            free(cap);                                                                        \
            free(at);                                                                         \
            return -1;                                                                        \
        }                                                                                     \
        if (direct) memset(mem, 0xff, at[0]);                                                 \
        int64_t groups = 0;                                                                   \
        _Pragma("omp parallel num_threads(nt) reduction(+ : groups)")                         \
        {                                                                                     \
            for (int q = ll_thread(); q < nt; q += ll_team()) {                               \
                const int64_t positions = direct ? 0 : (int64_t)1 << cap[nt + q];             \
                RowMap map = {NULL, (int32_t *)mem, 0, 0};                                    \
                int64_t *urows = (int64_t *)((RowPos *)(mem + at[q]) + positions);            \
                const T **first = (const T **)(urows + cap[q]);                               \
                T *first_w = (T *)(first + cap[q]);                                           \
                T *acc = (T *)(mem + at[q] + SFX(part_head)(cap[q], cap[nt + q], lazy));      \
                if (!direct) {                                                                \
                    map.pos = (RowPos *)(mem + at[q]);                                        \
                    map.mask = (uint64_t)positions - 1;                                       \
                    map.shift = 64 - (int)cap[nt + q];                                        \
                    memset(map.pos, 0, sizeof(RowPos) * (size_t)positions);                   \
                }                                                                             \
                groups += SFX(OPT##_fused_range)(w, s, idx, n, offsets, n_bags, padding_idx,  \
                                                 weights, grad_out, map, q, nt, urows, lazy,  \
                                                 first, first_w, acc, p, dim);                \
            }                                                                                 \
        }                                                                                     \
        free(cap);                                                                            \
        free(at);                                                                             \
        scratch_give(mem, owned);                                                             \
        return groups;                                                                        \
    }                                                                                         \
    /* The update of n_tables tables in one call, each from its own lookup: table t's        \
     * operands are at position t of each array, its scalars at params[8 * t]; groups[t] is   \
     * how many rows of it were updated, or -1 (out of memory: that table left unchanged).    \
     * A table's lookup: idx (n entries), offsets (n_bags + 1, or n_bags = -1: one entry per  \
     * grad_out row), padding_idx (-1: none), weights (per entry, or NULL). */                \
    LL_EXPORT void SFX(ll_fused_##OPT)(int64_t n_tables, const int64_t *const *idx,           \
                                       const int64_t *n, const int64_t *const *offsets,       \
                                       const int64_t *n_bags, const int64_t *padding_idx,     \
                                       const T *const *weights, const T *const *grad_out,     \
                                       const int64_t *dim, T *const *w, T *const *s,          \
                                       const double *params, int64_t *groups) {               \
        for (int64_t t = 0; t < n_tables; t++)                                                \
            groups[t] = SFX(OPT##_fused_table)(idx[t], n[t], offsets[t], n_bags[t],           \
                                               padding_idx[t], weights[t], grad_out[t],       \
                                               dim[t], w[t], s[t], params + 8 * t);           \
    }

LL_OPTIMIZER(sgd, SGD_STATE, p[2] != 0 ? dim * (int64_t)sizeof(T) : 0)
LL_OPTIMIZER(adagrad, ADAGRAD_STATE, dim * (int64_t)sizeof(T))
LL_OPTIMIZER(rowwise_adagrad, ROWWISE_ADAGRAD_STATE, (int64_t)sizeof(T))
LL_OPTIMIZER(adam, ADAM_STATE, 2 * dim * (int64_t)sizeof(T))

#undef LL_OPTIMIZER
