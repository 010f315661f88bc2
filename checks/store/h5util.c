#define _POSIX_C_SOURCE 200809L /* strnlen, strdup */

#include "store/h5util.h"

#include "io/atomic_file.h"
#include "io/h5.h"
#include "core/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* Sizes no file of ours comes near: a header claiming more is damaged, and
 * refusing it up front keeps a flipped bit from becoming a huge allocation. */
enum { MAX_STR_WIDTH = 1 << 24 };
static const hsize_t MAX_ELEMENTS = (hsize_t)1 << 40;

/* ---- error stack ---------------------------------------------------------- */

static dl_status fail_h5(dl_status s, const char *what, const char *where, const char *name) {
  char why[160];
  return dl_fail(s, "%s/%s: %s (%s)", where, name, what, dl_h5_reason(why));
}

/* ---- groups ------------------------------------------------------------------ */

dl_status dlc_h5_group_create(hid_t parent, const char *where, const char *name, hid_t *g) {
  hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
  *g = H5I_INVALID_HID;
  if (gcpl >= 0 &&
      H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) >= 0 &&
      H5Pset_obj_track_times(gcpl, 0) >= 0)
    *g = H5Gcreate2(parent, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
  if (gcpl >= 0) H5Pclose(gcpl);
  return *g < 0 ? fail_h5(DL_ERR_IO, "cannot create the group", where, name) : DL_OK;
}

dl_status dlc_h5_group_open(hid_t parent, const char *where, const char *name, hid_t *g) {
  *g = H5I_INVALID_HID;
  if (H5Lexists(parent, name, H5P_DEFAULT) <= 0)
    return dl_fail(DL_ERR_FORMAT, "%s/%s is missing: not a dlcheck trace, or a damaged one", where,
                   name);
  *g = H5Gopen2(parent, name, H5P_DEFAULT);
  return *g < 0 ? fail_h5(DL_ERR_FORMAT, "not a readable group", where, name) : DL_OK;
}

dl_status dlc_h5_group_count(hid_t g, const char *where, int64_t *n) {
  H5G_info_t info;
  *n = 0;
  if (H5Gget_info(g, &info) < 0) {
    char why[160];
    return dl_fail(DL_ERR_FORMAT, "%s: unreadable group (%s)", where, dl_h5_reason(why));
  }
  *n = (int64_t)info.nlinks;
  return DL_OK;
}

dl_status dlc_h5_link_name(hid_t g, const char *where, int64_t i, char **name) {
  H5_index_t order = dl_h5_link_order(g);
  ssize_t len = H5Lget_name_by_idx(g, ".", order, H5_ITER_INC, (hsize_t)i, NULL, 0, H5P_DEFAULT);
  *name = NULL;
  if (len < 0 || len > MAX_STR_WIDTH) {
    char why[160];
    return dl_fail(DL_ERR_FORMAT, "%s: unreadable link %lld (%s)", where, (long long)i,
                   dl_h5_reason(why));
  }
  *name = malloc((size_t)len + 1);
  if (!*name) return dl_fail(DL_ERR_NOMEM, "%s: out of memory for a link name", where);
  if (H5Lget_name_by_idx(g, ".", order, H5_ITER_INC, (hsize_t)i, *name, (size_t)len + 1,
                         H5P_DEFAULT) < 0) {
    free(*name);
    *name = NULL;
    char why[160];
    return dl_fail(DL_ERR_FORMAT, "%s: unreadable link %lld (%s)", where, (long long)i,
                   dl_h5_reason(why));
  }
  return DL_OK;
}

/* ---- strings in memory ------------------------------------------------------- */

/* A fixed-length string type `width` bytes wide (NUL included). */
static hid_t str_type(size_t width) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0) return t;
  if (H5Tset_size(t, width) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 ||
      H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
    H5Tclose(t);
    return H5I_INVALID_HID;
  }
  return t;
}

