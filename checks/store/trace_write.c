/* Writing traces and goldens (trace_io.h, docs/trace-format.md): the
 * checks made before anything is written, the groups, and the sealed file
 * put in place atomically. */
#define _POSIX_C_SOURCE 200809L

#include "store/trace_io.h"

#include "io/atomic_file.h"
#include "io/h5.h"
#include "judge/tolerance.h"
#include "io/state_dict.h"
#include "store/h5util.h"
#include "store/trace_names.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- checking before writing ------------------------------------------------------- */

static bool terminated(const char *s, size_t size) { return memchr(s, '\0', size) != NULL; }

static dl_status check_name(const char *path, const char *what, const char *name,
                            const char *const *earlier, int n) {
  if (!terminated(name, DLC_NAME_MAX) || !*name)
    return dl_fail(DL_ERR_INVALID, "%s: a %s has an empty or unterminated name", path, what);
  for (int i = 0; i < n; i++)
    if (strcmp(earlier[i], name) == 0)
      return dl_fail(DL_ERR_INVALID, "%s: two %s entries are named '%s'", path, what, name);
  return DL_OK;
}

static dl_status check_series_and_finals(const char *path, const dlc_trace *t) {
  int n = t->nseries > t->nfinals ? t->nseries : t->nfinals;
  const char **seen = malloc((size_t)(n ? n : 1) * sizeof *seen);
  if (!seen) return dl_fail(DL_ERR_NOMEM, "%s: out of memory checking the trace", path);
  dl_status s = DL_OK;
  for (int i = 0; s == DL_OK && i < t->nseries; i++) {
    s = check_name(path, "series", t->series[i].name, seen, i);
    if (s == DL_OK && (t->series[i].n < 0 || (t->series[i].n && !t->series[i].v)))
      s = dl_fail(DL_ERR_INVALID, "%s: series %s has no values", path, t->series[i].name);
    seen[i] = t->series[i].name;
  }
  for (int i = 0; s == DL_OK && i < t->nfinals; i++) {
    s = check_name(path, "final tensor", t->finals[i].name, seen, i);
    seen[i] = t->finals[i].name;
  }
  free(seen);
  return s;
}

static dl_status check_meta(const char *path, const dlc_golden_meta *m) {
  if (!terminated(m->env_json, sizeof m->env_json) ||
      !terminated(m->recorded_at, sizeof m->recorded_at) ||
      !terminated(m->version, sizeof m->version) || m->ntols < 0 || m->ntols > DLC_GOLDEN_TOLS_MAX)
    return dl_fail(DL_ERR_INVALID,
                   "%s: golden metadata is not initialised "
                   "(dlc_golden_meta_init)",
                   path);
  for (int i = 0; i < m->ntols; i++) {
    dlc_tolerance parsed;
    if (!terminated(m->tols[i].quantity, DLC_NAME_MAX) ||
        !terminated(m->tols[i].rule, DLC_TOL_TEXT_MAX) ||
        dlc_tolerance_parse(m->tols[i].rule, &parsed) != DL_OK)
      return dl_fail(DL_ERR_INVALID,
                     "%s: golden tolerance %d is not a valid rule "
                     "(dlc_golden_meta_set_tol)",
                     path, i);
  }
  return DL_OK;
}

static bool is_golden(const dlc_golden_meta *m) { return m && m->golden; }

static dl_status check_trace(const char *path, const dlc_trace *t, const dlc_golden_meta *m) {
  if (!path || !*path) return dl_fail(DL_ERR_INVALID, "trace: empty file name");
  if (!terminated(t->run, sizeof t->run) || !terminated(t->scenario, sizeof t->scenario) ||
      !terminated(t->backend, sizeof t->backend))
    return dl_fail(DL_ERR_INVALID, "%s: the trace's run, scenario or backend is unterminated",
                   path);
  if (t->ndigest < 0 || t->digest_steps < 0 ||
      (t->ndigest && (!t->digest_names || (t->digest_steps && !t->digests))))
    return dl_fail(DL_ERR_INVALID, "%s: the trace's digests are inconsistent", path);
  for (int i = 0; i < t->nstats; i++)
    if (t->stats[i].nlayers < 0 ||
        (t->stats[i].nlayers && (!t->stats[i].layer || !t->stats[i].stat)))
      return dl_fail(DL_ERR_INVALID, "%s: layer statistics %d are inconsistent", path, i);
  for (int i = 0; i < t->nnotes; i++)
    if (!t->notes[i].text)
      return dl_fail(DL_ERR_INVALID, "%s: note %s has no text", path, t->notes[i].name);
  DL_TRY(check_series_and_finals(path, t));
  if (m && !terminated(m->env_json, sizeof m->env_json))
    return dl_fail(DL_ERR_INVALID, "%s: the environment fingerprint is unterminated", path);
  return is_golden(m) ? check_meta(path, m) : DL_OK;
}

