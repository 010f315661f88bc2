/* Whether this CPU runs the AVX-512 lanes of the numerics (fmath.c,
 * half.c). The lanes give the scalar code's bits, so the choice changes
 * speed only. */
#ifndef DL_NUMERICS_CPU_H
#define DL_NUMERICS_CPU_H

#include <stdbool.h>

static inline bool dl_cpu_has_avx512f(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

#endif
