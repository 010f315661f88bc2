/* State dicts in HDF5: bitwise round trips, PyTorch-style load diagnosis
 * (missing / unexpected / mis-shaped keys, DDP's "module." prefix), broken
 * files, atomic replacement, and readability by h5py.
 *
 * Every comparison here is bitwise (memcmp): saving and loading must not
 * change a single bit, NaN payloads and -0 included. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/mem.h"
#include "nn/model.h"
#include "io/state_dict.h"
#include "tmpdir.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int make_tmpdir(void **state) {
  (void)state;
  return tmpdir_make("dl_state_dict");
}

static void fill_f32(dl_tensor *t, float start) {
  for (int64_t i = 0; i < t->numel; i++) dl_f32(t)[i] = start + 0.25f * (float)i;
}

/* A set of tensors covering every dtype, rank 0..4 and an empty tensor. */
typedef struct sample {
  dl_tensor t[8];
  dl_named_tensor items[8];
  int n;
} sample;

static void make_sample(sample *s) {
  memset(s, 0, sizeof *s);
  static const char *names[] = {"0.weight", "0.bias", "1.num_batches_tracked",
                                "ids",      "half",   "brain",
                                "4d",       "empty"};
  assert_int_equal(dl_tensor_f32(&s->t[0], 2, 3, 2, 0, 0, names[0]), DL_OK);
  assert_int_equal(dl_tensor_f32(&s->t[1], 1, 3, 0, 0, 0, names[1]), DL_OK);
  assert_int_equal(dl_tensor_alloc(&s->t[2], DL_I64, 0, NULL, names[2]), DL_OK);
  const int64_t four[1] = {4}, three[1] = {3}, two[1] = {2}, none[2] = {0, 3};
  assert_int_equal(dl_tensor_alloc(&s->t[3], DL_I32, 1, four, names[3]), DL_OK);
  assert_int_equal(dl_tensor_alloc(&s->t[4], DL_F16, 1, three, names[4]), DL_OK);
  assert_int_equal(dl_tensor_alloc(&s->t[5], DL_BF16, 1, two, names[5]), DL_OK);
  assert_int_equal(dl_tensor_f32(&s->t[6], 4, 2, 1, 2, 3, names[6]), DL_OK);
  assert_int_equal(dl_tensor_alloc(&s->t[7], DL_F32, 2, none, names[7]), DL_OK);
  fill_f32(&s->t[0], -1.0f);
  /* bits a float conversion anywhere would change */
  dl_f32(&s->t[0])[1] = -0.0f;
  uint32_t nan_payload = 0x7fc01234u, denormal = 0x00000003u;
  memcpy(&dl_f32(&s->t[0])[2], &nan_payload, 4);
  memcpy(&dl_f32(&s->t[0])[3], &denormal, 4);
  dl_f32(&s->t[0])[4] = INFINITY;
  fill_f32(&s->t[1], 0.1f);
  *(int64_t *)s->t[2].data = 123456789012345LL;
  for (int i = 0; i < 4; i++) dl_i32(&s->t[3])[i] = -7 + 1000000 * i;
  const uint16_t h[3] = {0x3c00, 0xc000, 0x7bff}, b[2] = {0x3f80, 0xc0a0};
  memcpy(s->t[4].data, h, sizeof h);
  memcpy(s->t[5].data, b, sizeof b);
  fill_f32(&s->t[6], 3.0f);
  s->n = 8;
  for (int i = 0; i < s->n; i++) s->items[i] = (dl_named_tensor){names[i], &s->t[i]};
}

static void free_sample(sample *s) {
  for (int i = 0; i < s->n; i++) dl_tensor_free(&s->t[i]);
}

static void assert_same_tensor(const dl_tensor *a, const dl_tensor *b) {
  assert_int_equal(a->dtype, b->dtype);
  assert_int_equal(a->ndim, b->ndim);
  for (int i = 0; i < a->ndim; i++) assert_int_equal(a->shape[i], b->shape[i]);
  assert_int_equal(a->numel, b->numel);
  if (a->numel) assert_memory_equal(a->data, b->data, dl_tensor_bytes(a));
}

