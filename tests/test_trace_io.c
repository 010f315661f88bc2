/* Traces and goldens in HDF5: bitwise round trips, broken files (missing,
 * not HDF5, truncated, bytes flipped, edited, another schema), atomic
 * replacement when a write fails half-way, refusal of traces that cannot be
 * stored, golden metadata, and readability by h5py.
 *
 * Every comparison of values here is bitwise (memcmp): saving and loading
 * must not change a single bit, NaN payloads and -0 included. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/mem.h"
#include "io/state_dict.h"
#include "store/trace_io.h"

#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "tmpdir.h"

static int make_tmpdir(void **state) {
  (void)state;
  /* Golden metadata needs no CUDA libraries here (test_env probes them). */
  setenv("DLCHECK_NO_CUDA_PROBE", "1", 1);
  return tmpdir_make("dlc_trace_io");
}

static unsigned char *read_bytes(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  rewind(f);
  unsigned char *b = malloc((size_t)*n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)*n, f), (size_t)*n);
  fclose(f);
  return b;
}

static void write_bytes(const char *path, const unsigned char *b, long n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
}

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static double bits_f64(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* ---- a trace exercising every part and every awkward value ------------------- */

static void add_final(dlc_trace *t, const char *name, dl_dtype dt, int ndim, const int64_t *shape,
                      const void *bytes) {
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_alloc(&x, dt, ndim, shape, name), DL_OK);
  if (x.numel) memcpy(x.data, bytes, dl_tensor_bytes(&x));
  assert_int_equal(dlc_trace_add_final(t, name, &x), DL_OK);
  dl_tensor_free(&x);
}

static void add_finals(dlc_trace *t) {
  const int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s0[2] = {0, 3}, s4d[4] = {1, 2, 1, 2};
  const uint32_t w[6] = {0x3f800000u,
                         0x80000000u /* -0 */,
                         0x7fc01234u /* NaN payload */,
                         0x00000003u /* denormal */,
                         0x7f800000u /* inf */,
                         0xbe99999au};
  const int64_t count = 123456789012345LL;
  const uint16_t half[3] = {0x3c00, 0xc000, 0x7bff}, brain[2] = {0x3f80, 0xc0a0};
  const int32_t ids[3] = {-7, 0, 1000000};
  const float four[4] = {1, 2, 3, 4};
  add_final(t, "param/0.weight", DL_F32, 2, s23, w);
  add_final(t, "buffer/1.num_batches_tracked", DL_I64, 0, NULL, &count);
  add_final(t, "half", DL_F16, 1, s3, half);
  add_final(t, "brain", DL_BF16, 1, s2, brain);
  add_final(t, "ids", DL_I32, 1, s3, ids);
  add_final(t, "empty", DL_F32, 2, s0, NULL);
  add_final(t, "rank4", DL_F32, 4, s4d, four);
  /* names the percent-encoding must keep apart */
  add_final(t, ".", DL_F32, 1, s2, four);
  add_final(t, "a/b", DL_F32, 1, s2, four);
  add_final(t, "a%2Fb", DL_F32, 1, s2, four + 2);
}

static void make_trace(dlc_trace *t) {
  dlc_trace_init(t, "ddp_equiv", "reference");
  strcpy(t->backend, "cpu");
  t->seed = UINT64_MAX;
  t->scenario_hash = 0x0123456789abcdefULL;
  const double loss[6] = {2.5,      1.0 / 3.0,  -0.0, bits_f64(0x7ff8000000000abcULL),
                          INFINITY, bits_f64(1) /* denormal */};
  for (int i = 0; i < 6; i++) {
    assert_int_equal(dlc_trace_push(t, "loss", loss[i]), DL_OK);
    assert_int_equal(dlc_trace_push(t, "lr", 0.1 * i), DL_OK);
  }
  assert_int_equal(dlc_trace_push(t, "grad/norm", 3.0), DL_OK);
  assert_int_equal(dlc_trace_push(t, "100%", 1.0), DL_OK);

  dl_tensor a = {0}, b = {0};
  assert_int_equal(dl_tensor_f32(&a, 1, 4, 0, 0, 0, "a"), DL_OK);
  assert_int_equal(dl_tensor_f32(&b, 2, 2, 2, 0, 0, "b"), DL_OK);
  const char *names[2] = {"param/0.weight", "grad/0.weight"};
  const dl_tensor *tensors[2] = {&a, &b};
  for (int s = 0; s < 3; s++) {
    dl_f32(&a)[s] = (float)s;
    dl_f32(&b)[3 - s] = -(float)s;
    assert_int_equal(dlc_trace_push_digests(t, 2, names, tensors), DL_OK);
  }
  dl_tensor_free(&a);
  dl_tensor_free(&b);

  const char *layers[3] = {"0 (linear)", "1 (relu)", "2 (linear)"};
  double st[3][DLC_STAT_COUNT] = {{0.5, 1, -2, 3, 0, 0},
                                  {0.25, 0.5, 0, 3, 0.5, 0},
                                  {NAN, NAN, -INFINITY, INFINITY, 0, 7}};
  assert_int_equal(dlc_trace_push_stats(t, 0, 3, layers, (const double(*)[DLC_STAT_COUNT])st),
                   DL_OK);
  st[0][0] = -1.5;
  assert_int_equal(dlc_trace_push_stats(t, 5, 2, layers, (const double(*)[DLC_STAT_COUNT])st),
                   DL_OK);
  add_finals(t);
  assert_int_equal(dlc_trace_set_metric(t, "peak_bytes", 1e9), DL_OK);
  assert_int_equal(dlc_trace_set_metric(t, "odd/metric", bits_f64(0xfff0000000000001ULL)), DL_OK);
  char long_text[5000];
  memset(long_text, 'x', sizeof long_text - 1);
  long_text[sizeof long_text - 1] = '\0';
  assert_int_equal(dlc_trace_set_note(t, "long", long_text), DL_OK);
  assert_int_equal(dlc_trace_set_note(t, "utf8", "na\xc3\xafve \xe2\x80\x94 \"quoted\"\n"), DL_OK);
  assert_int_equal(dlc_trace_set_note(t, "empty", ""), DL_OK);
}

