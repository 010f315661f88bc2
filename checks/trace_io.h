/* Traces and goldens in HDF5, readable by h5py and h5dump.
 *
 * Layout (schema_version 1):
 *   user block        512 bytes: "dlcheck trace 1\nxxh64 <16 hex digits>\n",
 *                     the xxhash64 of every byte after the user block
 *                     (h5util.h). A load checks it before HDF5 parses the
 *                     file, so a damaged, truncated or edited file is a
 *                     clean DL_ERR_FORMAT, never changed numbers or a crash.
 *   /                 attributes: schema_version (int64, 1), kind ("trace" or
 *                     "golden"), run, scenario, backend, seed (uint64),
 *                     scenario_hash (uint64) and scenario_hash_hex
 *                     ("0x0123456789abcdef")
 *   /series/<name>    float64 [steps], in recording order
 *   /digests/names    strings [n]
 *   /digests/values   uint64 [steps, n]: xxhash64 of tensor j after step s
 *   /stats/<k>        k = 0, 1, ...: attribute step (int64); layers
 *                     strings [nlayers]; values float64 [nlayers, 6] with
 *                     attribute columns = dlc_stat_names
 *   /finals/<name>    the final tensors, as engine state dicts store them
 *                     (float32/float16/bfloat16/int32/int64, rank 0..4)
 *   /metrics/names    strings [n]; /metrics/values float64 [n]
 *   /notes/names      strings [n]; /notes/texts strings [n]
 * A golden adds root attributes env_fingerprint (dlc_env JSON),
 * recorded_at (UTC, ISO 8601) and dlcheck_version, and
 *   /tolerances/quantities strings [n]; /tolerances/rules strings [n]
 *                     ("bitwise", "ulp(4)", "close(1e-05, 1e-06)").
 *
 * Names of series and finals become HDF5 link names, where '/' separates
 * groups: they are percent-encoded ('%' -> "%25", '/' -> "%2F", and a name
 * "." -> "%2E"), so "param/0.weight" is stored as /finals/param%2F0.weight
 * (urllib.parse.unquote in Python undoes it). Every other name and text is
 * an element of a string dataset and stored as is. Strings are fixed-length,
 * NUL-terminated UTF-8.
 *
 * A file changed with h5py no longer matches its seal and is refused:
 * goldens are recorded, not edited. Writes are atomic (temporary file
 * beside the target, fsync, rename, directory fsync): a killed writer
 * leaves the old file or the new one. Files carry no timestamps besides
 * recorded_at: the same trace saves to the same bytes. Reads open without
 * file locking (NFS, Lustre). */
#ifndef DLC_TRACE_IO_H
#define DLC_TRACE_IO_H

#include "env.h"
#include "trace.h"

#include <stdbool.h>

enum { DLC_TRACE_SCHEMA_VERSION = 1, DLC_GOLDEN_TOLS_MAX = 32, DLC_TOL_TEXT_MAX = 64 };

typedef struct dlc_golden_tol {
  char quantity[DLC_NAME_MAX]; /* "loss", "finals", "param/0.weight" */
  char rule[DLC_TOL_TEXT_MAX]; /* parses with dlc_tolerance_parse */
} dlc_golden_tol;

/* What a golden adds to a trace. */
typedef struct dlc_golden_meta {
  bool golden;                      /* on load: the file is a golden */
  char env_json[DLC_ENV_JSON_MAX];  /* dlc_env_to_json of the recording machine */
  char recorded_at[32];             /* "2025-01-31T12:00:00Z" */
  char version[32];                 /* dlcheck version that recorded it */
  int ntols;
  dlc_golden_tol tols[DLC_GOLDEN_TOLS_MAX];
} dlc_golden_meta;

/* A golden's metadata for this machine now: fingerprint, UTC time,
 * version, no tolerances. */
dl_status dlc_golden_meta_init(dlc_golden_meta *m);
/* Sets the rule of `quantity` (replacing one of that name). DL_ERR_INVALID
 * if the rule does not parse, a text is too long or the table is full. */
dl_status dlc_golden_meta_set_tol(dlc_golden_meta *m, const char *quantity, const char *rule);
/* The rule text of `quantity`, or NULL. */
const char *dlc_golden_meta_tol(const dlc_golden_meta *m, const char *quantity);

/* Writes t (a golden when meta is not NULL) to a new file that atomically
 * replaces path. DL_ERR_INVALID for a trace that cannot be stored (empty
 * or repeated series/final names, bad tolerance rules) before anything is
 * written; DL_ERR_IO / DL_ERR_NOMEM if writing fails, the old file intact. */
dl_status dlc_trace_save(const char *path, const dlc_trace *t, const dlc_golden_meta *meta);

/* Reads a trace or golden into out (overwritten: pass an empty or freed
 * trace); meta may be NULL, else it is filled (meta->golden false and the
 * rest empty for a plain trace). Missing/unreadable file: DL_ERR_IO
 * "PATH: cannot open: ..."; not HDF5, truncated, damaged, another
 * schema_version or a required part missing: DL_ERR_FORMAT naming the
 * file and the part. On failure out is empty and meta zeroed. */
dl_status dlc_trace_load(const char *path, dlc_trace *out, dlc_golden_meta *meta);

#endif
