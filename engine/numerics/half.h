/* float16 (IEEE binary16) and bfloat16 storage formats. Conversions from
 * float32 round to nearest, ties to even, with subnormals, infinities and
 * NaN handled exactly; conversions to float32 are exact. AMP emulation
 * rounds matmul/conv operands through these (dl_round_f16/bf16). */
#ifndef DL_HALF_H
#define DL_HALF_H

#include <stdint.h>

uint16_t dl_f32_to_f16(float x);
float dl_f16_to_f32(uint16_t h);
uint16_t dl_f32_to_bf16(float x);
float dl_bf16_to_f32(uint16_t h);

/* x rounded to the nearest representable half value, as float32. */
static inline float dl_round_f16(float x) { return dl_f16_to_f32(dl_f32_to_f16(x)); }
static inline float dl_round_bf16(float x) { return dl_bf16_to_f32(dl_f32_to_bf16(x)); }

/* Round n floats in place to f16 (dtype 1) or bf16 (dtype 2); any other
 * code is a no-op. */
void dl_round_inplace(float *x, int64_t n, int half_dtype);

#endif