static void assert_same_tensor(const dl_tensor *a, const dl_tensor *b) {
  assert_int_equal(a->dtype, b->dtype);
  assert_int_equal(a->ndim, b->ndim);
  for (int i = 0; i < a->ndim; i++) assert_int_equal(a->shape[i], b->shape[i]);
  assert_int_equal(a->numel, b->numel);
  if (a->numel) assert_memory_equal(a->data, b->data, dl_tensor_bytes(a));
}

static void assert_same_trace(const dlc_trace *a, const dlc_trace *b) {
  assert_string_equal(a->run, b->run);
  assert_string_equal(a->scenario, b->scenario);
  assert_string_equal(a->backend, b->backend);
  assert_true(a->seed == b->seed);
  assert_true(a->scenario_hash == b->scenario_hash);
  assert_int_equal(a->nseries, b->nseries);
  for (int i = 0; i < a->nseries; i++) {
    assert_string_equal(a->series[i].name, b->series[i].name);
    assert_int_equal(a->series[i].n, b->series[i].n);
    if (a->series[i].n)
      assert_memory_equal(a->series[i].v, b->series[i].v, (size_t)a->series[i].n * sizeof(double));
  }
  assert_int_equal(a->ndigest, b->ndigest);
  assert_int_equal(a->digest_steps, b->digest_steps);
  for (int j = 0; j < a->ndigest; j++) assert_string_equal(a->digest_names[j], b->digest_names[j]);
  if (a->ndigest && a->digest_steps)
    assert_memory_equal(a->digests, b->digests,
                        (size_t)(a->ndigest * a->digest_steps) * sizeof(uint64_t));
  assert_int_equal(a->nstats, b->nstats);
  for (int i = 0; i < a->nstats; i++) {
    assert_int_equal(a->stats[i].step, b->stats[i].step);
    assert_int_equal(a->stats[i].nlayers, b->stats[i].nlayers);
    for (int l = 0; l < a->stats[i].nlayers; l++)
      assert_string_equal(a->stats[i].layer[l], b->stats[i].layer[l]);
    if (a->stats[i].nlayers)
      assert_memory_equal(a->stats[i].stat, b->stats[i].stat,
                          (size_t)a->stats[i].nlayers * sizeof *a->stats[i].stat);
  }
  assert_int_equal(a->nfinals, b->nfinals);
  for (int i = 0; i < a->nfinals; i++) {
    assert_string_equal(a->finals[i].name, b->finals[i].name);
    assert_same_tensor(&a->finals[i].t, &b->finals[i].t);
  }
  assert_int_equal(a->nmetrics, b->nmetrics);
  for (int i = 0; i < a->nmetrics; i++) {
    assert_string_equal(a->metrics[i].name, b->metrics[i].name);
    assert_memory_equal(&a->metrics[i].value, &b->metrics[i].value, sizeof(double));
  }
  assert_int_equal(a->nnotes, b->nnotes);
  for (int i = 0; i < a->nnotes; i++) {
    assert_string_equal(a->notes[i].name, b->notes[i].name);
    assert_string_equal(a->notes[i].text, b->notes[i].text);
  }
}

static void make_meta(dlc_golden_meta *m) {
  assert_int_equal(dlc_golden_meta_init(m), DL_OK);
  assert_int_equal(dlc_golden_meta_set_tol(m, "loss", "close(1e-5, 1e-6)"), DL_OK);
  assert_int_equal(dlc_golden_meta_set_tol(m, "param/0.weight", "ulp(4)"), DL_OK);
  assert_int_equal(dlc_golden_meta_set_tol(m, "digests", "bitwise"), DL_OK);
}

static bool meta_is_zero(const dlc_golden_meta *m) {
  static const dlc_golden_meta zero;
  return memcmp(m, &zero, sizeof zero) == 0;
}

/* A trace saved and loaded once, for the tests that break files. */
static const char *saved_trace(const char *name, bool golden) {
  static dlc_golden_meta meta;
  dlc_trace t;
  make_trace(&t);
  if (golden) make_meta(&meta);
  const char *path = path_in_tmp(name);
  assert_int_equal(dlc_trace_save(path, &t, golden ? &meta : NULL), DL_OK);
  dlc_trace_free(&t);
  return path;
}

static void assert_format_error_naming(const char *path, const char *part) {
  dlc_trace t;
  dlc_golden_meta m;
  dl_status s = dlc_trace_load(path, &t, &m);
  if (s != DL_ERR_FORMAT) fail_msg("expected a format error, got %d: %s", s, dl_last_error());
  assert_non_null(strstr(dl_last_error(), path));
  if (part && !strstr(dl_last_error(), part))
    fail_msg("message lacks '%s': %s", part, dl_last_error());
  assert_int_equal(t.nseries, 0);
  assert_null(t.series);
  assert_true(meta_is_zero(&m));
}

/* ---- round trips ------------------------------------------------------------------ */

