/* dlc_env_fingerprint: the probes of this machine (env.h says what each field holds). */
#define _POSIX_C_SOURCE 200809L /* getline, strdup, uname */

#include "store/env.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef DLC_VERSION
#define DLC_VERSION "0.1.0"
#endif
/* The build passes the flags it compiled with; without them, say so. */
#ifndef DLC_BUILD_FLAGS
#define DLC_BUILD_FLAGS "unknown"
#endif

const char *dlc_version(void) { return DLC_VERSION; }

static void set(char *dst, size_t len, const char *src) { snprintf(dst, len, "%s", src); }
#define SET(field, src) set(field, sizeof field, src)

/* ---- CPU and OS --------------------------------------------------------------- */

/* "key\t: value" lines of /proc/cpuinfo: the value of the first `key`. */
static bool cpuinfo_value(const char *line, const char *key, const char **value) {
  size_t k = strlen(key);
  if (strncmp(line, key, k) != 0 || (line[k] != ' ' && line[k] != '\t' && line[k] != ':'))
    return false;
  const char *colon = strchr(line + k, ':');
  if (!colon) return false;
  *value = colon + 1 + strspn(colon + 1, " \t");
  return true;
}

static bool has_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)); p += n)
    if ((p == list || p[-1] == ' ' || p[-1] == '\t') &&
        (p[n] == ' ' || p[n] == '\t' || p[n] == '\n' || p[n] == '\0'))
      return true;
  return false;
}

static void cpu_flags_of_interest(dlc_env *e, const char *flags) {
  static const char *const interest[] = {"sse4_2", "avx", "avx2", "fma", "avx512f", "f16c"};
  size_t at = 0;
  e->cpu_flags[0] = '\0';
  for (size_t i = 0; i < sizeof interest / sizeof *interest; i++)
    if (has_word(flags, interest[i]))
      at += (size_t)snprintf(e->cpu_flags + at, sizeof e->cpu_flags - at, "%s%s", at ? " " : "",
                             interest[i]);
  if (!at) SET(e->cpu_flags, "none");
}

static void strip_newline(char *s) { s[strcspn(s, "\r\n")] = '\0'; }

static void read_cpuinfo(dlc_env *e) {
  SET(e->cpu_model, "unknown");
  SET(e->cpu_flags, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char *line = NULL;
  size_t cap = 0;
  bool model = false, flags = false;
  while ((!model || !flags) && getline(&line, &cap, f) > 0) {
    const char *v;
    strip_newline(line);
    if (!model && cpuinfo_value(line, "model name", &v)) {
      SET(e->cpu_model, v);
      model = true;
    } else if (!flags &&
               (cpuinfo_value(line, "flags", &v) || cpuinfo_value(line, "Features", &v))) {
      cpu_flags_of_interest(e, v);
      flags = true;
    }
  }
  free(line);
  fclose(f);
}

/* PRETTY_NAME="Debian GNU/Linux 12 (bookworm)" -> the text in quotes. */
static void read_os_release(dlc_env *e) {
  SET(e->os_release, "unknown");
  FILE *f = fopen("/etc/os-release", "r");
  if (!f) return;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    if (strncmp(line, "PRETTY_NAME=", 12) != 0) continue;
    strip_newline(line);
    char *v = line + 12;
    size_t n = strlen(v);
    if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
      v[n - 1] = '\0';
      v++;
    }
    SET(e->os_release, v);
    break;
  }
  free(line);
  fclose(f);
}

static void read_system(dlc_env *e) {
  struct utsname u;
  if (uname(&u) == 0) snprintf(e->os, sizeof e->os, "%s %s %s", u.sysname, u.release, u.machine);
  else SET(e->os, "unknown");
  read_os_release(e);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  e->logical_cores = n > 0 ? (int)n : 0;
  SET(e->glibc, gnu_get_libc_version());
}

static void read_build(dlc_env *e) {
#if defined(__clang__)
  SET(e->compiler, "clang " __clang_version__);
#elif defined(__GNUC__)
  SET(e->compiler, "gcc " __VERSION__);
#else
  SET(e->compiler, "unknown");
#endif
  SET(e->build_flags, DLC_BUILD_FLAGS);
#ifdef __OPTIMIZE__
  e->optimized = true;
#else
  e->optimized = false;
#endif
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  if (maj == H5_VERS_MAJOR && min == H5_VERS_MINOR && rel == H5_VERS_RELEASE)
    snprintf(e->hdf5, sizeof e->hdf5, "%u.%u.%u", maj, min, rel);
  else
    snprintf(e->hdf5, sizeof e->hdf5, "%u.%u.%u (built against %d.%d.%d)", maj, min, rel,
             H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE);
}

static void read_variable(char *dst, size_t len, const char *name) {
  const char *v = getenv(name);
  set(dst, len, v ? v : "unset");
}

/* ---- CUDA, found at run time -------------------------------------------------- */

