/* The CUDA backend's device layer: finding a GPU, a context (one device,
 * one stream, one cuBLAS handle, one math mode), device memory with its own
 * accounting, and copies between host tensors and device buffers.
 *
 * Everything a context does is ordered on its stream; the copies to and
 * from the host wait for the stream, so a download sees every kernel
 * launched before it. A context is used by one thread at a time.
 *
 * Plain C: users need no CUDA headers. Built only when CMake finds nvcc;
 * the library dlcuda defines DL_HAVE_CUDA=1 for its users. */
#ifndef DL_CUDA_DEVICE_H
#define DL_CUDA_DEVICE_H

#include "core/tensor.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How float32 GEMMs round (docs/design.md rule 3: TF32 off unless asked).
 * FP32: cuBLAS's pedantic float32 path, no TF32 even under
 *       NVIDIA_TF32_OVERRIDE=1; summation order is cuBLAS's own.
 * TF32: inputs rounded to TF32 (10-bit mantissa) on the tensor cores, FP32
 *       accumulation: torch.backends.cuda.matmul.allow_tf32 = True.
 * FP16/BF16 inputs are a matter of dtype, not of mode: dl_cuda_gemm_half
 * always accumulates in FP32. */
typedef enum dl_cuda_math { DL_CUDA_MATH_FP32 = 0, DL_CUDA_MATH_TF32 } dl_cuda_math;

const char *dl_cuda_math_name(dl_cuda_math m); /* "fp32", "tf32" */

typedef struct dl_cuda dl_cuda;

/* Number of GPUs this process can use. Any failure (no driver, a driver
 * too old for this runtime, CUDA_VISIBLE_DEVICES empty) counts as none:
 * *n = 0 and DL_ERR_UNSUPPORTED with "no CUDA device: <reason>" as the
 * message, which dl_cuda_no_device_reason() also keeps. Asks the runtime
 * once per process. */
dl_status dl_cuda_device_count(int *n);
/* The reason of the last dl_cuda_device_count that found none ("" if it
 * found some or was not called). */
const char *dl_cuda_no_device_reason(void);

/* A context on GPU `device`: a non-blocking stream and a cuBLAS handle on
 * it, in math mode `math`. Sets CUBLAS_WORKSPACE_CONFIG=:4096:8 when the
 * environment does not set it, before creating the handle: cuBLAS is
 * bitwise reproducible run to run only with a fixed workspace per stream
 * (cuBLAS docs, "Results reproducibility"), as PyTorch's
 * use_deterministic_algorithms asks too. No device is DL_ERR_UNSUPPORTED;
 * a device index out of range is DL_ERR_INVALID. */
dl_status dl_cuda_init(int device, dl_cuda_math math, dl_cuda **ctx);
void dl_cuda_destroy(dl_cuda *ctx); /* NULL allowed */

dl_status dl_cuda_set_math(dl_cuda *ctx, dl_cuda_math math);
dl_cuda_math dl_cuda_get_math(const dl_cuda *ctx);
int dl_cuda_device(const dl_cuda *ctx);

/* Waits for the context's stream; reports any failure of the work on it
 * (a faulting kernel shows up here). */
dl_status dl_cuda_sync(dl_cuda *ctx);

/* ---- device memory ---- */

/* Zeroed device block of `bytes` on ctx's GPU (0 allowed: *p = NULL).
 * `what` names it in messages. Counted in dl_cuda_mem_current/peak. */
dl_status dl_cuda_alloc(dl_cuda *ctx, size_t bytes, const char *what, void **p);
/* Frees a block from dl_cuda_alloc (NULL allowed). A pointer that is not
 * one is DL_ERR_INVALID, and nothing is freed. */
dl_status dl_cuda_free(void *p);

/* Bytes of device memory held through dl_cuda_alloc now, and the most held
 * at once since the start or the last reset: like PyTorch's
 * torch.cuda.memory_allocated / max_memory_allocated. All GPUs together. */
int64_t dl_cuda_mem_current(void);
int64_t dl_cuda_mem_peak(void);
void dl_cuda_mem_reset_peak(void); /* peak := current */

/* ---- copies: host <-> device, waiting for the stream ---- */

/* dst and src on the device must lie inside one block from dl_cuda_alloc
 * (a pointer into a block is fine, with `bytes` within it); otherwise
 * DL_ERR_INVALID naming `what`, and nothing is copied. */
dl_status dl_cuda_upload_bytes(dl_cuda *ctx, void *dst, const void *src, size_t bytes,
                               const char *what);
dl_status dl_cuda_download_bytes(dl_cuda *ctx, void *dst, const void *src, size_t bytes,
                                 const char *what);
/* All of tensor src's bytes to dst, and back into tensor dst (its dtype and
 * shape say how many bytes). */
dl_status dl_cuda_upload(dl_cuda *ctx, void *dst, const dl_tensor *src, const char *what);
dl_status dl_cuda_download(dl_cuda *ctx, dl_tensor *dst, const void *src, const char *what);

#ifdef __cplusplus
}
#endif

#endif
