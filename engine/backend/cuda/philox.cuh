/* Philox4x32-10 and the stream word layout of engine/numerics/philox.h, ported
 * line for line from engine/numerics/philox.c for host and device. Change them only
 * together with philox.c (and fixtures/pytorch, which reimplements them). */
#ifndef DL_CUDA_PHILOX_CUH
#define DL_CUDA_PHILOX_CUH

#include <stdint.h>

extern "C" {
#include "numerics/philox.h"
}

namespace dl_cuda_philox {

__host__ __device__ inline void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                              uint32_t out[4]) {
  const uint32_t M0 = 0xD2511F53, M1 = 0xCD9E8D57, W0 = 0x9E3779B9, W1 = 0xBB67AE85;
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; round++) {
    uint64_t p0 = (uint64_t)M0 * c0;
    uint64_t p1 = (uint64_t)M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = (uint32_t)p1;
    c2 = n2;
    c3 = (uint32_t)p0;
    k0 += W0;
    k1 += W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* Words 4*block .. 4*block+3 of stream s. */
__host__ __device__ inline void stream_block(const dl_stream &s, uint64_t block, uint32_t out[4]) {
  const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)s.id,
                           (uint32_t)(s.id >> 32)};
  philox4x32_10(ctr, s.key, out);
}

/* Exact: a 24-bit integer converts exactly, and 2^-24 is a power of two. */
__host__ __device__ inline float uniform_of(uint32_t word) {
  return (float)(word >> 8) * 0x1p-24f;
}

/* The outputs of Philox block `block` for out[i] = uniform(word index + i),
 * i < n: the lanes of the block that fall in the range. */
__host__ __device__ inline void uniform_block(const dl_stream &s, uint64_t index, int64_t n,
                                              uint64_t block, float *out) {
  uint32_t words[4];
  stream_block(s, block, words);
  for (unsigned lane = 0; lane < 4; lane++) {
    uint64_t w = block * 4 + lane;
    if (w >= index && w - index < (uint64_t)n) out[w - index] = uniform_of(words[lane]);
  }
}

} // namespace dl_cuda_philox

#endif
