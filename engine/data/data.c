#include "data/data.h"

#include "io/atomic_file.h"

#include "io/h5.h"
#include "core/mem.h"
#include "numerics/philox.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- rows and batches ---------------------------------------------------- */

static int64_t row_elems(const dl_tensor *t) {
  int64_t r = 1;
  for (int i = 1; i < t->ndim; i++) r *= t->shape[i];
  return r;
}

int64_t dl_dataset_x_row(const dl_dataset *ds) { return row_elems(&ds->x); }
int64_t dl_dataset_y_row(const dl_dataset *ds) { return row_elems(&ds->y); }

void dl_dataset_free(dl_dataset *ds) {
  if (!ds) return;
  dl_tensor_free(&ds->x);
  dl_tensor_free(&ds->y);
  dl_tensor_free(&ds->lengths);
  memset(ds, 0, sizeof *ds);
}

/* A tensor like `like` but with `rows` in the first dimension. */
static dl_status alloc_rows(dl_tensor *t, const dl_tensor *like, int64_t rows, const char *what) {
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, like->shape, sizeof shape);
  shape[0] = rows;
  return dl_tensor_alloc(t, like->dtype, like->ndim, shape, what);
}

void dl_batch_free(dl_batch *b) {
  if (!b) return;
  dl_tensor_free(&b->x);
  dl_tensor_free(&b->y);
  dl_tensor_free(&b->lengths);
  dl_mem_free(b->ids);
  memset(b, 0, sizeof *b);
}

dl_status dl_batch_alloc(dl_batch *b, const dl_dataset *ds, int64_t capacity) {
  if (capacity < 1)
    return dl_fail(DL_ERR_INVALID, "batch of %s: capacity %lld must be >= 1", ds->name,
                   (long long)capacity);
  memset(b, 0, sizeof *b);
  dl_status s = alloc_rows(&b->x, &ds->x, capacity, "batch x");
  if (s == DL_OK) s = alloc_rows(&b->y, &ds->y, capacity, "batch y");
  if (s == DL_OK && !dl_tensor_empty(&ds->lengths))
    s = alloc_rows(&b->lengths, &ds->lengths, capacity, "batch lengths");
  if (s == DL_OK) {
    b->ids = dl_mem_alloc((size_t)capacity * sizeof *b->ids, "batch ids");
    if (!b->ids) s = DL_ERR_NOMEM;
  }
  if (s != DL_OK) {
    dl_batch_free(b);
    return dl_fail_context(s, "batch of %s: ", ds->name);
  }
  b->capacity = capacity;
  return DL_OK;
}

/* Same dtype and per-sample shape: the batch can hold rows of the dataset. */
static bool rows_match(const dl_tensor *batch, const dl_tensor *data) {
  if (dl_tensor_empty(batch) != dl_tensor_empty(data)) return false;
  if (batch->dtype != data->dtype || batch->ndim != data->ndim) return false;
  for (int i = 1; i < data->ndim; i++)
    if (batch->shape[i] != data->shape[i]) return false;
  return true;
}

static void copy_rows(dl_tensor *dst, const dl_tensor *src, const int64_t *idx, int64_t n) {
  if (dl_tensor_empty(src)) return;
  size_t row = (size_t)row_elems(src) * dl_dtype_size(src->dtype);
  const char *from = src->data;
  char *to = dst->data;
  for (int64_t r = 0; r < n; r++) memcpy(to + (size_t)r * row, from + (size_t)idx[r] * row, row);
  dst->shape[0] = n;
  dst->numel = n * row_elems(src);
}