/* The first of names that loads, or NULL. */
static void *open_first(const char *const *names) {
  for (; *names; names++) {
    void *h = dlopen(*names, RTLD_LAZY | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

/* POSIX's way to turn dlsym's object pointer into a function pointer. */
#define LOOKUP(handle, fn, name) (*(void **)(&(fn)) = dlsym(handle, name))

enum { CU_ATTR_SM_COUNT = 16, CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76 };

static void probe_devices(dlc_env *e, void *cuda) {
  int (*get_count)(int *) = NULL;
  int (*get)(int *, int) = NULL;
  int (*get_name)(char *, int, int) = NULL;
  int (*get_attr)(int *, int, int) = NULL;
  int count = 0;
  if (!LOOKUP(cuda, get_count, "cuDeviceGetCount") || !LOOKUP(cuda, get, "cuDeviceGet") ||
      !LOOKUP(cuda, get_name, "cuDeviceGetName") ||
      !LOOKUP(cuda, get_attr, "cuDeviceGetAttribute") || get_count(&count) != 0)
    return;
  for (int i = 0; i < count && e->ngpus < DLC_ENV_MAX_GPUS; i++) {
    dlc_gpu *g = &e->gpu[e->ngpus];
    int dev;
    if (get(&dev, i) != 0 || get_name(g->name, (int)sizeof g->name, dev) != 0) continue;
    g->name[sizeof g->name - 1] = '\0';
    get_attr(&g->major, CU_ATTR_CC_MAJOR, dev);
    get_attr(&g->minor, CU_ATTR_CC_MINOR, dev);
    get_attr(&g->sms, CU_ATTR_SM_COUNT, dev);
    e->ngpus++;
  }
}

/* The driver stays loaded: cuInit started it, and this process may use it. */
static void probe_driver(dlc_env *e) {
  static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
  void *cuda = open_first(names);
  if (!cuda) return;
  e->cuda_driver_loaded = true;
  int (*driver_version)(int *) = NULL;
  int (*init)(unsigned) = NULL;
  if (LOOKUP(cuda, driver_version, "cuDriverGetVersion") && driver_version(&e->cuda_driver) != 0)
    e->cuda_driver = 0;
  if (!LOOKUP(cuda, init, "cuInit")) {
    e->cuda_init_error = -1;
    return;
  }
  e->cuda_init_error = init(0);
  if (e->cuda_init_error == 0) probe_devices(e, cuda);
}

/* Calls `symbol` of the first library of names that loads: int f(int *). */
static int library_version(const char *const *names, const char *symbol) {
  void *h = open_first(names);
  int (*fn)(int *) = NULL;
  int v = 0;
  if (!h || !LOOKUP(h, fn, symbol) || fn(&v) != 0) v = 0;
  return v;
}

static int cublas_version(void) {
  static const char *const names[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12",
                                      "libcublas.so.11", NULL};
  void *h = open_first(names);
  if (!h) return 0;
  int (*prop)(int, int *) = NULL; /* libraryPropertyType: MAJOR 0, MINOR 1, PATCH 2 */
  int v[3] = {0, 0, 0};
  bool ok = LOOKUP(h, prop, "cublasGetProperty") != NULL;
  for (int i = 0; ok && i < 3; i++) ok = prop(i, &v[i]) == 0;
  return ok ? v[0] * 10000 + v[1] * 100 + v[2] : 0;
}

static int cudnn_version(void) {
  static const char *const names[] = {"libcudnn.so", "libcudnn.so.9", "libcudnn.so.8", NULL};
  void *h = open_first(names);
  if (!h) return 0;
  size_t (*fn)(void) = NULL;
  size_t v = LOOKUP(h, fn, "cudnnGetVersion") ? fn() : 0;
  return v <= (size_t)INT32_MAX ? (int)v : 0;
}

static void probe_cuda(dlc_env *e) {
  static const char *const cudart[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                       "libcudart.so.11.0", NULL};
  static const char *const nccl[] = {"libnccl.so.2", "libnccl.so", NULL};
  const char *skip = getenv("DLCHECK_NO_CUDA_PROBE");
  if (skip && *skip && strcmp(skip, "0") != 0) return;
  e->cuda_probed = true;
  probe_driver(e);
  e->cuda_runtime = library_version(cudart, "cudaRuntimeGetVersion");
  e->cublas = cublas_version();
  e->cudnn = cudnn_version();
  e->nccl = library_version(nccl, "ncclGetVersion");
}

void dlc_env_fingerprint(dlc_env *e) {
  memset(e, 0, sizeof *e);
  SET(e->dlcheck, dlc_version());
  read_cpuinfo(e);
  read_system(e);
  read_build(e);
  probe_cuda(e);
  read_variable(e->tf32_override, sizeof e->tf32_override, "NVIDIA_TF32_OVERRIDE");
  read_variable(e->cublas_workspace_config, sizeof e->cublas_workspace_config,
                "CUBLAS_WORKSPACE_CONFIG");
}
