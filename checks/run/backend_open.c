/* The only place the harness names the CUDA backend: everything else sees
 * a dl_backend (or NULL, the CPU). */
#include "run/backend_open.h"

#include <stdio.h>
#include <string.h>

#ifdef DL_HAVE_CUDA
#include "backend/cuda/backend.h"
#endif

dlc_device dlc_run_device(const dlc_run_config *c, dlc_device cli_default) {
  if (c->backend.device != DLC_DEVICE_DEFAULT) return c->backend.device;
  return cli_default == DLC_DEVICE_DEFAULT ? DLC_DEVICE_CPU : cli_default;
}

const char *dlc_device_name(dlc_device d) { return d == DLC_DEVICE_CUDA ? "cuda" : "cpu"; }

dl_status dlc_device_parse(const char *name, dlc_device *out) {
  if (strcmp(name, "cpu") == 0) *out = DLC_DEVICE_CPU;
  else if (strcmp(name, "cuda") == 0) *out = DLC_DEVICE_CUDA;
  else return dl_fail(DL_ERR_INVALID, "unknown backend '%s': expected cpu or cuda", name);
  return DL_OK;
}

/* The CPU, or a backend this file did not open (a test's). */
static const char *cpu_describe(const dl_backend *b, char *buf, size_t len) {
  if (b) snprintf(buf, len, "%s backend", b->name ? b->name : "unnamed");
  else
    snprintf(buf, len,
             "cpu: dl_sgemm (fmaf in k order, the same bits on every CPU and "
             "thread count), im2col convolutions");
  return buf;
}

bool dlc_device_available(dlc_device d, char *reason, size_t len) {
  if (reason && len) reason[0] = '\0';
  if (d != DLC_DEVICE_CUDA) return true;
#ifdef DL_HAVE_CUDA
  int n = 0;
  if (dl_cuda_device_count(&n) == DL_OK && n > 0) return true;
  if (reason) snprintf(reason, len, "no CUDA device: %s", dl_cuda_no_device_reason());
#else
  if (reason)
    snprintf(reason, len,
             "this build has no CUDA backend: nvcc was not found when it was "
             "configured (put nvcc on PATH and configure again)");
#endif
  return false;
}

dl_status dlc_backend_open(const dlc_backend_config *c, dlc_device d, int rank, dl_backend **out) {
  *out = NULL;
  if (d != DLC_DEVICE_CUDA) return DL_OK;
  char why[512];
  if (!dlc_device_available(d, why, sizeof why)) return dl_fail(DL_ERR_UNSUPPORTED, "%s", why);
#ifdef DL_HAVE_CUDA
  int n = 0;
  DL_TRY(dl_cuda_device_count(&n));
  dl_cuda_backend_options o = {
      .device = rank % n,
      .math = c->math == DLC_MATH_TF32 ? DL_CUDA_MATH_TF32 : DL_CUDA_MATH_FP32,
      .conv = c->conv_algo == DLC_CONV_FASTEST ? DL_CUDA_CONV_FASTEST : DL_CUDA_CONV_DETERMINISTIC};
  return dl_cuda_backend_create(&o, out);
#else
  (void)c;
  (void)rank;
  return dl_fail(DL_ERR_INTERNAL, "no CUDA backend in this build"); /* unreachable */
#endif
}

#ifdef DL_HAVE_CUDA

void dlc_backend_close(dl_backend *b) { dl_cuda_backend_destroy(b); }

const char *dlc_backend_describe(const dl_backend *b, char *buf, size_t len) {
  if (!b || !b->name || strcmp(b->name, "cuda") != 0) return cpu_describe(b, buf, len);
  char dev[512], algos[512];
  dl_cuda_backend_describe(b, dev, sizeof dev);
  dl_cuda_backend_algorithms(b, algos, sizeof algos);
  snprintf(buf, len, "%s; convolutions: %s", dev, algos[0] ? algos : "none run");
  return buf;
}

#else /* a build without nvcc: nothing is ever opened */

void dlc_backend_close(dl_backend *b) { (void)b; }

const char *dlc_backend_describe(const dl_backend *b, char *buf, size_t len) {
  return cpu_describe(b, buf, len);
}

#endif