dl_status dl_dataset_gather(const dl_dataset *ds, const int64_t *idx, int64_t n, dl_batch *b) {
  if (n < 1 || n > b->capacity)
    return dl_fail(DL_ERR_INVALID,
                   "gather from %s: %lld rows for a batch of "
                   "capacity %lld",
                   ds->name, (long long)n, (long long)b->capacity);
  if (!rows_match(&b->x, &ds->x) || !rows_match(&b->y, &ds->y) ||
      !rows_match(&b->lengths, &ds->lengths)) {
    char a[96], d[96];
    return dl_fail(DL_ERR_INVALID,
                   "gather from %s: batch x %s cannot hold rows "
                   "of x %s (allocate the batch for this dataset)",
                   ds->name, dl_tensor_describe(&b->x, a, sizeof a),
                   dl_tensor_describe(&ds->x, d, sizeof d));
  }
  for (int64_t r = 0; r < n; r++)
    if (idx[r] < 0 || idx[r] >= ds->n)
      return dl_fail(DL_ERR_INVALID,
                     "gather from %s: index %lld (row %lld) is "
                     "outside [0, %lld)",
                     ds->name, (long long)idx[r], (long long)r, (long long)ds->n);
  copy_rows(&b->x, &ds->x, idx, n);
  copy_rows(&b->y, &ds->y, idx, n);
  copy_rows(&b->lengths, &ds->lengths, idx, n);
  memcpy(b->ids, idx, (size_t)n * sizeof *idx);
  b->n = n;
  return DL_OK;
}

/* ---- synthetic datasets -------------------------------------------------- */

dl_status dl_dataset_blobs(dl_dataset *ds, int64_t n, int64_t dim, int classes, float spread,
                           uint64_t seed) {
  if (n < 1 || dim < 1 || classes < 1 || !(spread >= 0.0f) || isinf(spread))
    return dl_fail(DL_ERR_INVALID,
                   "blobs: need n >= 1, dim >= 1, classes >= 1 "
                   "and a finite spread >= 0 (got n=%lld, dim=%lld, classes=%d, "
                   "spread=%g)",
                   (long long)n, (long long)dim, classes, (double)spread);
  memset(ds, 0, sizeof *ds);
  float *centers = dl_mem_alloc((size_t)classes * (size_t)dim * sizeof(float), "blobs centers");
  if (!centers) return DL_ERR_NOMEM;
  int64_t xs[2] = {n, dim}, ys[1] = {n};
  dl_status s = dl_tensor_alloc(&ds->x, DL_F32, 2, xs, "blobs x");
  if (s == DL_OK) s = dl_tensor_alloc(&ds->y, DL_I32, 1, ys, "blobs y");
  if (s != DL_OK) {
    dl_mem_free(centers);
    dl_dataset_free(ds);
    return s;
  }
  dl_stream cs = dl_stream_make(seed, "blobs/centers", NULL, 0);
  dl_stream_uniform_range(&cs, 0, -1.0f, 1.0f, centers, classes * dim);
  for (int64_t i = 0; i < n; i++) {
    dl_stream ss = dl_stream_make(seed, "blobs/sample", (const uint64_t[]){(uint64_t)i}, 1);
    int label = (int)dl_stream_below(&ss, 0, (uint64_t)classes);
    float *row = dl_f32(&ds->x) + i * dim;
    const float *m = centers + (int64_t)label * dim;
    dl_stream_normal(&ss, 2, 0.0f, 1.0f, row, dim);
    for (int64_t d = 0; d < dim; d++) row[d] = m[d] + spread * row[d];
    dl_i32(&ds->y)[i] = label;
  }
  dl_mem_free(centers);
  ds->n = n;
  ds->n_classes = classes;
  snprintf(ds->name, sizeof ds->name,
           "blobs(n=%lld, dim=%lld, classes=%d, "
           "spread=%g, seed=%llu)",
           (long long)n, (long long)dim, classes, (double)spread, (unsigned long long)seed);
  return DL_OK;
}

