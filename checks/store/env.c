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

/* ---- values as text ----------------------------------------------------------- */

static const char not_available[] = "not available", not_probed[] = "not probed";

/* CUDA's 12040 -> "12.4" */
static void cuda_version_text(int v, char *buf, size_t len) {
  if (v <= 0) set(buf, len, not_available);
  else snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
}

/* major*div + minor*100 + patch -> "major.minor.patch" */
static void triple_text(int v, int div, char *buf, size_t len) {
  if (v <= 0) set(buf, len, not_available);
  else snprintf(buf, len, "%d.%d.%d", v / div, v % div / 100, v % 100);
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

const char *const dlc_env_keys[] = {"dlcheck_version",
                                    "cpu_model",
                                    "cpu_flags",
                                    "logical_cores",
                                    "os",
                                    "os_release",
                                    "glibc",
                                    "compiler",
                                    "build_flags",
                                    "optimized",
                                    "hdf5",
                                    "cuda_driver",
                                    "cuda_devices",
                                    "cuda_runtime",
                                    "cublas",
                                    "cudnn",
                                    "nccl",
                                    "nvidia_tf32_override",
                                    "cublas_workspace_config",
                                    NULL};

static const char *const labels[] = {"dlcheck",
                                     "CPU",
                                     "CPU flags",
                                     "logical cores",
                                     "OS",
                                     "OS release",
                                     "glibc",
                                     "compiler",
                                     "build flags",
                                     "optimized",
                                     "HDF5",
                                     "CUDA driver",
                                     "CUDA devices",
                                     "CUDA runtime",
                                     "cuBLAS",
                                     "cuDNN",
                                     "NCCL",
                                     "NVIDIA_TF32_OVERRIDE",
                                     "CUBLAS_WORKSPACE_CONFIG"};

enum { MAX_VALUE = 2048 };

/* Indices into dlc_env_keys. */
enum {
  K_DLCHECK,
  K_CPU,
  K_FLAGS,
  K_CORES,
  K_OS,
  K_OS_RELEASE,
  K_GLIBC,
  K_COMPILER,
  K_BUILD_FLAGS,
  K_OPTIMIZED,
  K_HDF5,
  K_DRIVER,
  K_DEVICES,
  K_RUNTIME,
  K_CUBLAS,
  K_CUDNN,
  K_NCCL,
  K_TF32,
  K_WORKSPACE
};

static void cuda_value(const dlc_env *e, int k, char *buf, size_t len) {
  if (!e->cuda_probed) {
    set(buf, len, k == K_DEVICES ? "not probed (DLCHECK_NO_CUDA_PROBE is set)" : not_probed);
    return;
  }
  switch (k) {
  case K_DRIVER: cuda_version_text(e->cuda_driver, buf, len); break;
  case K_DEVICES: devices_text(e, buf, len); break;
  case K_RUNTIME: cuda_version_text(e->cuda_runtime, buf, len); break;
  case K_CUBLAS: triple_text(e->cublas, 10000, buf, len); break;
  case K_CUDNN: triple_text(e->cudnn, e->cudnn >= 90000 ? 10000 : 1000, buf, len); break;
  default: triple_text(e->nccl, e->nccl >= 20900 ? 10000 : 1000, buf, len); break;
  }
}

/* Value of key number k into buf (MAX_VALUE bytes). */
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
    char v[MAX_VALUE];
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
  for (int k = 0; dlc_env_keys[k]; k++)
    if ((int)strlen(labels[k]) > width) width = (int)strlen(labels[k]);
  for (int k = 0; dlc_env_keys[k]; k++) {
    char v[MAX_VALUE];
    value_at(e, k, v, sizeof v);
    fprintf(out, "  %-*s  %s\n", width, labels[k], v);
  }
}

/* ---- JSON out ---------------------------------------------------------------------- */

typedef struct text {
  char *buf;
  size_t len, at; /* at may pass len: then the text did not fit */
} text;