/* ---- writing ------------------------------------------------------------------------- */

/* Pointers to n names laid out `stride` bytes apart from first (malloc'd). */
static const char **gather(const char *first, size_t stride, int64_t n) {
  const char **v = malloc((size_t)(n ? n : 1) * sizeof *v);
  if (!v) {
    dl_fail(DL_ERR_NOMEM, "out of memory listing %lld names", (long long)n);
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) v[i] = first + (size_t)i * stride;
  return v;
}

/* A group under the root, passed to fn, closed after. */
typedef dl_status (*group_writer)(hid_t g, const char *where, const dlc_trace *t,
                                  const dlc_golden_meta *m);

static dl_status write_group(hid_t file, const char *path, const char *name, group_writer fn,
                             const dlc_trace *t, const dlc_golden_meta *m) {
  char where[DLC_TRACE_WHERE_MAX], root[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(root, path, ":", "");
  dlc_trace_join(where, path, ":/", name);
  hid_t g;
  DL_TRY(dlc_h5_group_create(file, root, name, &g));
  dl_status s = fn(g, where, t, m);
  H5Gclose(g);
  return s;
}

static dl_status write_series(hid_t g, const char *where, const dlc_trace *t,
                              const dlc_golden_meta *m) {
  (void)m;
  for (int i = 0; i < t->nseries; i++) {
    char enc[DLC_TRACE_ENCODED_MAX];
    dlc_trace_encode_name(t->series[i].name, enc);
    hsize_t dims[1] = {(hsize_t)t->series[i].n};
    DL_TRY(dlc_h5_write_num(g, where, enc, DLC_H5_F64, 1, dims, t->series[i].v));
  }
  return DL_OK;
}

static dl_status write_digests(hid_t g, const char *where, const dlc_trace *t,
                               const dlc_golden_meta *m) {
  (void)m;
  const char **names = gather(t->ndigest ? t->digest_names[0] : NULL, DLC_NAME_MAX, t->ndigest);
  if (!names) return dl_fail_context(DL_ERR_NOMEM, "%s: ", where);
  dl_status s = dlc_h5_write_strs(g, where, "names", t->ndigest, names);
  free(names);
  hsize_t dims[2] = {(hsize_t)t->digest_steps, (hsize_t)t->ndigest};
  if (s == DL_OK) s = dlc_h5_write_num(g, where, "values", DLC_H5_U64, 2, dims, t->digests);
  return s;
}

static dl_status write_one_stats(hid_t g, const char *where, const dlc_layer_stats *st) {
  DL_TRY(dlc_h5_attr_write_i64(g, where, "step", st->step));
  const char **layers = gather(st->nlayers ? st->layer[0] : NULL, DLC_NAME_MAX, st->nlayers);
  if (!layers) return dl_fail_context(DL_ERR_NOMEM, "%s: ", where);
  dl_status s = dlc_h5_write_strs(g, where, "layers", st->nlayers, layers);
  free(layers);
  hsize_t dims[2] = {(hsize_t)st->nlayers, DLC_STAT_COUNT};
  if (s == DL_OK) s = dlc_h5_write_num(g, where, "values", DLC_H5_F64, 2, dims, st->stat);
  if (s != DL_OK) return s;
  hid_t ds = H5Dopen2(g, "values", H5P_DEFAULT);
  if (ds < 0) return dl_fail(DL_ERR_IO, "%s/values: cannot reopen it", where);
  char here[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(here, where, "/", "values");
  s = dlc_h5_attr_write_strs(ds, here, "columns", DLC_STAT_COUNT, dlc_stat_names);
  H5Dclose(ds);
  return s;
}

static dl_status write_stats(hid_t g, const char *where, const dlc_trace *t,
                             const dlc_golden_meta *m) {
  (void)m;
  for (int i = 0; i < t->nstats; i++) {
    char name[16], here[DLC_TRACE_WHERE_MAX];
    snprintf(name, sizeof name, "%d", i);
    dlc_trace_join(here, where, "/", name);
    hid_t k;
    DL_TRY(dlc_h5_group_create(g, where, name, &k));
    dl_status s = write_one_stats(k, here, &t->stats[i]);
    H5Gclose(k);
    DL_TRY(s);
  }
  return DL_OK;
}

static dl_status write_metrics(hid_t g, const char *where, const dlc_trace *t,
                               const dlc_golden_meta *m) {
  (void)m;
  int n = t->nmetrics;
  const char **names = gather(n ? t->metrics[0].name : NULL, sizeof *t->metrics, n);
  double *values = malloc((size_t)(n ? n : 1) * sizeof *values);
  dl_status s = names && values ? DL_OK : dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  for (int i = 0; s == DL_OK && i < n; i++) values[i] = t->metrics[i].value;
  hsize_t dims[1] = {(hsize_t)n};
  if (s == DL_OK) s = dlc_h5_write_strs(g, where, "names", n, names);
  if (s == DL_OK) s = dlc_h5_write_num(g, where, "values", DLC_H5_F64, 1, dims, values);
  free(names);
  free(values);
  return s;
}

static dl_status write_notes(hid_t g, const char *where, const dlc_trace *t,
                             const dlc_golden_meta *m) {
  (void)m;
  int n = t->nnotes;
  const char **names = gather(n ? t->notes[0].name : NULL, sizeof *t->notes, n);
  const char **texts = malloc((size_t)(n ? n : 1) * sizeof *texts);
  dl_status s = names && texts ? DL_OK : dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  for (int i = 0; s == DL_OK && i < n; i++) texts[i] = t->notes[i].text;
  if (s == DL_OK) s = dlc_h5_write_strs(g, where, "names", n, names);
  if (s == DL_OK) s = dlc_h5_write_strs(g, where, "texts", n, texts);
  free(names);
  free(texts);
  return s;
}

static dl_status write_tolerances(hid_t g, const char *where, const dlc_trace *t,
                                  const dlc_golden_meta *m) {
  (void)t;
  int n = m->ntols;
  const char **quantities = gather(n ? m->tols[0].quantity : NULL, sizeof *m->tols, n);
  const char **rules = gather(n ? m->tols[0].rule : NULL, sizeof *m->tols, n);
  dl_status s = quantities && rules ? DL_OK : dl_fail_context(DL_ERR_NOMEM, "%s: ", where);
  if (s == DL_OK) s = dlc_h5_write_strs(g, where, "quantities", n, quantities);
  if (s == DL_OK) s = dlc_h5_write_strs(g, where, "rules", n, rules);
  free(quantities);
  free(rules);
  return s;
}

/* Finals go through the engine's state-dict writer, under encoded names. */
static dl_status write_finals(hid_t file, const char *path, const dlc_trace *t) {
  int n = t->nfinals;
  dl_named_tensor *items = malloc((size_t)(n ? n : 1) * sizeof *items);
  char(*names)[DLC_TRACE_ENCODED_MAX] = malloc((size_t)(n ? n : 1) * sizeof *names);
  dl_status s = items && names ? DL_OK : dl_fail(DL_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; s == DL_OK && i < n; i++) {
    dlc_trace_encode_name(t->finals[i].name, names[i]);
    items[i] = (dl_named_tensor){names[i], (dl_tensor *)&t->finals[i].t};
  }
  if (s == DL_OK) s = dl_state_write_group(file, path, "/finals", items, n);
  free(items);
  free(names);
  return s;
}

/* calibrated: a golden with an envelope (root attribute golden_kind). */
static dl_status write_root(hid_t file, const char *path, const dlc_trace *t,
                            const dlc_golden_meta *m, bool calibrated) {
  char where[DLC_TRACE_WHERE_MAX], hex[24];
  dlc_trace_join(where, path, ":", "");
  snprintf(hex, sizeof hex, "0x%016llx", (unsigned long long)t->scenario_hash);
  hid_t root = H5Gopen2(file, "/", H5P_DEFAULT);
  if (root < 0) return dl_fail(DL_ERR_IO, "%s: cannot open the root group", path);
  dl_status s = dlc_h5_attr_write_i64(root, where, "schema_version", DLC_TRACE_SCHEMA_VERSION);
  bool golden = is_golden(m);
  if (s == DL_OK) s = dlc_h5_attr_write_str(root, where, "kind", golden ? "golden" : "trace");
  if (s == DL_OK) s = dlc_h5_attr_write_str(root, where, "run", t->run);
  if (s == DL_OK) s = dlc_h5_attr_write_str(root, where, "scenario", t->scenario);
  if (s == DL_OK) s = dlc_h5_attr_write_str(root, where, "backend", t->backend);
  if (s == DL_OK) s = dlc_h5_attr_write_u64(root, where, "seed", t->seed);
  if (s == DL_OK) s = dlc_h5_attr_write_u64(root, where, "scenario_hash", t->scenario_hash);
  if (s == DL_OK) s = dlc_h5_attr_write_str(root, where, "scenario_hash_hex", hex);
  if (s == DL_OK && (golden || (m && m->env_json[0])))
    s = dlc_h5_attr_write_str(root, where, "env_fingerprint", m->env_json);
  if (s == DL_OK && golden) s = dlc_h5_attr_write_str(root, where, "recorded_at", m->recorded_at);
  if (s == DL_OK && golden) s = dlc_h5_attr_write_str(root, where, "dlcheck_version", m->version);
  if (s == DL_OK && calibrated) s = dlc_h5_attr_write_str(root, where, "golden_kind", "calibrated");
  H5Gclose(root);
  return s;
}

/* /envelope of a calibrated golden (docs/trace-format.md section 9). */
static dl_status write_envelope_series(hid_t g, const char *where, const dlc_envelope *e) {
  for (int i = 0; i < e->nseries; i++) {
    char enc[DLC_TRACE_ENCODED_MAX];
    dlc_trace_encode_name(e->series[i].name, enc);
    hsize_t dims[2] = {(hsize_t)e->series[i].n, DLC_ENV_COLS};
    DL_TRY(dlc_h5_write_num(g, where, enc, DLC_H5_F64, 2, dims, e->series[i].v));
  }
  return DL_OK;
}

static dl_status write_envelope_finals(hid_t g, const char *where, const dlc_envelope *e) {
  int n = e->nfinals;
  const char **names = gather(n ? e->finals[0].name : NULL, sizeof *e->finals, n);
  double(*v)[DLC_FIN_COLS] = malloc((size_t)(n ? n : 1) * sizeof *v);
  dl_status s = names && v ? DL_OK : dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  for (int i = 0; s == DL_OK && i < n; i++) memcpy(v[i], e->finals[i].v, sizeof v[i]);
  hsize_t dims[2] = {(hsize_t)n, DLC_FIN_COLS};
  if (s == DL_OK) s = dlc_h5_write_strs(g, where, "names", n, names);
  if (s == DL_OK) s = dlc_h5_write_num(g, where, "values", DLC_H5_F64, 2, dims, v);
  free(names);
  free(v);
  return s;
}

typedef dl_status (*envelope_part)(hid_t g, const char *where, const dlc_envelope *e);

static dl_status write_envelope_part(hid_t parent, const char *where, const char *name,
                                     envelope_part fn, const dlc_envelope *e) {
  char here[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(here, where, "/", name);
  hid_t g;
  DL_TRY(dlc_h5_group_create(parent, where, name, &g));
  dl_status s = fn(g, here, e);
  H5Gclose(g);
  return s;
}

static dl_status write_envelope(hid_t file, const char *path, const dlc_envelope *e) {
  char root[DLC_TRACE_WHERE_MAX], where[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(root, path, ":", "");
  dlc_trace_join(where, path, ":/", "envelope");
  hid_t g;
  DL_TRY(dlc_h5_group_create(file, root, "envelope", &g));
  hsize_t one[1] = {1};
  dl_status s = dlc_h5_attr_write_i64(g, where, "repeats", e->repeats);
  if (s == DL_OK) s = dlc_h5_attr_write_str(g, where, "perturbation", e->perturbation);
  if (s == DL_OK) s = dlc_h5_write_num(g, where, "widen", DLC_H5_F64, 1, one, &e->widen);
  if (s == DL_OK) s = write_envelope_part(g, where, "series", write_envelope_series, e);
  if (s == DL_OK) s = write_envelope_part(g, where, "finals", write_envelope_finals, e);
  H5Gclose(g);
  return s;
}

static dl_status write_all(hid_t file, const char *path, const dlc_trace *t,
                           const dlc_golden_meta *m, const dlc_envelope *e) {
  DL_TRY(write_root(file, path, t, m, e != NULL));
  DL_TRY(write_group(file, path, "series", write_series, t, m));
  DL_TRY(write_group(file, path, "digests", write_digests, t, m));
  DL_TRY(write_group(file, path, "stats", write_stats, t, m));
  DL_TRY(write_finals(file, path, t));
  DL_TRY(write_group(file, path, "metrics", write_metrics, t, m));
  DL_TRY(write_group(file, path, "notes", write_notes, t, m));
  if (is_golden(m)) DL_TRY(write_group(file, path, "tolerances", write_tolerances, t, m));
  return e ? write_envelope(file, path, e) : DL_OK;
}

/* The temporary (atomic_file.h) is created again by HDF5 with the user
 * block that holds the seal (h5util.h), in the 1.8 format whose superblock
 * and object headers carry HDF5's own checksums too. */
static dl_status create_with_userblock(const dl_atomic_file *out, const char *path, hid_t *file) {
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = dl_h5_file_access();
  *file = H5I_INVALID_HID;
  if (fcpl >= 0 && fapl >= 0 && H5Pset_userblock(fcpl, DLC_H5_USERBLOCK) >= 0 &&
      H5Pset_obj_track_times(fcpl, 0) >= 0 && /* the root group's times */
      H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) >= 0)
    *file = dl_h5_create(out->tmp, fcpl, fapl);
  /* The reason first: closing the property lists clears HDF5's error stack. */
  char why[160];
  if (*file < 0) dl_h5_reason(why);
  if (fcpl >= 0) H5Pclose(fcpl);
  if (fapl >= 0) H5Pclose(fapl);
  if (*file >= 0) return DL_OK;
  return dl_fail(DL_ERR_IO, "%s: cannot create the temporary HDF5 file %s (%s)", path, out->tmp,
                 why);
}

/* HDF5 is done with the temporary: close it, then seal its bytes. A
 * failure names the final path: the temporary is removed after it. */
static dl_status close_and_seal(hid_t *file, const dl_atomic_file *out, const char *path) {
  DL_TRY(dl_h5_close(file, path, DL_OK));
  return dlc_h5_seal(out->fd, out->tmp, DLC_TRACE_MAGIC);
}

/* Crash tests (tests/cli): DLCHECK_FAILPOINT=before_rename kills the
 * process once the new file is complete but not yet renamed over the old
 * one, as a power cut or OOM kill would; sleep_before_rename waits there a
 * minute instead, for a test to send a signal while the temporary exists.
 * Nothing else reads the variable. */
static void failpoint(const char *name) {
  const char *armed = getenv("DLCHECK_FAILPOINT");
  if (armed && strcmp(armed, name) == 0) raise(SIGKILL);
  if (armed && strncmp(armed, "sleep_", 6) == 0 && strcmp(armed + 6, name) == 0) sleep(60);
}

static dl_status check_envelope(const char *path, const dlc_envelope *e,
                                const dlc_golden_meta *meta) {
  if (!is_golden(meta))
    return dl_fail(DL_ERR_INVALID, "%s: an envelope is stored in goldens only", path);
  if (e->repeats < DLC_ENVELOPE_MIN_REPEATS || !(e->widen >= 1.0) ||
      !terminated(e->perturbation, sizeof e->perturbation))
    return dl_fail(DL_ERR_INVALID, "%s: the envelope is not built (dlc_envelope_build)", path);
  for (int i = 0; i < e->nseries; i++)
    if (!*e->series[i].name || (e->series[i].n && !e->series[i].v))
      return dl_fail(DL_ERR_INVALID, "%s: envelope series %d is inconsistent", path, i);
  return DL_OK;
}

static dl_status save(const char *path, const dlc_trace *t, const dlc_golden_meta *meta,
                      const dlc_envelope *env) {
  DL_TRY(check_trace(path, t, meta));
  if (env) DL_TRY(check_envelope(path, env, meta));
  dl_atomic_file out;
  DL_TRY(dl_atomic_open(&out, path));
  hid_t file;
  dl_h5_quiet q = dl_h5_quiet_begin();
  dl_status s = create_with_userblock(&out, path, &file);
  if (s == DL_OK) s = write_all(file, path, t, meta, env);
  if (s == DL_OK) s = close_and_seal(&file, &out, path);
  s = dl_h5_close(&file, path, s); /* after a failure: every id released */
  dl_h5_quiet_end(q);
  if (s != DL_OK) {
    dl_atomic_abort(&out);
    return s;
  }
  failpoint("before_rename");
  return dl_atomic_commit(&out);
}

dl_status dlc_trace_save(const char *path, const dlc_trace *t, const dlc_golden_meta *meta) {
  return save(path, t, meta, NULL);
}

dl_status dlc_golden_save_calibrated(const char *path, const dlc_trace *t,
                                     const dlc_golden_meta *meta, const dlc_envelope *env) {
  if (!env) return dl_fail(DL_ERR_INVALID, "%s: a calibrated golden needs its envelope", path);
  return save(path, t, meta, env);
}
