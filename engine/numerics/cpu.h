/* Whether this CPU runs the AVX-512 lanes of the numerics (fmath.c,
 * half.c). The lanes give the scalar code's bits, so the choice changes
 * speed only. */
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

#endif
