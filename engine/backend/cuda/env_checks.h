/* E1-E3 (backend/cuda_env.h decides them) on the numbers of this machine
 * and this build. Without an NVIDIA driver every check is "not applicable"
 * (ok, nothing to run on). */
#ifndef DL_CUDA_ENV_CHECKS_H
#define DL_CUDA_ENV_CHECKS_H

#include "backend/cuda_env.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The architectures dlcuda was built for (DL_CUDA_ARCHS, ',' separated). */
const char *dl_cuda_built_archs(void);
/* Versions of the headers dlcuda was compiled with (cuDNN and NCCL 0 when
 * their headers were not found). */
void dl_cuda_built_versions(dl_cuda_versions *v);
/* Versions loaded in this process: the linked cudart and cuBLAS, and
 * libcudnn / libnccl found with dlopen (kept loaded: unloading libraries
 * that may have started threads is unsafe). */
void dl_cuda_loaded_versions(dl_cuda_versions *v);

/* E1-E3 of this build on this machine for GPU `device`: out[0..2]. Never fails. */
void dl_cuda_env_checks(int device, dl_cuda_check out[3]);

#ifdef __cplusplus
}
#endif

#endif