static void make_sequence(int32_t *x, int32_t *y, int32_t *len, int64_t i, int vocab,
                          int64_t min_len, int64_t max_len, int pad_id, uint64_t seed) {
  dl_stream s = dl_stream_make(seed, "seq/sample", (const uint64_t[]){(uint64_t)i}, 1);
  int64_t n = min_len + (int64_t)dl_stream_below(&s, 0, (uint64_t)(max_len - min_len + 1));
  for (int64_t t = 0; t < max_len; t++) {
    if (t < n) {
      int64_t v = (int64_t)dl_stream_below(&s, 2 + 2 * (uint64_t)t, (uint64_t)vocab);
      x[t] = (int32_t)v;
      y[t] = (int32_t)((3 * v + 1) % vocab);
    } else {
      x[t] = pad_id;
      y[t] = DL_IGNORE_INDEX;
    }
  }
  *len = (int32_t)n;
}

dl_status dl_dataset_sequences(dl_dataset *ds, int64_t n, int vocab, int64_t min_len,
                               int64_t max_len, int pad_id, uint64_t seed) {
  if (n < 1 || vocab < 2 || min_len < 1 || max_len < min_len || max_len > INT32_MAX || pad_id < 0 ||
      pad_id >= vocab)
    return dl_fail(DL_ERR_INVALID,
                   "sequences: need n >= 1, vocab >= 2, "
                   "1 <= min_len <= max_len and 0 <= pad_id < vocab (got n=%lld, "
                   "vocab=%d, min_len=%lld, max_len=%lld, pad_id=%d)",
                   (long long)n, vocab, (long long)min_len, (long long)max_len, pad_id);
  memset(ds, 0, sizeof *ds);
  int64_t xs[2] = {n, max_len};
  dl_status s = dl_tensor_alloc(&ds->x, DL_I32, 2, xs, "sequences x");
  if (s == DL_OK) s = dl_tensor_alloc(&ds->y, DL_I32, 2, xs, "sequences y");
  if (s == DL_OK) s = dl_tensor_alloc(&ds->lengths, DL_I32, 1, xs, "sequences lengths");
  if (s != DL_OK) {
    dl_dataset_free(ds);
    return s;
  }
  for (int64_t i = 0; i < n; i++)
    make_sequence(dl_i32(&ds->x) + i * max_len, dl_i32(&ds->y) + i * max_len,
                  dl_i32(&ds->lengths) + i, i, vocab, min_len, max_len, pad_id, seed);
  ds->n = n;
  ds->n_classes = vocab;
  snprintf(ds->name, sizeof ds->name,
           "sequences(n=%lld, vocab=%d, len=%lld..%lld, "
           "seed=%llu)",
           (long long)n, vocab, (long long)min_len, (long long)max_len, (unsigned long long)seed);
  return DL_OK;
}

/* ---- HDF5 ---------------------------------------------------------------- */

/* Where we are reading, for messages: "fixtures/x.h5: dataset /train/y: ". */
typedef struct h5_src {
  const char *path;
  char group[128]; /* "/train" ("" for the root) */
} h5_src;

static dl_status h5_fail(const h5_src *src, const char *dset, dl_status s, const char *what) {
  char why[160];
  return dl_fail(s, "%s: dataset %s/%s: %s (%s)", src->path, src->group, dset, what,
                 dl_h5_reason(why));
}

static const char *type_text(hid_t type, char *buf, size_t len) {
  H5T_class_t c = H5Tget_class(type);
  size_t bits = H5Tget_size(type) * 8;
  const char *name = c == H5T_FLOAT     ? "float"
                     : c == H5T_INTEGER ? "integer"
                     : c == H5T_STRING  ? "string"
                                        : "compound/other";
  snprintf(buf, len, "%s%zu", name, bits);
  return buf;
}

/* Accepts x as float32 features or int32 tokens, and targets/lengths as any
 * integer type (HDF5 converts them to int32). Sets *dt, *mem_type. */
static dl_status pick_dtype(const h5_src *src, const char *dset, hid_t type, bool features,
                            dl_dtype *dt, hid_t *mem_type) {
  H5T_class_t c = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  char buf[48];
  if (features && c == H5T_FLOAT && size == 4) {
    *dt = DL_F32;
    *mem_type = H5T_NATIVE_FLOAT;
    return DL_OK;
  }
  if (c == H5T_INTEGER && (!features || size == 4)) {
    *dt = DL_I32;
    *mem_type = H5T_NATIVE_INT32;
    return DL_OK;
  }
  return dl_fail(DL_ERR_FORMAT, "%s: dataset %s/%s has type %s; expected %s", src->path, src->group,
                 dset, type_text(type, buf, sizeof buf),
                 features ? "float32 (features) or int32 (tokens)" : "an integer type");
}