/* n strings side by side, each `*width` bytes: staged in accounted memory. */
static char *pack_strs(int64_t n, const char *const *v, size_t *width, const char *what) {
  size_t w = 1;
  for (int64_t i = 0; i < n; i++) {
    size_t len = strlen(v[i]) + 1;
    if (len > w) w = len;
  }
  *width = w;
  if (n > 0 && (size_t)n > SIZE_MAX / w) {
    dl_fail(DL_ERR_NOMEM, "%s: %lld strings of %zu bytes do not fit in memory", what, (long long)n,
            w);
    return NULL;
  }
  char *buf = dl_mem_alloc((size_t)n * w, what);
  if (!buf) return NULL;
  for (int64_t i = 0; i < n; i++) memcpy(buf + (size_t)i * w, v[i], strlen(v[i]));
  return buf;
}

/* ---- writing ------------------------------------------------------------------- */

static dl_status write_attr(hid_t obj, const char *where, const char *name, hid_t ftype,
                            hid_t mtype, hid_t space, const void *buf) {
  hid_t a = H5I_INVALID_HID;
  herr_t rc = -1;
  if (ftype >= 0 && mtype >= 0 && space >= 0) {
    a = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) rc = H5Awrite(a, mtype, buf);
  }
  dl_status s = DL_OK;
  if (rc < 0) {
    char why[160];
    s = dl_fail(DL_ERR_IO, "%s attribute %s: cannot write it (%s)", where, name, dl_h5_reason(why));
  }
  if (a >= 0) H5Aclose(a);
  return s;
}

dl_status dlc_h5_attr_write_str(hid_t obj, const char *where, const char *name, const char *value) {
  hid_t t = str_type(strlen(value) + 1);
  hid_t space = H5Screate(H5S_SCALAR);
  dl_status s = write_attr(obj, where, name, t, t, space, value);
  if (t >= 0) H5Tclose(t);
  if (space >= 0) H5Sclose(space);
  return s;
}

dl_status dlc_h5_attr_write_u64(hid_t obj, const char *where, const char *name, uint64_t v) {
  hid_t space = H5Screate(H5S_SCALAR);
  dl_status s = write_attr(obj, where, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, space, &v);
  if (space >= 0) H5Sclose(space);
  return s;
}

dl_status dlc_h5_attr_write_i64(hid_t obj, const char *where, const char *name, int64_t v) {
  hid_t space = H5Screate(H5S_SCALAR);
  dl_status s = write_attr(obj, where, name, H5T_STD_I64LE, H5T_NATIVE_INT64, space, &v);
  if (space >= 0) H5Sclose(space);
  return s;
}

dl_status dlc_h5_attr_write_strs(hid_t obj, const char *where, const char *name, int n,
                                 const char *const *v) {
  size_t width;
  char *buf = pack_strs(n, v, &width, name);
  if (!buf) return dl_fail_context(DL_ERR_NOMEM, "%s: ", where);
  hsize_t dims[1] = {(hsize_t)n};
  hid_t t = str_type(width);
  hid_t space = H5Screate_simple(1, dims, NULL);
  dl_status s = write_attr(obj, where, name, t, t, space, buf);
  if (t >= 0) H5Tclose(t);
  if (space >= 0) H5Sclose(space);
  dl_mem_free(buf);
  return s;
}

static hid_t new_dataset(hid_t loc, const char *name, hid_t ftype, hid_t space) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hid_t ds = H5I_INVALID_HID;
  if (dcpl >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0)
    ds = H5Dcreate2(loc, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (dcpl >= 0) H5Pclose(dcpl);
  return ds;
}

