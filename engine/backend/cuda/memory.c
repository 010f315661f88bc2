/* Device memory: cudaMalloc'd blocks, each recorded with its size, so that
 * freeing can be counted and a copy can be checked to fit its block before
 * it runs (an overrun on the device corrupts silently or faults later).
 * The record is a list under a mutex: a model holds tens to hundreds of
 * blocks, and allocation is not on any hot path. */
#define _POSIX_C_SOURCE 200809L
#include "backend/cuda/context.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct block {
  uintptr_t base;
  size_t bytes;
  struct block *next;
} block;

static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static block *blocks;
static int64_t held_bytes, peak_bytes;

static void record(block *b) {
  pthread_mutex_lock(&blocks_lock);
  b->next = blocks;
  blocks = b;
  held_bytes += (int64_t)b->bytes;
  if (held_bytes > peak_bytes) peak_bytes = held_bytes;
  pthread_mutex_unlock(&blocks_lock);
}

/* Unlinks and returns the block starting at p, or NULL. */
static block *unrecord(const void *p) {
  pthread_mutex_lock(&blocks_lock);
  block **at = &blocks;
  while (*at && (*at)->base != (uintptr_t)p) at = &(*at)->next;
  block *b = *at;
  if (b) {
    *at = b->next;
    held_bytes -= (int64_t)b->bytes;
  }
  pthread_mutex_unlock(&blocks_lock);
  return b;
}

/* Do [p, p + bytes) lie inside one recorded block? */
static bool inside_a_block(const void *p, size_t bytes) {
  uintptr_t at = (uintptr_t)p;
  bool found = false;
  pthread_mutex_lock(&blocks_lock);
  for (const block *b = blocks; b && !found; b = b->next)
    found = at >= b->base && at - b->base <= b->bytes && bytes <= b->bytes - (at - b->base);
  pthread_mutex_unlock(&blocks_lock);
  return found;
}

int64_t dl_cuda_mem_current(void) {
  pthread_mutex_lock(&blocks_lock);
  int64_t v = held_bytes;
  pthread_mutex_unlock(&blocks_lock);
  return v;
}

int64_t dl_cuda_mem_peak(void) {
  pthread_mutex_lock(&blocks_lock);
  int64_t v = peak_bytes;
  pthread_mutex_unlock(&blocks_lock);
  return v;
}

void dl_cuda_mem_reset_peak(void) {
  pthread_mutex_lock(&blocks_lock);
  peak_bytes = held_bytes;
  pthread_mutex_unlock(&blocks_lock);
}

static dl_status alloc_fail(dl_status s, dl_cuda *ctx, size_t bytes, const char *what) {
  return dl_fail_context(s,
                         "%s (%zu bytes on GPU %d; dlcheck holds %lld bytes of device "
                         "memory): ",
                         what, bytes, ctx->device, (long long)dl_cuda_mem_current());
}

dl_status dl_cuda_alloc(dl_cuda *ctx, size_t bytes, const char *what, void **p) {
  if (!what) what = "device buffer";
  if (!p) return dl_fail(DL_ERR_INVALID, "dl_cuda_alloc of %s: no place for the pointer", what);
  *p = NULL;
  DL_TRY(dl_cuda_enter(ctx, what));
  if (bytes == 0) return DL_OK;
  block *b = malloc(sizeof *b);
  if (!b) return dl_fail(DL_ERR_NOMEM, "%s: no host memory for the record of a device block", what);
  void *d = NULL;
  cudaError_t e = cudaMalloc(&d, bytes);
  if (e == cudaSuccess) {
    e = cudaMemsetAsync(d, 0, bytes, ctx->stream);
    if (e != cudaSuccess) cudaFree(d);
  }
  if (e != cudaSuccess) {
    free(b);
    return alloc_fail(dl_cuda_fail(e, __FILE__, __LINE__, "cudaMalloc"), ctx, bytes, what);
  }
  b->base = (uintptr_t)d;
  b->bytes = bytes;
  record(b);
  *p = d;
  return DL_OK;
}

dl_status dl_cuda_free(void *p) {
  if (!p) return DL_OK;
  block *b = unrecord(p);
  if (!b)
    return dl_fail(DL_ERR_INVALID,
                   "dl_cuda_free: %p is not a device block from dl_cuda_alloc "
                   "(freed twice, or an offset into a block?)",
                   p);
  free(b);
  DL_CUDA_TRY(cudaFree(p));
  return DL_OK;
}

/* ---- copies ---- */

typedef enum direction { TO_DEVICE, TO_HOST } direction;

static dl_status copy(dl_cuda *ctx, void *dst, const void *src, size_t bytes, const char *what,
                      direction dir) {
  if (!what) what = "device buffer";
  if (bytes == 0) return DL_OK;
  if (!dst || !src)
    return dl_fail(DL_ERR_INVALID, "%s: copy of %zu bytes %s a NULL pointer", what, bytes,
                   dir == TO_DEVICE ? "to the GPU from" : "from the GPU with");
  const void *device_side = dir == TO_DEVICE ? dst : src;
  if (!inside_a_block(device_side, bytes))
    return dl_fail(DL_ERR_INVALID,
                   "%s: %zu bytes at %p do not lie inside one device block "
                   "from dl_cuda_alloc",
                   what, bytes, device_side);
  DL_TRY(dl_cuda_enter(ctx, what));
  DL_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes,
                              dir == TO_DEVICE ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                              ctx->stream));
  DL_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
  return DL_OK;
}

dl_status dl_cuda_upload_bytes(dl_cuda *ctx, void *dst, const void *src, size_t bytes,
                               const char *what) {
  return copy(ctx, dst, src, bytes, what, TO_DEVICE);
}

dl_status dl_cuda_download_bytes(dl_cuda *ctx, void *dst, const void *src, size_t bytes,
                                 const char *what) {
  return copy(ctx, dst, src, bytes, what, TO_HOST);
}

dl_status dl_cuda_upload(dl_cuda *ctx, void *dst, const dl_tensor *src, const char *what) {
  if (!src) return dl_fail(DL_ERR_INVALID, "%s: upload of no tensor", what ? what : "tensor");
  return copy(ctx, dst, src->data, dl_tensor_bytes(src), what, TO_DEVICE);
}

dl_status dl_cuda_download(dl_cuda *ctx, dl_tensor *dst, const void *src, const char *what) {
  if (!dst) return dl_fail(DL_ERR_INVALID, "%s: download into no tensor", what ? what : "tensor");
  return copy(ctx, dst->data, src, dl_tensor_bytes(dst), what, TO_HOST);
}
