/* The fuzz targets' entry points. See targets.h. */
#define _XOPEN_SOURCE 700 /* mkdtemp */

#include "targets.h"

#include "data/data.h"
#include "judge/envelope.h"
#include "scenario/scenario.h"
#include "io/state_dict.h"
#include "store/trace_io.h"
#include "trace/trace.h"

#include <hdf5.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

enum { USERBLOCK = 512, NAME_MAX_LEN = 100 };

static char fuzz_dir[256];

/* DLC_FUZZ_VERBOSE=1: each loader's outcome on stderr (to see how far an
 * input gets; libFuzzer's runs are silent). */
static void outcome(const char *what, dl_status s) {
  static int verbose = -1;
  if (verbose < 0) verbose = getenv("DLC_FUZZ_VERBOSE") != NULL;
  if (verbose) fprintf(stderr, "%s: %s\n", what, s == DL_OK ? "loaded" : dl_last_error());
}

int dlc_fuzz_init(void) {
  if (fuzz_dir[0]) return 0;
  const char *base = getenv("DLC_FUZZ_TMPDIR");
  if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  snprintf(fuzz_dir, sizeof fuzz_dir, "%.200s/dlc_fuzz_XXXXXX", base);
  if (!mkdtemp(fuzz_dir)) {
    fuzz_dir[0] = '\0';
    return -1;
  }
  return 0;
}

void dlc_fuzz_cleanup(void) {
  dlc_fuzz_cli_cleanup();
  if (fuzz_dir[0]) rmdir(fuzz_dir);
  fuzz_dir[0] = '\0';
}

/* Writes head[0..nhead) then data[0..size) to path; false if it cannot. */
static bool write_file(const char *path, const void *head, size_t nhead, const uint8_t *data,
                       size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fwrite(head, 1, nhead, f) == nhead && fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok;
}

/* A path in the temporary folder; every target uses its own name, so that
 * the regression test can replay them in any order. */
const char *dlc_fuzz_tmp_path(char *buf, size_t size, const char *name) {
  if (!fuzz_dir[0] && dlc_fuzz_init() != 0) return NULL;
  if (snprintf(buf, size, "%s/%s", fuzz_dir, name) >= (int)size) return NULL;
  return buf;
}

/* A loader must close every HDF5 file and object it opened, on every
 * path: a handle left open is a leak LeakSanitizer cannot see (HDF5 still
 * holds it), so it is checked here and is a finding. */
void dlc_fuzz_check_hdf5_closed(const char *what) {
  ssize_t open = H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open > 0) {
    fprintf(stderr, "dlc_fuzz: %s left %zd HDF5 file(s) or object(s) open\n", what, open);
    abort();
  }
}

/* ---- sanitizers ------------------------------------------------------- */

/* Defaults for every program that links this file when it is built with
 * ASan (the fuzz targets; tests/test_fuzz_regress.c in the asan preset);
 * ASAN_OPTIONS / LSAN_OPTIONS add to them or override them.
 *
 * Full unwinding at malloc: HDF5 is built without frame pointers, so the
 * fast unwinder stops at its first frame and a leak inside it would show
 * no caller, neither to us nor to the suppression below.
 *
 * No alternate signal stack: the CLI target runs commands that start and
 * cancel a signal-waiting thread (cli/scratch.c), and clang 14's ASan then
 * reports a false stack-buffer-overflow in sigaltstack as it destroys the
 * thread (AsanThread::Destroy). A stack overflow still ends in SEGV. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "fast_unwind_on_malloc=0:malloc_context_size=30:use_sigaltstack=0";
}

/* Leaks inside HDF5 on damaged files. HDF5 1.10 loses memory on some of
 * its error paths: an object header its metadata cache was loading
 * (H5C_protect under H5Oopen), a dataset's layout (H5D__layout_oh_read
 * under H5Dopen2), ... (fuzz/README.md). A leak is suppressed when it was
 * allocated inside one of the HDF5 calls below: each returns nothing but
 * an ID, a number or a copy into dlcheck's buffer, and whatever an open ID
 * holds stays reachable from HDF5's ID table, so memory lost inside them
 * is HDF5's, never dlcheck's. H5Aread and H5Dread are not listed: they
 * hand dlcheck variable-length strings it must free, so their leaks are
 * still reported, as is every leak of dlcheck's own allocations. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:H5C_protect\n"
         "leak:H5Fopen\nleak:H5Fclose\nleak:H5Fis_hdf5\nleak:H5Fis_accessible\n"
         "leak:H5Oopen\nleak:H5Oclose\nleak:H5Dopen2\nleak:H5Dclose\n"
         "leak:H5Gopen2\nleak:H5Gclose\nleak:H5Gget_info\nleak:H5Gget_create_plist\n"
         "leak:H5Aopen\nleak:H5Aclose\nleak:H5Aexists\n"
         "leak:H5Lexists\nleak:H5Lget_name_by_idx\n"
         "leak:H5Dget_type\nleak:H5Dget_space\nleak:H5Dget_create_plist\n"
         "leak:H5Dget_storage_size\nleak:H5Dget_space_status\n"
         "leak:H5Aget_type\nleak:H5Aget_space\nleak:H5Pget_layout\nleak:H5Iget_type\n";
}

/* ---- scenario --------------------------------------------------------- */

