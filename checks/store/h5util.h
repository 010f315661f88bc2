/* Small HDF5 helpers for the harness's own files (traces, goldens):
 * attributes, numeric datasets and fixed-length string arrays, written
 * without timestamps (same content, same bytes) and read back with every
 * type, rank and size checked before a byte is allocated or copied.
 *
 * Messages name the object as "FILE:/group/name": callers pass `where`, the
 * object holding the attribute or dataset ("out.h5:/series", or "out.h5:"
 * for the root group). Write failures are DL_ERR_IO; anything missing,
 * mistyped or inconsistent on reading is DL_ERR_FORMAT.
 *
 * Silencing HDF5's own error printing and taking its reason for a message
 * are the engine's (h5.h: dl_h5_quiet_begin/end, dl_h5_reason). */
#ifndef DLC_H5UTIL_H
#define DLC_H5UTIL_H

#include "core/status.h"
#include "trace/spill.h"

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

/* ---- groups -------------------------------------------------------------- */

/* A new group `name` under parent, tracking creation order, no timestamps. */
dl_status dlc_h5_group_create(hid_t parent, const char *where, const char *name, hid_t *g);
/* An existing group; DL_ERR_FORMAT if absent or not a group. */
dl_status dlc_h5_group_open(hid_t parent, const char *where, const char *name, hid_t *g);
/* Number of links in group g, and the name of the i-th in creation order
 * (name order where the file does not track creation). *name is malloc'd. */
dl_status dlc_h5_group_count(hid_t g, const char *where, int64_t *n);
dl_status dlc_h5_link_name(hid_t g, const char *where, int64_t i, char **name);

/* ---- attributes ----------------------------------------------------------- */

dl_status dlc_h5_attr_write_str(hid_t obj, const char *where, const char *name, const char *value);
dl_status dlc_h5_attr_write_u64(hid_t obj, const char *where, const char *name, uint64_t v);
dl_status dlc_h5_attr_write_i64(hid_t obj, const char *where, const char *name, int64_t v);
/* A 1-D array of n fixed-length strings. */
dl_status dlc_h5_attr_write_strs(hid_t obj, const char *where, const char *name, int n,
                                 const char *const *v);

/* A scalar fixed-length string attribute copied into buf; DL_ERR_FORMAT if
 * it does not fit in len bytes (NUL included). NUL-terminated and
 * NUL-padded strings (h5py's numpy bytes, full ones without a NUL) read the
 * same: the value ends at the first NUL or at the type's size. */
dl_status dlc_h5_attr_read_str(hid_t obj, const char *where, const char *name, char *buf,
                               size_t len);
/* A scalar integer attribute of any integer type whose value fits. */
dl_status dlc_h5_attr_read_u64(hid_t obj, const char *where, const char *name, uint64_t *v);
dl_status dlc_h5_attr_read_i64(hid_t obj, const char *where, const char *name, int64_t *v);

/* ---- numeric datasets ------------------------------------------------------ */

typedef enum { DLC_H5_F64, DLC_H5_U64 } dlc_h5_num;

/* A dataset of rank 1 or 2 (dims[0..rank-1]) holding float64 or uint64. */
dl_status dlc_h5_write_num(hid_t loc, const char *where, const char *name, dlc_h5_num type,
                           int rank, const hsize_t *dims, const void *data);
/* Reads a dataset that must be exactly `type` (float64 / uint64, any byte
 * order) of rank `rank`; dims are filled, *data is malloc'd (NULL when
 * empty) and bit-exact. */
dl_status dlc_h5_read_num(hid_t loc, const char *where, const char *name, dlc_h5_num type, int rank,
                          hsize_t *dims, void **data);
/* The same (rank 1 or 2) into an array that spills to a file when long
 * (trace/spill.h; sp empty before, freed with dlc_spill_free), read a
 * chunk of rows at a time: a trace's per-step series and digests. */
dl_status dlc_h5_read_num_spilled(hid_t loc, const char *where, const char *name, dlc_h5_num type,
                                  int rank, hsize_t *dims, void **data, dlc_spill *sp);

/* ---- string datasets ------------------------------------------------------- */

/* n fixed-length strings, as wide as the longest; staged in accounted
 * memory (dl_mem_alloc). */
dl_status dlc_h5_write_strs(hid_t loc, const char *where, const char *name, int64_t n,
                            const char *const *v);

/* Strings read from a 1-D fixed-length string dataset (any padding, as
 * attributes). */
typedef struct dlc_h5_strs {
  int64_t n;
  size_t width;
  char *data; /* n * width bytes, each string NUL-padded or terminated */
} dlc_h5_strs;

dl_status dlc_h5_read_strs(hid_t loc, const char *where, const char *name, dlc_h5_strs *out);
/* String i copied into dst; DL_ERR_FORMAT naming where/name if it does not
 * fit in len bytes. */
dl_status dlc_h5_strs_get(const dlc_h5_strs *s, int64_t i, const char *where, const char *name,
                          char *dst, size_t len);
/* String i as a new malloc'd string (NULL with a message on failure). */
char *dlc_h5_strs_dup(const dlc_h5_strs *s, int64_t i);
void dlc_h5_strs_free(dlc_h5_strs *s); /* leaves s empty; safe on empty */

/* ---- sealed files ------------------------------------------------------------ */

/* A sealed file starts with an HDF5 user block of DLC_H5_USERBLOCK bytes
 * (create it with H5Pset_userblock) holding a text header,
 *   MAGIC "xxh64 " 16 hex digits "\n", then NULs,
 * where the digits are the xxhash64 (seed 0) of every byte after the user
 * block. HDF5 never parses a file whose seal does not check, so damage of
 * any kind is a clean DL_ERR_FORMAT, never a crash inside HDF5 or a leak
 * in its error paths (HDF5 1.10 leaks on damaged object headers). */
enum { DLC_H5_USERBLOCK = 512 };

/* Writes the header into fd, an HDF5 file closed by HDF5 but open here
 * read-write; `path` names it in messages. DL_ERR_IO on failure. */
dl_status dlc_h5_seal(int fd, const char *path, const char *magic);
/* Checks the seal of `path`: DL_ERR_IO "PATH: cannot open: ..." if it
 * cannot be read; DL_ERR_FORMAT if the header is missing (another kind of
 * file) or the hash differs (damaged, truncated or changed since). */
dl_status dlc_h5_check_seal(const char *path, const char *magic);

#endif
