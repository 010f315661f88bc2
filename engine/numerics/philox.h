/* Counter-based random numbers: Philox4x32-10 (Salmon et al., Random123),
 * the generator of PyTorch's CUDA backend and JAX.
 *
 * Determinism rule 1: a random value is a pure function of
 * (seed, stream, index). The stream names the purpose with indices, e.g.
 * dl_stream_make(seed, "dropout", (uint64_t[]){layer, step, sample}, 3);
 * the index counts values within the stream. So who draws a value (which
 * thread, worker, rank) never changes it. */
#ifndef DL_PHILOX_H
#define DL_PHILOX_H

#include <stdint.h>

/* One Philox4x32 block, 10 rounds: out = philox(ctr, key). */
void dl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

typedef struct dl_stream {
  uint32_t key[2]; /* the seed */
  uint64_t id;     /* hash of purpose and indices: counter words 2..3 */
} dl_stream;

/* Stream for (seed, purpose, idx[0..nidx-1]); never keyed by a thread or
 * rank id. Exact algorithm (fixtures/pytorch reimplements it in numpy):
 *   id = 0xcbf29ce484222325; for each byte c of purpose:
 *        id = (id ^ c) * 0x100000001b3            (FNV-1a 64)
 *   for each idx[i]: id = splitmix64(id ^ idx[i]) where splitmix64(z):
 *        z += 0x9e3779b97f4a7c15; z = (z ^ z>>30) * 0xbf58476d1ce4e5b9;
 *        z = (z ^ z>>27) * 0x94d049bb133111eb; return z ^ z>>31
 *   key = {seed & 0xffffffff, seed >> 32}
 *   word w of the stream: block b = w / 4, ctr = {b & 0xffffffff, b >> 32,
 *        id & 0xffffffff, id >> 32}, value = philox(ctr, key)[w % 4] */
dl_stream dl_stream_make(uint64_t seed, const char *purpose, const uint64_t *idx, int nidx);

/* Raw 32-bit words index..index+n-1 of the stream (counter words 0..1 hold
 * index/4, so one Philox block yields 4 consecutive words). */
void dl_stream_u32(const dl_stream *s, uint64_t index, uint32_t *out, int64_t n);
/* Uniform floats in [0, 1): (word >> 8) * 2^-24. out[i] uses word index+i. */
void dl_stream_uniform(const dl_stream *s, uint64_t index, float *out, int64_t n);
/* Uniform in [lo, hi). */
void dl_stream_uniform_range(const dl_stream *s, uint64_t index, float lo, float hi, float *out,
                             int64_t n);
/* Normal(mean, std) by Box-Muller; out[i] uses words index+2i, index+2i+1. */
void dl_stream_normal(const dl_stream *s, uint64_t index, float mean, float std, float *out,
                      int64_t n);
/* out[i] = 1 with probability p (uniform < p), else 0. */
void dl_stream_bernoulli(const dl_stream *s, uint64_t index, float p, uint8_t *out, int64_t n);
/* A uniform integer in [0, n) from word `index` (for shuffles; Lemire's
 * multiply-shift on 64 bits built from two words index, index+1). */
uint64_t dl_stream_below(const dl_stream *s, uint64_t index, uint64_t n);

#endif
