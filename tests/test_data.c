/* Datasets (engine/data/data.c): the committed HDF5 fixtures, corrupt and
 * malformed files, the synthetic generators and batch gathering. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp (tmpdir.h) */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <hdf5.h>

#include "data/data.h"
#include "core/mem.h"
#include "tmpdir.h"

#define FIXTURE(name) DL_SOURCE_DIR "/fixtures/" name

static char tmp_path[DL_TMP_PATH_MAX + 96];

/* A path in $TMPDIR (else /tmp) unique to this process and `tag`. */
static const char *tmp_file(const char *tag) {
  char name[96];
  snprintf(name, sizeof name, "dl_test_data_%ld_%.60s", (long)getpid(), tag);
  assert_non_null(tmp_path_make(tmp_path, sizeof tmp_path, name));
  return tmp_path;
}

static void expect_error(dl_status got, dl_status want, const char *text) {
  assert_int_equal(got, want);
  if (!strstr(dl_last_error(), text)) fail_msg("message '%s' lacks '%s'", dl_last_error(), text);
}

/* ---- fixtures ------------------------------------------------------------ */

typedef struct fixture_facts {
  const char *file, *group;
  int64_t n, h, w;
  double sum; /* sum of x as h5py reads it (see below) */
  int32_t first_labels[8];
} fixture_facts;

/* Sums and labels printed by h5py (an independent HDF5 reader) from the
 * committed files. Digits pixels are k/16, so their double sum is exact;
 * Fashion's k/255 sum depends on summation order by ~1e-11 relative, so we
 * allow 1e-9 relative. */
static const fixture_facts facts[] = {
    {"digits.h5", "train", 1437, 8, 8, 28086.625, {2, 8, 2, 6, 6, 7, 1, 9}},
    {"digits.h5", "test", 360, 8, 8, 7020.75, {7, 9, 4, 7, 0, 2, 6, 1}},
    {"fashion_mnist.h5", "train", 4096, 28, 28, 916603.6478327145, {9, 0, 0, 3, 0, 2, 7, 2}},
    {"fashion_mnist.h5", "/test", 1024, 28, 28, 232882.89049940044, {9, 2, 1, 1, 6, 1, 4, 6}},
};

static void fixtures_load_with_shapes_and_labels(void **state) {
  (void)state;
  for (size_t f = 0; f < sizeof facts / sizeof facts[0]; f++) {
    const fixture_facts *e = &facts[f];
    char path[512];
    snprintf(path, sizeof path, "%s/fixtures/%s", DL_SOURCE_DIR, e->file);
    dl_dataset ds = {0};
    assert_int_equal(dl_dataset_load_h5(&ds, path, e->group), DL_OK);
    assert_int_equal(ds.n, e->n);
    assert_int_equal(ds.n_classes, 10);
    assert_int_equal(ds.x.dtype, DL_F32);
    assert_int_equal(ds.x.ndim, 4);
    const int64_t shape[4] = {e->n, 1, e->h, e->w};
    assert_memory_equal(ds.x.shape, shape, sizeof shape);
    assert_int_equal(ds.y.dtype, DL_I32);
    assert_int_equal(ds.y.ndim, 1);
    assert_int_equal(ds.y.shape[0], e->n);
    assert_true(dl_tensor_empty(&ds.lengths));
    assert_memory_equal(dl_i32(&ds.y), e->first_labels, sizeof e->first_labels);
    double sum = 0.0;
    for (int64_t i = 0; i < ds.x.numel; i++) {
      float v = dl_f32(&ds.x)[i];
      assert_true(v >= 0.0f && v <= 1.0f);
      sum += v;
    }
    assert_true(sum > e->sum * (1 - 1e-9) && sum < e->sum * (1 + 1e-9));
    int count[10] = {0};
    for (int64_t i = 0; i < ds.n; i++) count[dl_i32(&ds.y)[i]]++;
    for (int c = 0; c < 10; c++) assert_true(count[c] > 0);
    assert_non_null(strstr(ds.name, e->file));
    dl_dataset_free(&ds);
  }
}

/* ---- corrupt and malformed files ----------------------------------------- */