static void put(text *t, const char *s, size_t n) {
  if (t->at < t->len) memcpy(t->buf + t->at, s, t->at + n < t->len ? n : t->len - t->at);
  t->at += n;
}

static void put_json_string(text *t, const char *s) {
  put(t, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c;
      put(t, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      put(t, esc, 6);
    } else {
      put(t, s, 1);
    }
  }
  put(t, "\"", 1);
}

dl_status dlc_env_to_json(const dlc_env *e, char *buf, size_t len) {
  text t = {buf, len, 0};
  put(&t, "{", 1);
  for (int k = 0; dlc_env_keys[k]; k++) {
    char v[MAX_VALUE];
    value_at(e, k, v, sizeof v);
    put(&t, k ? ",\n  " : "\n  ", k ? 4 : 3);
    put_json_string(&t, dlc_env_keys[k]);
    put(&t, ": ", 2);
    put_json_string(&t, v);
  }
  put(&t, "\n}", 3); /* with the terminating NUL */
  if (t.at > len)
    return dl_fail(DL_ERR_INVALID,
                   "the environment fingerprint needs %zu bytes of JSON, "
                   "the buffer has %zu",
                   t.at, len);
  return DL_OK;
}

/* ---- JSON in: one flat object of string values -------------------------------------- */

typedef struct pair {
  char *key, *value;
} pair;

typedef struct pairs {
  pair *p;
  int n;
} pairs;

static void pairs_free(pairs *ps) {
  for (int i = 0; i < ps->n; i++) {
    free(ps->p[i].key);
    free(ps->p[i].value);
  }
  free(ps->p);
  ps->p = NULL;
  ps->n = 0;
}

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* \uXXXX (no surrogates, no NUL) as UTF-8 into out; bytes written, 0 if bad. */
static int put_utf8(const char *hex, char *out) {
  unsigned u = 0;
  for (int i = 0; i < 4; i++) {
    int d = hex_digit(hex[i]);
    if (d < 0) return 0;
    u = u * 16 + (unsigned)d;
  }
  if (u == 0 || (u >= 0xd800 && u <= 0xdfff)) return 0;
  if (u < 0x80) {
    out[0] = (char)u;
    return 1;
  }
  if (u < 0x800) {
    out[0] = (char)(0xc0 | u >> 6);
    out[1] = (char)(0x80 | (u & 0x3f));
    return 2;
  }
  out[0] = (char)(0xe0 | u >> 12);
  out[1] = (char)(0x80 | (u >> 6 & 0x3f));
  out[2] = (char)(0x80 | (u & 0x3f));
  return 3;
}

static const char escaped[] = "\"\\/bfnrt", unescaped[] = "\"\\/\b\f\n\r\t";

/* Parses the string at *p (at its opening quote) into a new malloc'd string;
 * NULL with *bad set on a syntax error or with a NOMEM message. */
static char *parse_string(const char **p, bool *bad) {
  const char *s = *p;
  if (*s != '"') return *bad = true, NULL;
  char *out = malloc(strlen(s) + 1); /* unescaping never lengthens */
  if (!out) {
    dl_fail(DL_ERR_NOMEM, "out of memory parsing an environment fingerprint");
    return NULL;
  }
  size_t n = 0;
  for (s++; *s != '"'; s++) {
    if ((unsigned char)*s < 0x20) break; /* includes the end of the text */
    if (*s != '\\') {
      out[n++] = *s;
      continue;
    }
    s++;
    const char *plain = *s ? strchr(escaped, *s) : NULL;
    int k = 0;
    if (plain) out[n++] = unescaped[plain - escaped];
    else if (*s == 'u' && (k = put_utf8(s + 1, out + n)) > 0) n += (size_t)k, s += 4;
    else break;
  }
  if (*s != '"') {
    free(out);
    *bad = true;
    return NULL;
  }
  out[n] = '\0';
  *p = s + 1;
  return out;
}

