#define _POSIX_C_SOURCE 200809L /* gmtime_r */

#include "store/trace_io.h"

#include "h5.h"
#include "store/h5util.h"
#include "state_dict.h"
#include "judge/tolerance.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

enum { WHERE_MAX = DLC_PATH_MAX + 64, ENCODED_MAX = 3 * DLC_NAME_MAX + 1, KIND_MAX = 16 };

/* "a" + sep + "b" into a WHERE_MAX buffer, for messages only: a very long
 * path is cut short there, never in what is read or written. */
static const char *join(char *buf, const char *a, const char *sep, const char *b) {
  if (snprintf(buf, WHERE_MAX, "%s%s%s", a, sep, b) >= WHERE_MAX) buf[WHERE_MAX - 1] = '\0';
  return buf;
}

/* ---- golden metadata ------------------------------------------------------------ */

dl_status dlc_golden_meta_init(dlc_golden_meta *m) {
  memset(m, 0, sizeof *m);
  m->golden = true;
  dlc_env e;
  dlc_env_fingerprint(&e);
  DL_TRY(dlc_env_to_json(&e, m->env_json, sizeof m->env_json));
  time_t now = time(NULL);
  struct tm utc;
  if (now == (time_t)-1 || !gmtime_r(&now, &utc) ||
      !strftime(m->recorded_at, sizeof m->recorded_at, "%Y-%m-%dT%H:%M:%SZ", &utc))
    snprintf(m->recorded_at, sizeof m->recorded_at, "unknown");
  snprintf(m->version, sizeof m->version, "%s", dlc_version());
  snprintf(m->golden_kind, sizeof m->golden_kind, "single");
  return DL_OK;
}

dl_status dlc_golden_meta_set_tol(dlc_golden_meta *m, const char *quantity, const char *rule) {
  dlc_tolerance parsed;
  if (!*quantity || strlen(quantity) >= DLC_NAME_MAX)
    return dl_fail(DL_ERR_INVALID,
                   "golden tolerance: quantity name '%s' is empty or longer "
                   "than %d bytes",
                   quantity, DLC_NAME_MAX - 1);
  if (strlen(rule) >= DLC_TOL_TEXT_MAX)
    return dl_fail(DL_ERR_INVALID, "golden tolerance of %s: rule '%s' is longer than %d bytes",
                   quantity, rule, DLC_TOL_TEXT_MAX - 1);
  if (dlc_tolerance_parse(rule, &parsed) != DL_OK)
    return dl_fail_context(DL_ERR_INVALID, "golden tolerance of %s: ", quantity);
  int i = 0;
  while (i < m->ntols && strcmp(m->tols[i].quantity, quantity) != 0) i++;
  if (i == DLC_GOLDEN_TOLS_MAX)
    return dl_fail(DL_ERR_INVALID,
                   "golden tolerance of %s: the table holds at most %d "
                   "quantities",
                   quantity, DLC_GOLDEN_TOLS_MAX);
  snprintf(m->tols[i].quantity, sizeof m->tols[i].quantity, "%s", quantity);
  snprintf(m->tols[i].rule, sizeof m->tols[i].rule, "%s", rule);
  if (i == m->ntols) m->ntols++;
  return DL_OK;
}

dl_status dlc_golden_meta_recorded(dlc_golden_meta *m, const char *origin_env, bool bitwise) {
  DL_TRY(dlc_golden_meta_init(m));
  if (origin_env && origin_env[0]) snprintf(m->env_json, sizeof m->env_json, "%s", origin_env);
  static const char *const quantities[] = {"loss", "grad_norm", "params", "buffers"};
  for (size_t i = 0; i < sizeof quantities / sizeof *quantities; i++)
    DL_TRY(dlc_golden_meta_set_tol(m, quantities[i], bitwise ? "bitwise" : "close(1.3e-6, 1e-5)"));
  return DL_OK;
}

const char *dlc_golden_meta_tol(const dlc_golden_meta *m, const char *quantity) {
  for (int i = 0; i < m->ntols; i++)
    if (strcmp(m->tols[i].quantity, quantity) == 0) return m->tols[i].rule;
  return NULL;
}

/* ---- link names ------------------------------------------------------------------- */