static void copy_prefix(const char *from, const char *to, long bytes) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[4096];
  long left = bytes;
  while (left > 0) {
    size_t got = fread(buf, 1, left < 4096 ? (size_t)left : 4096, in);
    if (got == 0) break;
    fwrite(buf, 1, got, out);
    left -= (long)got;
  }
  fclose(in);
  fclose(out);
}

/* Garbles 64 bytes in the middle of the first compressed chunk of `dset`,
 * found with H5Dget_chunk_info, so that gzip's checksum fails on read. */
static void flip_chunk_bytes(const char *path, const char *dset) {
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(file, dset, H5P_DEFAULT);
  hsize_t offset[4];
  unsigned mask;
  haddr_t addr;
  hsize_t size;
  hid_t space = H5Dget_space(d);
  assert_true(H5Dget_chunk_info(d, space, 0, offset, &mask, &addr, &size) >= 0);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(file);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  unsigned char junk[64];
  memset(junk, 0x5a, sizeof junk);
  assert_int_equal(fseek(f, (long)(addr + size / 2), SEEK_SET), 0);
  assert_int_equal(fwrite(junk, 1, sizeof junk, f), sizeof junk);
  fclose(f);
}

/* Fuzz finding (tests/fuzz/fixture): /train/x's extent beyond its maximum
 * made HDF5's read run away (2 GB, seconds): refused from the header
 * first. */
static void an_extent_beyond_its_maximum_is_refused(void **state) {
  (void)state;
  const char *path = DL_SOURCE_DIR "/tests/fuzz/fixture/extent-beyond-maximum-hdf5-runaway.h5";
  dl_dataset ds = {0};
  expect_error(dl_dataset_load_h5(&ds, path, "train"), DL_ERR_FORMAT, "extent beyond its maximum");
}

static void unreadable_files_give_clear_errors(void **state) {
  (void)state;
  int64_t before = dl_mem_current();
  dl_dataset ds = {0};
  expect_error(dl_dataset_load_h5(&ds, "/nonexistent/digits.h5", "train"), DL_ERR_IO,
               "/nonexistent/digits.h5: cannot open dataset file: No such file");

  const char *text = tmp_file("text.h5");
  FILE *f = fopen(text, "w");
  assert_non_null(f);
  fputs("this is not HDF5\n", f);
  fclose(f);
  expect_error(dl_dataset_load_h5(&ds, text, "train"), DL_ERR_FORMAT, "not an HDF5 file");
  assert_non_null(strstr(dl_last_error(), text));
  remove(text);

  const char *cut = tmp_file("cut.h5");
  copy_prefix(FIXTURE("digits.h5"), cut, 40000);
  expect_error(dl_dataset_load_h5(&ds, cut, "train"), DL_ERR_FORMAT,
               "damaged or truncated? (truncated file: eof = 40000");
  assert_non_null(strstr(dl_last_error(), cut));
  remove(cut);

  const char *bad = tmp_file("flipped.h5");
  copy_prefix(FIXTURE("digits.h5"), bad, 1L << 30);
  flip_chunk_bytes(bad, "/train/x");
  expect_error(dl_dataset_load_h5(&ds, bad, "train"), DL_ERR_FORMAT,
               "dataset /train/x: cannot read data (inflate() failed)");
  remove(bad);

  expect_error(dl_dataset_load_h5(&ds, FIXTURE("digits.h5"), "valid"), DL_ERR_FORMAT,
               "no group /valid");
  expect_error(dl_dataset_load_h5(&ds, NULL, "train"), DL_ERR_INVALID, "required");
  assert_null(ds.x.data);
  assert_int_equal(dl_mem_current(), before);
}

/* What a test file holds; a dataset with a NULL name is left out. */
typedef struct h5_dset {
  const char *name;
  hid_t type; /* file and memory type */
  int rank;
  hsize_t dims[4];
  const void *data;
} h5_dset;