static void plain_trace_round_trip_is_bitwise(void **state) {
  (void)state;
  dlc_trace t, u;
  make_trace(&t);
  const char *path = path_in_tmp("plain.h5");
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_OK);
  dlc_golden_meta m;
  memset(&m, 0xab, sizeof m);
  assert_int_equal(dlc_trace_load(path, &u, &m), DL_OK);
  assert_same_trace(&t, &u);
  assert_true(meta_is_zero(&m)); /* a plain trace has no golden metadata */
  /* the order of every list is kept, so lookups and reports stay stable */
  assert_string_equal(u.series[2].name, "grad/norm");
  assert_string_equal(u.finals[7].name, ".");
  assert_non_null(dlc_trace_final(&u, "a%2Fb"));
  dlc_trace_free(&u);
  dlc_trace_free(&t);
}

static void golden_round_trip_keeps_metadata(void **state) {
  (void)state;
  dlc_trace t, u;
  dlc_golden_meta m, back;
  make_trace(&t);
  make_meta(&m);
  const char *path = path_in_tmp("golden.h5");
  assert_int_equal(dlc_trace_save(path, &t, &m), DL_OK);
  assert_int_equal(dlc_trace_load(path, &u, &back), DL_OK);
  assert_same_trace(&t, &u);
  assert_true(back.golden);
  assert_string_equal(back.env_json, m.env_json);
  assert_string_equal(back.recorded_at, m.recorded_at);
  assert_string_equal(back.version, dlc_version());
  assert_int_equal(back.ntols, 3);
  assert_string_equal(dlc_golden_meta_tol(&back, "param/0.weight"), "ulp(4)");
  assert_string_equal(dlc_golden_meta_tol(&back, "loss"), "close(1e-5, 1e-6)");
  dlc_trace_free(&u);
  /* the metadata is optional on loading */
  assert_int_equal(dlc_trace_load(path, &u, NULL), DL_OK);
  assert_same_trace(&t, &u);
  dlc_trace_free(&u);
  dlc_trace_free(&t);
}

static void empty_trace_round_trips(void **state) {
  (void)state;
  dlc_trace t, u;
  dlc_trace_init(&t, "", "");
  t.backend[0] = '\0';
  const char *path = path_in_tmp("empty.h5");
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_OK);
  assert_int_equal(dlc_trace_load(path, &u, NULL), DL_OK);
  assert_same_trace(&t, &u);
  dlc_trace_free(&u);
  /* digests of zero tensors still count their steps */
  t.digest_steps = 4;
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_OK);
  assert_int_equal(dlc_trace_load(path, &u, NULL), DL_OK);
  assert_int_equal(u.digest_steps, 4);
  assert_int_equal(u.ndigest, 0);
  dlc_trace_free(&u);
  dlc_trace_free(&t);
}

/* No timestamps in the file: the same golden recorded twice, seconds
 * apart, is the same bytes, so re-recording an unchanged golden changes
 * nothing in git. */
static void same_trace_saves_same_bytes(void **state) {
  (void)state;
  dlc_trace t;
  dlc_golden_meta m;
  make_trace(&t);
  make_meta(&m);
  const char *a = path_in_tmp("same_a.h5"), *b = path_in_tmp("same_b.h5");
  assert_int_equal(dlc_trace_save(a, &t, &m), DL_OK);
  sleep(1); /* HDF5 object times have a resolution of one second */
  assert_int_equal(dlc_trace_save(b, &t, &m), DL_OK);
  long na, nb;
  unsigned char *ba = read_bytes(a, &na), *bb = read_bytes(b, &nb);
  assert_int_equal(na, nb);
  assert_memory_equal(ba, bb, (size_t)na);
  free(ba);
  free(bb);
  dlc_trace_free(&t);
}

/* ---- broken files ----------------------------------------------------------------------- */

static void missing_file_is_an_io_error(void **state) {
  (void)state;
  dlc_trace t;
  dlc_golden_meta m;
  const char *path = path_in_tmp("no_such.h5");
  assert_int_equal(dlc_trace_load(path, &t, &m), DL_ERR_IO);
  char expect[512];
  snprintf(expect, sizeof expect, "%s: cannot open: ", path);
  assert_ptr_equal(strstr(dl_last_error(), expect), dl_last_error());
  assert_int_equal(t.nseries, 0);
  assert_true(meta_is_zero(&m));
  assert_int_equal(dlc_trace_load(tmpdir, &t, NULL), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "directory"));
  assert_int_equal(dlc_trace_load("", &t, NULL), DL_ERR_INVALID);
  /* a FIFO is refused without reading it (it used to block forever) */
  const char *fifo = path_in_tmp("fifo.h5");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  alarm(10); /* a regression blocks: fail rather than hang */
  assert_int_equal(dlc_trace_load(fifo, &t, NULL), DL_ERR_IO);
  alarm(0);
  assert_non_null(strstr(dl_last_error(), "it is a FIFO"));
  unlink(fifo);
}

/* The seal hashes bytes 512 on; the rest of the 512-byte header (39-511)
 * must be NUL, or a changed byte there would go unnoticed. */
static void a_flipped_byte_in_the_unused_header_is_refused(void **state) {
  (void)state;
  static const long offsets[] = {39, 100, 511};
  for (size_t i = 0; i < sizeof offsets / sizeof *offsets; i++) {
    const char *path = saved_trace("header.h5", true);
    long n;
    unsigned char *b = read_bytes(path, &n);
    b[offsets[i]] ^= 0x20;
    write_bytes(path, b, n);
    free(b);
    char part[64];
    snprintf(part, sizeof part, "byte %ld of the 512-byte header is not zero", offsets[i]);
    assert_format_error_naming(path, part);
  }
}

