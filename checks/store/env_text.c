/* The fingerprint's values as text: the keys in their fixed order, each
 * field as the JSON and `dlcheck env` show it, and the aligned listing. */
#include "store/env.h"

#include "backend/cuda_env.h"

#include <string.h>

/* One row per key, in the JSON's order: its index, JSON key and label. */
#define DLC_ENV_FIELDS(X)                                   \
  X(K_DLCHECK, "dlcheck_version", "dlcheck")                \
  X(K_CPU, "cpu_model", "CPU")                              \
  X(K_FLAGS, "cpu_flags", "CPU flags")                      \
  X(K_CORES, "logical_cores", "logical cores")              \
  X(K_OS, "os", "OS")                                       \
  X(K_OS_RELEASE, "os_release", "OS release")               \
  X(K_GLIBC, "glibc", "glibc")                              \
  X(K_COMPILER, "compiler", "compiler")                     \
  X(K_BUILD_FLAGS, "build_flags", "build flags")            \
  X(K_OPTIMIZED, "optimized", "optimized")                  \
  X(K_HDF5, "hdf5", "HDF5")                                 \
  X(K_DRIVER, "cuda_driver", "CUDA driver")                 \
  X(K_DEVICES, "cuda_devices", "CUDA devices")              \
  X(K_RUNTIME, "cuda_runtime", "CUDA runtime")              \
  X(K_CUBLAS, "cublas", "cuBLAS")                           \
  X(K_CUDNN, "cudnn", "cuDNN")                              \
  X(K_NCCL, "nccl", "NCCL")                                 \
  X(K_TF32, "nvidia_tf32_override", "NVIDIA_TF32_OVERRIDE") \
  X(K_WORKSPACE, "cublas_workspace_config", "CUBLAS_WORKSPACE_CONFIG")

#define AS_INDEX(id, key, label) id,
#define AS_KEY(id, key, label) key,
#define AS_LABEL(id, key, label) label,
enum { DLC_ENV_FIELDS(AS_INDEX) K_COUNT };
const char *const dlc_env_keys[] = {DLC_ENV_FIELDS(AS_KEY) NULL};
static const char *const labels[] = {DLC_ENV_FIELDS(AS_LABEL)};
_Static_assert(sizeof labels / sizeof labels[0] == K_COUNT, "a label for every key");

static const char not_available[] = "not available", not_probed[] = "not probed";

static void set(char *dst, size_t len, const char *src) { snprintf(dst, len, "%s", src); }

/* A version backend/cuda_env.h formats, or "not available" where absent. */
static void version_text(int v, bool cuda, char *buf, size_t len) {
  set(buf, len,
      v <= 0 ? not_available
      : cuda ? dl_cuda_version(v).s
             : dl_cuda_library_version(v).s);
}

static void devices_text(const dlc_env *e, char *buf, size_t len) {
  if (!e->cuda_driver_loaded) {
    set(buf, len, "no CUDA device (driver: not available)");
    return;
  }
  if (e->cuda_init_error) {
    snprintf(buf, len, "no CUDA device (cuInit error %d)", e->cuda_init_error);
    return;
  }
  if (!e->ngpus) {
    set(buf, len, "no CUDA device");
    return;
  }
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < e->ngpus && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%d: %s (sm_%d%d, %d SMs)", i ? "; " : "", i,
                           e->gpu[i].name, e->gpu[i].major, e->gpu[i].minor, e->gpu[i].sms);
}

static void cuda_value(const dlc_env *e, int k, char *buf, size_t len) {
  if (!e->cuda_probed) {
    set(buf, len, k == K_DEVICES ? "not probed (DLCHECK_NO_CUDA_PROBE is set)" : not_probed);
    return;
  }
  switch (k) {
  case K_DRIVER: version_text(e->cuda_driver, true, buf, len); break;
  case K_DEVICES: devices_text(e, buf, len); break;
  case K_RUNTIME: version_text(e->cuda_runtime, true, buf, len); break;
  case K_CUBLAS: version_text(e->cublas, false, buf, len); break;
  case K_CUDNN: version_text(e->cudnn, false, buf, len); break;
  default: version_text(e->nccl, false, buf, len); break;
  }
}

/* Value of key number k into buf (DLC_ENV_VALUE_MAX bytes). */
static void value_at(const dlc_env *e, int k, char *buf, size_t len) {
  switch (k) {
  case K_DLCHECK: set(buf, len, e->dlcheck); break;
  case K_CPU: set(buf, len, e->cpu_model); break;
  case K_FLAGS: set(buf, len, e->cpu_flags); break;
  case K_CORES: snprintf(buf, len, "%d", e->logical_cores); break;
  case K_OS: set(buf, len, e->os); break;
  case K_OS_RELEASE: set(buf, len, e->os_release); break;
  case K_GLIBC: set(buf, len, e->glibc); break;
  case K_COMPILER: set(buf, len, e->compiler); break;
  case K_BUILD_FLAGS: set(buf, len, e->build_flags); break;
  case K_OPTIMIZED: set(buf, len, e->optimized ? "yes" : "no"); break;
  case K_HDF5: set(buf, len, e->hdf5); break;
  case K_TF32: set(buf, len, e->tf32_override); break;
  case K_WORKSPACE: set(buf, len, e->cublas_workspace_config); break;
  default: cuda_value(e, k, buf, len); break;
  }
}

dl_status dlc_env_value(const dlc_env *e, const char *key, char *buf, size_t len) {
  for (int k = 0; dlc_env_keys[k]; k++) {
    if (strcmp(dlc_env_keys[k], key) != 0) continue;
    char v[DLC_ENV_VALUE_MAX];
    value_at(e, k, v, sizeof v);
    if (strlen(v) >= len)
      return dl_fail(DL_ERR_INVALID, "environment value %s needs %zu bytes, the buffer has %zu",
                     key, strlen(v) + 1, len);
    memcpy(buf, v, strlen(v) + 1);
    return DL_OK;
  }
  return dl_fail(DL_ERR_INVALID, "no environment key '%s'", key);
}

void dlc_env_print(const dlc_env *e, FILE *out) {
  int width = 0;
  for (int k = 0; k < K_COUNT; k++)
    if ((int)strlen(labels[k]) > width) width = (int)strlen(labels[k]);
  for (int k = 0; k < K_COUNT; k++) {
    char v[DLC_ENV_VALUE_MAX];
    value_at(e, k, v, sizeof v);
    fprintf(out, "  %-*s  %s\n", width, labels[k], v);
  }
}