static dl_status read_shape(const h5_src *src, const char *dset, hid_t space, int *ndim,
                            int64_t shape[DL_MAX_DIMS]) {
  int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 1 || rank > DL_MAX_DIMS)
    return dl_fail(DL_ERR_FORMAT, "%s: dataset %s/%s has rank %d; expected 1..%d", src->path,
                   src->group, dset, rank, DL_MAX_DIMS);
  hsize_t dims[DL_MAX_DIMS], maxdims[DL_MAX_DIMS];
  H5Sget_simple_extent_dims(space, dims, maxdims);
  for (int i = 0; i < rank; i++) {
    if (dims[i] > (hsize_t)INT64_MAX)
      return dl_fail(DL_ERR_FORMAT, "%s: dataset %s/%s: dimension %d is too large", src->path,
                     src->group, dset, i);
    /* A damaged header: HDF5's read of it runs away (fuzz finding). */
    if (maxdims[i] != H5S_UNLIMITED && dims[i] > maxdims[i])
      return dl_fail(DL_ERR_FORMAT,
                     "%s: dataset %s/%s: extent beyond its maximum (dimension "
                     "%d): the file is damaged",
                     src->path, src->group, dset, i);
    shape[i] = (int64_t)dims[i];
  }
  *ndim = rank;
  return DL_OK;
}

/* Reads group/dset whole into `out`. */
static dl_status read_dataset(const h5_src *src, hid_t group, const char *dset, bool features,
                              dl_tensor *out) {
  if (H5Lexists(group, dset, H5P_DEFAULT) <= 0)
    return dl_fail(DL_ERR_FORMAT,
                   "%s: no dataset %s/%s (the file needs %s/x and "
                   "%s/y)",
                   src->path, src->group, dset, src->group, src->group);
  hid_t d = H5Dopen2(group, dset, H5P_DEFAULT);
  if (d < 0) return h5_fail(src, dset, DL_ERR_FORMAT, "cannot open");
  hid_t type = H5Dget_type(d), space = H5Dget_space(d);
  dl_dtype dt = DL_F32;
  hid_t mem_type = -1;
  int ndim = 0;
  int64_t shape[DL_MAX_DIMS] = {0};
  dl_status s = DL_OK;
  if (type < 0 || space < 0) s = h5_fail(src, dset, DL_ERR_FORMAT, "cannot read header");
  if (s == DL_OK) s = pick_dtype(src, dset, type, features, &dt, &mem_type);
  if (s == DL_OK) s = read_shape(src, dset, space, &ndim, shape);
  if (s == DL_OK) {
    char what[512];
    snprintf(what, sizeof what, "%s: dataset %s/%s", src->path, src->group, dset);
    s = dl_h5_check_stored(d, what);
  }
  if (s == DL_OK && (s = dl_tensor_alloc(out, dt, ndim, shape, dset)) != DL_OK)
    dl_fail_context(s, "%s: dataset %s/%s: ", src->path, src->group, dset);
  if (s == DL_OK && out->numel > 0 &&
      H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data) < 0) {
    s = h5_fail(src, dset, DL_ERR_FORMAT, "cannot read data");
    dl_tensor_free(out);
  }
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  H5Dclose(d);
  return s;
}