/* A link where a trace is written is refused; the file it points to is
 * never truncated (issue 16: a golden linked from an output folder lost
 * its bytes). */
static void a_link_at_the_target_is_refused(void **state) {
  (void)state;
  const char *victim = saved_trace("victim.h5", true);
  long before;
  unsigned char *b = read_bytes(victim, &before);
  const char *link = path_in_tmp("link.h5");
  assert_int_equal(symlink(victim, link), 0);
  dlc_trace t;
  make_trace(&t);
  assert_int_equal(dlc_trace_save(link, &t, NULL), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "symbolic link"));
  dlc_trace_free(&t);
  long after;
  unsigned char *a = read_bytes(victim, &after);
  assert_int_equal(after, before);
  assert_memory_equal(a, b, (size_t)before);
  free(a);
  free(b);
  unlink(link);
}

static void not_hdf5_is_a_format_error(void **state) {
  (void)state;
  const char *path = path_in_tmp("text.h5");
  const unsigned char text[] = "step,loss\n0,2.5\n";
  write_bytes(path, text, (long)sizeof text - 1);
  assert_format_error_naming(path, "not a file dlcheck wrote");
  /* an HDF5 file of another kind: a state dict */
  dl_tensor x = {0};
  assert_int_equal(dl_tensor_f32(&x, 1, 3, 0, 0, 0, "w"), DL_OK);
  const dl_named_tensor items[1] = {{"w", &x}};
  assert_int_equal(dl_state_save(path, "model", items, 1), DL_OK);
  assert_format_error_naming(path, "does not start with the 'dlcheck trace 1' header");
  dl_tensor_free(&x);
}

/* Every prefix length of interest: empty, inside the superblock, inside
 * the metadata, inside the data, one byte short. */
static void truncated_files_are_format_errors(void **state) {
  (void)state;
  const char *path = saved_trace("whole.h5", true);
  long n;
  unsigned char *b = read_bytes(path, &n);
  const long lengths[] = {0, 1, 8, 47, 100, 512, 2048, n / 2, n - 100, n - 8, n - 1};
  const char *cut = path_in_tmp("cut.h5");
  for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
    write_bytes(cut, b, lengths[i]);
    assert_format_error_naming(cut, NULL);
  }
  free(b);
}

/* A flipped bit anywhere either leaves the content intact (a byte HDF5
 * does not use) or is detected: by HDF5's metadata checksums or by the
 * content checksum. Never a crash, never changed numbers. */
static void flipped_bytes_are_detected_or_harmless(void **state) {
  (void)state;
  const char *path = saved_trace("flip_src.h5", true);
  dlc_trace original;
  assert_int_equal(dlc_trace_load(path, &original, NULL), DL_OK);
  long n;
  unsigned char *b = read_bytes(path, &n);
  const char *flipped = path_in_tmp("flipped.h5");
  uint64_t lcg = 0x9e3779b97f4a7c15ULL;
  int detected = 0, harmless = 0;
  for (int i = 0; i < 120; i++) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    long at = (long)((lcg >> 33) % (uint64_t)n);
    unsigned char mask = (unsigned char)(1u << ((lcg >> 20) & 7));
    b[at] ^= mask;
    write_bytes(flipped, b, n);
    b[at] ^= mask;
    dlc_trace t;
    dl_status s = dlc_trace_load(flipped, &t, NULL);
    if (s == DL_OK) {
      assert_same_trace(&original, &t);
      dlc_trace_free(&t);
      harmless++;
      continue;
    }
    if (s != DL_ERR_FORMAT) fail_msg("byte %ld ^ %d: status %d: %s", at, mask, s, dl_last_error());
    assert_non_null(strstr(dl_last_error(), flipped));
    detected++;
  }
  assert_true(detected > 60); /* most bytes of a compact file matter */
  (void)harmless;
  free(b);
  dlc_trace_free(&original);
}

static hid_t open_rw(const char *path) {
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  assert_true(f >= 0);
  return f;
}

/* Seals an edited file again, as trace_io.h documents the seal: the file
 * then reaches the checks behind it. */
static void reseal(const char *path) {
  long n;
  unsigned char *b = read_bytes(path, &n);
  char header[512] = {0};
  snprintf(header, sizeof header, "dlcheck trace 1\nxxh64 %016llx\n",
           (unsigned long long)XXH64(b + 512, (size_t)n - 512, 0));
  memcpy(b, header, sizeof header);
  write_bytes(path, b, n);
  free(b);
}

static void other_schema_version_is_refused(void **state) {
  (void)state;
  const char *path = saved_trace("schema.h5", false);
  hid_t f = open_rw(path);
  hid_t a = H5Aopen(f, "schema_version", H5P_DEFAULT);
  const int64_t two = 2;
  assert_true(H5Awrite(a, H5T_NATIVE_INT64, &two) >= 0);
  H5Aclose(a);
  H5Fclose(f);
  assert_format_error_naming(path, "checksum mismatch");
  reseal(path);
  assert_format_error_naming(path, "schema_version is 2; this dlcheck reads 1: update dlcheck");
}

static void edited_kind_is_refused(void **state) {
  (void)state;
  const char *path = saved_trace("kind.h5", false);
  hid_t f = open_rw(path);
  assert_true(H5Adelete(f, "kind") >= 0);
  H5Fclose(f);
  reseal(path);
  assert_format_error_naming(path, "attribute kind is missing");
  /* an integer where a string belongs */
  f = open_rw(path);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, "kind", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
  const int32_t one = 1;
  assert_true(H5Awrite(a, H5T_NATIVE_INT32, &one) >= 0);
  H5Aclose(a);
  H5Sclose(space);
  H5Fclose(f);
  reseal(path);
  assert_format_error_naming(path, "kind is not a fixed-length string");
}

