/* E1-E3 decided (cuda_env.h): pure functions of version numbers and
 * architecture lists, built everywhere, so that they are tested without a
 * GPU and judge a PyTorch process's fingerprint on any machine. */
#include "backend/cuda_env.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

void dl_cuda_check_not_applicable(dl_cuda_check *out, const char *id, const char *why) {
  begin(out, id);
  out->applicable = false;
  say(out, "%s", why);
}

/* ---- version numbers as text ---- */

dl_cuda_version_text dl_cuda_version(int v) { /* 12040 -> 12.4 */
  dl_cuda_version_text t;
  snprintf(t.s, sizeof t.s, "%d.%d", v / 1000, v % 1000 / 10);
  return t;
}

dl_cuda_version_text dl_cuda_library_version(int v) {
  dl_cuda_version_text t;
  int div = v < 10000 ? 1000 : 10000; /* cuDNN 8, NCCL before 2.9: major*1000 */
  snprintf(t.s, sizeof t.s, "%d.%d.%d", v / div, v % div / 100, v % 100);
  return t;
}

/* ---- E1 ---- */

void dl_cuda_check_runtime_vs_driver(int runtime, int driver, dl_cuda_subject who,
                                     dl_cuda_check *out) {
  if (driver <= 0) {
    dl_cuda_check_not_applicable(out, "E1", "no CUDA driver: E1-E3 not applicable");
    return;
  }
  begin(out, "E1");
  dl_cuda_version_text rt_text = dl_cuda_version(runtime), drv_text = dl_cuda_version(driver);
  const char *rt = rt_text.s, *drv = drv_text.s;
  if (runtime / 1000 > driver / 1000) {
    out->ok = false;
    say(out,
        "CUDA runtime %s is newer than this driver supports (CUDA %s): every CUDA call "
        "fails with 'CUDA driver version is insufficient for CUDA runtime version'; install "
        "a driver for CUDA %d.x or newer, or NVIDIA's cuda-compat package for %s%s",
        rt, drv, runtime / 1000, rt,
        who == DL_CUDA_TORCH ? ", or a torch wheel built for the CUDA this driver supports" : "");
  } else if (runtime > driver) {
    say(out,
        "CUDA runtime %s on a driver for CUDA %s: runs by minor version compatibility, "
        "but the driver cannot JIT-compile %s PTX (a GPU without SASS in it fails, see "
        "E2); a driver for CUDA %s or newer removes the caveat",
        rt, drv, who == DL_CUDA_TORCH ? "PyTorch's" : "this toolkit's", rt);
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

void dl_cuda_check_arch_vs_device(const char *archs, int major, int minor, dl_cuda_subject who,
                                  dl_cuda_check *out) {
  const char *built = who == DL_CUDA_TORCH ? "this PyTorch" : "this build";
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
      say(out, "cannot read '%.*s' in the CUDA architectures '%s' of %s", (int)len, p, archs,
          built);
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
        "compute capability %d.%d has no SASS in %s (architectures '%s'): the driver "
        "JIT-compiles the PTX of '%.*s' at the first launch (slow start; needs a driver at "
        "least as new as the toolkit); ",
        major, minor, built, archs, (int)ptx_len, ptx);
    if (who == DL_CUDA_TORCH)
      say(out, "a torch built with %d.%d in TORCH_CUDA_ARCH_LIST avoids it", major, minor);
    else say(out, "add %d%d-real to CMAKE_CUDA_ARCHITECTURES to avoid it", major, minor);
  } else {
    out->ok = false;
    say(out,
        "compute capability %d.%d has no kernel image in %s (architectures '%s'%s): its "
        "first kernel launch would fail with 'no kernel image is available for execution on "
        "the device'; ",
        major, minor, built, archs, entries == 0 ? ", no device code at all" : "");
    if (who == DL_CUDA_TORCH)
      say(out,
          "install a torch whose torch.cuda.get_arch_list() covers sm_%d%d (a wheel for a "
          "newer CUDA), or build it with %d.%d in TORCH_CUDA_ARCH_LIST",
          major, minor, major, minor);
    else
      say(out,
          "rebuild with -DCMAKE_CUDA_ARCHITECTURES including %d%d-real (or a -virtual entry at "
          "or below %d%d)",
          major, minor, major, minor);
  }
}

/* ---- E3 ---- */

typedef struct library {
  const char *name;
  int built, loaded;
  bool cuda_style;
} library;

static dl_cuda_version_text text_of(const library *l, int v) {
  return l->cuda_style ? dl_cuda_version(v) : dl_cuda_library_version(v);
}

void dl_cuda_check_built_vs_loaded(const dl_cuda_versions *built, const dl_cuda_versions *loaded,
                                   dl_cuda_subject who, dl_cuda_check *out) {
  begin(out, "E3");
  const library libs[] = {
      {"CUDA runtime", built->runtime, loaded->runtime, true},
      {"cuBLAS", built->cublas, loaded->cublas, false},
      {"cuDNN", built->cudnn, loaded->cudnn, false},
      {"NCCL", built->nccl, loaded->nccl, false},
  };
  const char *sep = "";
  for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
    const library *l = &libs[i];
    if (l->built == 0) continue; /* no headers at build time: nothing to compare */
    dl_cuda_version_text b = text_of(l, l->built), now = text_of(l, l->loaded);
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
  if (out->ok) return;
  say(out, ": other kernels, other bits (drift against goldens) or missing symbols; ");
  if (who == DL_CUDA_TORCH)
    say(out, "install the versions this torch was built with (the nvidia-* wheels its pip "
             "package names), and check that LD_LIBRARY_PATH puts no other copy first");
  else
    say(out, "make LD_LIBRARY_PATH find the libraries dlcheck was built with, or rebuild "
             "against these");
}
