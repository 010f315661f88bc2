/* The environment checks E1-E3 (checks/judge/catalogue.c): what makes a CUDA
 * program fail at start or drift, said before it happens.
 *
 *   E1  the CUDA runtime is newer than the driver supports
 *   E2  no kernel image for the GPU's architecture
 *   E3  a library built against one version, another loaded
 *
 * Each decision is a pure function of numbers, built with or without
 * CUDA: backend/cuda/env_checks.h gathers the numbers of this build on
 * this machine, checks/store/env_torch.h reads those of a PyTorch process
 * from its fingerprint.
 *
 * Versions are as the libraries report them: runtime and driver 12040 =
 * 12.4; cuBLAS major*10000 + minor*100 + patch; cuDNN 90100 = 9.1.0
 * (8xyz = 8.x.yz for cuDNN 8); NCCL 22304 = 2.23.4. 0 means absent. */
#ifndef DL_CUDA_ENV_H
#define DL_CUDA_ENV_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { DL_CUDA_CHECK_MESSAGE_MAX = 512 };

typedef struct dl_cuda_check {
  const char *id;                          /* "E1", "E2", "E3" */
  bool applicable;                         /* false: nothing to check here (no driver or GPU) */
  bool ok;                                 /* true when applicable and fine, or not applicable */
  char message[DL_CUDA_CHECK_MESSAGE_MAX]; /* what was found; on failure, what to do */
} dl_cuda_check;

/* Whose CUDA code is judged: it decides the fix a failure names
 * (CMAKE_CUDA_ARCHITECTURES and LD_LIBRARY_PATH for this build; a torch
 * wheel, TORCH_CUDA_ARCH_LIST and its nvidia-* packages for PyTorch). */
typedef enum dl_cuda_subject { DL_CUDA_DLCHECK, DL_CUDA_TORCH } dl_cuda_subject;

typedef struct dl_cuda_versions {
  int runtime, cublas, cudnn, nccl;
} dl_cuda_versions;

/* E1. The driver supports runtimes up to its own version's major.minor;
 * a runtime of a newer major cannot start (cudaErrorInsufficientDriver);
 * a newer minor of the same major runs (minor version compatibility) but
 * cannot JIT-compile PTX newer than the driver, which is said as a note.
 * driver 0 means no driver: not applicable. */
void dl_cuda_check_runtime_vs_driver(int runtime, int driver, dl_cuda_subject who,
                                     dl_cuda_check *out);

/* E2. archs: CMAKE_CUDA_ARCHITECTURES as built, entries separated by
 * ',' or ';': "80" (SASS and PTX), "80-real" (SASS only), "80-virtual"
 * (PTX only); a suffix letter ("90a") is SASS/PTX for exactly that GPU.
 * SASS for X.y runs on X.z with z >= y; PTX for X.y is JIT-compiled for any
 * GPU >= X.y. A GPU neither covers fails: its first kernel launch would say
 * "no kernel image is available for execution on the device". "all",
 * "all-major" and "native" cannot be judged from the list (ok, said so). */
void dl_cuda_check_arch_vs_device(const char *archs, int major, int minor, dl_cuda_subject who,
                                  dl_cuda_check *out);

/* E3. Each library present on both sides must be loaded at the version it
 * was built against: another version means other kernels, other bits
 * (drift against goldens) or missing symbols (crashes). A library not
 * loaded at run time is not compared (said in the message). */
void dl_cuda_check_built_vs_loaded(const dl_cuda_versions *built, const dl_cuda_versions *loaded,
                                   dl_cuda_subject who, dl_cuda_check *out);

/* out := not applicable (ok) with id and reason `why`. */
void dl_cuda_check_not_applicable(dl_cuda_check *out, const char *id, const char *why);

typedef struct dl_cuda_version_text {
  char s[32];
} dl_cuda_version_text;
/* A CUDA version as text: 12040 -> "12.4". */
dl_cuda_version_text dl_cuda_version(int v);
/* A library version as text: cuBLAS 120304 -> "12.3.4", cuDNN 90100 ->
 * "9.1.0" and 8907 -> "8.9.7", NCCL 22304 -> "2.23.4" and 2708 -> "2.7.8"
 * (below 10000 the major counts in thousands, for each of them). */
dl_cuda_version_text dl_cuda_library_version(int v);

#ifdef __cplusplus
}
#endif

#endif
