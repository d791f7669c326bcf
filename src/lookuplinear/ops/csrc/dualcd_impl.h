/* The epoch of dualcd.c for one index type: included with I = int32_t and SFX(x) = x_i32 (the
 * CSR matrices scipy makes), and with I = int64_t and SFX(x) = x_i64. */

LL_INLINE void SFX(epoch)(float *restrict w, float *restrict b,
                              const I *restrict indptr, const I *restrict indices,
                              const float *restrict data, int64_t *restrict order,
                              int64_t *restrict n_active, const double *restrict qdiag,
                              const double *restrict target, const double *restrict diag,
                              int64_t diag_cols, double *restrict dual, int64_t n_out,
                              int64_t loss, double *restrict pg, double *restrict f,
                              float *restrict step, int64_t *restrict moved) {
    double pg_max = -INFINITY, pg_min = INFINITY, shrink_above = pg[0];
    int64_t n = *n_active, row_bytes = n_out * (int64_t)sizeof(float);
    for (int64_t o = 0; o < n; o++) {
        int64_t i = order[o], lo = indptr[i], hi = indptr[i + 1];
        /* the next row's table rows, while this one is computed; one output's table is small
         * enough to stay in cache, and there the prefetches only cost time */
        if (n_out > 1 && o + 1 < n)
            for (int64_t e = indptr[order[o + 1]]; e < indptr[order[o + 1] + 1]; e++)
                prefetch_row_w(w + indices[e] * n_out, row_bytes);
        /* f = x_i . w + b, every output at once: the row's lookup */
        for (int64_t k = 0; k < n_out; k++) f[k] = b[k];
        for (int64_t e = lo; e < hi; e++) {
            const float *row = w + indices[e] * n_out;
            double x = data[e];
            for (int64_t k = 0; k < n_out; k++) f[k] += x * row[k];
        }
        /* diag_cols 1: one C_i for the row's outputs; n_out: one per output */
        const double *drow = diag + i * diag_cols, x2 = qdiag[i];
        const int64_t dk = diag_cols > 1; /* 0 or 1: the step between a row's outputs */
        const double *t = target + i * n_out;
        double *a = dual + i * n_out;
        int64_t n_moved = 0, n_settled = 0;
        for (int64_t k = 0; k < n_out; k++) {
            double g, pg, next, d = drow[k * dk], q = x2 + d;
            if (d == INFINITY) { /* C_ik = 0: the variable stays at 0, settled */
                n_settled++;
                continue;
            }
            if (loss == HINGE) {
                g = t[k] * f[k] - 1.0 + d * a[k];
                pg = a[k] == 0.0 ? fmin(g, 0.0) : g;
                n_settled += a[k] == 0.0 && g > shrink_above;
                next = fmax(a[k] - g / q, 0.0);
            } else {
                g = f[k] - t[k] + d * a[k];
                pg = g;
                next = a[k] - g / q;
            }
            pg_max = fmax(pg_max, pg);
            pg_min = fmin(pg_min, pg);
            if (fabs(pg) <= 1e-12 || next == a[k]) continue;
            double delta = next - a[k];
            a[k] = next;
            step[n_moved] = (float)(loss == HINGE ? delta * t[k] : delta);
            moved[n_moved++] = k;
        }
        if (n_settled == n_out) { /* every output rests at a = 0 past the bound: shrink */
            order[o--] = order[--n];
            order[n] = i;
            continue;
        }
        if (n_moved == 0) continue;
        /* w += step x_i (and b += step, the constant feature 1) on the outputs that moved: the scatter */
        for (int64_t m = 0; m < n_moved; m++) b[moved[m]] += step[m];
        if (2 * n_moved >= n_out) { /* most outputs moved: one contiguous pass per entry */
            for (int64_t k = 0; k < n_out; k++) f[k] = 0.0;
            for (int64_t m = 0; m < n_moved; m++) f[moved[m]] = step[m];
            for (int64_t e = lo; e < hi; e++) {
                float *row = w + indices[e] * n_out, x = data[e];
                for (int64_t k = 0; k < n_out; k++) row[k] += (float)f[k] * x;
            }
        } else {
            for (int64_t e = lo; e < hi; e++) {
                float *row = w + indices[e] * n_out, x = data[e];
                for (int64_t m = 0; m < n_moved; m++) row[moved[m]] += step[m] * x;
            }
        }
    }
    *n_active = n;
    pg[1] = pg_max, pg[2] = pg_min;
}

/* the body twice: once for one output (a binary class or one target: the compiler drops the
 * loops over outputs), once for any number */
LL_EXPORT void SFX(ll_dual_cd_f32)(float *restrict w, float *restrict b,
                              const I *restrict indptr, const I *restrict indices,
                              const float *restrict data, int64_t *restrict order,
                              int64_t *restrict n_active, const double *restrict qdiag,
                              const double *restrict target, const double *restrict diag,
                              int64_t diag_cols, double *restrict dual, int64_t n_out,
                              int64_t loss, double *restrict pg, double *restrict f,
                              float *restrict step, int64_t *restrict moved) {
    if (n_out == 1)
        SFX(epoch)(w, b, indptr, indices, data, order, n_active, qdiag, target, diag, diag_cols,
              dual, 1, loss, pg, f, step, moved);
    else
        SFX(epoch)(w, b, indptr, indices, data, order, n_active, qdiag, target, diag, diag_cols,
              dual, n_out, loss, pg, f, step, moved);
}
