/* Replays the fuzz regression inputs: every file of tests/fuzz/TARGET/
 * (TARGET: scenario, trace, state_dict, fixture, report, cli) through the entry point
 * that fuzz target uses (fuzz/targets.c, compiled in here), so that what
 * the fuzzers once found stays fixed in the normal build, without clang.
 * An input passes when it is loaded or refused without a crash, a hang or
 * (in the asan preset) a leak or a sanitizer report; a scenario input must
 * also be refused ("FILE:LINE:COL: ..."). tests/fuzz/pending/ holds
 * reproducers of bugs not fixed yet and tests/fuzz/library/ those of bugs
 * in HDF5 or libfyaml: neither is replayed (fuzz/README.md). */
#include "../fuzz/targets.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>

#define INPUTS DL_SOURCE_DIR "/tests/fuzz/"

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint8_t *read_input(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  assert_int_equal(fseek(f, 0, SEEK_SET), 0);
  uint8_t *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *size = (size_t)n;
  return buf;
}

/* Replays every file of INPUTS/target (sorted); returns how many. */
static int replay(const char *target) {
  dlc_fuzz_fn fn = dlc_fuzz_target(target);
  assert_non_null(fn);
  char dir[512];
  snprintf(dir, sizeof dir, "%s%s", INPUTS, target);
  DIR *d = opendir(dir);
  if (!d) fail_msg("no folder %s", dir);
  char *names[1024];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < 1024) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md")) continue;
    names[n] = strdup(e->d_name);
    assert_non_null(names[n]);
    n++;
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], by_name);
  for (int i = 0; i < n; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    size_t size;
    uint8_t *data = read_input(path, &size);
    print_message("%s: %s (%zu bytes)\n", target, names[i], size);
    dl_clear_error();
    assert_int_equal(fn(data, size), 0);
    if (!strcmp(target, "scenario") && !strstr(dl_last_error(), "scenario.yaml:"))
      fail_msg("%s: not refused with a located message: '%s'", names[i], dl_last_error());
    free(data);
    free(names[i]);
  }
  return n;
}

static void test_scenario(void **state) {
  (void)state;
  assert_true(replay("scenario") > 0);
}

static void test_trace(void **state) {
  (void)state;
  replay("trace");
}

static void test_state_dict(void **state) {
  (void)state;
  replay("state_dict");
}

static void test_fixture(void **state) {
  (void)state;
  replay("fixture");
}

static void test_report(void **state) {
  (void)state;
  assert_true(replay("report") > 0);
}

static void test_cli(void **state) {
  (void)state;
  assert_true(replay("cli") > 0);
}

static int setup(void **state) {
  (void)state;
  return dlc_fuzz_init();
}

static int teardown(void **state) {
  (void)state;
  dlc_fuzz_cleanup();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scenario),   cmocka_unit_test(test_trace),
      cmocka_unit_test(test_state_dict), cmocka_unit_test(test_fixture),
      cmocka_unit_test(test_report),     cmocka_unit_test(test_cli),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
