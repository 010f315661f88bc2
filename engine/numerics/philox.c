/* The keyed streams of philox.h on one Philox block (philox_block.h, which
 * the CUDA kernels share). The stream-id hash and the transforms below are
 * a spec that fixtures/pytorch reimplements in numpy; change them only
 * together. */
#include "numerics/philox.h"

#include "numerics/philox_block.h"

#include "numerics/fmath.h"

#include <math.h>
#include <string.h>

enum { WORDS_PER_CHUNK = 256 }; /* stack buffer of the transforms */

void dl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  dl_philox_block(ctr, key, out);
}

static uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

dl_stream dl_stream_make(uint64_t seed, const char *purpose, const uint64_t *idx, int nidx) {
  uint64_t id = 0xcbf29ce484222325ULL;
  for (const unsigned char *c = (const unsigned char *)(purpose ? purpose : ""); *c; c++)
    id = (id ^ *c) * 0x100000001b3ULL;
  for (int i = 0; i < nidx; i++) id = splitmix64(id ^ idx[i]);
  dl_stream s = {{(uint32_t)seed, (uint32_t)(seed >> 32)}, id};
  return s;
}

void dl_stream_u32(const dl_stream *s, uint64_t index, uint32_t *out, int64_t n) {
  int64_t i = 0;
  while (i < n) {
    uint64_t w = index + (uint64_t)i;
    uint32_t block[4];
    dl_philox_stream_block(s, w / 4, block);
    for (unsigned lane = (unsigned)(w % 4); lane < 4 && i < n; lane++) out[i++] = block[lane];
  }
}

void dl_stream_uniform(const dl_stream *s, uint64_t index, float *out, int64_t n) {
  uint32_t words[WORDS_PER_CHUNK];
  for (int64_t done = 0; done < n; done += WORDS_PER_CHUNK) {
    int64_t m = n - done < WORDS_PER_CHUNK ? n - done : WORDS_PER_CHUNK;
    dl_stream_u32(s, index + (uint64_t)done, words, m);
    for (int64_t i = 0; i < m; i++) out[done + i] = dl_philox_uniform(words[i]);
  }
}

/* The largest float below hi. */
static float float_below(float hi) {
  if (hi == 0.0f) return -0x1p-149f;
  uint32_t u;
  memcpy(&u, &hi, sizeof u);
  u = hi > 0.0f ? u - 1 : u + 1;
  memcpy(&hi, &u, sizeof u);
  return hi;
}

void dl_stream_uniform_range(const dl_stream *s, uint64_t index, float lo, float hi, float *out,
                             int64_t n) {
  dl_stream_uniform(s, index, out, n);
  float width = hi - lo;
  /* u*width + lo as PyTorch's uniform_ computes it; rounding can reach hi
   * when u is close to 1, which would break the [lo, hi) promise. */
  int clamp = hi > lo;
  float top = clamp ? float_below(hi) : hi;
  for (int64_t i = 0; i < n; i++) {
    float v = out[i] * width + lo;
    out[i] = clamp && !(v < hi) ? top : v;
  }
}

/* Box-Muller on two words: u1 = (w1 + 1) 2^-32 in (0, 1], so log never sees 0;
 * u2 = w2 2^-32 in [0, 1); z = sqrt(-2 log u1) cos(2 pi u2), all in double. */
static double standard_normal(uint32_t w1, uint32_t w2) {
  double u1 = ((double)w1 + 1.0) * 0x1p-32;
  double u2 = (double)w2 * 0x1p-32;
  return sqrt(-2.0 * dl_log(u1)) * dl_cospi(2.0 * u2);
}

void dl_stream_normal(const dl_stream *s, uint64_t index, float mean, float std, float *out,
                      int64_t n) {
  enum { PAIRS = WORDS_PER_CHUNK / 2 };
  uint32_t words[WORDS_PER_CHUNK];
  for (int64_t done = 0; done < n; done += PAIRS) {
    int64_t m = n - done < PAIRS ? n - done : PAIRS;
    dl_stream_u32(s, index + 2 * (uint64_t)done, words, 2 * m);
    for (int64_t i = 0; i < m; i++) {
      double z = standard_normal(words[2 * i], words[2 * i + 1]);
      out[done + i] = (float)(z * (double)std + (double)mean);
    }
  }
}

void dl_stream_bernoulli(const dl_stream *s, uint64_t index, float p, uint8_t *out, int64_t n) {
  uint32_t words[WORDS_PER_CHUNK];
  for (int64_t done = 0; done < n; done += WORDS_PER_CHUNK) {
    int64_t m = n - done < WORDS_PER_CHUNK ? n - done : WORDS_PER_CHUNK;
    dl_stream_u32(s, index + (uint64_t)done, words, m);
    for (int64_t i = 0; i < m; i++) out[done + i] = dl_philox_uniform(words[i]) < p;
  }
}

/* High 64 bits of a*b, from 32-bit halves. */
static uint64_t mul_high64(uint64_t a, uint64_t b) {
  uint64_t a_lo = (uint32_t)a, a_hi = a >> 32, b_lo = (uint32_t)b, b_hi = b >> 32;
  uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  uint64_t middle = (lo_lo >> 32) + (uint32_t)hi_lo + (uint32_t)lo_hi;
  return hi_hi + (hi_lo >> 32) + (lo_hi >> 32) + (middle >> 32);
}

/* r = word[index] | word[index+1] << 32 (numpy: words[i:i+2].view(uint64));
 * result = (r * n) >> 64, bias below n / 2^64. n = 0 gives 0. */
uint64_t dl_stream_below(const dl_stream *s, uint64_t index, uint64_t n) {
  uint32_t words[2];
  dl_stream_u32(s, index, words, 2);
  uint64_t r = (uint64_t)words[0] | (uint64_t)words[1] << 32;
  return mul_high64(r, n);
}