static void missing_parts_are_named(void **state) {
  (void)state;
  static const char *const parts[] = {"/series",        "/digests",        "/digests/values",
                                      "/stats",         "/stats/1/layers", "/finals",
                                      "/metrics/names", "/notes/texts",    "/tolerances/rules"};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
    const char *path = saved_trace("parts.h5", true);
    hid_t f = open_rw(path);
    assert_true(H5Ldelete(f, parts[i], H5P_DEFAULT) >= 0);
    H5Fclose(f);
    reseal(path);
    assert_format_error_naming(path, strcmp(parts[i], "/finals") ? parts[i] + 1 : "finals");
  }
  const char *path = saved_trace("parts.h5", true);
  hid_t f = open_rw(path);
  assert_true(H5Adelete(f, "env_fingerprint") >= 0);
  H5Fclose(f);
  reseal(path);
  assert_format_error_naming(path, "env_fingerprint");
}

/* Replaces dataset `name` by one of `type` with the given shape (data zero). */
static void replace_dataset(const char *path, const char *name, hid_t type, int rank,
                            const hsize_t *dims) {
  hid_t f = open_rw(path);
  assert_true(H5Ldelete(f, name, H5P_DEFAULT) >= 0);
  hid_t space = H5Screate_simple(rank, dims, NULL);
  hid_t ds = H5Dcreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(ds >= 0);
  size_t bytes = H5Tget_size(type);
  for (int i = 0; i < rank; i++) bytes *= dims[i];
  void *zero = calloc(1, bytes + 1);
  assert_true(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, zero) >= 0);
  free(zero);
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(f);
  reseal(path);
}

static void wrong_types_and_shapes_are_named(void **state) {
  (void)state;
  const hsize_t d1[1] = {2}, d2x3[2] = {3, 3}, d2[2] = {2, 6};
  const char *path = saved_trace("types.h5", false);
  replace_dataset(path, "/metrics/values", H5T_STD_I32LE, 1, d1);
  assert_format_error_naming(path, "/metrics/values is not float64");
  path = saved_trace("types.h5", false);
  replace_dataset(path, "/series/loss", H5T_IEEE_F64LE, 2, d2);
  assert_format_error_naming(path, "/series/loss has rank 2; expected 1");
  path = saved_trace("types.h5", false);
  replace_dataset(path, "/digests/values", H5T_STD_U64LE, 2, d2x3);
  assert_format_error_naming(path, "values' second dimension has 3 entries but names has 2");
  path = saved_trace("types.h5", false);
  replace_dataset(path, "/stats/0/values", H5T_IEEE_F64LE, 2, d2x3);
  assert_format_error_naming(path, "/stats/0/values has 3 columns; expected 6");
  path = saved_trace("types.h5", false);
  replace_dataset(path, "/metrics/names", H5T_IEEE_F64LE, 1, d1);
  assert_format_error_naming(path, "/metrics/names is not an array of fixed-length strings");
}

/* ---- what plain traces may carry, and what other writers write ---------------- */

/* The Python recorder's plain traces carry the recording machine's
 * fingerprint; the rest of the metadata stays a golden's. */
static void plain_trace_carries_an_env_fingerprint(void **state) {
  (void)state;
  dlc_trace t, u;
  dlc_golden_meta m, back;
  make_trace(&t);
  make_meta(&m);
  m.golden = false; /* tolerances, time and version set, and not written */
  const char *path = path_in_tmp("plain_env.h5");
  assert_int_equal(dlc_trace_save(path, &t, &m), DL_OK);
  assert_int_equal(dlc_trace_load(path, &u, &back), DL_OK);
  assert_same_trace(&t, &u);
  dlc_trace_free(&u);
  assert_false(back.golden);
  assert_string_equal(back.env_json, m.env_json);
  assert_string_equal(back.recorded_at, "");
  assert_int_equal(back.ntols, 0);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(H5Aexists(f, "env_fingerprint") > 0);
  assert_true(H5Aexists(f, "recorded_at") == 0 && H5Aexists(f, "dlcheck_version") == 0);
  assert_true(H5Lexists(f, "tolerances", H5P_DEFAULT) == 0);
  H5Fclose(f);
  /* an empty fingerprint is not written, and its absence reads as "" */
  m.env_json[0] = '\0';
  assert_int_equal(dlc_trace_save(path, &t, &m), DL_OK);
  memset(&back, 0xab, sizeof back);
  assert_int_equal(dlc_trace_load(path, &u, &back), DL_OK);
  assert_true(meta_is_zero(&back));
  dlc_trace_free(&u);
  dlc_trace_free(&t);
}

static hid_t nullpad_type(size_t width) {
  hid_t t = H5Tcopy(H5T_C_S1);
  assert_true(t >= 0 && H5Tset_size(t, width) >= 0 && H5Tset_strpad(t, H5T_STR_NULLPAD) >= 0);
  return t;
}

/* numpy bytes as h5py stores them: NUL-padded, no terminator when full. */
static void nullpad_attr(hid_t obj, const char *name, const char *value) {
  size_t n = strlen(value), w = n ? n : 1;
  char *buf = calloc(1, w);
  assert_non_null(buf);
  memcpy(buf, value, n);
  assert_true(H5Adelete(obj, name) >= 0);
  hid_t t = nullpad_type(w), space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, space, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(a >= 0 && H5Awrite(a, t, buf) >= 0);
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(t);
  free(buf);
}

