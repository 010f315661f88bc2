/* env_torch.h: a PyTorch fingerprint's values as numbers, then E1-E3. */
#include "judge/env_torch.h"

#include "trace/json.h"

#include <stdio.h>
#include <string.h>

static const char *value(json_t *env, const char *key) {
  const char *v = json_string_value(json_object_get(env, key));
  return v ? v : "";
}

/* A version the fingerprint writes where one is present: digits first. */
static bool present(const char *v) { return v[0] >= '0' && v[0] <= '9'; }

static dl_status unreadable(const char *key, const char *v) {
  return dl_fail(DL_ERR_FORMAT, "the PyTorch fingerprint's %s '%s' is not a version", key, v);
}

/* "12.1" -> 12010, as CUDA numbers its versions; 0 where absent. */
static dl_status cuda_number(json_t *env, const char *key, int *out) {
  const char *v = value(env, key);
  int major, minor, end = 0;
  *out = 0;
  if (!present(v)) return DL_OK;
  if (sscanf(v, "%4d.%3d%n", &major, &minor, &end) != 2 || v[end]) return unreadable(key, v);
  *out = major * 1000 + minor * 10;
  return DL_OK;
}

/* "2.18.1" -> 21801 (div 10000) or 2708 (div 1000); a plain integer, as
 * torch.backends.cudnn.version() writes cuDNN, as it is; 0 where absent. */
static dl_status library_number(json_t *env, const char *key, int *out) {
  const char *v = value(env, key);
  int a, b, c, end = 0;
  *out = 0;
  if (!present(v)) return DL_OK;
  if (sscanf(v, "%4d.%3d.%3d%n", &a, &b, &c, &end) == 3 && !v[end]) {
    *out = a * (a > 2 || b >= 9 ? 10000 : 1000) + b * 100 + c; /* NCCL 2.9 on: 10000 */
    return DL_OK;
  }
  end = 0;
  if (sscanf(v, "%7d%n", &a, &end) == 1 && !v[end]) {
    *out = a;
    return DL_OK;
  }
  return unreadable(key, v);
}

/* "sm_80 sm_90 compute_90" -> "80-real,90-real,90-virtual" in buf (the
 * notation backend/cuda_env.h reads); a word of neither kind is kept, so
 * that E2 says it cannot read it. */
static dl_status arch_list(const char *torch, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (const char *p = torch; *p;) {
    size_t n = strcspn(p, " ");
    const char *kind = "";
    if (n > 3 && strncmp(p, "sm_", 3) == 0) p += 3, n -= 3, kind = "-real";
    else if (n > 8 && strncmp(p, "compute_", 8) == 0) p += 8, n -= 8, kind = "-virtual";
    if (n > 0) {
      int w = snprintf(buf + at, len - at, "%s%.*s%s", at ? "," : "", (int)n, p, kind);
      if (w < 0 || (size_t)w >= len - at)
        return dl_fail(DL_ERR_FORMAT,
                       "the PyTorch fingerprint's torch_arch_list is longer "
                       "than %zu bytes",
                       len);
      at += (size_t)w;
    }
    p += n;
    while (*p == ' ') p++;
  }
  return DL_OK;
}

/* E2 for every GPU of torch_gpus: the first that fails, else the first. */
static dl_status check_gpus(json_t *env, dl_cuda_check *out) {
  char archs[1024];
  DL_TRY(arch_list(value(env, "torch_arch_list"), archs, sizeof archs));
  const char *gpus = value(env, "torch_gpus");
  int n = 0;
  for (const char *p = strstr(gpus, "(sm_"); p; p = strstr(p + 1, "(sm_")) {
    int cc, end = 0;
    if (sscanf(p, "(sm_%4d)%n", &cc, &end) != 1 || end == 0 || cc < 10)
      return dl_fail(DL_ERR_FORMAT, "the PyTorch fingerprint's torch_gpus '%s' is not readable",
                     gpus);
    dl_cuda_check c;
    dl_cuda_check_arch_vs_device(archs, cc / 10, cc % 10, DL_CUDA_TORCH, &c);
    if (n++ == 0 || (out->ok && !c.ok)) *out = c;
  }
  if (n == 0)
    dl_cuda_check_not_applicable(out, "E2", "PyTorch saw no GPU (torch_gpus): nothing to run on");
  return DL_OK;
}

static dl_status check_libraries(json_t *env, dl_cuda_check *out) {
  dl_cuda_versions built = {0}, loaded = {0};
  DL_TRY(library_number(env, "torch_cudnn_built", &built.cudnn));
  DL_TRY(library_number(env, "torch_cudnn", &loaded.cudnn));
  DL_TRY(library_number(env, "torch_nccl", &built.nccl));
  DL_TRY(library_number(env, "torch_nccl_loaded", &loaded.nccl));
  dl_cuda_check_built_vs_loaded(&built, &loaded, DL_CUDA_TORCH, out);
  return DL_OK;
}

static dl_status decide(json_t *env, dl_cuda_check out[3]) {
  int runtime, driver;
  DL_TRY(cuda_number(env, "torch_cuda", &runtime));
  DL_TRY(cuda_number(env, "cuda_driver", &driver));
  static const char *const ids[] = {"E1", "E2", "E3"};
  const char *why = runtime == 0  ? "PyTorch built without CUDA (torch.version.cuda is None): "
                                    "E1-E3 not applicable"
                    : driver == 0 ? "no CUDA driver where PyTorch ran: E1-E3 not applicable"
                                  : NULL;
  if (why) {
    for (int i = 0; i < 3; i++) dl_cuda_check_not_applicable(&out[i], ids[i], why);
    return DL_OK;
  }
  dl_cuda_check_runtime_vs_driver(runtime, driver, DL_CUDA_TORCH, &out[0]);
  DL_TRY(check_gpus(env, &out[1]));
  return check_libraries(env, &out[2]);
}

dl_status dlc_env_torch_checks(const char *json, dl_cuda_check out[3], bool *found) {
  json_t *env;
  *found = false;
  DL_TRY(dlc_json_parse(json, "the environment fingerprint", &env));
  dl_status s = DL_OK;
  if (!json_is_object(env))
    s = dl_fail(DL_ERR_FORMAT, "the environment fingerprint is not a JSON object");
  else if (json_object_get(env, "torch_cuda")) {
    dl_cuda_check checks[3];
    s = decide(env, checks);
    if (s == DL_OK) memcpy(out, checks, sizeof checks), *found = true;
  }
  json_decref(env);
  return s;
}