static dl_status parse_pair(const char **p, pairs *ps) {
  bool bad = false;
  pair *grown = realloc(ps->p, (size_t)(ps->n + 1) * sizeof *grown);
  if (!grown) return dl_fail(DL_ERR_NOMEM, "out of memory parsing an environment fingerprint");
  ps->p = grown;
  pair *kv = &grown[ps->n];
  kv->value = NULL;
  kv->key = parse_string(p, &bad);
  if (!kv->key) return bad ? DL_ERR_FORMAT : DL_ERR_NOMEM;
  ps->n++;
  *p = skip_ws(*p);
  if (**p != ':') return DL_ERR_FORMAT;
  *p = skip_ws(*p + 1);
  kv->value = parse_string(p, &bad);
  if (!kv->value) return bad ? DL_ERR_FORMAT : DL_ERR_NOMEM;
  *p = skip_ws(*p);
  return DL_OK;
}

static dl_status parse_object(const char *json, pairs *ps) {
  const char *p = skip_ws(json);
  dl_status s = *p == '{' ? DL_OK : DL_ERR_FORMAT;
  if (s == DL_OK) p = skip_ws(p + 1); /* never step over the terminator */
  if (s == DL_OK && *p != '}') {
    for (;;) {
      s = parse_pair(&p, ps);
      if (s != DL_OK || *p != ',') break;
      p = skip_ws(p + 1);
    }
  }
  if (s == DL_OK && *p == '}') p = skip_ws(p + 1);
  else if (s == DL_OK) s = DL_ERR_FORMAT;
  if (s == DL_OK && *p) s = DL_ERR_FORMAT;
  if (s == DL_ERR_FORMAT)
    dl_fail(s,
            "not an environment fingerprint (a flat JSON object of strings): syntax error "
            "at offset %td",
            p - json);
  if (s != DL_OK) pairs_free(ps);
  return s;
}

static const char *lookup(const pairs *ps, const char *key) {
  for (int i = 0; i < ps->n; i++)
    if (strcmp(ps->p[i].key, key) == 0) return ps->p[i].value;
  return NULL;
}

dl_status dlc_env_json_get(const char *json, const char *key, char *val, size_t len, bool *found) {
  pairs ps = {0};
  *found = false;
  DL_TRY(parse_object(json, &ps));
  const char *v = lookup(&ps, key);
  dl_status s = DL_OK;
  if (v && strlen(v) >= len)
    s = dl_fail(DL_ERR_INVALID, "environment value %s needs %zu bytes, the buffer has %zu", key,
                strlen(v) + 1, len);
  else if (v) {
    memcpy(val, v, strlen(v) + 1);
    *found = true;
  }
  pairs_free(&ps);
  return s;
}

static void print_difference(FILE *out, const char *key, const char *a, const char *b) {
  if (out) fprintf(out, "  %-24s %s  ->  %s\n", key, a ? a : "(absent)", b ? b : "(absent)");
}

dl_status dlc_env_diff(const char *a_json, const char *b_json, FILE *out, int *ndiff) {
  pairs a = {0}, b = {0};
  *ndiff = 0;
  dl_status s = parse_object(a_json, &a);
  if (s != DL_OK) return dl_fail_context(s, "first fingerprint: ");
  s = parse_object(b_json, &b);
  if (s != DL_OK) {
    pairs_free(&a);
    return dl_fail_context(s, "second fingerprint: ");
  }
  for (int i = 0; i < a.n; i++) {
    const char *other = lookup(&b, a.p[i].key);
    if (lookup(&a, a.p[i].key) != a.p[i].value) continue; /* a repeated key */
    if (other && strcmp(other, a.p[i].value) == 0) continue;
    print_difference(out, a.p[i].key, a.p[i].value, other);
    (*ndiff)++;
  }
  for (int i = 0; i < b.n; i++)
    if (!lookup(&a, b.p[i].key) && lookup(&b, b.p[i].key) == b.p[i].value) {
      print_difference(out, b.p[i].key, NULL, b.p[i].value);
      (*ndiff)++;
    }
  pairs_free(&a);
  pairs_free(&b);
  return DL_OK;
}
