/* The engine's own elementary functions (determinism rule 2): fixed
 * polynomials evaluated in a fixed order with IEEE double arithmetic, so the
 * last bits are the same on every x86-64 machine, libc and compiler, unlike
 * libm's expf/logf/tanhf/erff. Each is within 1 ulp of the correctly rounded
 * float result over its whole domain; tests/test_fmath.c states and checks
 * the bound against libm's double functions. */
#ifndef DL_FMATH_H
#define DL_FMATH_H

#include <stdint.h>

float dl_expf(float x);
float dl_logf(float x); /* log(0) = -inf, log(<0) = NaN */
float dl_tanhf(float x);
float dl_erff(float x);
float dl_sinf(float x); /* for Box-Muller; |x| <= 2*pi is the range used */
float dl_cosf(float x);
/* out[i] = dl_expf(in[i]) and out[i] = dl_erff(in[i]) for 0 <= i < n, the
 * same bits, for loops over rows (softmax, cross-entropy, GELU): on a CPU
 * with AVX-512 eight at a time, the scalar functions' double operations in
 * eight lanes (so the same roundings), the scalar functions elsewhere and
 * for the lanes their special cases take. exp first tries a quicker
 * table-driven double exp whose rounding to float provably agrees where
 * its result is not near a midpoint between floats (fmath.c). in == out is allowed; other
 * overlaps are not. tests/test_fmath.c compares them with the scalar
 * functions bit for bit (every float with DL_FMATH_EXHAUSTIVE=1). */
void dl_expf_n(const float *in, float *out, int64_t n);
void dl_erff_n(const float *in, float *out, int64_t n);
/* Double versions used inside the float ones and by the RNG. */
double dl_exp(double x);
double dl_log(double x);
/* cos(pi*x) with exact argument reduction (no pi*x rounding); Box-Muller. */
double dl_cospi(double x);

#endif
