/* The environment fingerprint: every key present in a fixed order, host
 * values that agree with what the system says through other routes, CUDA
 * values and their "not available" path, JSON escaping and parsing, the
 * diff of two fingerprints, and the aligned text.
 *
 * The CUDA libraries are probed in a child process (this executable with
 * --fingerprint): loading cuBLAS/cuDNN under valgrind takes minutes and
 * trips valgrind inside ld.so, and valgrind does not follow exec. The
 * parent runs with DLCHECK_NO_CUDA_PROBE=1. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store/env.h"
#include "tmpdir.h"

#include <ctype.h>
#include <gnu/libc-version.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

static const char *self; /* argv[0], to run the CUDA probe in a child */

static char *json_of(const dlc_env *e) {
  char *json = malloc(DLC_ENV_JSON_MAX);
  assert_non_null(json);
  assert_int_equal(dlc_env_to_json(e, json, DLC_ENV_JSON_MAX), DL_OK);
  return json;
}

static void assert_json_value(const char *json, const char *key, const char *want) {
  char v[1024];
  bool found;
  assert_int_equal(dlc_env_json_get(json, key, v, sizeof v, &found), DL_OK);
  if (!found) fail_msg("no key %s in\n%s", key, json);
  assert_string_equal(v, want);
}

static int count_keys(void) {
  int n = 0;
  while (dlc_env_keys[n]) n++;
  return n;
}

/* ---- the JSON holds every key, in order ----------------------------------------- */

static void json_has_every_key_in_order(void **state) {
  (void)state;
  dlc_env e;
  dlc_env_fingerprint(&e);
  char *json = json_of(&e);
  /* the keys goldens already hold: renaming one breaks every comparison */
  static const char *const keys[] = {"dlcheck_version",
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
                                     "cublas_workspace_config"};
  assert_int_equal(count_keys(), 19);
  for (int k = 0; k < 19; k++) assert_string_equal(dlc_env_keys[k], keys[k]);
  const char *last = json;
  for (int k = 0; dlc_env_keys[k]; k++) {
    char quoted[64], v[1024];
    snprintf(quoted, sizeof quoted, "\"%s\":", dlc_env_keys[k]);
    const char *at = strstr(json, quoted);
    if (!at || at < last) fail_msg("key %s missing or out of order in\n%s", quoted, json);
    last = at;
    assert_int_equal(dlc_env_value(&e, dlc_env_keys[k], v, sizeof v), DL_OK);
    assert_true(v[0] != '\0');
    assert_json_value(json, dlc_env_keys[k], v);
  }
  free(json);
}

/* Python's json module, an independent parser, reads the same keys and
 * the same awkward value (compared as hex of its UTF-8 bytes). */
