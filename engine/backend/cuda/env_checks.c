/* E1-E3 of this build: the numbers of this machine, decided by backend/cuda_env.c. */
#include "backend/cuda/env_checks.h"

#include "backend/cuda/device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<cudnn_version.h>)
#include <cudnn_version.h>
#endif
#if __has_include(<nccl.h>)
#include <nccl.h>
#endif
#endif

#ifndef DL_CUDA_ARCHS
#define DL_CUDA_ARCHS "unknown"
#endif

/* ---- this machine ---- */

const char *dl_cuda_built_archs(void) { return DL_CUDA_ARCHS; }

void dl_cuda_built_versions(dl_cuda_versions *v) {
  memset(v, 0, sizeof *v);
  v->runtime = CUDART_VERSION;
  v->cublas = CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH;
#ifdef CUDNN_VERSION
  v->cudnn = CUDNN_VERSION;
#endif
#ifdef NCCL_VERSION_CODE
  v->nccl = NCCL_VERSION_CODE;
#endif
}

/* POSIX's way to turn dlsym's object pointer into a function pointer. */
#define LOOKUP(handle, fn, name) (*(void **)(&(fn)) = dlsym(handle, name))

static void *open_first(const char *const *names) {
  for (; *names; names++) {
    void *h = dlopen(*names, RTLD_LAZY | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

static int loaded_cudnn(void) {
  static const char *const names[] = {"libcudnn.so.9", "libcudnn.so", "libcudnn.so.8", NULL};
  void *h = open_first(names);
  size_t (*get_version)(void) = NULL;
  if (!h || !LOOKUP(h, get_version, "cudnnGetVersion")) return 0;
  size_t v = get_version();
  return v < 1000000 ? (int)v : 0;
}

static int loaded_nccl(void) {
  static const char *const names[] = {"libnccl.so.2", "libnccl.so", NULL};
  void *h = open_first(names);
  int (*get_version)(int *) = NULL;
  int v = 0;
  if (!h || !LOOKUP(h, get_version, "ncclGetVersion") || get_version(&v) != 0) return 0;
  return v;
}

static int loaded_cublas(void) {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return 0;
  return major * 10000 + minor * 100 + patch;
}

void dl_cuda_loaded_versions(dl_cuda_versions *v) {
  memset(v, 0, sizeof *v);
  if (cudaRuntimeGetVersion(&v->runtime) != cudaSuccess) v->runtime = 0;
  v->cublas = loaded_cublas();
  v->cudnn = loaded_cudnn();
  v->nccl = loaded_nccl();
}

static void check_this_gpu(int device, dl_cuda_check *out) {
  int n = 0, major = 0, minor = 0;
  char why[DL_CUDA_CHECK_MESSAGE_MAX];
  if (dl_cuda_device_count(&n) != DL_OK) {
    snprintf(why, sizeof why, "no CUDA device: %s", dl_cuda_no_device_reason());
    dl_cuda_check_not_applicable(out, "E2", why);
    return;
  }
  if (device < 0 || device >= n ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(why, sizeof why, "no CUDA device %d (this process sees %d)", device, n);
    dl_cuda_check_not_applicable(out, "E2", why);
    return;
  }
  dl_cuda_check_arch_vs_device(dl_cuda_built_archs(), major, minor, DL_CUDA_DLCHECK, out);
}

void dl_cuda_env_checks(int device, dl_cuda_check out[3]) {
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  if (driver == 0) {
    static const char *const ids[] = {"E1", "E2", "E3"};
    char why[DL_CUDA_CHECK_MESSAGE_MAX];
    snprintf(why, sizeof why,
             "no CUDA driver: E1-E3 not applicable (no NVIDIA driver found; "
             "this build has CUDA runtime %s)",
             dl_cuda_version(runtime).s);
    for (int i = 0; i < 3; i++) dl_cuda_check_not_applicable(&out[i], ids[i], why);
    return;
  }
  dl_cuda_check_runtime_vs_driver(runtime, driver, DL_CUDA_DLCHECK, &out[0]);
  check_this_gpu(device, &out[1]);
  dl_cuda_versions built, loaded;
  dl_cuda_built_versions(&built);
  dl_cuda_loaded_versions(&loaded);
  dl_cuda_check_built_vs_loaded(&built, &loaded, DL_CUDA_DLCHECK, &out[2]);
}