static void round_trip_is_bitwise_and_ordered(void **state) {
  (void)state;
  sample s;
  make_sample(&s);
  const char *path = path_in_tmp("rt.h5");
  assert_int_equal(dl_state_save(path, "model", s.items, s.n), DL_OK);
  dl_state_dict sd;
  assert_int_equal(dl_state_read(path, "/model", &sd), DL_OK);
  assert_int_equal(sd.n, s.n);
  for (int i = 0; i < s.n; i++) {
    /* creation order, not HDF5's alphabetical order */
    assert_string_equal(sd.names[i], s.items[i].name);
    assert_same_tensor(&sd.tensors[i], &s.t[i]);
  }
  assert_non_null(dl_state_dict_find(&sd, "ids"));
  assert_null(dl_state_dict_find(&sd, "nope"));
  dl_state_dict_free(&sd);
  dl_state_dict_free(&sd); /* safe twice */

  /* load into tensors of the right shapes: strict, everything matches */
  sample dst;
  make_sample(&dst);
  for (int i = 0; i < dst.n; i++) memset(dst.t[i].data, 0, dl_tensor_bytes(&dst.t[i]));
  dl_load_report r;
  assert_int_equal(dl_state_load(path, "model", dst.items, dst.n, true, &r), DL_OK);
  assert_int_equal(r.nloaded, s.n);
  assert_int_equal(r.nmissing + r.nunexpected + r.nmismatched, 0);
  assert_false(r.module_prefix);
  char text[256];
  assert_non_null(strstr(dl_load_report_describe(&r, text, sizeof text), "all 8 keys"));
  for (int i = 0; i < s.n; i++) assert_same_tensor(&dst.t[i], &s.t[i]);
  dl_load_report_free(&r);
  free_sample(&dst);
  free_sample(&s);
}

static void groups_root_nested_and_several_per_file(void **state) {
  (void)state;
  sample s;
  make_sample(&s);
  const char *path = path_in_tmp("groups.h5");
  dl_h5_atomic a;
  assert_int_equal(dl_h5_atomic_create(&a, path), DL_OK);
  assert_int_equal(dl_state_write_group(a.file, path, "/", s.items, 2), DL_OK);
  assert_int_equal(dl_state_write_group(a.file, path, "optimizer/state", s.items + 2, 2), DL_OK);
  /* the same group twice is refused, naming it */
  assert_int_equal(dl_state_write_group(a.file, path, "optimizer/state", s.items, 1), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "optimizer/state"));
  assert_int_equal(dl_h5_atomic_commit(&a), DL_OK);

  dl_state_dict sd;
  /* the root holds 2 datasets and a group; the group is not a key */
  assert_int_equal(dl_state_read(path, NULL, &sd), DL_OK);
  assert_int_equal(sd.n, 2);
  dl_state_dict_free(&sd);
  assert_int_equal(dl_state_read(path, "/optimizer/state", &sd), DL_OK);
  assert_int_equal(sd.n, 2);
  assert_string_equal(sd.names[1], "ids");
  dl_state_dict_free(&sd);
  free_sample(&s);
}

