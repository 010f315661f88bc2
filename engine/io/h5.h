/* Small HDF5 helpers shared by every module that reads or writes HDF5
 * (state dicts, checkpoints, datasets, the harness's traces and goldens),
 * so that all of them report HDF5's errors, create files atomically, open
 * them for reading and list groups the same way. */
#ifndef DL_H5_H
#define DL_H5_H

#include "core/status.h"
#include "io/atomic_file.h"

#include <hdf5.h>
#include <stdbool.h>

/* HDF5 prints its error stack to stderr by default; we report errors
 * through dl_fail instead, so printing is off between begin and end, which
 * puts the caller's handler back. */
typedef struct dl_h5_quiet {
  H5E_auto2_t fn;
  void *data;
} dl_h5_quiet;

dl_h5_quiet dl_h5_quiet_begin(void);
void dl_h5_quiet_end(dl_h5_quiet q);
/* Printing off for the rest of the process, for a program that reports
 * every error through dl_fail (the CLI). It also keeps HDF5's exit handler
 * quiet, which prints only where printing is on: HDF5 1.10 loses memory on
 * some error paths of damaged files (an object header whose checksum fails
 * in its metadata cache), and its exit handler would then print "HDF5:
 * infinite loop closing library" and a line of the interfaces it could not
 * close, after dlcheck's own message. */
void dl_h5_quiet_for_good(void);

/* The innermost (most specific) message of HDF5's current error stack
 * into buf, or "no detail from HDF5"; returns buf. Takes the stack, so call
 * it right after the failing call, before any other HDF5 call clears it. */
const char *dl_h5_reason(char buf[160]);

/* A file-access property list (close with H5Pclose; negative on failure):
 * H5F_CLOSE_STRONG, and file locking off where the HDF5 version allows it,
 * as locks fail on NFS and Lustre, where training output often lives. */
hid_t dl_h5_file_access(void);

/* Closes the HDF5 file *file (nothing if negative) and sets it to
 * H5I_INVALID_HID; `name` names it in the message. Returns s when s is a
 * failure already (its message kept), else DL_ERR_IO if closing failed
 * (flushing failed: disk full, file too large), else DL_OK. */
dl_status dl_h5_close(hid_t *file, const char *name, dl_status s);
/* H5Fcreate(path, H5F_ACC_TRUNC, fcpl, fapl), noting a failure for
 * dl_h5_close_failed: HDF5 1.10 keeps a file whose creation failed at its
 * first write as it keeps one whose close failed. */
hid_t dl_h5_create(const char *path, hid_t fcpl, hid_t fapl);
/* Whether a create or close failed in this process. HDF5 (1.10) keeps such a file
 * half closed, and its exit handler crashes on it (SIGSEGV at exit after
 * "errno = 28"); releasing the id crashes the same way. A program that
 * sees true ends with _exit, after flushing its output, so that the
 * handler never runs (the CLI does, cli/main.c). */
bool dl_h5_close_failed(void);

/* The order to list group g's links in: creation order where the group
 * indexes it (ours do), else name order (files written without it). */
H5_index_t dl_h5_link_order(hid_t g);

/* Whether dataset ds's file holds the data its header promises (extent x
 * element size), checked before anything is allocated for it: a damaged
 * or hostile header can claim gigabytes in a file of a few kilobytes.
 * Contiguous and compact data must occupy exactly that; chunked data
 * without filters at least that (every chunk written); compressed data at
 * least 1/1032 of it, deflate's largest ratio (shuffle and Fletcher32
 * change nothing). Other filters have no such bound and are refused.
 * `what` names the dataset in the message (DL_ERR_FORMAT). */
dl_status dl_h5_check_stored(hid_t ds, const char *what);

/* A property list for H5P_FILE_CREATE or H5P_GROUP_CREATE (close with
 * H5Pclose; negative on failure) that tracks creation order, so that keys
 * read back in the order they were written, and stores no timestamps, so
 * that the same tensors give the same bytes. */
hid_t dl_h5_ordered_plist(hid_t cls);

/* A new HDF5 file under a temporary name beside `path` (atomic_file.h:
 * never through a link, a `path` that is not a regular file refused);
 * commit renames it over `path`, abort deletes it. */
typedef struct dl_h5_atomic {
  hid_t file;
  dl_atomic_file out; /* out.tmp is the file HDF5 writes, out.fd open on it */
} dl_h5_atomic;

dl_status dl_h5_atomic_create(dl_h5_atomic *a, const char *path);
dl_status dl_h5_atomic_commit(dl_h5_atomic *a); /* on failure the temp is gone */
void dl_h5_atomic_abort(dl_h5_atomic *a);       /* safe after commit */

/* Opens an existing file read-only with dl_h5_file_access (no file
 * locking where HDF5 allows, so NFS/Lustre work). DL_ERR_IO if
 * missing/unreadable, DL_ERR_FORMAT if not HDF5. Close with H5Fclose. */
dl_status dl_h5_open_read(const char *path, hid_t *file);

#endif
