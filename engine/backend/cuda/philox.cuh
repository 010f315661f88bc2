/* The Philox block of numerics/philox_block.h (the CPU's own, compiled
 * __host__ __device__ here) and what the kernels build on it. */
#ifndef DL_CUDA_PHILOX_CUH
#define DL_CUDA_PHILOX_CUH

#include <stdint.h>

extern "C" {
#include "numerics/philox_block.h"
}

namespace dl_cuda_philox {

/* The outputs of Philox block `block` for out[i] = uniform(word index + i),
 * i < n: the lanes of the block that fall in the range. */
__host__ __device__ inline void uniform_block(const dl_stream &s, uint64_t index, int64_t n,
                                              uint64_t block, float *out) {
  uint32_t words[4];
  dl_philox_stream_block(&s, block, words);
  for (unsigned lane = 0; lane < 4; lane++) {
    uint64_t w = block * 4 + lane;
    if (w >= index && w - index < (uint64_t)n) out[w - index] = dl_philox_uniform(words[lane]);
  }
}

} // namespace dl_cuda_philox

#endif