static dl_status write_dataset(hid_t loc, const char *where, const char *name, hid_t ftype,
                               hid_t mtype, int rank, const hsize_t *dims, const void *buf) {
  hid_t space = H5Screate_simple(rank, dims, NULL);
  hid_t ds = H5I_INVALID_HID;
  herr_t rc = -1;
  hsize_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= dims[i];
  if (space >= 0 && ftype >= 0 && mtype >= 0) ds = new_dataset(loc, name, ftype, space);
  if (ds >= 0) rc = numel ? H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : 0;
  dl_status s = rc < 0 ? fail_h5(DL_ERR_IO, "cannot write the dataset", where, name) : DL_OK;
  if (ds >= 0) H5Dclose(ds);
  if (space >= 0) H5Sclose(space);
  return s;
}

dl_status dlc_h5_write_num(hid_t loc, const char *where, const char *name, dlc_h5_num type,
                           int rank, const hsize_t *dims, const void *data) {
  if (type == DLC_H5_F64)
    return write_dataset(loc, where, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, rank, dims, data);
  return write_dataset(loc, where, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, rank, dims, data);
}

dl_status dlc_h5_write_strs(hid_t loc, const char *where, const char *name, int64_t n,
                            const char *const *v) {
  size_t width;
  char *buf = pack_strs(n, v, &width, name);
  if (!buf) return dl_fail_context(DL_ERR_NOMEM, "%s: ", where);
  hsize_t dims[1] = {(hsize_t)n};
  hid_t t = str_type(width);
  dl_status s = write_dataset(loc, where, name, t, t, 1, dims, buf);
  if (t >= 0) H5Tclose(t);
  dl_mem_free(buf);
  return s;
}

/* ---- reading attributes --------------------------------------------------------- */

static dl_status open_attr(hid_t obj, const char *where, const char *name, hid_t *a) {
  *a = H5I_INVALID_HID;
  if (H5Aexists(obj, name) <= 0)
    return dl_fail(DL_ERR_FORMAT,
                   "%s attribute %s is missing: not a dlcheck trace, or a "
                   "damaged one",
                   where, name);
  *a = H5Aopen(obj, name, H5P_DEFAULT);
  if (*a < 0) {
    char why[160];
    return dl_fail(DL_ERR_FORMAT, "%s attribute %s is unreadable (%s)", where, name,
                   dl_h5_reason(why));
  }
  return DL_OK;
}

static bool is_scalar(hid_t space) {
  return space >= 0 && H5Sget_simple_extent_type(space) == H5S_SCALAR;
}

/* Reads a scalar fixed-length string attribute into a new buffer. */
static dl_status read_attr_text(hid_t a, const char *where, const char *name, char **text,
                                size_t *width) {
  hid_t t = H5Aget_type(a), space = H5Aget_space(a);
  dl_status s = DL_OK;
  *text = NULL;
  *width = t >= 0 ? H5Tget_size(t) : 0;
  if (t < 0 || H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) != 0 || !is_scalar(space) ||
      *width == 0 || *width > MAX_STR_WIDTH)
    s = dl_fail(DL_ERR_FORMAT, "%s attribute %s is not a fixed-length string", where, name);
  if (s == DL_OK && !(*text = malloc(*width)))
    s = dl_fail(DL_ERR_NOMEM, "%s attribute %s: out of memory reading it", where, name);
  if (s == DL_OK && H5Aread(a, t, *text) < 0) {
    char why[160];
    s = dl_fail(DL_ERR_FORMAT, "%s attribute %s is unreadable (%s)", where, name,
                dl_h5_reason(why));
  }
  if (t >= 0) H5Tclose(t);
  if (space >= 0) H5Sclose(space);
  if (s != DL_OK) {
    free(*text);
    *text = NULL;
  }
  return s;
}

dl_status dlc_h5_attr_read_str(hid_t obj, const char *where, const char *name, char *buf,
                               size_t len) {
  hid_t a;
  char *text;
  size_t width;
  DL_TRY(open_attr(obj, where, name, &a));
  dl_status s = read_attr_text(a, where, name, &text, &width);
  H5Aclose(a);
  if (s != DL_OK) return s;
  size_t n = strnlen(text, width);
  if (n >= len)
    s = dl_fail(DL_ERR_FORMAT, "%s attribute %s is %zu bytes long; at most %zu fit", where, name, n,
                len ? len - 1 : 0);
  else {
    memcpy(buf, text, n);
    buf[n] = '\0';
  }
  free(text);
  return s;
}