/* n_classes: an integer attribute of the group, else of the file's root. */
static dl_status read_n_classes(const h5_src *src, hid_t file, hid_t group, int *out) {
  hid_t owner = H5Aexists(group, "n_classes") > 0  ? group
                : H5Aexists(file, "n_classes") > 0 ? file
                                                   : -1;
  if (owner < 0)
    return dl_fail(DL_ERR_FORMAT,
                   "%s: no integer attribute n_classes on %s or the "
                   "root group",
                   src->path, src->group[0] ? src->group : "/");
  hid_t a = H5Aopen(owner, "n_classes", H5P_DEFAULT);
  hid_t type = a >= 0 ? H5Aget_type(a) : -1, space = a >= 0 ? H5Aget_space(a) : -1;
  bool ok = type >= 0 && H5Tget_class(type) == H5T_INTEGER && space >= 0 &&
            H5Sget_simple_extent_npoints(space) == 1;
  long long v = 0;
  if (ok) ok = H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0;
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  if (a >= 0) H5Aclose(a);
  if (!ok || v < 1 || v > INT32_MAX)
    return dl_fail(DL_ERR_FORMAT, "%s: attribute n_classes must be one integer >= 1%s", src->path,
                   ok ? " and fit in int32" : "");
  *out = (int)v;
  return DL_OK;
}

/* Shapes agree: x [N, ...] float32 with y [N], or x [N, T] int32 tokens with
 * y [N] or [N, T]; lengths, if present, [N]. */
static dl_status check_shapes(const h5_src *src, const dl_dataset *ds) {
  char a[96], b[96];
  const dl_tensor *x = &ds->x, *y = &ds->y, *len = &ds->lengths;
  bool tokens = x->dtype == DL_I32;
  if ((tokens && x->ndim != 2) || (!tokens && x->ndim < 2))
    return dl_fail(DL_ERR_FORMAT, "%s: dataset %s/x is %s; expected %s", src->path, src->group,
                   dl_tensor_describe(x, a, sizeof a),
                   tokens ? "int32 tokens [N, T]" : "float32 [N, ...] of rank 2..4");
  bool y_ok = y->ndim == 1 || (tokens && y->ndim == 2 && y->shape[1] == x->shape[1]);
  if (!y_ok || y->shape[0] != x->shape[0])
    return dl_fail(DL_ERR_FORMAT,
                   "%s: dataset %s/y is %s but %s/x is %s; expected "
                   "y [N]%s with the same N",
                   src->path, src->group, dl_tensor_describe(y, b, sizeof b), src->group,
                   dl_tensor_describe(x, a, sizeof a), tokens ? " or [N, T]" : "");
  if (!dl_tensor_empty(len) && (len->ndim != 1 || len->shape[0] != x->shape[0]))
    return dl_fail(DL_ERR_FORMAT, "%s: dataset %s/lengths is %s; expected [%lld]", src->path,
                   src->group, dl_tensor_describe(len, a, sizeof a), (long long)x->shape[0]);
  if (x->shape[0] == 0)
    return dl_fail(DL_ERR_FORMAT, "%s: dataset %s/x has no samples", src->path, src->group);
  return DL_OK;
}

static dl_status check_values(const h5_src *src, const dl_dataset *ds) {
  const int32_t *y = dl_i32(&ds->y);
  bool per_token = ds->y.ndim == 2;
  int64_t row = dl_dataset_y_row(ds);
  for (int64_t i = 0; i < ds->y.numel; i++) {
    if (y[i] >= 0 && y[i] < ds->n_classes) continue;
    if (per_token && y[i] == DL_IGNORE_INDEX) continue;
    return dl_fail(DL_ERR_INVALID,
                   "%s: dataset %s/y: label %d of sample %lld is "
                   "outside [0, %d)%s",
                   src->path, src->group, (int)y[i], (long long)(i / row), ds->n_classes,
                   per_token ? " and is not the ignore index -100" : "");
  }
  if (dl_tensor_empty(&ds->lengths)) return DL_OK;
  const int32_t *len = dl_i32(&ds->lengths);
  for (int64_t i = 0; i < ds->n; i++)
    if (len[i] < 0 || len[i] > ds->x.shape[1])
      return dl_fail(DL_ERR_INVALID,
                     "%s: dataset %s/lengths: length %d of sample "
                     "%lld is outside [0, %lld]",
                     src->path, src->group, (int)len[i], (long long)i, (long long)ds->x.shape[1]);
  return DL_OK;
}

