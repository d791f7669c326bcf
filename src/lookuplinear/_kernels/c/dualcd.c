/* One epoch of dual coordinate descent for an L2-regularised linear model on CSR rows, every
 * output at once (lookuplinear/_kernels/_dualcd.py calls it; where this library was not built
 * the same loop runs in Python there).
 *
 * The problem, for each output k independently (one-vs-rest):
 *
 *   min_w  1/2 ||w_k||^2 + sum_i C_i loss(target[i, k], x_i . w_k + bias_scale * b_k)
 *
 *   squared hinge (loss=0): loss(t, f) = max(0, 1 - t f)^2, t = +1 / -1     (LinearSVC)
 *   squared error (loss=1): loss(t, f) = (t - f)^2                           (ridge)
 *
 * solved in its dual (Hsieh et al., ICML 2008; liblinear's solvers 1 and 12): one variable
 * a[i, k] per row and output, w_k = sum_i a[i, k] t_ik x_i (squared hinge) or sum_i a[i, k] x_i
 * (squared error), and diag[i] = 1 / (2 C_i). Visiting row i, for each output k:
 *
 *   G  = t f - 1 + diag[i] a      (hinge)        G = f - t + diag[i] a      (error)
 *   a' = max(a - G / Q, 0)                       a' = a - G / Q
 *   Q  = ||x_i||^2 + bias_scale^2 + diag[i]      (qdiag[i] holds the first two terms)
 *
 * then w_k (and b_k) move by (a' - a) t x_i (or (a' - a) x_i). The row's entries are read once
 * for all outputs: the table is (n_features, n_outputs), the layout of LookupLinear's weight, so
 * an entry's outputs are one contiguous row (the lookup), and the update is its scatter.
 *
 * Visits order[0:*n_active]. Shrinking, as liblinear's: a row all of whose outputs rest at
 * a = 0 with G > pg[0] (the previous epoch's largest projected gradient; INFINITY turns it off,
 * and squared error never shrinks) is swapped behind the active rows and *n_active drops by one.
 * pg[1] and pg[2] receive the largest and smallest projected gradient met (liblinear stops when
 * their difference is small: 0 at the optimum). f, step and moved are n_out scratch values.
 */
#include "common.h"

enum { HINGE = 0, ERROR = 1, LINE = 64 };

/* every cache line of a table row */
LL_INLINE void prefetch_row(const void *p, int64_t nbytes) {
    const char *c = (const char *)p;
    for (int64_t o = 0; o < nbytes; o += LINE) __builtin_prefetch(c + o, 1, 3);
    if (nbytes % LINE) __builtin_prefetch(c + nbytes - 1, 1, 3);
}

LL_INLINE void epoch(float *restrict w, float *restrict b, double bias_scale,
                              const int64_t *restrict indptr, const int64_t *restrict indices,
                              const float *restrict data, int64_t *restrict order,
                              int64_t *restrict n_active, const double *restrict qdiag,
                              const double *restrict target, const double *restrict diag,
                              double *restrict dual, int64_t n_out, int64_t loss, double *restrict pg,
                              double *restrict f, float *restrict step, int64_t *restrict moved) {
    double pg_max = -INFINITY, pg_min = INFINITY, shrink_above = pg[0];
    int64_t n = *n_active, row_bytes = n_out * (int64_t)sizeof(float);
    for (int64_t o = 0; o < n; o++) {
        int64_t i = order[o], lo = indptr[i], hi = indptr[i + 1];
        /* the next row's table rows, while this one is computed; one output's table is small
         * enough to stay in cache, and there the prefetches only cost (2x slower) */
        if (n_out > 1 && o + 1 < n)
            for (int64_t e = indptr[order[o + 1]]; e < indptr[order[o + 1] + 1]; e++)
                prefetch_row(w + indices[e] * n_out, row_bytes);
        /* f = x_i . w + bias_scale * b, every output at once: the row's lookup */
        for (int64_t k = 0; k < n_out; k++) f[k] = bias_scale * b[k];
        for (int64_t e = lo; e < hi; e++) {
            const float *row = w + indices[e] * n_out;
            double x = data[e];
            for (int64_t k = 0; k < n_out; k++) f[k] += x * row[k];
        }
        double d = diag[i], q = qdiag[i] + d;
        const double *t = target + i * n_out;
        double *a = dual + i * n_out;
        int64_t n_moved = 0, n_settled = 0;
        for (int64_t k = 0; k < n_out; k++) {
            double g, pg, next;
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
        /* w += step x_i (and b += step bias_scale) on the outputs that moved: the scatter */
        for (int64_t m = 0; m < n_moved; m++) b[moved[m]] += (float)(step[m] * bias_scale);
        if (2 * n_moved >= n_out) { /* most outputs moved: one contiguous pass per entry */
            for (int64_t k = n_out - 1; k >= 0; k--) f[k] = 0.0;
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
LL_EXPORT void ll_dual_cd_f32(float *restrict w, float *restrict b, double bias_scale,
                              const int64_t *restrict indptr, const int64_t *restrict indices,
                              const float *restrict data, int64_t *restrict order,
                              int64_t *restrict n_active, const double *restrict qdiag,
                              const double *restrict target, const double *restrict diag,
                              double *restrict dual, int64_t n_out, int64_t loss, double *restrict pg,
                              double *restrict f, float *restrict step, int64_t *restrict moved) {
    if (n_out == 1)
        epoch(w, b, bias_scale, indptr, indices, data, order, n_active, qdiag, target, diag, dual,
              1, loss, pg, f, step, moved);
    else
        epoch(w, b, bias_scale, indptr, indices, data, order, n_active, qdiag, target, diag, dual,
              n_out, loss, pg, f, step, moved);
}
