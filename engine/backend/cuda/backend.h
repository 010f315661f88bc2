/* The CUDA backend of engine/backend/backend.h: a dl_backend whose GEMMs run in
 * cuBLAS (dl_cuda_sgemm) and whose convolutions run in cuDNN, on host
 * arrays. Each call uploads its inputs into device buffers the backend
 * keeps (grown, never shrunk, counted by dl_cuda_mem_current), computes on
 * the context's stream and downloads the output, waiting for the stream.
 *
 * Results differ from the CPU's only in summation order (and in TF32
 * rounding when asked): within float32 rounding of dl_sgemm, not bitwise.
 * In DL_CUDA_CONV_DETERMINISTIC mode the same call gives the same bits run
 * to run on one GPU model with one cuBLAS/cuDNN version.
 *
 * Convolutions need cuDNN: a build where CMake found none (no
 * DL_CUDA_HAVE_CUDNN) leaves the backend's convolution functions NULL, so
 * the layers run them on the CPU.
 *
 * Plain C: users need no CUDA headers. One thread at a time per backend. */
#ifndef DL_CUDA_BACKEND_H
#define DL_CUDA_BACKEND_H

#include "backend/backend.h" /* engine/backend/backend.h: "backend.h" would be this file */
#include "backend/cuda/device.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How cuDNN's convolution algorithms are chosen (per geometry, once).
 * DETERMINISTIC: among cuDNN's heuristic ranking (the _v7 Get functions),
 *   the first algorithm it reports as CUDNN_DETERMINISTIC with status
 *   success and a workspace within the limit: torch.backends.cudnn.
 *   deterministic = True. Same bits run to run.
 * FASTEST: cuDNN's first-ranked algorithm that can run, deterministic or
 *   not (bwd-data ALGO_0 and bwd-filter ALGO_0/ALGO_3 use atomics): like
 *   torch.backends.cudnn.benchmark, from the heuristics rather than timing. */
typedef enum dl_cuda_conv_algo {
  DL_CUDA_CONV_DETERMINISTIC = 0,
  DL_CUDA_CONV_FASTEST
} dl_cuda_conv_algo;

const char *dl_cuda_conv_algo_name(dl_cuda_conv_algo a); /* "deterministic", "fastest" */

/* The largest cuDNN workspace an algorithm may ask for. */
#define DL_CUDA_CONV_WORKSPACE_LIMIT ((size_t)256 << 20)

typedef struct dl_cuda_backend_options {
  int device;             /* GPU index, after CUDA_VISIBLE_DEVICES */
  dl_cuda_math math;      /* cuBLAS and cuDNN. FP32: cuBLAS pedantic, cuDNN
                             CUDNN_FMA_MATH (no TF32); TF32: cuBLAS TF32
                             tensor ops, cuDNN CUDNN_DEFAULT_MATH (TF32
                             allowed, as torch.backends.cudnn.allow_tf32) */
  dl_cuda_conv_algo conv; /* above */
} dl_cuda_backend_options;

/* A dl_cuda context on o->device (dl_cuda_init: stream, cuBLAS handle,
 * CUBLAS_WORKSPACE_CONFIG) plus a cuDNN handle on its stream, as a
 * dl_backend named "cuda". No GPU: DL_ERR_UNSUPPORTED with "no CUDA device:
 * <reason>"; a bad option or device index: DL_ERR_INVALID. *out is NULL on
 * any failure, and nothing is left allocated. */
dl_status dl_cuda_backend_create(const dl_cuda_backend_options *o, dl_backend **out);
void dl_cuda_backend_destroy(dl_backend *b); /* NULL allowed */

/* One line for the trace and the report: "cuda:0 NVIDIA H200 (sm_90), math
 * fp32, conv deterministic, cuBLAS 13.0.2, cuDNN 9.19.0,
 * CUBLAS_WORKSPACE_CONFIG=:4096:8". Returns buf. */
const char *dl_cuda_backend_describe(const dl_backend *b, char *buf, size_t len);

/* The distinct convolution algorithms chosen so far, and whether each is
 * deterministic: "fwd IMPLICIT_PRECOMP_GEMM (deterministic), bwd-data
 * ALGO_1 (deterministic), bwd-filter ALGO_1 (deterministic)". "" when no
 * convolution has run; in a build without cuDNN, a sentence saying they run
 * on the CPU. Returns buf. */
const char *dl_cuda_backend_algorithms(const dl_backend *b, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
