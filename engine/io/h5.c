#include "io/h5.h"

#include <errno.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dl_h5_quiet dl_h5_quiet_begin(void) {
  dl_h5_quiet q = {0};
  H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  return q;
}

void dl_h5_quiet_end(dl_h5_quiet q) { H5Eset_auto2(H5E_DEFAULT, q.fn, q.data); }

void dl_h5_quiet_for_good(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* The innermost error is the specific one ("truncated file: eof = ..."); the
 * outer ones only say which API call failed. A failed write's text spans
 * lines ("file write failed: time = ...\n, filename = ..., errno = 28, ...")
 * and would be cut at 160 bytes before its errno: the errno says it. */
static herr_t keep_innermost(unsigned n, const H5E_error2_t *e, void *user) {
  if (n != 0 || !e->desc || !e->desc[0]) return 0;
  const char *errno_at = strstr(e->desc, "errno = ");
  int err = errno_at ? atoi(errno_at + 8) : 0;
  if (err > 0) snprintf((char *)user, 160, "%s", strerror(err));
  else snprintf((char *)user, 160, "%s", e->desc);
  return 0;
}

/* The stack is taken first: any API call, H5Ewalk2 included, clears the
 * current one on entry. Taking it also leaves the current stack empty. */
const char *dl_h5_reason(char buf[160]) {
  snprintf(buf, 160, "no detail from HDF5");
  hid_t stack = H5Eget_current_stack();
  if (stack >= 0) {
    H5Ewalk2(stack, H5E_WALK_UPWARD, keep_innermost, buf);
    H5Eclose_stack(stack);
  }
  return buf;
}

/* H5Pset_file_locking appeared in 1.10.7 and 1.12.1. */
hid_t dl_h5_file_access(void) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return fapl;
  H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
  H5Pset_file_locking(fapl, 0, 1);
#endif
  return fapl;
}

H5_index_t dl_h5_link_order(hid_t g) {
  hid_t gcpl = H5Gget_create_plist(g);
  unsigned flags = 0;
  if (gcpl >= 0) {
    H5Pget_link_creation_order(gcpl, &flags);
    H5Pclose(gcpl);
  }
  return (flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
}

static atomic_bool close_failed;

bool dl_h5_close_failed(void) { return atomic_load(&close_failed); }

/* A create whose first writes fail (disk full, ulimit -f) leaves the file
 * half open inside HDF5 1.10 as a failed close does: its exit handler then
 * loops ("infinite loop closing library") and leaks. */
hid_t dl_h5_create(const char *path, hid_t fcpl, hid_t fapl) {
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl);
  if (file < 0) atomic_store(&close_failed, true);
  return file;
}

dl_status dl_h5_close(hid_t *file, const char *name, dl_status s) {
  if (*file < 0) return s;
  dl_h5_quiet q = dl_h5_quiet_begin();
  errno = 0;
  if (H5Fclose(*file) < 0) {
    int err = errno;
    atomic_store(&close_failed, true);
    char why[160];
    dl_h5_reason(why);
    if (strstr(why, "write failed") && err) snprintf(why, sizeof why, "%s", strerror(err));
    if (s == DL_OK)
      s = dl_fail(DL_ERR_IO, "cannot finish writing %s (%s): disk full or file too large?", name,
                  why);
  }
  dl_h5_quiet_end(q);
  *file = H5I_INVALID_HID;
  return s;
}

/* Extent x element size, false when it overflows 64 bits. */
static bool promised_bytes(hid_t ds, uint64_t *bytes) {
  hid_t space = H5Dget_space(ds), type = H5Dget_type(ds);
  int ndim = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
  size_t width = type >= 0 ? H5Tget_size(type) : 0;
  hsize_t dims[H5S_MAX_RANK];
  bool ok = ndim >= 0 && width > 0 && H5Sget_simple_extent_dims(space, dims, NULL) >= 0;
  *bytes = width;
  for (int i = 0; ok && i < ndim; i++) {
    if (dims[i] && *bytes > UINT64_MAX / dims[i]) ok = false;
    else *bytes *= dims[i];
  }
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  return ok;
}

/* The largest ratio of what ds's filters yield to what they store: 1
 * without filters, 1032 with deflate, 0 for a filter with no known bound. */
static uint64_t largest_ratio(hid_t dcpl) {
  uint64_t ratio = 1;
  int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n; i++) {
    unsigned flags, conf;
    size_t nvalues = 0;
    H5Z_filter_t f = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nvalues, NULL, 0, NULL, &conf);
    if (f == H5Z_FILTER_DEFLATE) ratio = 1032;
    else if (f != H5Z_FILTER_SHUFFLE && f != H5Z_FILTER_FLETCHER32) return 0;
  }
  return n < 0 ? 0 : ratio;
}