/* n strings as wide as the longest, NUL-padded: the longest has no NUL. */
static void nullpad_dataset(hid_t f, const char *name, int n, const char *const *v) {
  size_t w = 1;
  for (int i = 0; i < n; i++) w = strlen(v[i]) > w ? strlen(v[i]) : w;
  char *buf = calloc((size_t)n, w);
  assert_non_null(buf);
  for (int i = 0; i < n; i++) memcpy(buf + (size_t)i * w, v[i], strlen(v[i]));
  assert_true(H5Ldelete(f, name, H5P_DEFAULT) >= 0);
  const hsize_t dims[1] = {(hsize_t)n};
  hid_t t = nullpad_type(w), space = H5Screate_simple(1, dims, NULL);
  hid_t ds = H5Dcreate2(f, name, t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(ds >= 0 && H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  H5Dclose(ds);
  H5Sclose(space);
  H5Tclose(t);
  free(buf);
}

/* Strings NUL-padded (H5T_STR_NULLPAD) read as the NUL-terminated ones
 * dlcheck writes: root attributes, names, and texts thousands of bytes long. */
static void nullpad_strings_read_the_same(void **state) {
  (void)state;
  dlc_trace t, u;
  dlc_golden_meta m, back;
  make_trace(&t);
  memset(&m, 0, sizeof m);
  strcpy(m.env_json, "{\"os\": \"Linux 6.1\", \"cpu\": \"x86-64\"}");
  const char *path = path_in_tmp("nullpad.h5");
  assert_int_equal(dlc_trace_save(path, &t, &m), DL_OK);
  hid_t f = open_rw(path);
  nullpad_attr(f, "kind", "trace");
  nullpad_attr(f, "run", t.run);
  nullpad_attr(f, "scenario", t.scenario);
  nullpad_attr(f, "backend", t.backend);
  nullpad_attr(f, "env_fingerprint", m.env_json);
  const char *metrics[2] = {t.metrics[0].name, t.metrics[1].name}; /* equally long */
  nullpad_dataset(f, "/metrics/names", 2, metrics);
  const char *texts[3] = {t.notes[0].text, t.notes[1].text, t.notes[2].text};
  nullpad_dataset(f, "/notes/texts", 3, texts);
  const char *digests[2] = {t.digest_names[0], t.digest_names[1]};
  nullpad_dataset(f, "/digests/names", 2, digests);
  H5Fclose(f);
  reseal(path);
  if (dlc_trace_load(path, &u, &back) != DL_OK) fail_msg("%s", dl_last_error());
  assert_same_trace(&t, &u);
  assert_false(back.golden);
  assert_string_equal(back.env_json, m.env_json);
  dlc_trace_free(&u);
  dlc_trace_free(&t);
}

static void edited_values_fail_the_checksum(void **state) {
  (void)state;
  const char *path = saved_trace("edited.h5", true);
  hid_t f = open_rw(path);
  hid_t ds = H5Dopen2(f, "/series/lr", H5P_DEFAULT);
  double lr[6];
  assert_true(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, lr) >= 0);
  lr[3] = nextafter(lr[3], 1.0); /* one ulp: what a damaged sector could do */
  assert_true(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, lr) >= 0);
  H5Dclose(ds);
  H5Fclose(f);
  assert_format_error_naming(path, "checksum mismatch");
}

/* The seal is what trace_io.h documents, byte for byte. */
static void header_holds_the_documented_seal(void **state) {
  (void)state;
  const char *path = saved_trace("seal.h5", false);
  long n;
  unsigned char *b = read_bytes(path, &n);
  char expect[64];
  snprintf(expect, sizeof expect, "dlcheck trace 1\nxxh64 %016llx\n",
           (unsigned long long)XXH64(b + 512, (size_t)n - 512, 0));
  assert_memory_equal(b, expect, strlen(expect));
  for (size_t i = strlen(expect); i < 512; i++) assert_int_equal(b[i], 0);
  assert_memory_equal(b + 512, "\x89HDF\r\n\x1a\n", 8); /* the superblock follows */
  free(b);
}