static void strict_and_non_strict_diagnosis(void **state) {
  (void)state;
  dl_tensor a = {0}, b = {0}, c = {0}, d = {0}, w = {0};
  assert_int_equal(dl_tensor_f32(&a, 1, 2, 0, 0, 0, "a"), DL_OK);
  assert_int_equal(dl_tensor_f32(&b, 2, 2, 3, 0, 0, "b"), DL_OK);
  assert_int_equal(dl_tensor_f32(&c, 1, 1, 0, 0, 0, "c"), DL_OK);
  fill_f32(&a, 1.0f);
  fill_f32(&b, 2.0f);
  const char *path = path_in_tmp("diag.h5");
  dl_named_tensor saved[] = {{"a", &a}, {"b", &b}, {"c", &c}};
  assert_int_equal(dl_state_save(path, "m", saved, 3), DL_OK);

  /* destination: a, b (right shapes), d (absent from the file) */
  dl_tensor a2 = {0}, b2 = {0};
  assert_int_equal(dl_tensor_f32(&a2, 1, 2, 0, 0, 0, "a"), DL_OK);
  assert_int_equal(dl_tensor_f32(&b2, 2, 2, 3, 0, 0, "b"), DL_OK);
  assert_int_equal(dl_tensor_f32(&d, 1, 5, 0, 0, 0, "d"), DL_OK);
  dl_named_tensor dst[] = {{"a", &a2}, {"b", &b2}, {"d", &d}};

  dl_load_report r;
  assert_int_equal(dl_state_load(path, "m", dst, 3, true, &r), DL_ERR_INVALID);
  const char *msg = dl_last_error();
  assert_non_null(strstr(msg, path));
  assert_non_null(strstr(msg, "1 missing keys: d"));
  assert_non_null(strstr(msg, "1 unexpected keys: c"));
  assert_int_equal(r.nmissing, 1);
  assert_string_equal(r.missing[0], "d");
  assert_int_equal(r.nunexpected, 1);
  assert_string_equal(r.unexpected[0], "c");
  assert_int_equal(r.nloaded, 0);
  assert_true(dl_f32(&a2)[0] == 0.0f); /* a failed load changes nothing */
  dl_load_report_free(&r);

  /* strict=False: loads what matches and still says what did not (C5) */
  assert_int_equal(dl_state_load(path, "m", dst, 3, false, &r), DL_OK);
  assert_int_equal(r.nloaded, 2);
  assert_int_equal(r.nmissing, 1);
  assert_int_equal(r.nunexpected, 1);
  assert_memory_equal(a2.data, a.data, dl_tensor_bytes(&a));
  assert_memory_equal(b2.data, b.data, dl_tensor_bytes(&b));
  dl_load_report_free(&r);

  /* a shape mismatch fails in both modes, as in PyTorch */
  assert_int_equal(dl_tensor_f32(&w, 2, 3, 2, 0, 0, "b"), DL_OK);
  dl_named_tensor bad[] = {{"a", &a2}, {"b", &w}, {"c", &c}};
  for (int strict = 0; strict < 2; strict++) {
    assert_int_equal(dl_state_load(path, "m", bad, 3, strict, &r), DL_ERR_INVALID);
    assert_non_null(strstr(dl_last_error(), "b (expected [3, 2], found [2, 3])"));
    assert_int_equal(r.nmismatched, 1);
    assert_string_equal(r.mismatched[0].name, "b");
    assert_int_equal(r.mismatched[0].expected_ndim, 2);
    assert_int_equal(r.mismatched[0].found[0], 2);
    assert_int_equal(r.mismatched[0].found[1], 3);
    assert_int_equal(r.nloaded, 0);
    dl_load_report_free(&r);
  }
  /* no report wanted: same outcome */
  assert_int_equal(dl_state_load(path, "m", bad, 3, false, NULL), DL_ERR_INVALID);

  dl_tensor *all[] = {&a, &b, &c, &d, &w, &a2, &b2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) dl_tensor_free(all[i]);
}