dl_status dl_h5_check_stored(hid_t ds, const char *what) {
  uint64_t bytes;
  if (!promised_bytes(ds, &bytes))
    return dl_fail(DL_ERR_FORMAT,
                   "%s: its header promises more than 2^64 bytes: the file is damaged", what);
  if (bytes == 0) return DL_OK;
  hid_t dcpl = H5Dget_create_plist(ds);
  H5D_layout_t layout = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
  uint64_t ratio = layout == H5D_CHUNKED ? largest_ratio(dcpl) : 1;
  if (dcpl >= 0) H5Pclose(dcpl);
  uint64_t stored = H5Dget_storage_size(ds);
  if (layout == H5D_LAYOUT_ERROR)
    return dl_fail(DL_ERR_FORMAT, "%s: unreadable storage layout: the file is damaged", what);
  if (ratio == 0)
    return dl_fail(DL_ERR_FORMAT,
                   "%s is compressed with a filter other than gzip, shuffle or Fletcher32, "
                   "which dlcheck does not read: save it uncompressed or with gzip",
                   what);
  if (stored == 0)
    return dl_fail(DL_ERR_FORMAT, "%s holds no data (created but never written)", what);
  bool fits = layout == H5D_CHUNKED ? bytes / ratio <= stored : bytes == stored;
  if (fits) return DL_OK;
  return dl_fail(DL_ERR_FORMAT,
                 "%s: its header promises %llu bytes, the file holds %llu%s: the file is damaged "
                 "or was not written to the end",
                 what, (unsigned long long)bytes, (unsigned long long)stored,
                 ratio > 1 ? " compressed" : "");
}

/* ---- files written atomically, files read -------------------------------------------------------- */

hid_t dl_h5_ordered_plist(hid_t cls) {
  hid_t p = H5Pcreate(cls);
  if (p < 0) return p;
  H5Pset_link_creation_order(p, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  H5Pset_obj_track_times(p, 0);
  return p;
}

dl_status dl_h5_atomic_create(dl_h5_atomic *a, const char *path) {
  a->file = H5I_INVALID_HID;
  a->out = (dl_atomic_file){.fd = -1};
  if (!path || !*path) return dl_fail(DL_ERR_INVALID, "HDF5 file: empty file name");
  DL_TRY(dl_atomic_open(&a->out, path));
  dl_status s = DL_OK;
  dl_h5_quiet q = dl_h5_quiet_begin();
  hid_t fcpl = dl_h5_ordered_plist(H5P_FILE_CREATE);
  hid_t fapl = dl_h5_file_access();
  a->file = dl_h5_create(a->out.tmp, fcpl, fapl);
  char why[160];
  if (a->file < 0)
    s = dl_fail(DL_ERR_IO, "cannot create HDF5 file %s (%s)", a->out.tmp, dl_h5_reason(why));
  H5Pclose(fcpl);
  H5Pclose(fapl);
  dl_h5_quiet_end(q);
  if (s != DL_OK) dl_h5_atomic_abort(a);
  return s;
}

dl_status dl_h5_atomic_commit(dl_h5_atomic *a) {
  /* Named by its final name: the temporary is gone once this fails. */
  dl_status s = dl_h5_close(&a->file, a->out.path, DL_OK);
  if (s != DL_OK) {
    dl_atomic_abort(&a->out);
    return s;
  }
  return dl_atomic_commit(&a->out);
}

void dl_h5_atomic_abort(dl_h5_atomic *a) {
  if (!a) return;
  dl_h5_close(&a->file, a->out.path, DL_ERR_IO); /* a failure to close changes nothing */
  dl_atomic_abort(&a->out);
}

dl_status dl_h5_open_read(const char *path, hid_t *file) {
  *file = H5I_INVALID_HID;
  if (!path || !*path) return dl_fail(DL_ERR_INVALID, "HDF5 file: empty file name");
  /* A FIFO would block HDF5's open; a folder is no file either. */
  DL_TRY(dl_check_regular(path, NULL));
  dl_h5_quiet q = dl_h5_quiet_begin();
  hid_t fapl = dl_h5_file_access();
  *file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  dl_status s = DL_OK;
  char why[160];
  if (*file < 0)
    s = dl_fail(DL_ERR_FORMAT, "%s is not an HDF5 file or is damaged (%s)", path,
                dl_h5_reason(why));
  H5Pclose(fapl);
  dl_h5_quiet_end(q);
  return s;
}
