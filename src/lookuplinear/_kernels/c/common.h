/* What every kernel file includes: the standard headers, how an entry point is exported, and
 * the ABI version that lookuplinear/_kernels/_clib.py checks before it calls anything. */
#ifndef LL_COMMON_H
#define LL_COMMON_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__) && !defined(LL_NO_CLONES)
/* one copy of each entry point per instruction set, chosen at load time (no -march=native, so
 * a build runs on any x86-64 machine) */
#define LL_EXPORT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LL_EXPORT
#endif
#define LL_INLINE static inline __attribute__((always_inline))

#endif