static void describe_lists_first_names_and_counts(void **state) {
  (void)state;
  char *names[6] = {"k0", "k1", "k2", "k3", "k4", "k5"};
  dl_shape_mismatch mm[5];
  memset(mm, 0, sizeof mm);
  for (int i = 0; i < 5; i++) {
    mm[i].name = names[i];
    mm[i].found_ndim = 1;
    mm[i].found[0] = i;
  }
  dl_load_report r = {.missing = names, .nmissing = 6, .mismatched = mm, .nmismatched = 5};
  char text[512];
  dl_load_report_describe(&r, text, sizeof text);
  assert_non_null(strstr(text, "6 missing keys: k0, k1, k2, k3, ... (2 more)"));
  assert_non_null(strstr(text, "5 shape mismatches: k0 (expected [], found [0])"));
  assert_null(strstr(text, "k4 (expected"));
  /* a short buffer truncates, never overflows */
  char tiny[12];
  dl_load_report_describe(&r, tiny, sizeof tiny);
  assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static void ddp_module_prefix_is_recognised(void **state) {
  (void)state;
  dl_tensor w = {0}, b = {0};
  assert_int_equal(dl_tensor_f32(&w, 2, 2, 2, 0, 0, "w"), DL_OK);
  assert_int_equal(dl_tensor_f32(&b, 1, 2, 0, 0, 0, "b"), DL_OK);
  const char *path = path_in_tmp("ddp.h5");
  dl_named_tensor ddp[] = {{"module.0.weight", &w}, {"module.0.bias", &b}};
  assert_int_equal(dl_state_save(path, "model", ddp, 2), DL_OK);
  dl_named_tensor plain[] = {{"0.weight", &w}, {"0.bias", &b}};

  dl_load_report r;
  assert_int_equal(dl_state_load(path, "model", plain, 2, true, &r), DL_ERR_INVALID);
  assert_true(r.module_prefix);
  assert_non_null(strstr(dl_last_error(), "strip the 'module.' prefix"));
  assert_non_null(strstr(dl_last_error(), "consume_prefix_in_state_dict_if_present"));
  dl_load_report_free(&r);
  assert_int_equal(dl_state_load(path, "model", plain, 2, false, &r), DL_OK);
  assert_true(r.module_prefix);
  assert_int_equal(r.nloaded, 0);
  dl_load_report_free(&r);

  /* "module." keys that do not resolve missing ones are not DDP's prefix */
  dl_named_tensor other[] = {{"0.weight", &w}, {"1.bias", &b}};
  assert_int_equal(dl_state_load(path, "model", other, 2, false, &r), DL_OK);
  assert_false(r.module_prefix);
  char text[512];
  assert_null(strstr(dl_load_report_describe(&r, text, sizeof text), "module."
                                                                     "' prefix"));
  dl_load_report_free(&r);
  dl_tensor_free(&w);
  dl_tensor_free(&b);
}

/* Writes a file with raw HDF5 calls: what another tool might produce. */
static void write_raw(const char *path, hid_t type, int rank, const hsize_t *dims) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g = H5Gcreate2(f, "m", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t sp = H5Screate_simple(rank, dims, NULL);
  hid_t ds = H5Dcreate2(g, "0.weight", type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(ds);
  H5Sclose(sp);
  H5Gclose(g);
  H5Fclose(f);
}

static void wrong_dtype_or_rank_is_a_format_error(void **state) {
  (void)state;
  const char *path = path_in_tmp("f64.h5");
  const hsize_t dims[5] = {2, 1, 1, 1, 1};
  write_raw(path, H5T_IEEE_F64LE, 1, dims);
  dl_tensor w = {0};
  assert_int_equal(dl_tensor_f32(&w, 1, 2, 0, 0, 0, "w"), DL_OK);
  dl_named_tensor items[] = {{"0.weight", &w}};
  dl_load_report r;
  assert_int_equal(dl_state_load(path, "m", items, 1, true, &r), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), path));
  assert_non_null(strstr(dl_last_error(), "0.weight is float64, expected float32"));
  assert_int_equal(r.nmissing + r.nunexpected + r.nmismatched, 0); /* emptied */
  dl_state_dict sd;
  assert_int_equal(dl_state_read(path, "m", &sd), DL_ERR_FORMAT);
  assert_int_equal(sd.n, 0);

  write_raw(path, H5T_STD_U8LE, 1, dims);
  assert_int_equal(dl_state_load(path, "m", items, 1, true, NULL), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "uint8"));
  write_raw(path, H5T_STD_I32LE, 5, dims);
  assert_int_equal(dl_state_read(path, "m", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "rank 5"));
  /* Created, never written: its fill value is no data anyone computed. */
  write_raw(path, H5T_IEEE_F32LE, 1, dims);
  assert_int_equal(dl_state_read(path, "m", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "0.weight holds no data"));
  assert_int_equal(sd.n, 0);
  dl_tensor_free(&w);
}

/* Fuzz finding (tests/fuzz/state_dict): a 13 kB file whose dataset
 * claims 1073741856 floats, its extent beyond its maximum: refused from
 * the header, before 4 GiB are allocated and filled. */
static void an_extent_beyond_its_maximum_is_refused(void **state) {
  (void)state;
  const char *path = DL_SOURCE_DIR "/tests/fuzz/state_dict/extent-of-1073741856-floats.h5";
  dl_state_dict sd;
  assert_int_equal(dl_state_read(path, "model", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "extent is beyond its maximum"));
}

/* Writes group m's "0.weight": float32 of extent n, chunked by `chunk`,
 * compressed with `filter` (H5Z_FILTER_NONE: not), its first `written`
 * values written (zeros). */