/* A scalar integer attribute as signed or unsigned 64-bit, per its type. */
static dl_status read_attr_int(hid_t obj, const char *where, const char *name, bool *is_signed,
                               int64_t *i, uint64_t *u) {
  hid_t a;
  DL_TRY(open_attr(obj, where, name, &a));
  hid_t t = H5Aget_type(a), space = H5Aget_space(a);
  dl_status s = DL_OK;
  if (t < 0 || H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) > 8 || !is_scalar(space)) {
    s = dl_fail(DL_ERR_FORMAT, "%s attribute %s is not a scalar integer", where, name);
  } else {
    *is_signed = H5Tget_sign(t) == H5T_SGN_2;
    herr_t rc = *is_signed ? H5Aread(a, H5T_NATIVE_INT64, i) : H5Aread(a, H5T_NATIVE_UINT64, u);
    if (rc < 0) {
      char why[160];
      s = dl_fail(DL_ERR_FORMAT, "%s attribute %s is unreadable (%s)", where, name,
                  dl_h5_reason(why));
    }
  }
  if (t >= 0) H5Tclose(t);
  if (space >= 0) H5Sclose(space);
  H5Aclose(a);
  return s;
}

dl_status dlc_h5_attr_read_u64(hid_t obj, const char *where, const char *name, uint64_t *v) {
  bool sign;
  int64_t i = 0;
  DL_TRY(read_attr_int(obj, where, name, &sign, &i, v));
  if (!sign) return DL_OK;
  if (i < 0)
    return dl_fail(DL_ERR_FORMAT, "%s attribute %s is %lld; expected a non-negative value", where,
                   name, (long long)i);
  *v = (uint64_t)i;
  return DL_OK;
}

dl_status dlc_h5_attr_read_i64(hid_t obj, const char *where, const char *name, int64_t *v) {
  bool sign;
  uint64_t u = 0;
  DL_TRY(read_attr_int(obj, where, name, &sign, v, &u));
  if (sign) return DL_OK;
  if (u > (uint64_t)INT64_MAX)
    return dl_fail(DL_ERR_FORMAT, "%s attribute %s is %llu, out of range", where, name,
                   (unsigned long long)u);
  *v = (int64_t)u;
  return DL_OK;
}

/* ---- reading datasets ------------------------------------------------------------ */

static dl_status open_dataset(hid_t loc, const char *where, const char *name, hid_t *ds) {
  *ds = H5I_INVALID_HID;
  if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
    return dl_fail(DL_ERR_FORMAT, "%s/%s is missing: not a dlcheck trace, or a damaged one", where,
                   name);
  *ds = H5Dopen2(loc, name, H5P_DEFAULT);
  return *ds < 0 ? fail_h5(DL_ERR_FORMAT, "not a readable dataset", where, name) : DL_OK;
}

/* dims of a simple dataspace of exactly `rank` dimensions, and their product. */
static dl_status get_dims(hid_t ds, const char *where, const char *name, int rank, hsize_t *dims,
                          hsize_t *numel) {
  hid_t space = H5Dget_space(ds);
  int r = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  dl_status s = DL_OK;
  if (r != rank || H5Sget_simple_extent_type(space) != H5S_SIMPLE) {
    s = dl_fail(DL_ERR_FORMAT, "%s/%s has rank %d; expected %d", where, name, r, rank);
  } else {
    H5Sget_simple_extent_dims(space, dims, NULL);
    *numel = 1;
    for (int i = 0; i < rank && s == DL_OK; i++) {
      if (dims[i] > MAX_ELEMENTS || (dims[i] && *numel > MAX_ELEMENTS / dims[i]))
        s = dl_fail(DL_ERR_FORMAT, "%s/%s claims more than 2^40 elements: the file is damaged",
                    where, name);
      else *numel *= dims[i];
    }
  }
  if (space >= 0) H5Sclose(space);
  return s;
}

