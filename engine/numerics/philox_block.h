/* One Philox4x32-10 block and the stream's word layout (philox.h), written
 * once for the CPU (numerics/philox.c) and the GPU (backend/cuda/philox.cuh):
 * under nvcc these are __host__ __device__, so a dropout mask drawn on the
 * GPU has the bits the CPU draws. The layout is a spec that fixtures/pytorch
 * reimplements in numpy; change it only together. */
#ifndef DL_PHILOX_BLOCK_H
#define DL_PHILOX_BLOCK_H

#include "numerics/philox.h"

#include <stdint.h>

#ifdef __CUDACC__
#define DL_PHILOX_FN static inline __host__ __device__
#else
#define DL_PHILOX_FN static inline
#endif

/* out = philox(ctr, key), 10 rounds (Salmon et al., Random123). */
DL_PHILOX_FN void dl_philox_block(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
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
DL_PHILOX_FN void dl_philox_stream_block(const dl_stream *s, uint64_t block, uint32_t out[4]) {
  const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)s->id,
                           (uint32_t)(s->id >> 32)};
  dl_philox_block(ctr, s->key, out);
}

/* A word as a uniform float in [0, 1). Exact: a 24-bit integer converts
 * exactly, and 2^-24 is a power of two. */
DL_PHILOX_FN float dl_philox_uniform(uint32_t word) { return (float)(word >> 8) * 0x1p-24f; }

#endif