static void write_chunked(const char *path, hsize_t n, hsize_t chunk, H5Z_filter_t filter,
                          hsize_t written) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g = H5Gcreate2(f, "m", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t max = H5S_UNLIMITED;
  hid_t sp = H5Screate_simple(1, &n, &max);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  if (filter == H5Z_FILTER_DEFLATE) H5Pset_deflate(dcpl, 9);
  if (filter == H5Z_FILTER_SCALEOFFSET) H5Pset_scaleoffset(dcpl, H5Z_SO_FLOAT_DSCALE, 2);
  hid_t ds = H5Dcreate2(g, "0.weight", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  float *zeros = calloc(written, sizeof *zeros);
  hid_t mem = H5Screate_simple(1, &written, NULL);
  hsize_t start = 0;
  H5Sselect_hyperslab(sp, H5S_SELECT_SET, &start, NULL, &written, NULL);
  assert_true(H5Dwrite(ds, H5T_NATIVE_FLOAT, mem, sp, H5P_DEFAULT, zeros) >= 0);
  free(zeros);
  H5Sclose(mem);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Gclose(g);
  H5Fclose(f);
}

/* Fuzz finding (CI, 2026-12-04): a chunked dataset whose extent claims
 * gigabytes that the file does not hold was allocated whole before it was
 * read (out of memory under libFuzzer's 2 GiB). The header is checked
 * against the storage first; gzip's bound is deflate's largest ratio
 * (1032), which real all-zero data compressed at level 9 stays within. */
static void a_header_promising_more_than_the_file_holds_is_refused(void **state) {
  (void)state;
  const char *path = path_in_tmp("chunked.h5");
  dl_state_dict sd;
  write_chunked(path, (hsize_t)1 << 28, 1024, H5Z_FILTER_NONE, 1024); /* 1 GiB claimed */
  assert_int_equal(dl_state_read(path, "m", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "promises 1073741824 bytes, the file holds 4096"));
  write_chunked(path, (hsize_t)1 << 28, 1 << 20, H5Z_FILTER_DEFLATE, 1 << 20);
  assert_int_equal(dl_state_read(path, "m", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "compressed: the file is damaged"));

  write_chunked(path, 1 << 20, 1 << 16, H5Z_FILTER_DEFLATE, 1 << 20); /* 4 MiB of zeros */
  assert_int_equal(dl_state_read(path, "m", &sd), DL_OK);
  assert_int_equal(sd.tensors[0].numel, 1 << 20);
  dl_state_dict_free(&sd);
  write_chunked(path, 4096, 1024, H5Z_FILTER_NONE, 4096);
  assert_int_equal(dl_state_read(path, "m", &sd), DL_OK);
  dl_state_dict_free(&sd);

  write_chunked(path, 4096, 1024, H5Z_FILTER_SCALEOFFSET, 4096);
  assert_int_equal(dl_state_read(path, "m", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "save it uncompressed or with gzip"));
}

static void broken_files_say_what_and_where(void **state) {
  (void)state;
  dl_state_dict sd;
  const char *missing = path_in_tmp("no_such_file.h5");
  assert_int_equal(dl_state_read(missing, "m", &sd), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), missing));

  const char *text = path_in_tmp("not_hdf5.h5");
  FILE *f = fopen(text, "w");
  assert_non_null(f);
  fputs("this is a checkpoint, honest\n", f);
  fclose(f);
  assert_int_equal(dl_state_read(text, "m", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "not an HDF5 file"));

  /* a real file cut in half, as a killed non-atomic writer leaves it */
  sample s;
  make_sample(&s);
  const char *good = path_in_tmp("good.h5"), *cut = path_in_tmp("cut.h5");
  assert_int_equal(dl_state_save(good, "m", s.items, s.n), DL_OK);
  FILE *in = fopen(good, "rb"), *out = fopen(cut, "wb");
  char buf[8192];
  size_t got = fread(buf, 1, sizeof buf, in);
  fwrite(buf, 1, got / 2, out);
  fclose(in);
  fclose(out);
  assert_int_equal(dl_state_read(cut, "m", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), cut));

  /* an existing file without the group */
  assert_int_equal(dl_state_read(good, "model", &sd), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "has no group model"));
  dl_named_tensor none[1];
  assert_int_equal(dl_state_load(good, "model", none, 0, false, NULL), DL_ERR_FORMAT);
  free_sample(&s);

  assert_int_equal(dl_state_read(tmpdir, "m", &sd), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "Is a directory"));
  assert_int_equal(dl_state_read("", "m", &sd), DL_ERR_INVALID);
}