static void write_h5(const char *path, const h5_dset *dsets, int n, int n_classes) {
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(file >= 0);
  hid_t g = H5Gcreate2(file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (int i = 0; i < n; i++) {
    if (!dsets[i].name) continue;
    hid_t sp = H5Screate_simple(dsets[i].rank, dsets[i].dims, NULL);
    hid_t d = H5Dcreate2(g, dsets[i].name, dsets[i].type, sp, H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    assert_true(H5Dwrite(d, dsets[i].type, H5S_ALL, H5S_ALL, H5P_DEFAULT, dsets[i].data) >= 0);
    H5Dclose(d);
    H5Sclose(sp);
  }
  if (n_classes > 0) {
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, "n_classes", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &n_classes);
    H5Aclose(a);
    H5Sclose(sp);
  }
  H5Gclose(g);
  H5Fclose(file);
}

static const float x_f32[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
static const double x_f64[12] = {0};
static const int32_t y_ok[4] = {0, 2, 1, 2};
static const int32_t y_bad[4] = {0, 2, 3, 1};
static const int64_t y_i64[4] = {2, 1, 0, 1};
static const float y_float[4] = {0, 1, 2, 1};

/* Loads a file of `dsets` and expects `want` with `text` in the message. */
static void expect_file(const h5_dset *dsets, int n, int n_classes, dl_status want,
                        const char *text) {
  const char *path = tmp_file("case.h5");
  write_h5(path, dsets, n, n_classes);
  dl_dataset ds = {0};
  dl_status got = dl_dataset_load_h5(&ds, path, "train");
  if (want == DL_OK) {
    assert_int_equal(got, DL_OK);
    dl_dataset_free(&ds);
  } else {
    expect_error(got, want, text);
    assert_null(ds.x.data);
  }
  remove(path);
}

static void malformed_files_give_clear_errors(void **state) {
  (void)state;
  int64_t before = dl_mem_current();
  const h5_dset x = {"x", H5T_NATIVE_FLOAT, 2, {4, 3}, x_f32};
  const h5_dset y = {"y", H5T_NATIVE_INT32, 1, {4}, y_ok};
  expect_file((h5_dset[]){x, y}, 2, 3, DL_OK, "");
  expect_file((h5_dset[]){x, {"y", H5T_NATIVE_INT64, 1, {4}, y_i64}}, 2, 3, DL_OK, "");
  expect_file((h5_dset[]){x}, 1, 3, DL_ERR_FORMAT, "no dataset /train/y");
  expect_file((h5_dset[]){x, y}, 2, 0, DL_ERR_FORMAT, "no integer attribute n_classes");
  expect_file((h5_dset[]){{"x", H5T_NATIVE_DOUBLE, 2, {4, 3}, x_f64}, y}, 2, 3, DL_ERR_FORMAT,
              "dataset /train/x has type float64; expected float32");
  expect_file((h5_dset[]){x, {"y", H5T_NATIVE_FLOAT, 1, {4}, y_float}}, 2, 3, DL_ERR_FORMAT,
              "dataset /train/y has type float32; expected an integer");
  expect_file((h5_dset[]){{"x", H5T_NATIVE_FLOAT, 1, {12}, x_f32}, y}, 2, 3, DL_ERR_FORMAT,
              "dataset /train/x is [12] float32; expected float32 [N, ...]");
  expect_file((h5_dset[]){{"x", H5T_NATIVE_FLOAT, 2, {3, 4}, x_f32}, y}, 2, 3, DL_ERR_FORMAT,
              "/train/y is [4] int32 but /train/x is [3, 4] float32");
  expect_file((h5_dset[]){x, {"y", H5T_NATIVE_INT32, 2, {2, 2}, y_ok}}, 2, 3, DL_ERR_FORMAT,
              "expected y [N] with the same N");
  expect_file((h5_dset[]){x, {"y", H5T_NATIVE_INT32, 1, {4}, y_bad}}, 2, 3, DL_ERR_INVALID,
              "/train/y: label 3 of sample 2 is outside [0, 3)");
  expect_file((h5_dset[]){x, y}, 2, 2, DL_ERR_INVALID, "label 2 of sample 1");
  assert_int_equal(dl_mem_current(), before);
}

static void token_files_load_with_lengths(void **state) {
  (void)state;
  const int32_t tok[8] = {1, 2, 0, 0, 3, 3, 3, 0};
  const int32_t tgt[8] = {2, 0, -100, -100, 1, 1, 1, -100};
  const int32_t len_ok[2] = {2, 3}, len_bad[2] = {2, 5}, len3[3] = {2, 3, 1};
  const h5_dset x = {"x", H5T_NATIVE_INT32, 2, {2, 4}, tok};
  const h5_dset y = {"y", H5T_NATIVE_INT32, 2, {2, 4}, tgt};
  const char *path = tmp_file("tokens.h5");
  write_h5(path, (h5_dset[]){x, y, {"lengths", H5T_NATIVE_INT32, 1, {2}, len_ok}}, 3, 4);
  dl_dataset ds = {0};
  assert_int_equal(dl_dataset_load_h5(&ds, path, "train/"), DL_OK);
  assert_int_equal(ds.x.dtype, DL_I32);
  assert_int_equal(ds.y.ndim, 2);
  assert_int_equal(dl_i32(&ds.lengths)[1], 3);
  assert_int_equal(dl_i32(&ds.y)[2], DL_IGNORE_INDEX);
  assert_int_equal(dl_dataset_y_row(&ds), 4);
  dl_dataset_free(&ds);
  remove(path);
  expect_file((h5_dset[]){x, y, {"lengths", H5T_NATIVE_INT32, 1, {2}, len_bad}}, 3, 4,
              DL_ERR_INVALID, "/train/lengths: length 5 of sample 1 is outside [0, 4]");
  expect_file((h5_dset[]){x, y, {"lengths", H5T_NATIVE_INT32, 1, {3}, len3}}, 3, 4, DL_ERR_FORMAT,
              "/train/lengths is [3] int32; expected [2]");
  expect_file((h5_dset[]){{"x", H5T_NATIVE_INT32, 1, {8}, tok}, y}, 2, 4, DL_ERR_FORMAT,
              "expected int32 tokens [N, T]");
  /* -100 is a class label only where targets are per token */
  expect_file((h5_dset[]){{"x", H5T_NATIVE_INT32, 2, {4, 2}, tok},
                          {"y", H5T_NATIVE_INT32, 1, {4}, (const int32_t[]){1, -100, 0, 0}}},
              2, 4, DL_ERR_INVALID, "label -100 of sample 1 is outside [0, 4)");
}

/* ---- synthetic datasets -------------------------------------------------- */

/* Sample i is a function of (seed, i) only, so a shorter dataset is a prefix
 * of a longer one, bit for bit. */
static void blobs_are_deterministic_and_independent_of_n(void **state) {
  (void)state;
  dl_dataset a = {0}, b = {0}, c = {0}, d = {0};
  assert_int_equal(dl_dataset_blobs(&a, 50, 3, 4, 0.2f, 9), DL_OK);
  assert_int_equal(dl_dataset_blobs(&b, 20, 3, 4, 0.2f, 9), DL_OK);
  assert_int_equal(dl_dataset_blobs(&c, 50, 3, 4, 0.2f, 9), DL_OK);
  assert_int_equal(dl_dataset_blobs(&d, 50, 3, 4, 0.2f, 10), DL_OK);
  assert_memory_equal(a.x.data, b.x.data, dl_tensor_bytes(&b.x));
  assert_memory_equal(a.y.data, b.y.data, dl_tensor_bytes(&b.y));
  assert_memory_equal(a.x.data, c.x.data, dl_tensor_bytes(&a.x));
  assert_true(memcmp(a.x.data, d.x.data, dl_tensor_bytes(&a.x)) != 0);
  assert_int_equal(a.n_classes, 4);
  assert_non_null(strstr(a.name, "seed=9"));
  dl_dataset_free(&a);
  dl_dataset_free(&b);
  dl_dataset_free(&c);
  dl_dataset_free(&d);
}

/* The per-class scatter is the requested spread and the classes are evenly
 * drawn. n = 6000 over 3 classes and 4 dims: the std estimate from ~8000
 * values has relative error ~1/sqrt(2*8000) = 0.8%, so 5% is ~6 std; a
 * class count has std sqrt(6000*2/9) = 37, so +-200 is ~5 std. */
static void blobs_have_the_requested_spread(void **state) {
  (void)state;
  enum { N = 6000, D = 4, C = 3 };
  dl_dataset ds = {0};
  assert_int_equal(dl_dataset_blobs(&ds, N, D, C, 0.3f, 1), DL_OK);
  double mean[C][D] = {{0}}, sq[C][D] = {{0}};
  int64_t count[C] = {0};
  for (int64_t i = 0; i < N; i++) {
    int c = dl_i32(&ds.y)[i];
    assert_true(c >= 0 && c < C);
    count[c]++;
    for (int d = 0; d < D; d++) mean[c][d] += dl_f32(&ds.x)[i * D + d];
  }
  for (int c = 0; c < C; c++) {
    assert_true(count[c] > N / C - 200 && count[c] < N / C + 200);
    for (int d = 0; d < D; d++) mean[c][d] /= (double)count[c];
  }
  for (int64_t i = 0; i < N; i++) {
    int c = dl_i32(&ds.y)[i];
    for (int d = 0; d < D; d++) {
      double e = dl_f32(&ds.x)[i * D + d] - mean[c][d];
      sq[c][d] += e * e;
    }
  }
  for (int c = 0; c < C; c++) {
    double var = 0.0;
    for (int d = 0; d < D; d++) {
      assert_true(mean[c][d] > -1.05 && mean[c][d] < 1.05); /* centres in [-1, 1) */
      var += sq[c][d] / (double)(count[c] - 1);
    }
    double std = sqrt(var / D);
    assert_true(std > 0.3 * 0.95 && std < 0.3 * 1.05);
  }
  dl_dataset_free(&ds);
}

static void sequences_are_padded_and_learnable(void **state) {
  (void)state;
  enum { N = 400, V = 11, LO = 2, HI = 9, PAD = 0 };
  dl_dataset a = {0}, b = {0};
  assert_int_equal(dl_dataset_sequences(&a, N, V, LO, HI, PAD, 3), DL_OK);
  assert_int_equal(dl_dataset_sequences(&b, 17, V, LO, HI, PAD, 3), DL_OK);
  assert_memory_equal(a.x.data, b.x.data, dl_tensor_bytes(&b.x));
  assert_memory_equal(a.lengths.data, b.lengths.data, dl_tensor_bytes(&b.lengths));
  assert_int_equal(a.x.dtype, DL_I32);
  assert_int_equal(a.x.shape[1], HI);
  assert_int_equal(a.n_classes, V);
  int seen_len[HI + 1] = {0}, seen_tok[V] = {0};
  for (int64_t i = 0; i < N; i++) {
    int len = dl_i32(&a.lengths)[i];
    assert_true(len >= LO && len <= HI);
    seen_len[len]++;
    for (int t = 0; t < HI; t++) {
      int32_t x = dl_i32(&a.x)[i * HI + t], y = dl_i32(&a.y)[i * HI + t];
      if (t < len) {
        assert_true(x >= 0 && x < V);
        assert_int_equal(y, (3 * x + 1) % V);
        seen_tok[x]++;
      } else {
        assert_int_equal(x, PAD);
        assert_int_equal(y, DL_IGNORE_INDEX);
      }
    }
  }
  for (int l = LO; l <= HI; l++) assert_true(seen_len[l] > 0);
  for (int v = 0; v < V; v++) assert_true(seen_tok[v] > 0);
  dl_dataset_free(&a);
  dl_dataset_free(&b);
}

static void bad_generator_arguments_are_refused(void **state) {
  (void)state;
  int64_t before = dl_mem_current();
  dl_dataset ds = {0};
  expect_error(dl_dataset_blobs(&ds, 0, 2, 2, 1.0f, 0), DL_ERR_INVALID, "n=0");
  expect_error(dl_dataset_blobs(&ds, 5, 2, 2, -1.0f, 0), DL_ERR_INVALID, "spread=-1");
  expect_error(dl_dataset_sequences(&ds, 5, 1, 1, 3, 0, 0), DL_ERR_INVALID, "vocab=1");
  expect_error(dl_dataset_sequences(&ds, 5, 4, 3, 2, 0, 0), DL_ERR_INVALID, "min_len=3");
  expect_error(dl_dataset_sequences(&ds, 5, 4, 1, 2, 4, 0), DL_ERR_INVALID, "pad_id=4");
  for (int k = 1; k <= 3; k++) {
    dl_mem_fail_after(k);
    assert_int_equal(dl_dataset_blobs(&ds, 5, 2, 2, 1.0f, 0), DL_ERR_NOMEM);
    dl_mem_fail_after(k);
    assert_int_equal(dl_dataset_sequences(&ds, 5, 4, 1, 2, 0, 0), DL_ERR_NOMEM);
  }
  dl_mem_fail_after(0);
  assert_int_equal(dl_mem_current(), before);
}

/* ---- batches ------------------------------------------------------------- */

static void gather_copies_rows_and_ids(void **state) {
  (void)state;
  dl_dataset ds = {0};
  assert_int_equal(dl_dataset_load_h5(&ds, FIXTURE("digits.h5"), "test"), DL_OK);
  dl_batch b = {0};
  assert_int_equal(dl_batch_alloc(&b, &ds, 4), DL_OK);
  const int64_t idx[4] = {359, 0, 7, 7};
  assert_int_equal(dl_dataset_gather(&ds, idx, 4, &b), DL_OK);
  assert_int_equal(b.n, 4);
  assert_int_equal(b.x.shape[0], 4);
  for (int r = 0; r < 4; r++) {
    assert_memory_equal(dl_f32(&b.x) + r * 64, dl_f32(&ds.x) + idx[r] * 64, 64 * sizeof(float));
    assert_int_equal(dl_i32(&b.y)[r], dl_i32(&ds.y)[idx[r]]);
    assert_int_equal(b.ids[r], idx[r]);
  }
  /* a short batch has a short first dimension */
  assert_int_equal(dl_dataset_gather(&ds, idx + 1, 2, &b), DL_OK);
  assert_int_equal(b.x.shape[0], 2);
  assert_int_equal(b.x.numel, 2 * 64);
  assert_int_equal(b.y.numel, 2);
  expect_error(dl_dataset_gather(&ds, (const int64_t[]){1, 360}, 2, &b), DL_ERR_INVALID,
               "index 360 (row 1) is outside [0, 360)");
  assert_int_equal(b.n, 2); /* unchanged on failure */
  expect_error(dl_dataset_gather(&ds, idx, 5, &b), DL_ERR_INVALID,
               "5 rows for a batch of capacity 4");
  dl_dataset seq = {0};
  assert_int_equal(dl_dataset_sequences(&seq, 10, 5, 1, 4, 0, 1), DL_OK);
  expect_error(dl_dataset_gather(&seq, idx + 1, 2, &b), DL_ERR_INVALID, "cannot hold rows");
  dl_batch sb = {0};
  assert_int_equal(dl_batch_alloc(&sb, &seq, 3), DL_OK);
  assert_int_equal(dl_dataset_gather(&seq, (const int64_t[]){9, 2}, 2, &sb), DL_OK);
  assert_int_equal(sb.lengths.shape[0], 2);
  assert_int_equal(dl_i32(&sb.lengths)[0], dl_i32(&seq.lengths)[9]);
  assert_memory_equal(dl_i32(&sb.y) + 4, dl_i32(&seq.y) + 2 * 4, 4 * sizeof(int32_t));
  expect_error(dl_batch_alloc(&sb, &seq, 0), DL_ERR_INVALID, "capacity 0");
  dl_batch_free(&sb);
  dl_batch_free(&b);
  dl_batch_free(&b);
  int64_t before = dl_mem_current();
  for (int k = 1; k <= 4; k++) {
    dl_mem_fail_after(k);
    assert_int_equal(dl_batch_alloc(&sb, &seq, 3), DL_ERR_NOMEM);
    assert_null(sb.x.data);
  }
  dl_mem_fail_after(0);
  assert_int_equal(dl_mem_current(), before);
  dl_dataset_free(&seq);
  dl_dataset_free(&ds);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fixtures_load_with_shapes_and_labels),
      cmocka_unit_test(unreadable_files_give_clear_errors),
      cmocka_unit_test(malformed_files_give_clear_errors),
      cmocka_unit_test(token_files_load_with_lengths),
      cmocka_unit_test(blobs_are_deterministic_and_independent_of_n),
      cmocka_unit_test(blobs_have_the_requested_spread),
      cmocka_unit_test(sequences_are_padded_and_learnable),
      cmocka_unit_test(bad_generator_arguments_are_refused),
      cmocka_unit_test(gather_copies_rows_and_ids),
      cmocka_unit_test(an_extent_beyond_its_maximum_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