static void foreign_link_names_are_refused(void **state) {
  (void)state;
  static const char *const names[] = {"/series/a%2fb" /* lower-case escape */,
                                      "/series/a%2Eb" /* needless escape */,
                                      "/series/bad%" /* cut escape */};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const char *path = saved_trace("names.h5", false);
    hid_t f = open_rw(path);
    assert_true(H5Lmove(f, "/series/lr", f, names[i], H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    reseal(path);
    assert_format_error_naming(path, "not a name dlcheck writes");
  }
  char long_name[200] = "/finals/";
  memset(long_name + 8, 'n', sizeof long_name - 9);
  long_name[sizeof long_name - 1] = '\0';
  const char *path = saved_trace("names.h5", false);
  hid_t f = open_rw(path);
  assert_true(H5Lmove(f, "/finals/ids", f, long_name, H5P_DEFAULT, H5P_DEFAULT) >= 0);
  H5Fclose(f);
  reseal(path);
  assert_format_error_naming(path, "at most 127 bytes");
}

/* ---- writing ---------------------------------------------------------------------------- */

/* Each accounted allocation of a save fails in turn, after the temporary
 * file exists and is half written: the old file stays byte for byte, and
 * no temporary file is left behind. */
static void failed_write_leaves_the_old_file(void **state) {
  (void)state;
  const char *path = saved_trace("atomic.h5", false);
  long n_old;
  unsigned char *old = read_bytes(path, &n_old);
  dlc_trace t;
  dlc_golden_meta m;
  make_trace(&t);
  make_meta(&m);
  int failures = 0;
  for (int64_t k = 1; k < 100; k++) {
    dl_mem_fail_after(k);
    dl_status s = dlc_trace_save(path, &t, &m);
    dl_mem_fail_after(0);
    assert_int_equal(count_files_with(".tmp."), 0);
    if (s == DL_OK) break;
    assert_int_equal(s, DL_ERR_NOMEM);
    assert_non_null(strstr(dl_last_error(), "injected"));
    long n;
    unsigned char *now = read_bytes(path, &n);
    assert_int_equal(n, n_old);
    assert_memory_equal(now, old, (size_t)n);
    free(now);
    failures++;
  }
  assert_true(failures >= 5); /* strings staged for every group */
  dlc_golden_meta back;
  dlc_trace u;
  assert_int_equal(dlc_trace_load(path, &u, &back), DL_OK);
  assert_true(back.golden);
  dlc_trace_free(&u);
  /* no directory to put the temporary in: nothing is written */
  assert_int_equal(dlc_trace_save(path_in_tmp("no_dir/x.h5"), &t, NULL), DL_ERR_IO);
  assert_int_equal(count_files_with(".tmp."), 0);
  free(old);
  dlc_trace_free(&t);
}

static const char *self; /* argv[0]: the killed writer runs as a new process */

/* The killed writer: saves a trace over argv[2] with the failpoint armed.
 * A separate process (not a fork) so that valgrind, which does not follow
 * exec, does not report the memory of a process killed mid-write. */
static int save_and_die(const char *path) {
  dlc_trace t;
  make_trace(&t);
  strcpy(t.run, "new run");
  setenv("DLCHECK_FAILPOINT", "before_rename", 1);
  dlc_trace_save(path, &t, NULL);
  return 3; /* not reached: the failpoint kills */
}

/* A writer killed between writing and renaming (DLCHECK_FAILPOINT) leaves
 * the old file as it was; only its temporary remains beside it. */
static void killed_writer_leaves_the_old_file(void **state) {
  (void)state;
  const char *path = saved_trace("killed.h5", false);
  long n_old;
  unsigned char *old = read_bytes(path, &n_old);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "exec %s --save-and-die %s", self, path);
  int status = system(cmd);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  long n;
  unsigned char *now = read_bytes(path, &n);
  assert_int_equal(n, n_old);
  assert_memory_equal(now, old, (size_t)n);
  assert_int_equal(count_files_with("killed.h5.tmp."), 1);
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, "killed.h5.tmp.")) unlink(path_in_tmp(e->d_name));
  if (d) closedir(d);
  free(now);
  free(old);
}

static void unstorable_traces_are_refused_before_writing(void **state) {
  (void)state;
  const char *path = path_in_tmp("refused.h5");
  dlc_trace t;
  dlc_golden_meta m;
  make_trace(&t);
  assert_int_equal(dlc_trace_save("", &t, NULL), DL_ERR_INVALID);
  char keep[DLC_NAME_MAX];
  strcpy(keep, t.series[1].name);
  strcpy(t.series[1].name, "loss");
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "two series entries are named 'loss'"));
  t.series[1].name[0] = '\0';
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_ERR_INVALID);
  strcpy(t.series[1].name, keep);
  strcpy(keep, t.finals[2].name);
  strcpy(t.finals[2].name, t.finals[0].name);
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "param/0.weight"));
  strcpy(t.finals[2].name, keep);
  char *text = t.notes[0].text;
  t.notes[0].text = NULL;
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_ERR_INVALID);
  t.notes[0].text = text;
  t.stats[0].nlayers = -1;
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_ERR_INVALID);
  t.stats[0].nlayers = 3;
  memset(t.run, 'r', sizeof t.run);
  assert_int_equal(dlc_trace_save(path, &t, NULL), DL_ERR_INVALID);
  strcpy(t.run, "reference");
  make_meta(&m);
  strcpy(m.tols[1].rule, "close(1)");
  assert_int_equal(dlc_trace_save(path, &t, &m), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "tolerance 1"));
  m.ntols = DLC_GOLDEN_TOLS_MAX + 1;
  assert_int_equal(dlc_trace_save(path, &t, &m), DL_ERR_INVALID);
  assert_false(file_exists(path));
  assert_int_equal(count_files_with(".tmp."), 0);
  dlc_trace_free(&t);
}