static void atomic_write_leaves_no_temp_file(void **state) {
  (void)state;
  sample s;
  make_sample(&s);
  const char *path = path_in_tmp("atomic.h5");
  assert_int_equal(dl_state_save(path, "m", s.items, 2), DL_OK);
  assert_int_equal(count_files_with(".tmp"), 0);

  /* a failed save (bad key) keeps the old file whole and cleans up */
  dl_named_tensor bad[] = {s.items[0], {"a/b", &s.t[1]}};
  assert_int_equal(dl_state_save(path, "m", bad, 2), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "'a/b'"));
  dl_named_tensor twice[] = {s.items[0], s.items[0]};
  assert_int_equal(dl_state_save(path, "m", twice, 2), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "two entries"));
  dl_named_tensor empty_name[] = {{"", &s.t[0]}}, no_tensor[] = {{"x", NULL}};
  assert_int_equal(dl_state_save(path, "m", empty_name, 1), DL_ERR_INVALID);
  assert_int_equal(dl_state_save(path, "m", no_tensor, 1), DL_ERR_INVALID);
  assert_int_equal(dl_state_save(path, "m", NULL, 1), DL_ERR_INVALID);
  assert_int_equal(count_files_with(".tmp"), 0);
  dl_state_dict sd;
  assert_int_equal(dl_state_read(path, "m", &sd), DL_OK);
  assert_int_equal(sd.n, 2);
  dl_state_dict_free(&sd);

  /* a second save replaces the content */
  assert_int_equal(dl_state_save(path, "m", s.items + 3, 3), DL_OK);
  assert_int_equal(dl_state_read(path, "m", &sd), DL_OK);
  assert_int_equal(sd.n, 3);
  assert_string_equal(sd.names[0], "ids");
  dl_state_dict_free(&sd);

  /* an abort removes its temporary file */
  dl_h5_atomic a;
  assert_int_equal(dl_h5_atomic_create(&a, path_in_tmp("aborted.h5")), DL_OK);
  assert_int_equal(count_files_with("aborted.h5.tmp"), 1);
  dl_h5_atomic_abort(&a);
  dl_h5_atomic_abort(&a); /* safe twice */
  assert_int_equal(count_files_with("aborted"), 0);

  /* no such directory: an I/O error naming the file, nothing written */
  const char *nodir = path_in_tmp("no/such/dir.h5");
  assert_int_equal(dl_state_save(nodir, "m", s.items, 1), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), nodir));
  assert_int_equal(dl_state_save("", "m", s.items, 1), DL_ERR_INVALID);
  free_sample(&s);
}

static void out_of_memory_while_reading_is_reported(void **state) {
  (void)state;
  sample s;
  make_sample(&s);
  const char *path = path_in_tmp("oom.h5");
  assert_int_equal(dl_state_save(path, "m", s.items, s.n), DL_OK);
  dl_state_dict sd;
  for (int k = 1; k <= 3; k++) {
    dl_mem_fail_after(k);
    assert_int_equal(dl_state_read(path, "m", &sd), DL_ERR_NOMEM);
    assert_int_equal(sd.n, 0);
  }
  dl_mem_fail_after(2);
  assert_int_equal(dl_state_load(path, "m", s.items, s.n, true, NULL), DL_ERR_NOMEM);
  dl_mem_fail_after(0);
  free_sample(&s);
}

/* A model with every kind of state: params, BN buffers, a residual body. */
static dl_status make_model(dl_model **m, uint64_t seed) {
  static dl_layer_desc body[2];
  body[0] = dl_layer_default(DL_LINEAR);
  body[0].in = body[0].out = 4;
  body[1] = dl_layer_default(DL_RELU);
  dl_layer_desc d[4] = {dl_layer_default(DL_LINEAR), dl_layer_default(DL_BATCHNORM1D),
                        dl_layer_default(DL_RELU), dl_layer_default(DL_RESIDUAL)};
  d[0].in = 3;
  d[0].out = 4;
  d[1].out = 4;
  d[3].body = body;
  d[3].nbody = 2;
  return dl_model_create(m, d, 4, seed);
}