static dl_status read_group(const h5_src *src, hid_t file, hid_t group, dl_dataset *ds) {
  DL_TRY(read_n_classes(src, file, group, &ds->n_classes));
  DL_TRY(read_dataset(src, group, "x", true, &ds->x));
  DL_TRY(read_dataset(src, group, "y", false, &ds->y));
  htri_t has_len = H5Lexists(group, "lengths", H5P_DEFAULT);
  if (has_len > 0) DL_TRY(read_dataset(src, group, "lengths", false, &ds->lengths));
  DL_TRY(check_shapes(src, ds));
  ds->n = ds->x.shape[0];
  return check_values(src, ds);
}

/* On failure, why gets HDF5's reason, read before the next API call clears
 * it. */
static hid_t open_read_only(const char *path, char why[160]) {
  hid_t fapl = dl_h5_file_access();
  if (fapl < 0) {
    dl_h5_reason(why);
    return -1;
  }
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  if (file < 0) dl_h5_reason(why);
  H5Pclose(fapl);
  return file;
}

static htri_t is_hdf5(const char *path) {
#if H5_VERSION_GE(1, 12, 0)
  return H5Fis_accessible(path, H5P_DEFAULT);
#else
  return H5Fis_hdf5(path);
#endif
}

static dl_status load_file(const h5_src *src, const char *group_name, dl_dataset *ds) {
  char why[160];
  htri_t sig = is_hdf5(src->path);
  if (sig <= 0)
    return dl_fail(DL_ERR_FORMAT, "%s: not an HDF5 file (%s)", src->path,
                   sig == 0 ? "no HDF5 signature" : dl_h5_reason(why));
  hid_t file = open_read_only(src->path, why);
  if (file < 0)
    return dl_fail(DL_ERR_FORMAT, "%s: cannot open as HDF5, damaged or truncated? (%s)", src->path,
                   why);
  dl_status s = DL_OK;
  hid_t group = H5Lexists(file, group_name, H5P_DEFAULT) > 0 || strcmp(group_name, "/") == 0
                    ? H5Gopen2(file, group_name, H5P_DEFAULT)
                    : -1;
  if (group < 0) {
    H5Eclear2(H5E_DEFAULT); /* a missing link is not an HDF5 error */
    s = dl_fail(DL_ERR_FORMAT, "%s: no group %s", src->path, group_name);
  } else {
    s = read_group(src, file, group, ds);
    H5Gclose(group);
  }
  H5Fclose(file);
  return s;
}

dl_status dl_dataset_load_h5(dl_dataset *ds, const char *path, const char *group) {
  if (!path || !group) return dl_fail(DL_ERR_INVALID, "load dataset: path and group are required");
  memset(ds, 0, sizeof *ds);
  /* Missing, unreadable, a directory or a FIFO (which would block HDF5's
   * open): an I/O error, not a format one. */
  FILE *f;
  DL_TRY(dl_fopen_regular(path, "dataset file", &f));
  unsigned char byte;
  bool unreadable = fread(&byte, 1, 1, f) == 0 && ferror(f);
  int err = errno;
  fclose(f);
  if (unreadable)
    return dl_fail(DL_ERR_IO, "%s: cannot read dataset file: %s", path, strerror(err));
  h5_src src = {.path = path};
  snprintf(src.group, sizeof src.group, "%s%s", group[0] == '/' ? "" : "/", group);
  size_t gl = strlen(src.group);
  while (gl > 0 && src.group[gl - 1] == '/') src.group[--gl] = '\0';

  dl_h5_quiet q = dl_h5_quiet_begin(); /* our message carries HDF5's */
  dl_status s = load_file(&src, src.group[0] ? src.group : "/", ds);
  dl_h5_quiet_end(q);
  if (s != DL_OK) {
    dl_dataset_free(ds);
    return s;
  }
  snprintf(ds->name, sizeof ds->name, "%s:%s", path, src.group[0] ? src.group : "/");
  return DL_OK;
}
