#include "data/sampler.h"

#include "core/mem.h"
#include "numerics/philox.h"

#include <string.h>

void dl_permutation(int64_t n, uint64_t seed, int64_t epoch, int64_t *perm) {
  dl_stream s = dl_stream_make(seed, "shuffle", (const uint64_t[]){(uint64_t)epoch}, 1);
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    uint64_t step = (uint64_t)(n - 1 - i);
    int64_t j = (int64_t)dl_stream_below(&s, 2 * step, (uint64_t)i + 1);
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

static dl_status check_sampler(const dl_sampler *s) {
  if (s->n < 0)
    return dl_fail(DL_ERR_INVALID, "sampler: dataset size %lld is negative", (long long)s->n);
  if (s->kind != DL_SAMPLER_SEQUENTIAL && s->kind != DL_SAMPLER_RANDOM &&
      s->kind != DL_SAMPLER_DISTRIBUTED)
    return dl_fail(DL_ERR_INVALID, "sampler: unknown kind %d", (int)s->kind);
  if (s->kind != DL_SAMPLER_DISTRIBUTED) return DL_OK;
  if (s->world < 1)
    return dl_fail(DL_ERR_INVALID, "distributed sampler: world size %d must be >= 1", s->world);
  if (s->rank < 0 || s->rank >= s->world)
    return dl_fail(DL_ERR_INVALID, "distributed sampler: rank %d is outside [0, %d]", s->rank,
                   s->world - 1);
  return DL_OK;
}

/* DistributedSampler's total_size: ceil(N/world)*world, or with drop_last
 * floor(N/world)*world (torch writes it ceil((N - world)/world)*world when N
 * is not a multiple, which is the same). */
static int64_t distributed_total(const dl_sampler *s) {
  int64_t w = s->world;
  return s->drop_last ? s->n / w * w : (s->n + w - 1) / w * w;
}

int64_t dl_sampler_len(const dl_sampler *s) {
  if (check_sampler(s) != DL_OK) return -1;
  if (s->kind != DL_SAMPLER_DISTRIBUTED) return s->n;
  return distributed_total(s) / s->world;
}

void dl_indices_free(dl_indices *ix) {
  if (!ix) return;
  dl_mem_free(ix->v);
  ix->v = NULL;
  ix->n = 0;
}

static dl_status alloc_indices(dl_indices *out, int64_t n, const char *what) {
  out->v = dl_mem_alloc((size_t)n * sizeof *out->v, what);
  if (!out->v) return DL_ERR_NOMEM;
  out->n = n;
  return DL_OK;
}

/* The whole epoch's list (shuffled or not), padded by wrapping or truncated
 * to total_size, then rank's stride of it. */
static dl_status distributed_indices(const dl_sampler *s, int64_t epoch, dl_indices *out) {
  int64_t total = distributed_total(s), w = s->world;
  int64_t *order = dl_mem_alloc((size_t)s->n * sizeof *order, "sampler order");
  if (!order) return DL_ERR_NOMEM;
  if (s->shuffle) {
    dl_permutation(s->n, s->seed, epoch, order);
  } else {
    for (int64_t i = 0; i < s->n; i++) order[i] = i;
  }
  dl_status st = alloc_indices(out, total / w, "distributed sampler indices");
  if (st == DL_OK)
    for (int64_t k = 0; k < out->n; k++) out->v[k] = order[(s->rank + k * w) % s->n];
  dl_mem_free(order);
  return st;
}

dl_status dl_sampler_indices(const dl_sampler *s, int64_t epoch, dl_indices *out) {
  memset(out, 0, sizeof *out);
  DL_TRY(check_sampler(s));
  if (s->kind == DL_SAMPLER_DISTRIBUTED) return distributed_indices(s, epoch, out);
  DL_TRY(alloc_indices(out, s->n, "sampler indices"));
  if (s->kind == DL_SAMPLER_RANDOM) {
    dl_permutation(s->n, s->seed, epoch, out->v);
  } else {
    for (int64_t i = 0; i < s->n; i++) out->v[i] = i;
  }
  return DL_OK;
}
