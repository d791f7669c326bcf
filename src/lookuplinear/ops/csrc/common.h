/* What every kernel file includes: the standard headers, how an entry point is exported, and
 * the ABI version that lookuplinear/ops/_clib.py checks before it calls anything. */
#ifndef LL_COMMON_H
#define LL_COMMON_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(LL_NO_CLONES)
/* one copy of each entry point per instruction set, chosen at load time (no -march=native, so
 * a build runs on any x86-64 machine) */
#define LL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LL_CLONES
#endif
#define LL_EXPORT LL_CLONES
/* a kernel's loop that an OpenMP region calls: the region's body is compiled once, for the
 * default instruction set, so the loop is a function of its own, cloned per instruction set;
 * it then fuses multiply-adds where the CPU has FMA, as every other kernel does, and gives
 * their bits */
#define LL_CLONED static LL_CLONES __attribute__((noinline))
#define LL_INLINE static inline __attribute__((always_inline))

/* Threads: a kernel whose work (rows, entries) reaches LL_PARALLEL_MIN splits it over the
 * OpenMP threads, PyTorch's own pool (torch.set_num_threads sets their number): the build links
 * libgomp.so.1, the library torch has loaded. Each thread takes a contiguous part, so every
 * output element is written by one thread in the same order whatever the number of threads,
 * and the bits do not depend on it. Built without OpenMP, the kernels run on one thread. */
enum { LL_PARALLEL_MIN = 4096 };
#ifdef _OPENMP
#include <omp.h>
LL_INLINE int ll_threads(int64_t work) { return work >= LL_PARALLEL_MIN ? omp_get_max_threads() : 1; }
LL_INLINE int ll_thread(void) { return omp_get_thread_num(); }
LL_INLINE int ll_team(void) { return omp_get_num_threads(); }
#else
LL_INLINE int ll_threads(int64_t work) { (void)work; return 1; }
LL_INLINE int ll_thread(void) { return 0; }
LL_INLINE int ll_team(void) { return 1; }
#endif
/* where part t of k of n items starts */
LL_INLINE int64_t ll_part(int64_t n, int t, int k) { return (int64_t)((__int128)n * t / k); }

enum { LL_LINE = 64 }; /* bytes of a cache line */

/* Every cache line of a table row of nbytes at p, requested ahead of its use (a row of 64
 * float32 spans four lines, and may end in one more): the rows of a large table are scattered
 * far beyond what the TLB covers, and without it each costs a memory round trip in turn.
 * prefetch_row for a row that is only read, prefetch_row_w for one that is written. */
#define LL_PREFETCH_ROW(p, nbytes, rw)                                                 \
    do {                                                                               \
        const char *c_ = (const char *)(p);                                            \
        for (int64_t o_ = 0; o_ < (nbytes); o_ += LL_LINE) __builtin_prefetch(c_ + o_, rw, 3); \
        if ((nbytes) % LL_LINE) __builtin_prefetch(c_ + (nbytes) - 1, rw, 3);          \
    } while (0)
LL_INLINE void prefetch_row(const void *p, int64_t nbytes) { LL_PREFETCH_ROW(p, nbytes, 0); }
LL_INLINE void prefetch_row_w(const void *p, int64_t nbytes) { LL_PREFETCH_ROW(p, nbytes, 1); }

/* F(..., dim) with the widths below compiled for a constant (the loops unrolled, a row held in
 * registers), any other width as it comes; the caller has a variable `dim` */
#define LL_BY_DIM(F, ...)                                \
    switch (dim) {                                       \
    case 8: F(__VA_ARGS__, 8); break;                    \
    case 16: F(__VA_ARGS__, 16); break;                  \
    case 32: F(__VA_ARGS__, 32); break;                  \
    case 64: F(__VA_ARGS__, 64); break;                  \
    case 128: F(__VA_ARGS__, 128); break;                \
    default: F(__VA_ARGS__, dim); break;                 \
    }

#endif
