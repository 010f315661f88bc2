/* Reading traces and goldens (trace_io.h, docs/trace-format.md): the seal
 * checked first, then every group, each size checked before it is used. */
#define _POSIX_C_SOURCE 200809L

#include "store/trace_io.h"

#include "io/h5.h"
#include "judge/tolerance.h"
#include "io/state_dict.h"
#include "store/h5util.h"
#include "store/trace_names.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading -------------------------------------------------------------------------- */

typedef dl_status (*group_reader)(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m);

static dl_status read_group(hid_t file, const char *path, const char *name, group_reader fn,
                            dlc_trace *t, dlc_golden_meta *m) {
  char where[DLC_TRACE_WHERE_MAX], root[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(root, path, ":", "");
  dlc_trace_join(where, path, ":/", name);
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
  bool spilled;          /* group: read into arrays that spill when long (trace/spill.h) */
  bool (*reserve)(void *owner, int64_t n);
  /* group: data is the entry's dataset of `rows` rows (where sp says),
   * which put owns from then on; table: data is the entry's row of values,
   * to be copied, and sp empty. */
  void (*put)(void *owner, int64_t i, const char *name, int64_t rows, double *data,
              const dlc_spill *sp);
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
    dlc_spill sp = {0};
    DL_TRY(dlc_h5_link_name(g, where, i, &link));
    dl_status st = dlc_trace_decode_name(link, where, name);
    if (st == DL_OK)
      st = k->spilled ? dlc_h5_read_num_spilled(g, where, link, DLC_H5_F64, k->rank, dims, &v, &sp)
                      : dlc_h5_read_num(g, where, link, DLC_H5_F64, k->rank, dims, &v);
    if (st == DL_OK) st = check_cols(k, dims, where, link);
    free(link);
    if (st != DL_OK) {
      dlc_spill_free(v, &sp);
      return st;
    }
    k->put(k->owner, i, name, (int64_t)dims[0], v, &sp);
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
    if (s == DL_OK) k->put(k->owner, i, name, 1, (double *)raw + (size_t)i * cols, &(dlc_spill){0});
  }
  free(raw);
  dlc_h5_strs_free(&names);
  return s;
}

static bool series_reserve(void *owner, int64_t n) {
  dlc_trace *t = owner;
  return (t->series = calloc((size_t)(n ? n : 1), sizeof *t->series)) != NULL;
}

static void series_put(void *owner, int64_t i, const char *name, int64_t rows, double *v,
                       const dlc_spill *sp) {
  dlc_trace *t = owner;
  snprintf(t->series[i].name, sizeof t->series[i].name, "%s", name);
  t->series[i].n = rows;
  t->series[i].v = v;
  t->series[i].spill = *sp;
  t->nseries = (int)i + 1;
}

static dl_status read_series(hid_t g, const char *where, dlc_trace *t, dlc_golden_meta *m) {
  (void)m;
  f64_sink k = {.rank = 1,
                .owner = t,
                .spilled = true,
                .reserve = series_reserve,
                .put = series_put};
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
  dlc_spill sp = {0};
  if (s == DL_OK)
    s = dlc_h5_read_num_spilled(g, where, "values", DLC_H5_U64, 2, dims, &values, &sp);
  if (s == DL_OK)
    s = same_count(where, "values' second dimension", (int64_t)dims[1], "names", names.n);
  if (s == DL_OK && !(t->digest_names = calloc((size_t)(names.n ? names.n : 1), DLC_NAME_MAX)))
    s = dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  if (s == DL_OK) s = copy_names(&names, where, "names", t->digest_names);
  if (s == DL_OK) {
    t->ndigest = (int)names.n;
    t->digest_steps = (int64_t)dims[0];
    t->digests = values;
    t->digest_spill = sp;
    values = NULL;
    sp = (dlc_spill){0};
  }
  dlc_spill_free(values, &sp);
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
    char name[24], here[DLC_TRACE_WHERE_MAX];
    snprintf(name, sizeof name, "%lld", (long long)i);
    dlc_trace_join(here, where, "/", name);
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

static void metrics_put(void *owner, int64_t i, const char *name, int64_t rows, double *row,
                        const dlc_spill *sp) {
  (void)sp;
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
  char where[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(where, path, ":/", "finals");
  dl_state_dict sd;
  DL_TRY(dl_state_read_group(file, path, "/finals", &sd));
  dl_status s = DL_OK;
  if (!(t->finals = calloc((size_t)(sd.n ? sd.n : 1), sizeof *t->finals)))
    s = dl_fail(DL_ERR_NOMEM, "%s: out of memory", where);
  for (int i = 0; s == DL_OK && i < sd.n; i++) {
    s = dlc_trace_decode_name(sd.names[i], where, t->finals[i].name);
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
  char kind[DLC_TRACE_KIND_MAX];
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

static void env_series_put(void *owner, int64_t i, const char *name, int64_t rows, double *v,
                           const dlc_spill *sp) {
  (void)sp; /* read unspilled: the envelope is held on the heap */
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

static void env_finals_put(void *owner, int64_t i, const char *name, int64_t rows, double *row,
                           const dlc_spill *sp) {
  (void)sp;
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
  char here[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(here, where, "/", name);
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
  char root[DLC_TRACE_WHERE_MAX], where[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(root, path, ":", "");
  dlc_trace_join(where, path, ":/", "envelope");
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
  char where[DLC_TRACE_WHERE_MAX];
  dlc_trace_join(where, path, ":", "");
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
  DL_TRY(dlc_h5_check_seal(path, DLC_TRACE_MAGIC));
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