/* NAME of the first line "name: NAME" when it is a plain name (a letter,
 * digit or '_' first, so never "." or ".."), else "fuzz". */
static void scenario_name(const uint8_t *data, size_t size, char *out, size_t out_size) {
  snprintf(out, out_size, "fuzz");
  for (size_t i = 0; i + 5 < size; i++) {
    if ((i > 0 && data[i - 1] != '\n') || memcmp(data + i, "name:", 5) != 0) continue;
    size_t j = i + 5;
    while (j < size && data[j] == ' ') j++;
    size_t n = 0;
    while (j + n < size && n + 1 < out_size && n < NAME_MAX_LEN) {
      uint8_t c = data[j + n];
      bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_';
      if (!(word || (n > 0 && (c == '-' || c == '.')))) break;
      n++;
    }
    if (n > 0) {
      memcpy(out, data + j, n);
      out[n] = '\0';
    }
    return;
  }
}

int dlc_fuzz_scenario(const uint8_t *data, size_t size) {
  char name[NAME_MAX_LEN + 1], dir[512], file[600];
  scenario_name(data, size, name, sizeof name);
  if (!dlc_fuzz_tmp_path(dir, sizeof dir, name)) return 0;
  snprintf(file, sizeof file, "%s/scenario.yaml", dir);
  if (mkdir(dir, 0700) != 0 || !write_file(file, "", 0, data, size)) {
    remove(file);
    rmdir(dir);
    return 0;
  }
  dlc_scenario *s = NULL;
  dl_status st = dlc_scenario_load(&s, dir);
  outcome("scenario", st);
  if (st == DL_OK) dlc_scenario_free(s);
  remove(file);
  rmdir(dir);
  return 0;
}

/* ---- HDF5 files -------------------------------------------------------- */

/* Writes head and data to the file `name` of the temporary folder, runs
 * load(path, user) on it, checks that every HDF5 handle was closed, removes
 * it. */
static void on_hdf5_file(const char *name, const void *head, size_t nhead, const uint8_t *data,
                         size_t size, void (*load)(const char *path, void *user), void *user,
                         const char *what) {
  char path[512];
  if (!dlc_fuzz_tmp_path(path, sizeof path, name)) return;
  if (write_file(path, head, nhead, data, size)) {
    load(path, user);
    dlc_fuzz_check_hdf5_closed(what);
  }
  remove(path);
}

/* ---- traces and goldens ----------------------------------------------- */

static const char trace_magic[] = "dlcheck trace 1\n";

static void load_trace(const char *path, void *user) {
  (void)user;
  dlc_trace t;
  dlc_golden_meta *meta = malloc(sizeof *meta);
  dlc_envelope env;
  dl_status st = meta ? dlc_golden_load(path, &t, meta, &env) : DL_ERR_NOMEM;
  outcome("trace", st);
  if (st == DL_OK) {
    dlc_trace_free(&t);
    dlc_envelope_free(&env);
  }
  free(meta);
}

