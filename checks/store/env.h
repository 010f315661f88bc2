/* The environment fingerprint: what a recorded number depends on beyond
 * the code — CPU, OS, C library, compiler and flags, HDF5, and the CUDA
 * stack when there is one. A golden file stores it as JSON, so that
 * `dlcheck env GOLDEN.h5` and `dlcheck compare` can say what differs
 * between the machine that recorded a golden and this one.
 *
 * CUDA is probed without linking it: libcuda.so.1, libcudart, libcublas,
 * libcudnn and libnccl are dlopen'ed at run time, and any failure reads
 * "not available". They stay loaded: the driver was initialised and this
 * process may use it, and unloading libraries that started threads or
 * registered exit handlers is unsafe. Setting DLCHECK_NO_CUDA_PROBE=1
 * skips the probe (CUDA values read "not probed"): loading cuBLAS and
 * cuDNN takes long on network filesystems and under valgrind, and cuInit
 * can hang on a wedged GPU.
 *
 * The JSON is one flat object of string values in a fixed key order
 * (dlc_env_keys), so two fingerprints diff line by line; jansson reads and
 * writes it. env_probe.c collects the fields, env_text.c turns them into
 * text, env_json.c into JSON. */
#ifndef DLC_ENV_H
#define DLC_ENV_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* DLC_ENV_VALUE_MAX: the longest value (as text) of any key, with its NUL. */
enum { DLC_ENV_JSON_MAX = 8192, DLC_ENV_VALUE_MAX = 2048, DLC_ENV_MAX_GPUS = 16 };

typedef struct dlc_gpu {
  char name[128];
  int major, minor; /* compute capability */
  int sms;          /* streaming multiprocessors */
} dlc_gpu;

typedef struct dlc_env {
  char dlcheck[32];    /* dlc_version() */
  char cpu_model[128]; /* /proc/cpuinfo "model name", or "unknown" */
  char cpu_flags[64];  /* present among sse4_2 avx avx2 fma avx512f f16c */
  int logical_cores;
  char os[256];         /* uname: sysname release machine */
  char os_release[128]; /* PRETTY_NAME of /etc/os-release, or "unknown" */
  char glibc[32];
  char compiler[128];    /* "gcc 12.2.0", "clang 16.0.6 ..." */
  char build_flags[512]; /* DLC_BUILD_FLAGS given at build time, or "unknown" */
  bool optimized;        /* built with optimisation (__OPTIMIZE__) */
  char hdf5[64];         /* loaded version, and the headers' if different */

  /* CUDA: 0 means not available. Versions as the libraries report them:
   * driver/runtime 12040 = 12.4; cuBLAS major*10000 + minor*100 + patch;
   * cuDNN 90100 = 9.1.0 (8xxx for cuDNN 8); NCCL 22304 = 2.23.4. */
  bool cuda_probed; /* false with DLCHECK_NO_CUDA_PROBE set */
  int cuda_driver;
  bool cuda_driver_loaded; /* libcuda.so.1 was found */
  int cuda_init_error;     /* cuInit's error code, 0 if it succeeded */
  int ngpus;
  dlc_gpu gpu[DLC_ENV_MAX_GPUS];
  int cuda_runtime;
  int cublas;
  int cudnn;
  int nccl;
  char tf32_override[32];           /* NVIDIA_TF32_OVERRIDE, or "unset" */
  char cublas_workspace_config[32]; /* CUBLAS_WORKSPACE_CONFIG, or "unset" */
} dlc_env;

/* The dlcheck version string ("0.1.0"). */
const char *dlc_version(void);

/* Collects the fingerprint of this process's machine. Never fails: what
 * cannot be found reads "unknown" or "not available". */
void dlc_env_fingerprint(dlc_env *e);

/* The JSON keys in their fixed order, NULL-terminated. */
extern const char *const dlc_env_keys[];

/* The value of key `key` of e as it appears in the JSON ("12.4", "not
 * available"); DL_ERR_INVALID for an unknown key or a too small buffer. */
dl_status dlc_env_value(const dlc_env *e, const char *key, char *buf, size_t len);

/* Writes e as JSON into buf; DL_ERR_INVALID if len is too small (nothing is
 * truncated silently). */
dl_status dlc_env_to_json(const dlc_env *e, char *buf, size_t len);

/* Aligned "label  value" lines for people. */
void dlc_env_print(const dlc_env *e, FILE *out);

/* Value of `key` in a fingerprint JSON: *found says whether it is there.
 * DL_ERR_FORMAT if json is not a flat object of string values (a key
 * given twice included: the message says where);
 * DL_ERR_INVALID if the value does not fit in len bytes. */
dl_status dlc_env_json_get(const char *json, const char *key, char *val, size_t len, bool *found);

/* Lists, on out (NULL: count only), one line per key whose value differs
 * between fingerprints a and b, in a's key order then b's extra keys:
 * "  cudnn  9.1.0  ->  9.2.1" ("(absent)" where a side lacks the key).
 * *ndiff is the number of such keys. DL_ERR_FORMAT if either is not a
 * fingerprint JSON (the message says which). */
dl_status dlc_env_diff(const char *a_json, const char *b_json, FILE *out, int *ndiff);

#endif