/* Percent-encodes what HDF5 link names cannot hold; out has ENCODED_MAX bytes. */
static void encode_name(const char *name, char *out) {
  if (strcmp(name, ".") == 0) {
    strcpy(out, "%2E");
    return;
  }
  size_t n = 0;
  for (; *name; name++) {
    if (*name == '%' || *name == '/') n += (size_t)sprintf(out + n, "%%%02X", *name);
    else out[n++] = *name;
  }
  out[n] = '\0';
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Inverse of encode_name; only the encoding it produces is accepted, so
 * that two links can never decode to the same name. */
static dl_status decode_name(const char *enc, const char *where, char out[DLC_NAME_MAX]) {
  size_t n = 0;
  bool ok = *enc != '\0';
  for (const char *p = enc; ok && *p; p++) {
    char c = *p;
    if (c == '%') {
      int hi = hex_value(p[1]), lo = hi >= 0 ? hex_value(p[2]) : -1;
      ok = lo >= 0;
      c = ok ? (char)(hi * 16 + lo) : 0;
      p += ok ? 2 : 0;
    }
    ok = ok && n < DLC_NAME_MAX - 1;
    if (ok) out[n++] = c;
  }
  if (ok) out[n] = '\0';
  char again[ENCODED_MAX];
  if (ok) encode_name(out, again);
  if (!ok || strcmp(again, enc) != 0)
    return dl_fail(DL_ERR_FORMAT,
                   "%s/%s: not a name dlcheck writes (percent-encoded, at most "
                   "%d bytes)",
                   where, enc, DLC_NAME_MAX - 1);
  return DL_OK;
}

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
  char where[WHERE_MAX], root[WHERE_MAX];
  join(root, path, ":", "");
  join(where, path, ":/", name);
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
    char enc[ENCODED_MAX];
    encode_name(t->series[i].name, enc);
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
  char here[WHERE_MAX];
  join(here, where, "/", "values");
  s = dlc_h5_attr_write_strs(ds, here, "columns", DLC_STAT_COUNT, dlc_stat_names);
  H5Dclose(ds);
  return s;
}

