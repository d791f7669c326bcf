/* One epoch of dual coordinate descent for an L2-regularised linear model on CSR rows, every
 * output at once (lookuplinear/ops/_dualcd.py calls it; where this library was not built
 * the same loop runs in Python there).
 *
 * The problem, for each output k independently (one-vs-rest):
 *
 *   min_w  1/2 ||w_k||^2 + sum_i C_ik loss(target[i, k], x_i . w_k + b_k)
 *
 *   squared hinge (loss=0): loss(t, f) = max(0, 1 - t f)^2, t = +1 / -1     (LinearSVC)
 *   squared error (loss=1): loss(t, f) = (t - f)^2                           (ridge)
 *
 * solved in its dual (Hsieh et al., ICML 2008; liblinear's solvers 1 and 12): one variable
 * a[i, k] per row and output, w_k = sum_i a[i, k] t_ik x_i (squared hinge) or sum_i a[i, k] x_i
 * (squared error), and d = diag[i, k] = 1 / (2 C_ik): diag has diag_cols columns, 1 (one C_i
 * for every output of row i) or n_out (one per output: liblinear's one-vs-rest weighs class k's
 * rows by its class weight in problem k only); INFINITY (C_ik = 0) holds a[i, k] at 0. Visiting
 * row i, for each output k:
 *
 *   G  = t f - 1 + d a            (hinge)        G = f - t + d a            (error)
 *   a' = max(a - G / Q, 0)                       a' = a - G / Q
 *   Q  = ||x_i||^2 + 1 + d                       (qdiag[i] holds the first two terms)
 *
 * then w_k (and b_k) move by (a' - a) t x_i (or (a' - a) x_i). The row's entries are read once
 * for all outputs: the table is (n_features, n_outputs), the layout of LookupLinear's weight, so
 * an entry's outputs are one contiguous row (the lookup), and the update is its scatter.
 *
 * Exported as ll_dual_cd_f32_i32 and ll_dual_cd_f32_i64 (the type of indptr and indices;
 * dualcd_impl.h holds the body). Visits order[0:*n_active]. Shrinking, as liblinear's: a row all of whose outputs rest at
 * a = 0 with G > pg[0] (the previous epoch's largest projected gradient; INFINITY turns it off,
 * and squared error never shrinks) is swapped behind the active rows and *n_active drops by one.
 * pg[1] and pg[2] receive the largest and smallest projected gradient met (liblinear stops when
 * their difference is small: 0 at the optimum). f, step and moved are n_out scratch values.
 */
#include "common.h"

enum { HINGE = 0, ERROR = 1 };

#define I int32_t
#define SFX(name) name##_i32
#include "dualcd_impl.h"
#undef I
#undef SFX

#define I int64_t
#define SFX(name) name##_i64
#include "dualcd_impl.h"
#undef I
#undef SFX
