/* E1-E3: the decisions, then the numbers of this machine. */
#include "backend/cuda/env_checks.h"

#include "backend/cuda/device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdarg.h>
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

static void begin(dl_cuda_check *out, const char *id) {
  memset(out, 0, sizeof *out);
  out->id = id;
  out->applicable = true;
  out->ok = true;
}

/* Appends to out->message; a message that does not fit ends in "..." rather
 * than being cut silently. */
static void say(dl_cuda_check *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(dl_cuda_check *out, const char *fmt, ...) {
  size_t used = strlen(out->message), room = sizeof out->message - used;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out->message + used, room, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n >= room) memcpy(out->message + sizeof out->message - 4, "...", 4);
}

static void not_applicable(dl_cuda_check *out, const char *id, const char *why) {
  begin(out, id);
  out->applicable = false;
  say(out, "%s", why);
}

/* ---- version numbers as text ---- */

typedef struct version_text {
  char s[32];
} version_text;

static version_text cuda_version(int v) { /* 12040 -> 12.4 */
  version_text t;
  snprintf(t.s, sizeof t.s, "%d.%d", v / 1000, v % 1000 / 10);
  return t;
}

static version_text library_version(int v, bool cudnn) {
  version_text t;
  if (cudnn && v < 10000) /* cuDNN 8: major*1000 + minor*100 + patch */
    snprintf(t.s, sizeof t.s, "%d.%d.%d", v / 1000, v % 1000 / 100, v % 100);
  else snprintf(t.s, sizeof t.s, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
  return t;
}

/* ---- E1 ---- */

void dl_cuda_check_runtime_vs_driver(int runtime, int driver, dl_cuda_check *out) {
  if (driver <= 0) {
    not_applicable(out, "E1", "no CUDA driver: E1-E3 not applicable");
    return;
  }
  begin(out, "E1");
  version_text rt_text = cuda_version(runtime), drv_text = cuda_version(driver);
  const char *rt = rt_text.s, *drv = drv_text.s;
  if (runtime / 1000 > driver / 1000) {
    out->ok = false;
    say(out,
        "CUDA runtime %s is newer than this driver supports (CUDA %s): every CUDA call "
        "fails with 'CUDA driver version is insufficient for CUDA runtime version'; install "
        "a driver for CUDA %d.x or newer, or NVIDIA's cuda-compat package for %s",
        rt, drv, runtime / 1000, rt);
  } else if (runtime > driver) {
    say(out,
        "CUDA runtime %s on a driver for CUDA %s: runs by minor version compatibility, "
        "but the driver cannot JIT-compile this toolkit's PTX (a GPU without SASS in the "
        "build fails, see E2); a driver for CUDA %s or newer removes the caveat",
        rt, drv, rt);
  } else {
    say(out, "CUDA runtime %s, driver supports up to CUDA %s", rt, drv);
  }
}

/* ---- E2 ---- */

typedef struct arch {
  int major, minor;
  bool sass, ptx;
  char suffix; /* 'a': this GPU only; 'f': its family; 0: none */
} arch;

/* "90", "90a", "90-real", "100f-virtual" -> arch; false if unreadable. */
static bool parse_arch(const char *tok, size_t len, arch *a) {
  size_t i = 0;
  int number = 0;
  while (i < len && tok[i] >= '0' && tok[i] <= '9' && number < 10000)
    number = number * 10 + (tok[i++] - '0');
  if (i < 2 || i > 4) return false;
  a->major = number / 10;
  a->minor = number % 10;
  a->suffix = i < len && tok[i] >= 'a' && tok[i] <= 'z' ? tok[i++] : 0;
  const char *rest = tok + i;
  size_t rest_len = len - i;
  a->sass = a->ptx = true;
  if (rest_len == 5 && memcmp(rest, "-real", 5) == 0) a->ptx = false;
  else if (rest_len == 8 && memcmp(rest, "-virtual", 8) == 0) a->sass = false;
  else if (rest_len != 0) return false;
  return true;
}

/* SASS runs on the same major at an equal or higher minor; 'a' only on
 * exactly its GPU. */
static bool sass_runs(const arch *a, int major, int minor) {
  if (a->suffix && a->suffix != 'f') return a->major == major && a->minor == minor;
  return a->major == major && a->minor <= minor;
}

/* PTX is JIT-compiled for any GPU at or above it; 'a' only for its GPU,
 * 'f' within its family. */
static bool ptx_runs(const arch *a, int major, int minor) {
  if (a->suffix == 'f') return a->major == major && a->minor <= minor;
  if (a->suffix) return a->major == major && a->minor == minor;
  return a->major * 10 + a->minor <= major * 10 + minor;
}

static bool is_keyword(const char *tok, size_t len) {
  static const char *const words[] = {"all", "all-major", "native", NULL};
  for (const char *const *w = words; *w; w++)
    if (strlen(*w) == len && memcmp(*w, tok, len) == 0) return true;
  return false;
}

void dl_cuda_check_arch_vs_device(const char *archs, int major, int minor, dl_cuda_check *out) {
  begin(out, "E2");
  if (!archs) archs = "";
  const char *sass = NULL, *ptx = NULL;
  size_t sass_len = 0, ptx_len = 0;
  int entries = 0;
  for (const char *p = archs; *p;) {
    size_t len = strcspn(p, ",;");
    arch a;
    if (is_keyword(p, len)) {
      say(out,
          "built for CUDA architectures '%s': which GPUs that covers cannot be told "
          "from the list; compute capability %d.%d assumed covered",
          archs, major, minor);
      return;
    }
    if (len > 0 && !parse_arch(p, len, &a)) {
      out->ok = false;
      say(out, "cannot read '%.*s' in the build's CUDA architectures '%s'", (int)len, p, archs);
      return;
    }
    if (len > 0) {
      entries++;
      if (!sass && a.sass && sass_runs(&a, major, minor)) sass = p, sass_len = len;
      if (!ptx && a.ptx && ptx_runs(&a, major, minor)) ptx = p, ptx_len = len;
    }
    p += len;
    if (*p) p++;
  }
  if (sass) {
    say(out, "compute capability %d.%d runs the SASS built for '%.*s' (architectures '%s')", major,
        minor, (int)sass_len, sass, archs);
  } else if (ptx) {
    say(out,
        "compute capability %d.%d has no SASS in this build (architectures '%s'): the "
        "driver JIT-compiles the PTX of '%.*s' at the first launch (slow start; needs a driver "
        "at least as new as the toolkit); add %d%d-real to CMAKE_CUDA_ARCHITECTURES to avoid "
        "it",
        major, minor, archs, (int)ptx_len, ptx, major, minor);
  } else {
    out->ok = false;
    say(out,
        "compute capability %d.%d has no kernel image in this build (architectures "
        "'%s'%s): its first kernel launch would fail with 'no kernel image is available for "
        "execution on the device'; rebuild with -DCMAKE_CUDA_ARCHITECTURES including %d%d-real "
        "(or a -virtual entry at or below %d%d)",
        major, minor, archs, entries == 0 ? ", no device code at all" : "", major, minor, major,
        minor);
  }
}

/* ---- E3 ---- */

typedef struct library {
  const char *name;
  int built, loaded;
  bool cuda_style, cudnn;
} library;

static version_text text_of(const library *l, int v) {
  return l->cuda_style ? cuda_version(v) : library_version(v, l->cudnn);
}

void dl_cuda_check_built_vs_loaded(const dl_cuda_versions *built, const dl_cuda_versions *loaded,
                                   dl_cuda_check *out) {
  begin(out, "E3");
  const library libs[] = {
      {"CUDA runtime", built->runtime, loaded->runtime, true, false},
      {"cuBLAS", built->cublas, loaded->cublas, false, false},
      {"cuDNN", built->cudnn, loaded->cudnn, false, true},
      {"NCCL", built->nccl, loaded->nccl, false, false},
  };
  const char *sep = "";
  for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
    const library *l = &libs[i];
    if (l->built == 0) continue; /* no headers at build time: nothing to compare */
    version_text b = text_of(l, l->built), now = text_of(l, l->loaded);
    if (l->loaded == 0) {
      say(out, "%s%s %s at build, not loaded", sep, l->name, b.s);
    } else if (l->loaded != l->built) {
      out->ok = false;
      say(out, "%s%s built against %s but %s is loaded", sep, l->name, b.s, now.s);
    } else {
      say(out, "%s%s %s", sep, l->name, b.s);
    }
    sep = "; ";
  }
  if (!out->ok)
    say(out, ": other kernels, other bits (drift against goldens) or missing symbols; make "
             "LD_LIBRARY_PATH find the libraries dlcheck was built with, or rebuild against these");
}

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
    not_applicable(out, "E2", why);
    return;
  }
  if (device < 0 || device >= n ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(why, sizeof why, "no CUDA device %d (this process sees %d)", device, n);
    not_applicable(out, "E2", why);
    return;
  }
  dl_cuda_check_arch_vs_device(dl_cuda_built_archs(), major, minor, out);
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
             cuda_version(runtime).s);
    for (int i = 0; i < 3; i++) not_applicable(&out[i], ids[i], why);
    return;
  }
  dl_cuda_check_runtime_vs_driver(runtime, driver, &out[0]);
  check_this_gpu(device, &out[1]);
  dl_cuda_versions built, loaded;
  dl_cuda_built_versions(&built);
  dl_cuda_loaded_versions(&loaded);
  dl_cuda_check_built_vs_loaded(&built, &loaded, &out[2]);
}