static void json_reads_in_python(void **state) {
  (void)state;
  if (system(DL_PYTHON " -c 'import json' >/dev/null 2>&1") != 0) {
    skip(); /* no Python here: nothing independent to check against */
  }
  dlc_env e;
  dlc_env_fingerprint(&e);
  snprintf(e.cpu_model, sizeof e.cpu_model, "tab\there \"quoted\" back\\slash \x01 na\xc3\xafve");
  char *json = json_of(&e);
  char path[DL_TMP_PATH_MAX + 32];
  assert_non_null(tmp_path_make(path, sizeof path, "dlc_env_json_XXXXXX"));
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
  close(fd);
  char cmd[512 + sizeof path], out[2048], want[2048];
  snprintf(cmd, sizeof cmd,
           DL_PYTHON " -c 'import json, sys; d = json.load(open(sys.argv[1])); "
                     "print(\",\".join(d)); print(d[\"cpu_model\"].encode().hex())' %s",
           path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  assert_int_equal(pclose(p), 0);
  unlink(path);
  size_t at = 0;
  for (int k = 0; dlc_env_keys[k]; k++)
    at += (size_t)snprintf(want + at, sizeof want - at, "%s%s", k ? "," : "", dlc_env_keys[k]);
  at += (size_t)snprintf(want + at, sizeof want - at, "\n");
  for (const unsigned char *c = (const unsigned char *)e.cpu_model; *c; c++)
    at += (size_t)snprintf(want + at, sizeof want - at, "%02x", *c);
  snprintf(want + at, sizeof want - at, "\n");
  assert_string_equal(out, want);
  free(json);
}

/* ---- host values agree with the system ------------------------------------------ */

static void host_values_agree_with_the_system(void **state) {
  (void)state;
  dlc_env e;
  dlc_env_fingerprint(&e);
  assert_string_equal(e.dlcheck, dlc_version());
  assert_int_equal(e.logical_cores, (int)sysconf(_SC_NPROCESSORS_ONLN));
  assert_string_equal(e.glibc, gnu_get_libc_version());
  unsigned maj, min, rel;
  char hdf5[64];
  H5get_libversion(&maj, &min, &rel);
  snprintf(hdf5, sizeof hdf5, "%u.%u.%u", maj, min, rel);
  assert_ptr_equal(strstr(e.hdf5, hdf5), e.hdf5);
  struct utsname u;
  assert_int_equal(uname(&u), 0);
  char os[600];
  snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
  assert_string_equal(e.os, os);
  assert_true(strncmp(e.compiler, "gcc ", 4) == 0 || strncmp(e.compiler, "clang ", 6) == 0);
#ifdef __OPTIMIZE__
  assert_true(e.optimized); /* the test is built with the library's flags */
#endif
  assert_true(e.cpu_model[0] != '\0');
#if defined(__x86_64__) && defined(__GNUC__)
  /* CPUID through the compiler, against /proc/cpuinfo through env.c
   * (not AVX-512: valgrind's CPUID hides it while the kernel lists it) */
  assert_int_equal(strstr(e.cpu_flags, "avx2") != NULL, __builtin_cpu_supports("avx2") != 0);
  assert_int_equal(strstr(e.cpu_flags, "sse4_2") != NULL, __builtin_cpu_supports("sse4.2") != 0);
#endif
  /* only flags of interest, each once */
  static const char *const allowed[] = {"sse4_2", "avx", "avx2", "fma", "avx512f", "f16c", "none"};
  char flags[sizeof e.cpu_flags];
  strcpy(flags, e.cpu_flags);
  for (char *w = strtok(flags, " "); w; w = strtok(NULL, " ")) {
    bool ok = false;
    for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++) ok |= strcmp(w, allowed[i]) == 0;
    if (!ok) fail_msg("unexpected CPU flag %s", w);
  }
}

static void variables_come_from_the_environment(void **state) {
  (void)state;
  dlc_env e;
  setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
  dlc_env_fingerprint(&e);
  assert_string_equal(e.tf32_override, "0");
  assert_string_equal(e.cublas_workspace_config, ":4096:8");
  unsetenv("NVIDIA_TF32_OVERRIDE");
  unsetenv("CUBLAS_WORKSPACE_CONFIG");
  dlc_env_fingerprint(&e);
  char *json = json_of(&e);
  assert_json_value(json, "nvidia_tf32_override", "unset");
  assert_json_value(json, "cublas_workspace_config", "unset");
  /* the parent does not load CUDA: every CUDA value says so */
  assert_false(e.cuda_probed);
  assert_json_value(json, "cuda_driver", "not probed");
  assert_json_value(json, "cuda_devices", "not probed (DLCHECK_NO_CUDA_PROBE is set)");
  assert_json_value(json, "cudnn", "not probed");
  free(json);
}

/* ---- CUDA ------------------------------------------------------------------------------ */

/* "12.4", "9.1.0": digits and dots, starting and ending with a digit. */
static bool is_version(const char *v) {
  size_t n = strlen(v);
  if (!n || !isdigit((unsigned char)v[0]) || !isdigit((unsigned char)v[n - 1])) return false;
  for (size_t i = 0; i < n; i++)
    if (!isdigit((unsigned char)v[i]) && v[i] != '.') return false;
  return strchr(v, '.') != NULL;
}