/* What the header promises, checked before allocating it (engine/io/h5.c). */
static dl_status check_storage(hid_t ds, const char *where, const char *name) {
  char what[512];
  snprintf(what, sizeof what, "%s/%s", where, name);
  return dl_h5_check_stored(ds, what);
}

static bool type_is(hid_t t, dlc_h5_num type) {
  if (type == DLC_H5_F64) return H5Tequal(t, H5T_IEEE_F64LE) > 0 || H5Tequal(t, H5T_IEEE_F64BE) > 0;
  return H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 8 && H5Tget_sign(t) == H5T_SGN_NONE;
}

/* The rows of ds (rank 1 or 2, dims) into data, DLC_SPILL_CHUNK bytes of
 * them at a time, each written one handed to dlc_spill_written, so that a
 * long dataset read into a spilled array stays out of the process. */
static dl_status read_rows(hid_t ds, hid_t mtype, int rank, const hsize_t *dims, void *data,
                           dlc_spill *sp) {
  hsize_t cols = rank == 2 ? dims[1] : 1, row = cols * 8;
  hsize_t per = row >= DLC_SPILL_CHUNK ? 1 : DLC_SPILL_CHUNK / row;
  hid_t file_space = H5Dget_space(ds);
  bool ok = file_space >= 0;
  for (hsize_t r = 0; ok && r < dims[0]; r += per) {
    hsize_t start[2] = {r, 0}, count[2] = {dims[0] - r < per ? dims[0] - r : per, cols};
    hid_t mem_space = H5Screate_simple(rank, count, NULL);
    ok = mem_space >= 0 &&
         H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
         H5Dread(ds, mtype, mem_space, file_space, H5P_DEFAULT, (char *)data + r * row) >= 0;
    if (mem_space >= 0) H5Sclose(mem_space);
    if (ok) dlc_spill_written(data, sp, (size_t)((r + count[0]) * row));
  }
  if (file_space >= 0) H5Sclose(file_space);
  return ok ? DL_OK : DL_ERR_FORMAT;
}

/* dlc_h5_read_num, into a malloc'd array (sp NULL) or a spilled one. */
static dl_status read_num(hid_t loc, const char *where, const char *name, dlc_h5_num type, int rank,
                          hsize_t *dims, void **data, dlc_spill *sp) {
  hid_t ds;
  *data = NULL;
  DL_TRY(open_dataset(loc, where, name, &ds));
  hid_t t = H5Dget_type(ds);
  hsize_t numel = 0;
  dl_status s = DL_OK;
  if (t < 0 || !type_is(t, type))
    s = dl_fail(DL_ERR_FORMAT, "%s/%s is not %s", where, name,
                type == DLC_H5_F64 ? "float64" : "uint64");
  if (s == DL_OK) s = get_dims(ds, where, name, rank, dims, &numel);
  if (s == DL_OK) s = check_storage(ds, where, name);
  if (s == DL_OK && numel && !sp && !(*data = malloc((size_t)numel * 8)))
    s = dl_fail(DL_ERR_NOMEM, "%s/%s: out of memory for %llu values", where, name,
                (unsigned long long)numel);
  if (s == DL_OK && numel && sp) s = dlc_spill_grow(data, sp, (size_t)numel * 8, name);
  hid_t mtype = type == DLC_H5_F64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_UINT64;
  if (s == DL_OK && numel &&
      (sp ? read_rows(ds, mtype, rank, dims, *data, sp) != DL_OK
          : H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *data) < 0))
    s = fail_h5(DL_ERR_FORMAT, "cannot read the data; the file may be truncated or damaged", where,
                name);
  if (t >= 0) H5Tclose(t);
  H5Dclose(ds);
  if (s != DL_OK) {
    if (sp) dlc_spill_free(*data, sp);
    else free(*data);
    *data = NULL;
  }
  return s;
}

