/* Whether this CPU runs the AVX-512 lanes of the numerics (fmath.c,
 * half.c), and DL_AVX512_CLONES for the layers' loops. The lanes give the
 * scalar code's bits, so the choice changes speed only. */
#ifndef DL_NUMERICS_CPU_H
#define DL_NUMERICS_CPU_H

#include <stdbool.h>
#include <stdint.h>

static inline bool dl_cpu_has_avx512f(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

/* The AVX-512 lane mask of the first n of 16 lanes (n <= 0: none, n >= 16:
 * all): the tail of an array under masked loads and stores. */
static inline uint16_t dl_first_lanes16(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? (uint16_t)0xffff : (uint16_t)((1u << n) - 1u);
}

/* On a kernel's job function (the function dl_parallel_for runs, or a
 * layer's serial loop): compiled twice, for AVX-512 (x86-64-v4) and for the
 * base ISA, with the static functions it calls inlined into each copy
 * (flatten), and the loader picks the copy for this CPU. The loops the
 * compiler vectorizes on its own then run 16 floats wide instead of 4
 * (GPT x1 at 1 thread: 1.05x less time). The bits do not change: the
 * build forbids contracting or reordering floating-point operations
 * (-ffp-contract=off, no fast-math), so a wider vector does the same IEEE
 * operations, more at a time; clang builds (ci/determinism.sh) and
 * valgrind, which hides AVX-512, run the base copy against the same
 * digests and goldens. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define DL_AVX512_CLONES __attribute__((target_clones("arch=x86-64-v4", "default"), flatten))
#else
#define DL_AVX512_CLONES
#endif

#endif