/* The real probe, in a child that valgrind does not follow. Without a
 * driver (this machine, CI) the driver and devices read "not available";
 * with one, versions and devices. The libraries either report a version or
 * "not available", never anything else. */
static void cuda_probe_reports_versions_or_not_available(void **state) {
  (void)state;
  char cmd[1024], out[DLC_ENV_JSON_MAX + 128];
  snprintf(cmd, sizeof cmd, "%s --fingerprint", self);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  assert_int_equal(pclose(p), 0);
  char *json = strchr(out, '{'), *loaded = strstr(out, "\ndriver_loaded ");
  assert_non_null(json);
  assert_non_null(loaded);
  *loaded = '\0';
  char driver[64], devices[1024];
  bool found;
  assert_int_equal(dlc_env_json_get(json, "cuda_driver", driver, sizeof driver, &found), DL_OK);
  assert_int_equal(dlc_env_json_get(json, "cuda_devices", devices, sizeof devices, &found), DL_OK);
  if (loaded[15] == '0') {
    assert_string_equal(driver, "not available");
    assert_string_equal(devices, "no CUDA device (driver: not available)");
  } else {
    assert_true(is_version(driver));
    assert_true(strncmp(devices, "0: ", 3) == 0 || strncmp(devices, "no CUDA device", 14) == 0);
  }
  static const char *const libs[] = {"cuda_runtime", "cublas", "cudnn", "nccl"};
  for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
    char v[64];
    assert_int_equal(dlc_env_json_get(json, libs[i], v, sizeof v, &found), DL_OK);
    assert_true(found);
    if (strcmp(v, "not available") != 0 && !is_version(v))
      fail_msg("%s is '%s': neither a version nor 'not available'", libs[i], v);
  }
}

/* How the versions CUDA's libraries report read, on made-up values. */
static void cuda_values_read_as_versions(void **state) {
  (void)state;
  dlc_env e;
  dlc_env_fingerprint(&e);
  e.cuda_probed = true;
  e.cuda_driver_loaded = true;
  e.cuda_driver = 12040;
  e.cuda_runtime = 11080;
  e.cublas = 120304;
  e.cudnn = 8907;
  e.nccl = 2708;
  e.ngpus = 2;
  e.gpu[0] = (dlc_gpu){"NVIDIA H200", 9, 0, 132};
  e.gpu[1] = (dlc_gpu){"NVIDIA A100-SXM4-80GB", 8, 0, 108};
  char *json = json_of(&e);
  assert_json_value(json, "cuda_driver", "12.4");
  assert_json_value(json, "cuda_runtime", "11.8");
  assert_json_value(json, "cublas", "12.3.4");
  assert_json_value(json, "cudnn", "8.9.7");
  assert_json_value(json, "nccl", "2.7.8");
  assert_json_value(json, "cuda_devices",
                    "0: NVIDIA H200 (sm_90, 132 SMs); 1: NVIDIA A100-SXM4-80GB (sm_80, 108 SMs)");
  free(json);
  e.cudnn = 91000; /* cuDNN 9 counts minor versions in hundreds */
  e.nccl = 22304;  /* NCCL 2.9 on too */
  e.ngpus = 0;
  e.cuda_runtime = 0;
  json = json_of(&e);
  assert_json_value(json, "cudnn", "9.10.0");
  assert_json_value(json, "nccl", "2.23.4");
  assert_json_value(json, "cuda_devices", "no CUDA device");
  assert_json_value(json, "cuda_runtime", "not available");
  free(json);
  e.cuda_init_error = 100; /* CUDA_ERROR_NO_DEVICE */
  json = json_of(&e);
  assert_json_value(json, "cuda_devices", "no CUDA device (cuInit error 100)");
  free(json);
}