static dl_status write_stats(hid_t g, const char *where, const dlc_trace *t,
                             const dlc_golden_meta *m) {
  (void)m;
  for (int i = 0; i < t->nstats; i++) {
    char name[16], here[WHERE_MAX];
    snprintf(name, sizeof name, "%d", i);
    join(here, where, "/", name);
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
  char(*names)[ENCODED_MAX] = malloc((size_t)(n ? n : 1) * sizeof *names);
  dl_status s = items && names ? DL_OK : dl_fail(DL_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; s == DL_OK && i < n; i++) {
    encode_name(t->finals[i].name, names[i]);
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
  char where[WHERE_MAX], hex[24];
  join(where, path, ":", "");
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
    char enc[ENCODED_MAX];
    encode_name(e->series[i].name, enc);
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
  char here[WHERE_MAX];
  join(here, where, "/", name);
  hid_t g;
  DL_TRY(dlc_h5_group_create(parent, where, name, &g));
  dl_status s = fn(g, here, e);
  H5Gclose(g);
  return s;
}

static dl_status write_envelope(hid_t file, const char *path, const dlc_envelope *e) {
  char root[WHERE_MAX], where[WHERE_MAX];
  join(root, path, ":", "");
  join(where, path, ":/", "envelope");
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

static const char magic[] = "dlcheck trace 1\n";

/* The temporary (atomic_file.h) is created again by HDF5 with the user
 * block that holds the seal (h5util.h), in the 1.8 format whose superblock
 * and object headers carry HDF5's own checksums too. */
static dl_status create_with_userblock(const dl_atomic_file *out, const char *path, hid_t *file) {
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = dl_h5_file_access();
  *file = H5I_INVALID_HID;
  if (fcpl >= 0 && fapl >= 0 && H5Pset_userblock(fcpl, DLC_H5_USERBLOCK) >= 0 &&
      H5Pset_obj_track_times(fcpl, 0) >= 0 && /* the root group's times */
      H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) >= 0)
    *file = H5Fcreate(out->tmp, H5F_ACC_TRUNC, fcpl, fapl);
  /* The reason first: closing the property lists clears HDF5's error stack. */
  char why[160];
  if (*file < 0) dl_h5_reason(why);
  if (fcpl >= 0) H5Pclose(fcpl);
  if (fapl >= 0) H5Pclose(fapl);
  if (*file >= 0) return DL_OK;
  return dl_fail(DL_ERR_IO, "%s: cannot create the temporary HDF5 file %s (%s)", path, out->tmp,
                 why);
}

/* HDF5 is done with the temporary: close it, then seal its bytes. */
static dl_status close_and_seal(hid_t *file, const dl_atomic_file *out, const char *path) {
  dl_status s = dl_h5_close(file, out->tmp, DL_OK);
  if (s != DL_OK) return dl_fail_context(s, "%s: ", path);
  return dlc_h5_seal(out->fd, out->tmp, magic);
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
  s = dl_h5_close(&file, out.tmp, s); /* after a failure: every id released */
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

/* ---- reading -------------------------------------------------------------------------- */

typedef dl_status (*group_reader)(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m);

static dl_status read_group(hid_t file, const char *path, const char *name, group_reader fn,
                            dlc_trace *t, dlc_golden_meta *m) {
  char where[WHERE_MAX], root[WHERE_MAX];
  join(root, path, ":", "");
  join(where, path, ":/", name);
  hid_t g;
  DL_TRY(dlc_h5_group_open(file, root, name, &g));
  dl_status s = fn(g, where, t, m);
  H5Gclose(g);
  return s;
}

static dl_status count_fits_int(int64_t n, const char *where) {
  if (n >= 0 && n < (1 << 30)) return DL_OK;
  return dl_fail(DL_ERR_FORMAT, "%s holds %lld entries: the file is damaged", where, (long long)n);
}

static dl_status same_count(const char *where, const char *a, int64_t na, const char *b,
                            int64_t nb) {
  if (na == nb) return DL_OK;
  return dl_fail(DL_ERR_FORMAT, "%s: %s has %lld entries but %s has %lld", where, a, (long long)na,
                 b, (long long)nb);
}

/* ---- float64 entries: a group of datasets, or a names + values table ---- */

/* Where the entries of a float64 group or table go (the series, metrics,
 * envelope series and finals): reserve makes room for n, put takes entry
 * i and counts it, so that a file that fails half way is freed by the
 * trace's or envelope's own free. */
typedef struct f64_sink {
  int rank;              /* of every dataset (group) or of the values (table) */
  hsize_t cols;          /* rank 2: the columns required */
  const char *cols_what; /* what they are, for the message */
  void *owner;           /* the trace or envelope */
  bool (*reserve)(void *owner, int64_t n);
  /* group: data is the entry's dataset of `rows` rows, which put owns from
   * then on; table: data is the entry's row of values, to be copied. */
  void (*put)(void *owner, int64_t i, const char *name, int64_t rows, double *data);
} f64_sink;

static dl_status reserve(const f64_sink *k, int64_t n, const char *where) {
  if (k->reserve(k->owner, n)) return DL_OK;
  return dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
}

static dl_status check_cols(const f64_sink *k, const hsize_t *dims, const char *where,
                            const char *name) {
  if (k->rank < 2 || dims[1] == k->cols) return DL_OK;
  return dl_fail(DL_ERR_FORMAT, "%s/%s has %llu columns; expected %d %s", where, name,
                 (unsigned long long)dims[1], (int)k->cols, k->cols_what);
}

/* One float64 dataset per link of g, named by the link's percent-encoded
 * name (/series, /envelope/series). */
static dl_status read_f64_group(hid_t g, const char *where, const f64_sink *k) {
  int64_t n;
  DL_TRY(dlc_h5_group_count(g, where, &n));
  DL_TRY(count_fits_int(n, where));
  DL_TRY(reserve(k, n, where));
  for (int64_t i = 0; i < n; i++) {
    char *link, name[DLC_NAME_MAX];
    hsize_t dims[2];
    void *v = NULL;
    DL_TRY(dlc_h5_link_name(g, where, i, &link));
    dl_status st = decode_name(link, where, name);
    if (st == DL_OK) st = dlc_h5_read_num(g, where, link, DLC_H5_F64, k->rank, dims, &v);
    if (st == DL_OK) st = check_cols(k, dims, where, link);
    free(link);
    if (st != DL_OK) {
      free(v);
      return st;
    }
    k->put(k->owner, i, name, (int64_t)dims[0], v);
  }
  return DL_OK;
}

/* names [m] and values [m] or [m, cols], a row per name (/metrics,
 * /envelope/finals). */
static dl_status read_f64_table(hid_t g, const char *where, const f64_sink *k) {
  dlc_h5_strs names;
  hsize_t dims[2];
  void *raw = NULL;
  DL_TRY(dlc_h5_read_strs(g, where, "names", &names));
  dl_status s = count_fits_int(names.n, where);
  if (s == DL_OK) s = dlc_h5_read_num(g, where, "values", DLC_H5_F64, k->rank, dims, &raw);
  if (s == DL_OK) s = same_count(where, "values", (int64_t)dims[0], "names", names.n);
  if (s == DL_OK) s = check_cols(k, dims, where, "values");
  if (s == DL_OK) s = reserve(k, names.n, where);
  size_t cols = k->rank == 2 ? (size_t)k->cols : 1;
  for (int64_t i = 0; s == DL_OK && i < names.n; i++) {
    char name[DLC_NAME_MAX];
    s = dlc_h5_strs_get(&names, i, where, "names", name, sizeof name);
    if (s == DL_OK) k->put(k->owner, i, name, 1, (double *)raw + (size_t)i * cols);
  }
  free(raw);
  dlc_h5_strs_free(&names);
  return s;
}

static bool series_reserve(void *owner, int64_t n) {
  dlc_trace *t = owner;
  return (t->series = calloc((size_t)(n ? n : 1), sizeof *t->series)) != NULL;
}

static void series_put(void *owner, int64_t i, const char *name, int64_t rows, double *v) {
  dlc_trace *t = owner;
  snprintf(t->series[i].name, sizeof t->series[i].name, "%s", name);
  t->series[i].n = rows;
  t->series[i].v = v;
  t->nseries = (int)i + 1;
}

static dl_status read_series(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m) {
  (void)m;
  f64_sink k = {.rank = 1, .owner = t, .reserve = series_reserve, .put = series_put};
  return read_f64_group(g, where, &k);
}

/* Copies n strings of `strs` into names laid out DLC_NAME_MAX apart. */
static dl_status copy_names(const dlc_h5_strs *strs, const char *where, const char *what,
                            char (*names)[DLC_NAME_MAX]) {
  for (int64_t i = 0; i < strs->n; i++)
    DL_TRY(dlc_h5_strs_get(strs, i, where, what, names[i], DLC_NAME_MAX));
  return DL_OK;
}

static dl_status read_digests(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m) {
  (void)m;
  dlc_h5_strs names;
  hsize_t dims[2];
  void *values = NULL;
  DL_TRY(dlc_h5_read_strs(g, where, "names", &names));
  dl_status s = count_fits_int(names.n, where);
  if (s == DL_OK) s = dlc_h5_read_num(g, where, "values", DLC_H5_U64, 2, dims, &values);
  if (s == DL_OK)
    s = same_count(where, "values' second dimension", (int64_t)dims[1], "names", names.n);
  if (s == DL_OK && !(t->digest_names = calloc((size_t)(names.n ? names.n : 1), DLC_NAME_MAX)))
    s = dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  if (s == DL_OK) s = copy_names(&names, where, "names", t->digest_names);
  if (s == DL_OK) {
    t->ndigest = (int)names.n;
    t->digest_steps = (int64_t)dims[0];
    t->digests = values;
    values = NULL;
  }
  free(values);
  dlc_h5_strs_free(&names);
  return s;
}

static dl_status read_one_stats(hid_t g, const char *where, dlc_layer_stats *st) {
  dlc_h5_strs layers;
  hsize_t dims[2];
  void *values = NULL;
  DL_TRY(dlc_h5_attr_read_i64(g, where, "step", &st->step));
  DL_TRY(dlc_h5_read_strs(g, where, "layers", &layers));
  dl_status s = count_fits_int(layers.n, where);
  if (s == DL_OK) s = dlc_h5_read_num(g, where, "values", DLC_H5_F64, 2, dims, &values);
  if (s == DL_OK) s = same_count(where, "values", (int64_t)dims[0], "layers", layers.n);
  if (s == DL_OK && dims[1] != DLC_STAT_COUNT)
    s = dl_fail(DL_ERR_FORMAT, "%s/values has %llu columns; expected %d", where,
                (unsigned long long)dims[1], DLC_STAT_COUNT);
  if (s == DL_OK && !(st->layer = calloc((size_t)(layers.n ? layers.n : 1), DLC_NAME_MAX)))
    s = dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  if (s == DL_OK) {
    st->nlayers = (int)layers.n;
    st->stat = values;
    values = NULL;
    s = copy_names(&layers, where, "layers", st->layer);
  }
  free(values);
  dlc_h5_strs_free(&layers);
  return s;
}

static dl_status read_stats(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m) {
  (void)m;
  int64_t n;
  DL_TRY(dlc_h5_group_count(g, where, &n));
  DL_TRY(count_fits_int(n, where));
  t->stats = calloc((size_t)(n ? n : 1), sizeof *t->stats);
  if (!t->stats) return dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  for (int64_t i = 0; i < n; i++) {
    char name[24], here[WHERE_MAX];
    snprintf(name, sizeof name, "%lld", (long long)i);
    join(here, where, "/", name);
    hid_t k;
    DL_TRY(dlc_h5_group_open(g, where, name, &k));
    t->nstats = (int)i + 1; /* freed with the trace even if half read */
    dl_status s = read_one_stats(k, here, &t->stats[i]);
    H5Gclose(k);
    DL_TRY(s);
  }
  return DL_OK;
}

static bool metrics_reserve(void *owner, int64_t n) {
  dlc_trace *t = owner;
  return (t->metrics = calloc((size_t)(n ? n : 1), sizeof *t->metrics)) != NULL;
}

static void metrics_put(void *owner, int64_t i, const char *name, int64_t rows, double *row) {
  (void)rows;
  dlc_trace *t = owner;
  snprintf(t->metrics[i].name, sizeof t->metrics[i].name, "%s", name);
  t->metrics[i].value = row[0];
  t->nmetrics = (int)i + 1;
}

static dl_status read_metrics(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m) {
  (void)m;
  f64_sink k = {.rank = 1, .owner = t, .reserve = metrics_reserve, .put = metrics_put};
  return read_f64_table(g, where, &k);
}

static dl_status read_notes(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m) {
  (void)m;
  dlc_h5_strs names, texts = {0};
  DL_TRY(dlc_h5_read_strs(g, where, "names", &names));
  dl_status s = count_fits_int(names.n, where);
  if (s == DL_OK) s = dlc_h5_read_strs(g, where, "texts", &texts);
  if (s == DL_OK) s = same_count(where, "texts", texts.n, "names", names.n);
  if (s == DL_OK && !(t->notes = calloc((size_t)(names.n ? names.n : 1), sizeof *t->notes)))
    s = dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  for (int64_t i = 0; s == DL_OK && i < names.n; i++) {
    s = dlc_h5_strs_get(&names, i, where, "names", t->notes[i].name, DLC_NAME_MAX);
    if (s == DL_OK && !(t->notes[i].text = dlc_h5_strs_dup(&texts, i)))
      s = dl_fail_context(DL_ERR_NOMEM, "%s: ", where);
    if (s == DL_OK) t->nnotes = (int)i + 1;
  }
  dlc_h5_strs_free(&names);
  dlc_h5_strs_free(&texts);
  return s;
}

static dl_status read_tolerances(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m) {
  (void)t;
  dlc_h5_strs quantities, rules = {0};
  DL_TRY(dlc_h5_read_strs(g, where, "quantities", &quantities));
  dl_status s = dlc_h5_read_strs(g, where, "rules", &rules);
  if (s == DL_OK) s = same_count(where, "rules", rules.n, "quantities", quantities.n);
  if (s == DL_OK && quantities.n > DLC_GOLDEN_TOLS_MAX)
    s = dl_fail(DL_ERR_FORMAT, "%s holds %lld tolerances; at most %d are read", where,
                (long long)quantities.n, DLC_GOLDEN_TOLS_MAX);
  for (int64_t i = 0; s == DL_OK && i < quantities.n; i++) {
    dlc_golden_tol *tol = &m->tols[i];
    dlc_tolerance parsed;
    s = dlc_h5_strs_get(&quantities, i, where, "quantities", tol->quantity, DLC_NAME_MAX);
    if (s == DL_OK) s = dlc_h5_strs_get(&rules, i, where, "rules", tol->rule, DLC_TOL_TEXT_MAX);
    if (s == DL_OK && dlc_tolerance_parse(tol->rule, &parsed) != DL_OK)
      s = dl_fail(DL_ERR_FORMAT, "%s/rules: '%s' (for %s) is not a tolerance rule", where,
                  tol->rule, tol->quantity);
    if (s == DL_OK) m->ntols = (int)i + 1;
  }
  dlc_h5_strs_free(&quantities);
  dlc_h5_strs_free(&rules);
  return s;
}

/* Finals come back through the engine's state-dict reader; names decoded. */
static dl_status read_finals(hid_t file, const char *path, dlc_trace *t) {
  char where[WHERE_MAX];
  join(where, path, ":/", "finals");
  dl_state_dict sd;
  DL_TRY(dl_state_read_group(file, path, "/finals", &sd));
  dl_status s = DL_OK;
  if (!(t->finals = calloc((size_t)(sd.n ? sd.n : 1), sizeof *t->finals)))
    s = dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  for (int i = 0; s == DL_OK && i < sd.n; i++) {
    s = decode_name(sd.names[i], where, t->finals[i].name);
    if (s != DL_OK) break;
    t->finals[i].t = sd.tensors[i]; /* ownership moves */
    memset(&sd.tensors[i], 0, sizeof sd.tensors[i]);
    t->nfinals = i + 1;
  }
  dl_state_dict_free(&sd);
  return s;
}

static dl_status read_root(hid_t root, const char *where, dlc_trace *t, bool *golden) {
  int64_t version;
  char kind[KIND_MAX];
  DL_TRY(dlc_h5_attr_read_i64(root, where, "schema_version", &version));
  if (version != DLC_TRACE_SCHEMA_VERSION)
    return dl_fail(DL_ERR_FORMAT, "%s schema_version is %lld; this dlcheck reads %d%s", where,
                   (long long)version, DLC_TRACE_SCHEMA_VERSION,
                   version > DLC_TRACE_SCHEMA_VERSION ? ": update dlcheck" : "");
  DL_TRY(dlc_h5_attr_read_str(root, where, "kind", kind, sizeof kind));
  *golden = strcmp(kind, "golden") == 0;
  if (!*golden && strcmp(kind, "trace") != 0)
    return dl_fail(DL_ERR_FORMAT, "%s kind is '%s'; expected 'trace' or 'golden'", where, kind);
  DL_TRY(dlc_h5_attr_read_str(root, where, "run", t->run, sizeof t->run));
  DL_TRY(dlc_h5_attr_read_str(root, where, "scenario", t->scenario, sizeof t->scenario));
  DL_TRY(dlc_h5_attr_read_str(root, where, "backend", t->backend, sizeof t->backend));
  DL_TRY(dlc_h5_attr_read_u64(root, where, "seed", &t->seed));
  return dlc_h5_attr_read_u64(root, where, "scenario_hash", &t->scenario_hash);
}

static dl_status read_golden_attrs(hid_t root, const char *where, dlc_golden_meta *m) {
  m->golden = true;
  DL_TRY(dlc_h5_attr_read_str(root, where, "env_fingerprint", m->env_json, sizeof m->env_json));
  DL_TRY(dlc_h5_attr_read_str(root, where, "recorded_at", m->recorded_at, sizeof m->recorded_at));
  DL_TRY(dlc_h5_attr_read_str(root, where, "dlcheck_version", m->version, sizeof m->version));
  /* Optional since 0.3 of the format documentation: absent is "single". */
  snprintf(m->golden_kind, sizeof m->golden_kind, "single");
  htri_t has = H5Aexists(root, "golden_kind");
  if (has < 0) return dl_fail(DL_ERR_FORMAT, "%s attribute golden_kind is unreadable", where);
  if (has)
    DL_TRY(dlc_h5_attr_read_str(root, where, "golden_kind", m->golden_kind, sizeof m->golden_kind));
  if (strcmp(m->golden_kind, "single") != 0 && strcmp(m->golden_kind, "calibrated") != 0)
    return dl_fail(DL_ERR_FORMAT, "%s golden_kind is '%s'; expected 'single' or 'calibrated'%s",
                   where, m->golden_kind, ": update dlcheck");
  return DL_OK;
}

/* ---- the envelope of a calibrated golden ---- */

static bool env_series_reserve(void *owner, int64_t n) {
  dlc_envelope *e = owner;
  return (e->series = calloc((size_t)(n ? n : 1), sizeof *e->series)) != NULL;
}

static void env_series_put(void *owner, int64_t i, const char *name, int64_t rows, double *v) {
  dlc_envelope *e = owner;
  dlc_envelope_series *es = &e->series[i];
  snprintf(es->name, sizeof es->name, "%s", name);
  es->n = rows;
  es->v = (double(*)[DLC_ENV_COLS])v;
  e->nseries = (int)i + 1;
}

static dl_status read_envelope_series(hid_t g, const char *where, dlc_envelope *e) {
  f64_sink k = {.rank = 2,
                .cols = DLC_ENV_COLS,
                .cols_what = "(min, max, mean, std)",
                .owner = e,
                .reserve = env_series_reserve,
                .put = env_series_put};
  return read_f64_group(g, where, &k);
}

static bool env_finals_reserve(void *owner, int64_t n) {
  dlc_envelope *e = owner;
  return (e->finals = calloc((size_t)(n ? n : 1), sizeof *e->finals)) != NULL;
}

static void env_finals_put(void *owner, int64_t i, const char *name, int64_t rows, double *row) {
  (void)rows;
  dlc_envelope *e = owner;
  snprintf(e->finals[i].name, sizeof e->finals[i].name, "%s", name);
  memcpy(e->finals[i].v, row, sizeof e->finals[i].v);
  e->nfinals = (int)i + 1;
}

static dl_status read_envelope_finals(hid_t g, const char *where, dlc_envelope *e) {
  f64_sink k = {.rank = 2,
                .cols = DLC_FIN_COLS,
                .cols_what = "(spread, max_rel, max_ulp)",
                .owner = e,
                .reserve = env_finals_reserve,
                .put = env_finals_put};
  return read_f64_table(g, where, &k);
}

typedef dl_status (*envelope_reader)(hid_t g, const char *where, dlc_envelope *e);

static dl_status read_envelope_part(hid_t parent, const char *where, const char *name,
                                    envelope_reader fn, dlc_envelope *e) {
  char here[WHERE_MAX];
  join(here, where, "/", name);
  hid_t g;
  DL_TRY(dlc_h5_group_open(parent, where, name, &g));
  dl_status s = fn(g, here, e);
  H5Gclose(g);
  return s;
}

static dl_status read_envelope_settings(hid_t g, const char *where, dlc_envelope *e) {
  int64_t repeats;
  hsize_t dims[1];
  void *widen = NULL;
  DL_TRY(dlc_h5_attr_read_i64(g, where, "repeats", &repeats));
  DL_TRY(dlc_h5_attr_read_str(g, where, "perturbation", e->perturbation, sizeof e->perturbation));
  DL_TRY(dlc_h5_read_num(g, where, "widen", DLC_H5_F64, 1, dims, &widen));
  e->widen = dims[0] == 1 ? *(double *)widen : NAN;
  free(widen);
  if (repeats < DLC_ENVELOPE_MIN_REPEATS || repeats > (1 << 20) || !(e->widen >= 1.0) ||
      !isfinite(e->widen))
    return dl_fail(DL_ERR_FORMAT,
                   "%s: repeats %lld or widen %g out of range (repeats >= %d, "
                   "widen >= 1, one value): the file is damaged",
                   where, (long long)repeats, e->widen, DLC_ENVELOPE_MIN_REPEATS);
  e->repeats = (int)repeats;
  return DL_OK;
}

static dl_status read_envelope(hid_t file, const char *path, dlc_envelope *e) {
  char root[WHERE_MAX], where[WHERE_MAX];
  join(root, path, ":", "");
  join(where, path, ":/", "envelope");
  hid_t g;
  DL_TRY(dlc_h5_group_open(file, root, "envelope", &g));
  dl_status s = read_envelope_settings(g, where, e);
  if (s == DL_OK) s = read_envelope_part(g, where, "series", read_envelope_series, e);
  if (s == DL_OK) s = read_envelope_part(g, where, "finals", read_envelope_finals, e);
  H5Gclose(g);
  return s;
}

/* Optional on a plain trace (the Python recorder writes it; old files
 * lack it): absent reads as "". */
static dl_status read_trace_env(hid_t root, const char *where, dlc_golden_meta *m) {
  htri_t has = H5Aexists(root, "env_fingerprint");
  if (has < 0) return dl_fail(DL_ERR_FORMAT, "%s attribute env_fingerprint is unreadable", where);
  if (!has) return DL_OK;
  return dlc_h5_attr_read_str(root, where, "env_fingerprint", m->env_json, sizeof m->env_json);
}

static dl_status read_all(hid_t file, const char *path, dlc_trace *t, dlc_golden_meta *m,
                          dlc_envelope *e) {
  char where[WHERE_MAX];
  join(where, path, ":", "");
  bool golden = false;
  hid_t root = H5Gopen2(file, "/", H5P_DEFAULT);
  if (root < 0) return dl_fail(DL_ERR_FORMAT, "%s: the root group is unreadable", path);
  dl_status s = read_root(root, where, t, &golden);
  if (s == DL_OK) s = golden ? read_golden_attrs(root, where, m) : read_trace_env(root, where, m);
  H5Gclose(root);
  DL_TRY(s);
  DL_TRY(read_group(file, path, "series", read_series, t, m));
  DL_TRY(read_group(file, path, "digests", read_digests, t, m));
  DL_TRY(read_group(file, path, "stats", read_stats, t, m));
  DL_TRY(read_finals(file, path, t));
  DL_TRY(read_group(file, path, "metrics", read_metrics, t, m));
  DL_TRY(read_group(file, path, "notes", read_notes, t, m));
  if (golden) DL_TRY(read_group(file, path, "tolerances", read_tolerances, t, m));
  if (e && golden && strcmp(m->golden_kind, "calibrated") == 0)
    DL_TRY(read_envelope(file, path, e));
  return DL_OK;
}

/* The seal is checked before HDF5 parses a byte of the file. */
static dl_status open_for_reading(const char *path, hid_t *file) {
  *file = H5I_INVALID_HID;
  if (!path || !*path) return dl_fail(DL_ERR_INVALID, "trace: empty file name");
  DL_TRY(dlc_h5_check_seal(path, magic));
  return dl_h5_open_read(path, file);
}

static dl_status load(const char *path, dlc_trace *out, dlc_golden_meta *meta, dlc_envelope *env) {
  dlc_trace_init(out, NULL, NULL);
  out->backend[0] = '\0';
  dlc_golden_meta *m = meta ? meta : malloc(sizeof *m);
  if (!m) return dl_fail(DL_ERR_NOMEM, "%s: out of memory for golden metadata", path);
  memset(m, 0, sizeof *m);
  hid_t file;
  dl_status s = open_for_reading(path, &file);
  if (s == DL_OK) {
    dl_h5_quiet q = dl_h5_quiet_begin();
    s = read_all(file, path, out, m, env);
    H5Fclose(file);
    dl_h5_quiet_end(q);
  }
  if (s != DL_OK) {
    dlc_trace_free(out);
    memset(m, 0, sizeof *m);
    if (env) dlc_envelope_free(env);
  }
  if (m != meta) free(m);
  return s;
}

dl_status dlc_trace_load(const char *path, dlc_trace *out, dlc_golden_meta *meta) {
  return load(path, out, meta, NULL);
}

dl_status dlc_golden_load(const char *path, dlc_trace *out, dlc_golden_meta *meta,
                          dlc_envelope *env) {
  if (env) memset(env, 0, sizeof *env);
  return load(path, out, meta, env);
}
