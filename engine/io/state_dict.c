/* Writing and reading state dicts (io/state_dict.h); loading with a
 * diagnosis is state_load.c. */
#define _POSIX_C_SOURCE 200809L

#include "io/state_dict.h"

#include "io/h5.h"
#include "io/state_dict_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- HDF5 types ---------------------------------------------------------- */

/* A 2-byte IEEE-style float: float16 (5 exponent bits) or bfloat16 (8), the
 * layout h5py uses for numpy's float16. */
static hid_t half_type(bool brain) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0) return t;
  if (brain) {
    H5Tset_fields(t, 15, 7, 8, 0, 7);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 127);
  } else {
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
  }
  return t;
}

/* The type in memory (native order); also the file type, as little-endian
 * machines are the only ones the engine runs on and HDF5 converts order. */
static hid_t mem_type(dl_dtype dt) {
  switch (dt) {
  case DL_F32: return H5Tcopy(H5T_NATIVE_FLOAT);
  case DL_I32: return H5Tcopy(H5T_NATIVE_INT32);
  case DL_I64: return H5Tcopy(H5T_NATIVE_INT64);
  case DL_F16: return half_type(false);
  case DL_BF16: return half_type(true);
  }
  return H5I_INVALID_HID;
}

/* The engine dtype a stored type holds exactly, or -1. */
static int stored_dtype(hid_t t) {
  H5T_class_t cls = H5Tget_class(t);
  size_t size = H5Tget_size(t);
  if (cls == H5T_FLOAT && size == 4) return DL_F32;
  if (cls == H5T_FLOAT && size == 2) {
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return -1;
    if (esize == 5 && msize == 10) return DL_F16;
    if (esize == 8 && msize == 7) return DL_BF16;
    return -1;
  }
  if (cls == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_2) {
    if (size == 4) return DL_I32;
    if (size == 8) return DL_I64;
  }
  return -1;
}

static const char *describe_stored(hid_t t, char *buf, size_t len) {
  int dt = stored_dtype(t);
  if (dt >= 0) return dl_dtype_name((dl_dtype)dt);
  size_t bits = H5Tget_size(t) * 8;
  switch (H5Tget_class(t)) {
  case H5T_FLOAT: snprintf(buf, len, "float%zu", bits); break;
  case H5T_INTEGER:
    snprintf(buf, len, "%sint%zu", H5Tget_sign(t) == H5T_SGN_2 ? "" : "u", bits);
    break;
  case H5T_STRING: snprintf(buf, len, "string"); break;
  default: snprintf(buf, len, "a non-numeric HDF5 type"); break;
  }
  return buf;
}

const char *dl_sd_describe_shape(int ndim, const int64_t *shape, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < ndim && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (at < len) snprintf(buf + at, len - at, "]");
  return buf;
}

/* "/" and "" mean the root group; a leading "/" is optional. */
const char *dl_sd_group_or_root(const char *group) {
  if (!group || !*group || strcmp(group, "/") == 0) return "/";
  return group;
}

/* Between group and key in messages: "f.h5:/lr", "f.h5:model/0.weight". */
static const char *sep(const char *group) { return strcmp(group, "/") == 0 ? "" : "/"; }

/* ---- writing --------------------------------------------------------------- */

dl_status dl_sd_check_items(const char *path, const dl_named_tensor *items, int n) {
  if (n < 0 || (n > 0 && !items))
    return dl_fail(DL_ERR_INVALID, "%s: %d state-dict entries with no list", path, n);
  for (int i = 0; i < n; i++) {
    const char *name = items[i].name;
    if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0)
      return dl_fail(DL_ERR_INVALID,
                     "%s: entry %d has name '%s', which cannot be an HDF5 dataset "
                     "name (empty, '.', or has '/')",
                     path, i, name ? name : "(null)");
    if (!items[i].tensor)
      return dl_fail(DL_ERR_INVALID, "%s: entry '%s' has no tensor", path, name);
    const dl_tensor *t = items[i].tensor;
    if (t->ndim < 0 || t->ndim > DL_MAX_DIMS || (t->numel > 0 && !t->data))
      return dl_fail(DL_ERR_INVALID, "%s: entry '%s' is not an allocated tensor", path, name);
    for (int j = 0; j < i; j++)
      if (strcmp(items[j].name, name) == 0)
        return dl_fail(DL_ERR_INVALID, "%s: two entries are named '%s'", path, name);
  }
  return DL_OK;
}