/* ---- JSON in and out ------------------------------------------------------------------ */

static void escapes_round_trip(void **state) {
  (void)state;
  dlc_env e;
  dlc_env_fingerprint(&e);
  const char *awkward = "a \"quoted\" \\ back\nslash\ttab\r\x01\x1f na\xc3\xafve /";
  snprintf(e.build_flags, sizeof e.build_flags, "%s", awkward);
  char *json = json_of(&e);
  assert_non_null(strstr(json, "\\u0001")); /* control characters escaped */
  assert_json_value(json, "build_flags", awkward);
  free(json);
  /* escapes dlc_env_to_json does not write are read too */
  assert_json_value("{\"k\": \"\\/\\b\\f\\n\\u00e9\\u4e2d\"}", "k", "/\b\f\n\xc3\xa9\xe4\xb8\xad");
}

static void buffers_too_small_are_refused(void **state) {
  (void)state;
  dlc_env e;
  dlc_env_fingerprint(&e);
  char *json = json_of(&e);
  size_t need = strlen(json) + 1;
  char *exact = malloc(need);
  assert_non_null(exact);
  assert_int_equal(dlc_env_to_json(&e, exact, need), DL_OK);
  assert_string_equal(exact, json);
  assert_int_equal(dlc_env_to_json(&e, exact, need - 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "needs"));
  char small[4];
  assert_int_equal(dlc_env_value(&e, "os", small, sizeof small), DL_ERR_INVALID);
  assert_int_equal(dlc_env_value(&e, "no_such_key", small, sizeof small), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "no_such_key"));
  bool found;
  assert_int_equal(dlc_env_json_get(json, "os", small, sizeof small, &found), DL_ERR_INVALID);
  assert_false(found);
  assert_int_equal(dlc_env_json_get(json, "absent", small, sizeof small, &found), DL_OK);
  assert_false(found);
  assert_int_equal(dlc_env_json_get("{}", "os", small, sizeof small, &found), DL_OK);
  assert_false(found);
  free(exact);
  free(json);
}

static void malformed_json_is_a_format_error(void **state) {
  (void)state;
  static const char *const bad[] = {"",
                                    "{",
                                    "[]",
                                    "{\"a\": 1}",
                                    "{\"a\": \"b\",}",
                                    "{\"a\" \"b\"}",
                                    "{\"a\": \"b\"} x",
                                    "{\"a\": \"\\x\"}",
                                    "{\"a\": \"\\u12\"}",
                                    "{\"a\": \"\\ud800\"}",
                                    "{\"a\": \"\\u0000\"}",
                                    "{\"a\": \"line\nbreak\"}",
                                    "{\"a\": \"open}",
                                    "{a: \"b\"}",
                                    "{\"a\": \"b\"",
                                    "{\"a\"",
                                    "{\"a\": \"b\\"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char v[16];
    bool found = true;
    dl_status s = dlc_env_json_get(bad[i], "a", v, sizeof v, &found);
    if (s != DL_ERR_FORMAT) fail_msg("'%s' gave %d", bad[i], s);
    assert_non_null(strstr(dl_last_error(), "the environment fingerprint"));
    assert_false(found);
  }
}

/* ---- diff ------------------------------------------------------------------------------ */

/* Runs dlc_env_diff into a string (caller frees). */
static char *diff_text(const char *a, const char *b, dl_status *s, int *n) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_non_null(out);
  *s = dlc_env_diff(a, b, out, n);
  fclose(out);
  return text;
}