static void golden_meta_table(void **state) {
  (void)state;
  dlc_golden_meta m;
  assert_int_equal(dlc_golden_meta_init(&m), DL_OK);
  assert_true(m.golden);
  assert_int_equal(m.ntols, 0);
  char hdf5[64];
  bool found;
  assert_int_equal(dlc_env_json_get(m.env_json, "hdf5", hdf5, sizeof hdf5, &found), DL_OK);
  assert_true(found);
  /* "2025-01-31T12:00:00Z" */
  assert_int_equal(strlen(m.recorded_at), 20);
  assert_int_equal(m.recorded_at[10], 'T');
  assert_int_equal(m.recorded_at[19], 'Z');
  assert_null(dlc_golden_meta_tol(&m, "loss"));
  assert_int_equal(dlc_golden_meta_set_tol(&m, "loss", "bitwise"), DL_OK);
  assert_int_equal(dlc_golden_meta_set_tol(&m, "loss", "ulp(2)"), DL_OK);
  assert_int_equal(m.ntols, 1);
  assert_string_equal(dlc_golden_meta_tol(&m, "loss"), "ulp(2)");
  assert_int_equal(dlc_golden_meta_set_tol(&m, "loss", "roughly"), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "golden tolerance of loss"));
  assert_string_equal(dlc_golden_meta_tol(&m, "loss"), "ulp(2)");
  assert_int_equal(dlc_golden_meta_set_tol(&m, "", "bitwise"), DL_ERR_INVALID);
  char long_rule[DLC_TOL_TEXT_MAX + 8];
  memset(long_rule, ' ', sizeof long_rule - 1);
  long_rule[sizeof long_rule - 1] = '\0';
  memcpy(long_rule + sizeof long_rule - 9, "bitwise", 7);
  assert_int_equal(dlc_golden_meta_set_tol(&m, "x", long_rule), DL_ERR_INVALID);
  for (int i = 1; i < DLC_GOLDEN_TOLS_MAX; i++) {
    char q[16];
    snprintf(q, sizeof q, "q%d", i);
    assert_int_equal(dlc_golden_meta_set_tol(&m, q, "bitwise"), DL_OK);
  }
  assert_int_equal(dlc_golden_meta_set_tol(&m, "one_more", "bitwise"), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "at most 32"));
  assert_int_equal(dlc_golden_meta_set_tol(&m, "q7", "ulp(1)"), DL_OK); /* replacing fits */
  /* a full table round-trips */
  dlc_trace t, u;
  dlc_golden_meta back;
  dlc_trace_init(&t, "s", "r");
  const char *path = path_in_tmp("full_table.h5");
  assert_int_equal(dlc_trace_save(path, &t, &m), DL_OK);
  assert_int_equal(dlc_trace_load(path, &u, &back), DL_OK);
  assert_memory_equal(back.tols, m.tols, sizeof m.tols);
  dlc_trace_free(&u);
  dlc_trace_free(&t);
}

/* h5py is how users look inside a golden: every part must read there,
 * names decoded with urllib.parse.unquote. */
static void readable_by_h5py(void **state) {
  (void)state;
  if (system(DL_PYTHON " -c 'import h5py' >/dev/null 2>&1") != 0) {
    skip(); /* python3-h5py is not installed: nothing to check against */
  }
  const char *path = saved_trace("h5py.h5", true);
  char cmd[1024], out[16384];
  snprintf(cmd, sizeof cmd, DL_PYTHON " %s/tests/h5py_read_trace.py %s 2>&1", DL_SOURCE_DIR, path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, sizeof out - 1, p);
  out[n] = '\0';
  int rc = pclose(p);
  if (rc != 0) fail_msg("h5py_read_trace.py failed:\n%s", out);
  static const char *const expected[] = {
      "kind golden",
      "seed 18446744073709551615",
      "scenario_hash 0x0123456789abcdef",
      "series/grad/norm float64 (1,)",
      "series/100% float64 (1,)",
      "digests ['param/0.weight', 'grad/0.weight'] (3, 2)",
      ("stats/1 step 5 layers ['0 (linear)', '1 (relu)'] columns ['mean', 'std', 'min', "
       "'max', 'frac_zero', 'nonfinite']"),
      "finals/param/0.weight float32 (2, 3)",
      "finals/buffer/1.num_batches_tracked int64 ()",
      "finals/. float32 (2,)",
      "finals/a/b float32 (2,)",
      "finals/a%2Fb float32 (2,)",
      "metric peak_bytes 1000000000.0",
      "note long 4999 chars",
      "note utf8 17 chars",
      "env 19 keys",
      "tolerance param/0.weight ulp(4)",
      "\nok\n"};
  for (size_t i = 0; i < sizeof expected / sizeof *expected; i++)
    if (!strstr(out, expected[i])) fail_msg("h5py output lacks '%s':\n%s", expected[i], out);
}

/* Every HDF5 object a test or the library opened is closed again. */
static int no_open_hdf5_objects(void **state) {
  (void)state;
  ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (n != 0) fprintf(stderr, "%zd HDF5 objects left open\n", n);
  return n == 0 ? 0 : -1;
}

#define TEST(f) cmocka_unit_test_teardown(f, no_open_hdf5_objects)

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--save-and-die") == 0) return save_and_die(argv[2]);
  self = argv[0];
  const struct CMUnitTest tests[] = {
      TEST(plain_trace_round_trip_is_bitwise),
      TEST(golden_round_trip_keeps_metadata),
      TEST(empty_trace_round_trips),
      TEST(same_trace_saves_same_bytes),
      TEST(missing_file_is_an_io_error),
      TEST(not_hdf5_is_a_format_error),
      TEST(a_flipped_byte_in_the_unused_header_is_refused),
      TEST(a_link_at_the_target_is_refused),
      TEST(truncated_files_are_format_errors),
      TEST(flipped_bytes_are_detected_or_harmless),
      TEST(other_schema_version_is_refused),
      TEST(edited_kind_is_refused),
      TEST(missing_parts_are_named),
      TEST(wrong_types_and_shapes_are_named),
      TEST(plain_trace_carries_an_env_fingerprint),
      TEST(nullpad_strings_read_the_same),
      TEST(edited_values_fail_the_checksum),
      TEST(header_holds_the_documented_seal),
      TEST(foreign_link_names_are_refused),
      TEST(failed_write_leaves_the_old_file),
      TEST(killed_writer_leaves_the_old_file),
      TEST(unstorable_traces_are_refused_before_writing),
      TEST(golden_meta_table),
      TEST(readable_by_h5py),
  };
  return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