static dl_status write_dataset(hid_t grp, const char *path, const char *group, const char *name,
                               const dl_tensor *t) {
  hsize_t dims[DL_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) dims[i] = (hsize_t)t->shape[i];
  hid_t space = t->ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(t->ndim, dims, NULL);
  hid_t type = mem_type(t->dtype);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (dcpl >= 0) H5Pset_obj_track_times(dcpl, 0);
  hid_t ds = H5I_INVALID_HID;
  herr_t rc = -1;
  if (space >= 0 && type >= 0 && dcpl >= 0) {
    ds = H5Dcreate2(grp, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds >= 0) rc = t->numel ? H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data) : 0;
  }
  char why[160];
  dl_status s = DL_OK;
  if (rc < 0)
    s = dl_fail(DL_ERR_IO, "cannot write %s:%s%s%s (%s)", path, group, sep(group), name,
                dl_h5_reason(why));
  if (ds >= 0) H5Dclose(ds);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  return s;
}

/* On failure, why = HDF5's reason (taken before the cleanup clears it). */
static hid_t create_group(hid_t file, const char *group, char why[160]) {
  if (strcmp(group, "/") == 0) return H5Gopen2(file, "/", H5P_DEFAULT);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  hid_t gcpl = dl_h5_ordered_plist(H5P_GROUP_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t g = H5Gcreate2(file, group, lcpl, gcpl, H5P_DEFAULT);
  if (g < 0) dl_h5_reason(why);
  H5Pclose(lcpl);
  H5Pclose(gcpl);
  return g;
}

dl_status dl_state_write_group(hid_t file, const char *path, const char *group,
                               const dl_named_tensor *items, int n) {
  group = dl_sd_group_or_root(group);
  DL_TRY(dl_sd_check_items(path, items, n));
  dl_h5_quiet q = dl_h5_quiet_begin();
  dl_status s = DL_OK;
  char why[160];
  hid_t g = create_group(file, group, why);
  if (g < 0)
    s = dl_fail(DL_ERR_IO, "cannot create group %s in %s (%s; does it exist already?)", group, path,
                why);
  for (int i = 0; s == DL_OK && i < n; i++)
    s = write_dataset(g, path, group, items[i].name, items[i].tensor);
  if (g >= 0) H5Gclose(g);
  dl_h5_quiet_end(q);
  return s;
}

dl_status dl_state_save(const char *path, const char *group, const dl_named_tensor *items, int n) {
  dl_h5_atomic a;
  DL_TRY(dl_h5_atomic_create(&a, path));
  dl_status s = dl_state_write_group(a.file, path, group, items, n);
  if (s != DL_OK) {
    dl_h5_atomic_abort(&a);
    return s;
  }
  return dl_h5_atomic_commit(&a);
}

/* ---- reading ---------------------------------------------------------------- */

void dl_sd_listing_free(dl_sd_listing *l) {
  for (int i = 0; i < l->n; i++) free(l->e[i].name);
  free(l->e);
  l->e = NULL;
  l->n = 0;
}

dl_status dl_sd_open_group(hid_t file, const char *path, const char *group, hid_t *g) {
  *g = H5I_INVALID_HID;
  if (strcmp(group, "/") != 0 && H5Lexists(file, group, H5P_DEFAULT) <= 0)
    return dl_fail(DL_ERR_FORMAT, "%s has no group %s: was it written under another group name?",
                   path, group);
  *g = H5Gopen2(file, group, H5P_DEFAULT);
  if (*g < 0) {
    char why[160];
    return dl_fail(DL_ERR_FORMAT, "%s: %s is not a readable group (%s)", path, group,
                   dl_h5_reason(why));
  }
  return DL_OK;
}

/* Every current dimension within its maximum (and representable). */
static bool extent_within_maximum(hid_t space, int ndim) {
  hsize_t dims[DL_MAX_DIMS], maxdims[DL_MAX_DIMS];
  if (H5Sget_simple_extent_dims(space, dims, maxdims) < 0) return false;
  for (int i = 0; i < ndim; i++)
    if (dims[i] > (hsize_t)INT64_MAX || (maxdims[i] != H5S_UNLIMITED && dims[i] > maxdims[i]))
      return false;
  return true;
}

static dl_status describe_dataset(hid_t ds, const char *path, const char *group, dl_sd_stored *e) {
  hid_t type = H5Dget_type(ds);
  hid_t space = H5Dget_space(ds);
  dl_status s = DL_OK;
  int ndim = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  if (type < 0 || ndim < 0) {
    char why[160];
    s = dl_fail(DL_ERR_FORMAT, "%s:%s%s%s: unreadable dataset header (%s)", path, group, sep(group),
                e->name, dl_h5_reason(why));
  } else if (ndim > DL_MAX_DIMS || H5Sget_simple_extent_type(space) == H5S_NULL) {
    s = dl_fail(DL_ERR_FORMAT, "%s:%s%s%s has rank %d; tensors have rank 0..%d", path, group,
                sep(group), e->name, ndim, DL_MAX_DIMS);
  } else if (!extent_within_maximum(space, ndim)) {
    /* A damaged header can claim 10^9 elements in a tiny file: refused
     * before anything is allocated for them (fuzz finding). */
    s = dl_fail(DL_ERR_FORMAT,
                "%s:%s%s%s: its extent is beyond its maximum: the file is "
                "damaged",
                path, group, sep(group), e->name);
  } else {
    hsize_t dims[DL_MAX_DIMS];
    H5Sget_simple_extent_dims(space, dims, NULL);
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = (int64_t)dims[i];
    char buf[sizeof e->type_name];
    e->dtype = stored_dtype(type);
    snprintf(e->type_name, sizeof e->type_name, "%s", describe_stored(type, buf, sizeof buf));
  }
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  return s;
}

/* Datasets only: a subgroup is not a key (a checkpoint may nest groups). */
static dl_status add_if_dataset(hid_t g, const char *path, const char *group, char *name,
                                dl_sd_listing *l) {
  hid_t obj = H5Oopen(g, name, H5P_DEFAULT);
  if (obj < 0) {
    char why[160];
    dl_status s = dl_fail(DL_ERR_FORMAT, "%s:%s%s%s cannot be opened (%s)", path, group, sep(group),
                          name, dl_h5_reason(why));
    free(name);
    return s;
  }
  if (H5Iget_type(obj) != H5I_DATASET) {
    H5Oclose(obj);
    free(name);
    return DL_OK;
  }
  dl_sd_stored *e = &l->e[l->n++];
  memset(e, 0, sizeof *e);
  e->name = name;
  dl_status s = describe_dataset(obj, path, group, e);
  H5Oclose(obj);
  return s;
}

dl_status dl_sd_list_group(hid_t g, const char *path, const char *group, dl_sd_listing *l) {
  H5G_info_t info;
  memset(l, 0, sizeof *l);
  if (H5Gget_info(g, &info) < 0) {
    char why[160];
    return dl_fail(DL_ERR_FORMAT, "%s:%s: unreadable group (%s)", path, group, dl_h5_reason(why));
  }
  l->e = calloc(info.nlinks ? info.nlinks : 1, sizeof *l->e);
  if (!l->e) return dl_fail(DL_ERR_NOMEM, "%s:%s: out of memory listing keys", path, group);
  H5_index_t order = dl_h5_link_order(g);
  for (hsize_t i = 0; i < info.nlinks; i++) {
    ssize_t len = H5Lget_name_by_idx(g, ".", order, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
    char *name = len >= 0 ? malloc((size_t)len + 1) : NULL;
    dl_status s = DL_OK;
    if (len < 0) {
      char why[160];
      s = dl_fail(DL_ERR_FORMAT, "%s:%s: unreadable link %llu (%s)", path, group,
                  (unsigned long long)i, dl_h5_reason(why));
    } else if (!name) {
      s = dl_fail(DL_ERR_NOMEM, "%s:%s: out of memory listing keys", path, group);
    } else {
      H5Lget_name_by_idx(g, ".", order, H5_ITER_INC, i, name, (size_t)len + 1, H5P_DEFAULT);
      s = add_if_dataset(g, path, group, name, l);
    }
    if (s != DL_OK) {
      dl_sd_listing_free(l);
      return s;
    }
  }
  return DL_OK;
}

dl_status dl_sd_read_dataset(hid_t g, const char *path, const char *group, const dl_sd_stored *e,
                             dl_tensor *t) {
  char what[1024 + 2 * DL_NAME_MAX];
  snprintf(what, sizeof what, "%s:%s%s%s", path, group, sep(group), e->name);
  hid_t ds = H5Dopen2(g, e->name, H5P_DEFAULT);
  char why[160];
  if (ds < 0) return dl_fail(DL_ERR_FORMAT, "%s cannot be opened (%s)", what, dl_h5_reason(why));
  /* Before allocating: a header can promise data the file does not hold,
   * and a dataset never written reads as its fill value, numbers nobody
   * computed. */
  dl_status s = dl_h5_check_stored(ds, what);
  if (s == DL_OK) s = dl_tensor_alloc(t, (dl_dtype)e->dtype, e->ndim, e->shape, what);
  hid_t type = s == DL_OK && t->numel > 0 ? mem_type(t->dtype) : H5I_INVALID_HID;
  if (s == DL_OK && t->numel > 0 &&
      (type < 0 || H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data) < 0))
    s = dl_fail(DL_ERR_FORMAT,
                "%s: cannot read the data (%s); the file may be truncated or damaged", what,
                dl_h5_reason(why));
  if (type >= 0) H5Tclose(type);
  H5Dclose(ds);
  if (s != DL_OK) dl_tensor_free(t);
  return s;
}

dl_status dl_sd_check_dtype(const char *path, const char *group, const dl_sd_stored *e,
                            int expected) {
  if (e->dtype >= 0 && e->dtype == expected) return DL_OK;
  return dl_fail(DL_ERR_FORMAT,
                 "%s:%s%s%s is %s, expected %s: convert it before "
                 "saving (tensor.float() / .long())",
                 path, group, sep(group), e->name, e->type_name,
                 expected >= 0 ? dl_dtype_name((dl_dtype)expected)
                               : "float32, float16, bfloat16, int32 or int64");
}

void dl_state_dict_free(dl_state_dict *sd) {
  if (!sd) return;
  for (int i = 0; i < sd->n; i++) {
    free(sd->names[i]);
    dl_tensor_free(&sd->tensors[i]);
  }
  free(sd->names);
  free(sd->tensors);
  memset(sd, 0, sizeof *sd);
}

const dl_tensor *dl_state_dict_find(const dl_state_dict *sd, const char *name) {
  for (int i = 0; i < sd->n; i++)
    if (strcmp(sd->names[i], name) == 0) return &sd->tensors[i];
  return NULL;
}

static dl_status read_all(hid_t g, const char *path, const char *group, dl_sd_listing *l,
                          dl_state_dict *out) {
  out->names = calloc(l->n ? l->n : 1, sizeof *out->names);
  out->tensors = calloc(l->n ? l->n : 1, sizeof *out->tensors);
  if (!out->names || !out->tensors)
    return dl_fail(DL_ERR_NOMEM, "%s:%s: out of memory", path, group);
  for (int i = 0; i < l->n; i++) {
    if (l->e[i].dtype < 0) return dl_sd_check_dtype(path, group, &l->e[i], -1);
    DL_TRY(dl_sd_read_dataset(g, path, group, &l->e[i], &out->tensors[i]));
    out->names[i] = l->e[i].name; /* ownership moves */
    l->e[i].name = NULL;
    out->n = i + 1;
  }
  return DL_OK;
}

dl_status dl_state_read_group(hid_t file, const char *path, const char *group, dl_state_dict *out) {
  memset(out, 0, sizeof *out);
  group = dl_sd_group_or_root(group);
  dl_h5_quiet q = dl_h5_quiet_begin();
  hid_t g;
  dl_sd_listing l = {0};
  dl_status s = dl_sd_open_group(file, path, group, &g);
  if (s == DL_OK) s = dl_sd_list_group(g, path, group, &l);
  if (s == DL_OK) s = read_all(g, path, group, &l, out);
  if (s != DL_OK) dl_state_dict_free(out);
  dl_sd_listing_free(&l);
  if (g >= 0) H5Gclose(g);
  dl_h5_quiet_end(q);
  return s;
}

dl_status dl_state_read(const char *path, const char *group, dl_state_dict *out) {
  hid_t file;
  memset(out, 0, sizeof *out);
  DL_TRY(dl_h5_open_read(path, &file));
  dl_status s = dl_state_read_group(file, path, group, out);
  H5Fclose(file);
  return s;
}