static void diff_lists_what_differs(void **state) {
  (void)state;
  dlc_env a, b;
  dlc_env_fingerprint(&a);
  b = a;
  char *ja = json_of(&a);
  dl_status s;
  int n = -1;
  char *text = diff_text(ja, ja, &s, &n);
  assert_int_equal(s, DL_OK);
  assert_int_equal(n, 0);
  assert_string_equal(text, "");
  free(text);
  b.cudnn = 91000;
  b.cuda_probed = true;
  snprintf(b.os_release, sizeof b.os_release, "Ubuntu 22.04.4 LTS");
  char *jb = json_of(&b);
  text = diff_text(ja, jb, &s, &n);
  assert_int_equal(s, DL_OK);
  /* os_release, and the six CUDA values that went from "not probed" */
  assert_int_equal(n, 7);
  assert_non_null(strstr(text, "os_release"));
  assert_non_null(strstr(text, "  ->  Ubuntu 22.04.4 LTS\n"));
  char line[128];
  snprintf(line, sizeof line, "  %-24s %s  ->  %s\n", "cudnn", "not probed", "9.10.0");
  assert_non_null(strstr(text, line));
  assert_null(strstr(text, "glibc"));
  free(text);
  /* counting only, without output */
  assert_int_equal(dlc_env_diff(ja, jb, NULL, &n), DL_OK);
  assert_int_equal(n, 7);
  free(jb);
  /* keys only one side has */
  text = diff_text("{\"x\": \"1\", \"y\": \"2\"}", "{\"y\": \"2\", \"z\": \"4\"}", &s, &n);
  assert_int_equal(s, DL_OK);
  assert_int_equal(n, 2);
  assert_non_null(strstr(text, "1  ->  (absent)"));
  assert_non_null(strstr(text, "(absent)  ->  4"));
  free(text);
  /* a key given twice is no fingerprint: which value would be meant? */
  assert_int_equal(dlc_env_diff("{\"y\": \"2\", \"y\": \"3\"}", ja, NULL, &n), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "duplicate"));
  assert_non_null(strstr(dl_last_error(), "line 1, column"));
  assert_int_equal(dlc_env_diff("{", ja, NULL, &n), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "first fingerprint"));
  assert_int_equal(dlc_env_diff(ja, "nonsense", NULL, &n), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "second fingerprint"));
  free(ja);
}

/* ---- text for people --------------------------------------------------------------------- */

static void print_aligns_values(void **state) {
  (void)state;
  dlc_env e;
  dlc_env_fingerprint(&e);
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_non_null(out);
  dlc_env_print(&e, out);
  fclose(out);
  /* the longest label is CUBLAS_WORKSPACE_CONFIG (23): values start at 27 */
  int lines = 0, k = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++, k++) {
    char v[1024];
    assert_int_equal(dlc_env_value(&e, dlc_env_keys[k], v, sizeof v), DL_OK);
    assert_true(strlen(line) > 27);
    assert_int_equal(line[26], ' ');
    assert_string_equal(line + 27, v);
  }
  assert_int_equal(lines, count_keys());
  free(text);
}

/* The child of cuda_probe_reports_versions_or_not_available. */
static int print_fingerprint(void) {
  dlc_env e;
  unsetenv("DLCHECK_NO_CUDA_PROBE");
  dlc_env_fingerprint(&e);
  char json[DLC_ENV_JSON_MAX];
  if (dlc_env_to_json(&e, json, sizeof json) != DL_OK) return 1;
  printf("%s\ndriver_loaded %d\n", json, e.cuda_driver_loaded);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--fingerprint") == 0) return print_fingerprint();
  self = argv[0];
  setenv("DLCHECK_NO_CUDA_PROBE", "1", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(json_has_every_key_in_order),
      cmocka_unit_test(json_reads_in_python),
      cmocka_unit_test(host_values_agree_with_the_system),
      cmocka_unit_test(variables_come_from_the_environment),
      cmocka_unit_test(cuda_probe_reports_versions_or_not_available),
      cmocka_unit_test(cuda_values_read_as_versions),
      cmocka_unit_test(escapes_round_trip),
      cmocka_unit_test(buffers_too_small_are_refused),
      cmocka_unit_test(malformed_json_is_a_format_error),
      cmocka_unit_test(diff_lists_what_differs),
      cmocka_unit_test(print_aligns_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