static void model_state_round_trip(void **state) {
  (void)state;
  dl_model *a, *b;
  assert_int_equal(make_model(&a, 1), DL_OK);
  assert_int_equal(make_model(&b, 2), DL_OK);
  dl_named_tensor *items;
  int n;
  assert_int_equal(dl_model_state_items(a, &items, &n), DL_OK);
  /* PyTorch's state_dict() order for the same nn.Sequential */
  static const char *order[] = {"0.weight",
                                "0.bias",
                                "1.weight",
                                "1.bias",
                                "1.running_mean",
                                "1.running_var",
                                "1.num_batches_tracked",
                                "3.body.0.weight",
                                "3.body.0.bias"};
  assert_int_equal(n, 9);
  for (int i = 0; i < n; i++) assert_string_equal(items[i].name, order[i]);
  *(int64_t *)items[6].tensor->data = 42;
  dl_f32(items[4].tensor)[2] = 0.5f;
  free(items);

  const char *path = path_in_tmp("model.h5");
  assert_int_equal(dl_model_save_state(a, path, "model"), DL_OK);
  dl_load_report r;
  assert_int_equal(dl_model_load_state(b, path, "model", true, &r), DL_OK);
  assert_int_equal(r.nloaded, 9);
  dl_load_report_free(&r);
  for (int i = 0; i < dl_model_num_params(a); i++)
    assert_same_tensor(&dl_model_param(a, i)->value, &dl_model_param(b, i)->value);
  for (int i = 0; i < dl_model_num_buffers(a); i++)
    assert_same_tensor(&dl_model_buffer(a, i)->value, &dl_model_buffer(b, i)->value);
  assert_int_equal(*(int64_t *)dl_model_find_buffer(b, "1.num_batches_tracked")->value.data, 42);

  /* a file of another architecture: the diagnosis names the differences */
  dl_layer_desc other = dl_layer_default(DL_LINEAR);
  other.in = 3;
  other.out = 5;
  dl_model *c;
  assert_int_equal(dl_model_create(&c, &other, 1, 3), DL_OK);
  assert_int_equal(dl_model_load_state(c, path, "model", false, &r), DL_ERR_INVALID);
  assert_int_equal(r.nmismatched, 2);
  assert_int_equal(r.nunexpected, 7);
  dl_load_report_free(&r);

  assert_int_equal(dl_model_state_items(NULL, &items, &n), DL_ERR_INVALID);
  dl_model_destroy(a);
  dl_model_destroy(b);
  dl_model_destroy(c);
}

/* The file must be what a PyTorch user reads with h5py: keys in
 * state-dict order, float32/int64 dtypes, 0-D num_batches_tracked. */
static void readable_by_h5py(void **state) {
  (void)state;
  if (system(DL_PYTHON " -c 'import h5py' >/dev/null 2>&1") != 0) {
    skip(); /* python3-h5py is not installed: nothing to check against */
  }
  dl_model *m;
  assert_int_equal(make_model(&m, 5), DL_OK);
  const char *path = path_in_tmp("h5py.h5");
  assert_int_equal(dl_model_save_state(m, path, "model"), DL_OK);
  float w0 = dl_f32(&dl_model_param(m, 0)->value)[0];
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           DL_PYTHON
           " -c \"import h5py, numpy as np, sys\n"
           "g = h5py.File('%s', 'r')['model']\n"
           "keys = list(g.keys())\n"
           "assert keys == ['0.weight', '0.bias', '1.weight', '1.bias', '1.running_mean', "
           "'1.running_var', '1.num_batches_tracked', '3.body.0.weight', '3.body.0.bias'], "
           "keys\n"
           "assert g['0.weight'].dtype == np.float32 and g['0.weight'].shape == (4, 3)\n"
           "assert g['1.num_batches_tracked'].dtype == np.int64\n"
           "assert g['1.num_batches_tracked'].shape == ()\n"
           "assert g['0.weight'][0, 0] == np.float32(%.9g), g['0.weight'][0, 0]\n\"",
           path, (double)w0);
  assert_int_equal(system(cmd), 0);
  dl_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_trip_is_bitwise_and_ordered),
      cmocka_unit_test(groups_root_nested_and_several_per_file),
      cmocka_unit_test(strict_and_non_strict_diagnosis),
      cmocka_unit_test(describe_lists_first_names_and_counts),
      cmocka_unit_test(ddp_module_prefix_is_recognised),
      cmocka_unit_test(wrong_dtype_or_rank_is_a_format_error),
      cmocka_unit_test(broken_files_say_what_and_where),
      cmocka_unit_test(an_extent_beyond_its_maximum_is_refused),
      cmocka_unit_test(a_header_promising_more_than_the_file_holds_is_refused),
      cmocka_unit_test(atomic_write_leaves_no_temp_file),
      cmocka_unit_test(out_of_memory_while_reading_is_reported),
      cmocka_unit_test(model_state_round_trip),
      cmocka_unit_test(readable_by_h5py),
  };
  return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