dl_status dlc_h5_read_num(hid_t loc, const char *where, const char *name, dlc_h5_num type, int rank,
                          hsize_t *dims, void **data) {
  return read_num(loc, where, name, type, rank, dims, data, NULL);
}

dl_status dlc_h5_read_num_spilled(hid_t loc, const char *where, const char *name, dlc_h5_num type,
                                  int rank, hsize_t *dims, void **data, dlc_spill *sp) {
  return read_num(loc, where, name, type, rank, dims, data, sp);
}

dl_status dlc_h5_read_strs(hid_t loc, const char *where, const char *name, dlc_h5_strs *out) {
  hid_t ds;
  memset(out, 0, sizeof *out);
  DL_TRY(open_dataset(loc, where, name, &ds));
  hid_t t = H5Dget_type(ds);
  hsize_t dims[1], numel = 0;
  size_t width = t >= 0 ? H5Tget_size(t) : 0;
  dl_status s = DL_OK;
  if (t < 0 || H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) != 0 || width == 0 ||
      width > MAX_STR_WIDTH)
    s = dl_fail(DL_ERR_FORMAT, "%s/%s is not an array of fixed-length strings", where, name);
  if (s == DL_OK) s = get_dims(ds, where, name, 1, dims, &numel);
  if (s == DL_OK && numel > SIZE_MAX / width)
    s = dl_fail(DL_ERR_FORMAT, "%s/%s is too large: the file is damaged", where, name);
  if (s == DL_OK) s = check_storage(ds, where, name);
  if (s == DL_OK && !(out->data = dl_mem_alloc((size_t)numel * width, name)))
    s = dl_fail_context(DL_ERR_NOMEM, "%s: ", where);
  if (s == DL_OK && numel && H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data) < 0)
    s = fail_h5(DL_ERR_FORMAT,
                "cannot read the strings; the file may be truncated or "
                "damaged",
                where, name);
  if (t >= 0) H5Tclose(t);
  H5Dclose(ds);
  if (s != DL_OK) {
    dlc_h5_strs_free(out);
    return s;
  }
  out->n = (int64_t)numel;
  out->width = width;
  return DL_OK;
}

dl_status dlc_h5_strs_get(const dlc_h5_strs *s, int64_t i, const char *where, const char *name,
                          char *dst, size_t len) {
  const char *p = s->data + (size_t)i * s->width;
  size_t n = strnlen(p, s->width);
  if (n >= len)
    return dl_fail(DL_ERR_FORMAT, "%s/%s: string %lld is %zu bytes long; at most %zu fit", where,
                   name, (long long)i, n, len ? len - 1 : 0);
  memcpy(dst, p, n);
  dst[n] = '\0';
  return DL_OK;
}

char *dlc_h5_strs_dup(const dlc_h5_strs *s, int64_t i) {
  const char *p = s->data + (size_t)i * s->width;
  size_t n = strnlen(p, s->width);
  char *d = malloc(n + 1);
  if (!d) {
    dl_fail(DL_ERR_NOMEM, "out of memory for a string of %zu bytes", n);
    return NULL;
  }
  memcpy(d, p, n);
  d[n] = '\0';
  return d;
}

void dlc_h5_strs_free(dlc_h5_strs *s) {
  if (!s) return;
  dl_mem_free(s->data);
  memset(s, 0, sizeof *s);
}

/* ---- sealed files ------------------------------------------------------------------- */

enum { HASH_CHUNK = 1 << 16 };