void dlc_fuzz_on_sealed_trace(const uint8_t *data, size_t size, const char *name,
                              void (*load)(const char *path, void *user), void *user) {
  if (size >= USERBLOCK && memcmp(data, trace_magic, sizeof trace_magic - 1) == 0) {
    data += USERBLOCK;
    size -= USERBLOCK;
  }
  /* The seal of docs/trace-format.md §3: XXH64 (seed 0) of the bytes after
   * the user block, in a header of 512 bytes, NUL-padded. */
  char header[USERBLOCK];
  memset(header, 0, sizeof header);
  snprintf(header, sizeof header, "%sxxh64 %016" PRIx64 "\n", trace_magic,
           (uint64_t)XXH64(data, size, 0));
  on_hdf5_file(name, header, sizeof header, data, size, load, user, "dlc_golden_load");
}

int dlc_fuzz_trace(const uint8_t *data, size_t size) {
  dlc_fuzz_on_sealed_trace(data, size, "trace.h5", load_trace, NULL);
  return 0;
}

/* ---- state dicts ------------------------------------------------------ */

static void load_state_dict(const char *path, void *user) {
  (void)user;
  dl_state_dict sd = {0};
  dl_status st = dl_state_read(path, "model", &sd);
  outcome("state_read", st);
  if (st == DL_OK) dl_state_dict_free(&sd);
  /* The layers of fixtures/torch/mlp_sgd.init.h5, a scalar int64 buffer
   * and a float16 one: shapes and dtypes to compare against. */
  static const struct {
    const char *name;
    dl_dtype dt;
    int ndim;
    int64_t shape[2];
  } want[] = {{"1.weight", DL_F32, 2, {32, 64}},         {"1.bias", DL_F32, 1, {32}},
              {"3.weight", DL_F32, 2, {10, 32}},         {"3.bias", DL_F32, 1, {10}},
              {"2.num_batches_tracked", DL_I64, 0, {0}}, {"2.running_mean", DL_F16, 1, {4}}};
  enum { NWANT = sizeof want / sizeof want[0] };
  dl_tensor tensors[NWANT];
  dl_named_tensor items[NWANT];
  memset(tensors, 0, sizeof tensors);
  int n = 0;
  while (n < NWANT && dl_tensor_alloc(&tensors[n], want[n].dt, want[n].ndim, want[n].shape,
                                      want[n].name) == DL_OK) {
    items[n] = (dl_named_tensor){want[n].name, &tensors[n]};
    n++;
  }
  if (n == NWANT) {
    dl_load_report report;
    memset(&report, 0, sizeof report);
    outcome("state_load", dl_state_load(path, "model", items, n, false, &report));
    dl_load_report_free(&report);
  }
  for (int i = 0; i < n; i++) dl_tensor_free(&tensors[i]);
}

int dlc_fuzz_state_dict(const uint8_t *data, size_t size) {
  on_hdf5_file("state.h5", "", 0, data, size, load_state_dict, NULL,
               "dl_state_read or dl_state_load");
  return 0;
}

/* ---- fixtures --------------------------------------------------------- */

static void load_fixture(const char *path, void *user) {
  (void)user;
  dl_dataset ds;
  memset(&ds, 0, sizeof ds);
  dl_status st = dl_dataset_load_h5(&ds, path, "train");
  outcome("fixture", st);
  if (st == DL_OK) dl_dataset_free(&ds);
}

int dlc_fuzz_fixture(const uint8_t *data, size_t size) {
  on_hdf5_file("fixture.h5", "", 0, data, size, load_fixture, NULL, "dl_dataset_load_h5");
  return 0;
}

dlc_fuzz_fn dlc_fuzz_target(const char *name) {
  static const struct {
    const char *name;
    dlc_fuzz_fn fn;
  } targets[] = {{"scenario", dlc_fuzz_scenario},     {"trace", dlc_fuzz_trace},
                 {"state_dict", dlc_fuzz_state_dict}, {"fixture", dlc_fuzz_fixture},
                 {"report", dlc_fuzz_report},         {"cli", dlc_fuzz_cli}};
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
    if (!strcmp(targets[i].name, name)) return targets[i].fn;
  return NULL;
}
