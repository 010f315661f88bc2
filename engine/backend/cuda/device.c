/* Finding GPUs and the context: stream, cuBLAS handle, math mode. */
#define _POSIX_C_SOURCE 200809L
#include "backend/cuda/context.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- is there a GPU? ---- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probed_count;
static char probed_reason[256];

/* The runtime caches a failed initialisation for the life of the process,
 * so asking again would only repeat the answer. */
static void probe_devices(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    snprintf(probed_reason, sizeof probed_reason, "cudaGetDeviceCount failed: %s (%d)%s",
             cudaGetErrorString(e), (int)e, driver == 0 ? "; no NVIDIA driver is installed" : "");
    n = 0;
  } else if (n == 0) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(probed_reason, sizeof probed_reason,
             "the driver sees no GPU (CUDA_VISIBLE_DEVICES=%s)", visible ? visible : "unset");
  }
  probed_count = n;
}

dl_status dl_cuda_device_count(int *n) {
  pthread_once(&probe_once, probe_devices);
  if (n) *n = probed_count;
  if (probed_count > 0) return DL_OK;
  return dl_fail(DL_ERR_UNSUPPORTED, "no CUDA device: %s", probed_reason);
}

const char *dl_cuda_no_device_reason(void) {
  pthread_once(&probe_once, probe_devices);
  return probed_reason;
}

/* ---- the context ---- */

const char *dl_cuda_math_name(dl_cuda_math m) {
  switch (m) {
  case DL_CUDA_MATH_FP32: return "fp32";
  case DL_CUDA_MATH_TF32: return "tf32";
  }
  return "unknown";
}

static dl_status create_handles(dl_cuda *ctx, dl_cuda_math math) {
  DL_CUDA_TRY(cudaSetDevice(ctx->device));
  DL_CUDA_TRY(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
  DL_CUBLAS_TRY(cublasCreate(&ctx->cublas));
  DL_CUBLAS_TRY(cublasSetStream(ctx->cublas, ctx->stream));
  /* The default, said out loud: atomics would make GEMM results depend on
   * timing. */
  DL_CUBLAS_TRY(cublasSetAtomicsMode(ctx->cublas, CUBLAS_ATOMICS_NOT_ALLOWED));
  DL_CUBLAS_TRY(cublasSetPointerMode(ctx->cublas, CUBLAS_POINTER_MODE_HOST));
  ctx->math = math;
  return DL_OK;
}

static pthread_once_t workspace_once = PTHREAD_ONCE_INIT;
static bool workspace_config_failed;
static void set_workspace_config(void) {
  workspace_config_failed = setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0) != 0;
}

dl_status dl_cuda_init(int device, dl_cuda_math math, dl_cuda **out) {
  if (!out) return dl_fail(DL_ERR_INVALID, "dl_cuda_init: no place for the context");
  *out = NULL;
  if (math != DL_CUDA_MATH_FP32 && math != DL_CUDA_MATH_TF32)
    return dl_fail(DL_ERR_INVALID, "dl_cuda_init: unknown math mode %d (fp32 or tf32)", (int)math);
  int n = 0;
  DL_TRY(dl_cuda_device_count(&n));
  if (device < 0 || device >= n)
    return dl_fail(DL_ERR_INVALID,
                   "CUDA device %d does not exist: this process sees %d GPU%s "
                   "(numbered from 0 after CUDA_VISIBLE_DEVICES)",
                   device, n, n == 1 ? "" : "s");
  /* cuBLAS reads it when the handle is created; a user's own setting wins.
   * Set once per process: rank threads create contexts at the same time,
   * and setenv racing with getenv (cuBLAS's, ours) is undefined. */
  pthread_once(&workspace_once, set_workspace_config);
  if (workspace_config_failed)
    return dl_fail(DL_ERR_NOMEM, "dl_cuda_init: cannot set CUBLAS_WORKSPACE_CONFIG");
  dl_cuda *ctx = calloc(1, sizeof *ctx);
  if (!ctx)
    return dl_fail(DL_ERR_NOMEM, "dl_cuda_init: no memory for the context of GPU %d", device);
  ctx->device = device;
  dl_status s = create_handles(ctx, math);
  if (s != DL_OK) {
    dl_cuda_destroy(ctx);
    return dl_fail_context(s, "CUDA context on GPU %d: ", device);
  }
  *out = ctx;
  return DL_OK;
}

/* Teardown cannot report: the handles go whatever the device says. */
void dl_cuda_destroy(dl_cuda *ctx) {
  if (!ctx) return;
  cudaSetDevice(ctx->device);
  if (ctx->stream) cudaStreamSynchronize(ctx->stream);
  dl_cuda_free(ctx->scratch);
  if (ctx->cublas) cublasDestroy(ctx->cublas);
  if (ctx->stream) cudaStreamDestroy(ctx->stream);
  (void)cudaGetLastError();
  free(ctx);
}

/* The mode is applied by each GEMM (gemm.c), which also knows its dtype. */
dl_status dl_cuda_set_math(dl_cuda *ctx, dl_cuda_math math) {
  if (!ctx) return dl_fail(DL_ERR_INVALID, "dl_cuda_set_math: no CUDA context");
  if (math != DL_CUDA_MATH_FP32 && math != DL_CUDA_MATH_TF32)
    return dl_fail(DL_ERR_INVALID, "dl_cuda_set_math: unknown math mode %d (fp32 or tf32)",
                   (int)math);
  ctx->math = math;
  return DL_OK;
}

dl_cuda_math dl_cuda_get_math(const dl_cuda *ctx) { return ctx->math; }
int dl_cuda_device(const dl_cuda *ctx) { return ctx->device; }

dl_status dl_cuda_sync(dl_cuda *ctx) {
  DL_TRY(dl_cuda_enter(ctx, "dl_cuda_sync"));
  DL_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
  return DL_OK;
}

/* Kernels still queued may read the old block: wait before freeing it. */
dl_status dl_cuda_scratch(dl_cuda *ctx, size_t bytes, float **p) {
  if (bytes > ctx->scratch_bytes) {
    DL_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    DL_TRY(dl_cuda_free(ctx->scratch));
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
    void *fresh = NULL;
    DL_TRY(dl_cuda_alloc(ctx, bytes, "CUDA scratch", &fresh));
    ctx->scratch = fresh;
    ctx->scratch_bytes = bytes;
  }
  *p = ctx->scratch;
  return DL_OK;
}