/* xxhash64 of fd's bytes from DLC_H5_USERBLOCK to the end. */
static dl_status hash_after_userblock(int fd, const char *path, uint64_t *hash) {
  XXH64_state_t *h = XXH64_createState();
  char *buf = malloc(HASH_CHUNK);
  dl_status s = h && buf ? DL_OK : dl_fail(DL_ERR_NOMEM, "%s: out of memory for a checksum", path);
  if (s == DL_OK) XXH64_reset(h, 0);
  for (off_t at = DLC_H5_USERBLOCK; s == DL_OK;) {
    ssize_t n = pread(fd, buf, HASH_CHUNK, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) s = dl_fail(DL_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    if (n <= 0) break;
    XXH64_update(h, buf, (size_t)n);
    at += n;
  }
  if (s == DL_OK) *hash = XXH64_digest(h);
  free(buf);
  if (h) XXH64_freeState(h);
  return s;
}

dl_status dlc_h5_seal(int fd, const char *path, const char *magic) {
  uint64_t hash;
  char header[DLC_H5_USERBLOCK];
  DL_TRY(hash_after_userblock(fd, path, &hash));
  memset(header, 0, sizeof header);
  snprintf(header, sizeof header, "%sxxh64 %016" PRIx64 "\n", magic, hash);
  if (pwrite(fd, header, sizeof header, 0) != (ssize_t)sizeof header)
    return dl_fail(DL_ERR_IO, "%s: cannot write the file header: %s", path, strerror(errno));
  return DL_OK;
}

/* The hash written in header, or false if the header is not one of ours. */
static bool parse_header(const char *header, const char *magic, uint64_t *hash) {
  size_t m = strlen(magic);
  char *end;
  if (memcmp(header, magic, m) != 0 || memcmp(header + m, "xxh64 ", 6) != 0) return false;
  const char *digits = header + m + 6;
  for (int i = 0; i < 16; i++)
    if (!((digits[i] >= '0' && digits[i] <= '9') || (digits[i] >= 'a' && digits[i] <= 'f')))
      return false;
  *hash = strtoull(digits, &end, 16);
  return end == digits + 16 && *end == '\n';
}

static dl_status check_header(int fd, const char *path, const char *magic) {
  char header[DLC_H5_USERBLOCK + 1];
  ssize_t n = pread(fd, header, DLC_H5_USERBLOCK, 0);
  if (n < 0) return dl_fail(DL_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  header[n] = '\0';
  uint64_t stored, computed;
  if (n < DLC_H5_USERBLOCK || !parse_header(header, magic, &stored))
    return dl_fail(DL_ERR_FORMAT,
                   "%s: not a file dlcheck wrote, or a damaged one: it does not "
                   "start with the '%.*s' header",
                   path, (int)strcspn(magic, "\n"), magic);
  /* The seal covers bytes 512 on; the rest of the header must be NUL, so
   * that no byte of the file can change unnoticed. */
  size_t end = strlen(magic) + 6 + 16 + 1;
  for (size_t i = end; i < DLC_H5_USERBLOCK; i++)
    if (header[i] != '\0')
      return dl_fail(DL_ERR_FORMAT,
                     "%s: byte %zu of the 512-byte header is not zero: the "
                     "unused part of the header (bytes %zu-511) must be zero; the file was "
                     "changed after dlcheck wrote it",
                     path, i, end);
  DL_TRY(hash_after_userblock(fd, path, &computed));
  if (computed == stored) return DL_OK;
  return dl_fail(DL_ERR_FORMAT,
                 "%s: checksum mismatch (stored %016" PRIx64 ", computed %016" PRIx64
                 "): the file is damaged, truncated or was changed after dlcheck wrote "
                 "it",
                 path, stored, computed);
}

dl_status dlc_h5_check_seal(const char *path, const char *magic) {
  int fd;
  DL_TRY(dl_open_regular(path, NULL, &fd)); /* a FIFO or folder is refused, not read */
  dl_status s = check_header(fd, path, magic);
  close(fd);
  return s;
}
