/* What every kernel file includes: the standard headers, how an entry point is exported, and
 * the ABI version that lookuplinear/_kernels/_clib.py checks before it calls anything. */
#ifndef LL_COMMON_H
#define LL_COMMON_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(LL_NO_CLONES)
/* one copy of a function per instruction set, chosen at load time (no -march=native, so a
 * build runs on any x86-64 machine): every entry point, and every function that one calls
 * through a pointer (a thread's part), which the entry point's copy cannot inline */
#define LL_CLONED __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LL_CLONED
#endif
#define LL_EXPORT LL_CLONED
#define LL_INLINE static inline __attribute__((always_inline))

#endif
