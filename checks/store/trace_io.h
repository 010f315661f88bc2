/* Traces and goldens in HDF5, readable by h5py and h5dump: dlc_trace_save
 * writes a trace (a golden when meta is given) atomically, sealed with an
 * xxhash64 header that dlc_trace_load checks before HDF5 parses the file;
 * anything damaged, mistyped or of another schema_version is a clean
 * DL_ERR_FORMAT. The file format (schema_version 1: layout, types, name
 * encoding, seal, golden tolerances, what a reader refuses) is specified
 * in docs/trace-format.md; change the two together. */
#ifndef DLC_TRACE_IO_H
#define DLC_TRACE_IO_H

#include "store/env.h"
#include "judge/envelope.h"
#include "trace/trace.h"

#include <stdbool.h>

enum { DLC_TRACE_SCHEMA_VERSION = 1, DLC_GOLDEN_TOLS_MAX = 32, DLC_TOL_TEXT_MAX = 64 };

typedef struct dlc_golden_tol {
  char quantity[DLC_NAME_MAX]; /* "loss", "finals", "param/0.weight" */
  char rule[DLC_TOL_TEXT_MAX]; /* parses with dlc_tolerance_parse */
} dlc_golden_tol;

/* What a golden adds to a trace. A plain trace may carry env_json alone
 * (golden false, the rest empty). */
typedef struct dlc_golden_meta {
  bool golden;                     /* the file is (on save: is to be) a golden */
  char env_json[DLC_ENV_JSON_MAX]; /* dlc_env_to_json of the recording machine; "" none */
  char recorded_at[32];            /* "2025-01-31T12:00:00Z" */
  char version[32];                /* dlcheck version that recorded it */
  int ntols;
  dlc_golden_tol tols[DLC_GOLDEN_TOLS_MAX];
  /* "single" (one run; also what a golden without the root attribute
   * golden_kind reads as) or "calibrated" (the file holds an envelope). */
  char golden_kind[16];
} dlc_golden_meta;

/* A golden's metadata for this machine now: fingerprint, UTC time,
 * version, no tolerances. */
dl_status dlc_golden_meta_init(dlc_golden_meta *m);
/* Sets the rule of `quantity` (replacing one of that name). DL_ERR_INVALID
 * if the rule does not parse, a text is too long or the table is full. */
dl_status dlc_golden_meta_set_tol(dlc_golden_meta *m, const char *quantity, const char *rule);
/* The rule text of `quantity`, or NULL. */
const char *dlc_golden_meta_tol(const dlc_golden_meta *m, const char *quantity);
/* A golden's metadata as dlcheck records it: dlc_golden_meta_init, the
 * fingerprint origin_env instead of this machine's when not empty (where a
 * recorded run computed), and the rules of loss, grad_norm, params and
 * buffers: bitwise (the CPU engine's promise) or float32's default
 * closeness, close(1.3e-6, 1e-5). */
dl_status dlc_golden_meta_recorded(dlc_golden_meta *m, const char *origin_env, bool bitwise);

/* Writes t to a new file that atomically replaces path: a golden when meta
 * is not NULL and meta->golden; else a plain trace, with the root attribute
 * env_fingerprint when meta is not NULL and meta->env_json is not empty
 * (the rest of meta is then unused). DL_ERR_INVALID for a trace that
 * cannot be stored (empty or repeated series/final names, bad tolerance
 * rules) before anything is written; DL_ERR_IO / DL_ERR_NOMEM if writing
 * fails, the old file intact. */
dl_status dlc_trace_save(const char *path, const dlc_trace *t, const dlc_golden_meta *meta);

/* Reads a trace or golden into out (overwritten: pass an empty or freed
 * trace); meta may be NULL, else it is filled (for a plain trace
 * meta->golden is false, env_json its optional env_fingerprint or "", and
 * the rest empty). Missing/unreadable file: DL_ERR_IO
 * "PATH: cannot open: ..."; not HDF5, truncated, damaged, another
 * schema_version or a required part missing: DL_ERR_FORMAT naming the
 * file and the part. On failure out is empty and meta zeroed. */
dl_status dlc_trace_load(const char *path, dlc_trace *out, dlc_golden_meta *meta);

/* A calibrated golden: dlc_trace_save of t with meta (meta->golden must
 * be set), plus env in /envelope and the root attribute golden_kind =
 * "calibrated" (docs/trace-format.md, since 0.3). */
dl_status dlc_golden_save_calibrated(const char *path, const dlc_trace *t,
                                     const dlc_golden_meta *meta, const dlc_envelope *env);
/* dlc_trace_load, and env (emptied first; may be NULL) filled when the file
 * is a calibrated golden. A calibrated golden whose envelope is missing or
 * damaged is DL_ERR_FORMAT naming the part. */
dl_status dlc_golden_load(const char *path, dlc_trace *out, dlc_golden_meta *meta,
                          dlc_envelope *env);

#endif
