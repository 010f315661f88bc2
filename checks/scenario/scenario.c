/* The scenario loader: scenario.yaml (schema in scenarios/README.md) into
 * runs, checks and pitfall variants.
 *
 * Every run is built the same way: PyTorch's defaults, then the file's
 * top-level run settings, then the run's overrides, then (in a pitfall
 * variant) the pitfall's overrides. Each layer of settings is applied with
 * field tables that set only the keys present, so nested mappings merge key
 * by key while lists (model, frozen, ...) replace. Errors point at the
 * offending key or value: "FILE:LINE:COL: path: what, expected what".
 *
 * The run settings and how a run is built from them: run_schema.c. */
#define _XOPEN_SOURCE 700 /* realpath */

#include "scenario/scenario.h"

#include "scenario/loader.h"

#include "judge/catalogue.h"
#include "judge/check.h"
#include "judge/envelope.h"
#include "trace/trace.h"
#include "scenario/yaml_util.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SCENARIO_MAX_BYTES = 1 << 20, MAX_PITFALLS = DLC_MAX_VARIANTS };

/* ---- names ------------------------------------------------------------- */

/* Names end up in file names, HDF5 groups and reports. */
static dl_status check_name(const yu_val *v, const char *what, const char *name, bool at_key) {
  for (const char *p = name; *p; p++) {
    bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.';
    if (ok) continue;
    const char *fmt = "%s name '%s' may hold only letters, digits, '_', '-' and '.'";
    return at_key ? yu_fail_key(v, DL_ERR_INVALID, fmt, what, name)
                  : yu_fail(v, DL_ERR_INVALID, fmt, what, name);
  }
  return DL_OK;
}

/* Keys that yu_apply already required; failing here again keeps every
 * path safe on its own. */
static dl_status find_key(const yu_val *map, const char *key, yu_val *v) {
  if (yu_map_find(map, key, v)) return DL_OK;
  return yu_fail(map, DL_ERR_FORMAT, "missing required key '%s'", key);
}

static dl_status read_name(const yu_val *map, const char *key, char *dst, size_t size,
                           const char *what, yu_val *v) {
  DL_TRY(find_key(map, key, v));
  DL_TRY(yu_str(v, dst, size, false));
  return what ? check_name(v, what, dst, false) : DL_OK;
}

/* The folder's own name: the last component of dir, resolved for "." and "..". */
static void folder_name(const char *dir, char *out, size_t size) {
  char resolved[PATH_MAX];
  const char *d = dir;
  size_t n = strlen(d);
  while (n > 1 && d[n - 1] == '/') n--;
  size_t start = n;
  while (start > 0 && d[start - 1] != '/') start--;
  if ((n - start == 1 && d[start] == '.') || (n - start == 2 && !strncmp(d + start, "..", 2))) {
    if (realpath(dir, resolved)) {
      folder_name(resolved, out, size);
      return;
    }
  }
  snprintf(out, size, "%.*s", (int)(n - start), d + start);
}

static dl_status read_header(loader *L, const char *dir) {
  dlc_scenario *s = &L->os->pub;
  yu_val v;
  DL_TRY(read_name(&L->root, "name", s->name, sizeof s->name, "scenario", &v));
  char folder[DLC_NAME_MAX + 8];
  folder_name(dir, folder, sizeof folder);
  if (strcmp(folder, s->name) != 0)
    return yu_fail(&v, DL_ERR_INVALID, "must equal the scenario's folder name '%s', got '%s'",
                   folder, s->name);
  yu_val d;
  DL_TRY(find_key(&L->root, "description", &d));
  return yu_text(&d, s->description, sizeof s->description);
}

/* ---- runs -------------------------------------------------------------- */

static dl_status read_runs(loader *L) {
  dlc_scenario *s = &L->os->pub;
  yu_val runs, item;
  DL_TRY(find_key(&L->root, "runs", &runs));
  DL_TRY(yu_expect_mapping(&runs));
  void *it = NULL;
  for (;;) {
    bool got;
    DL_TRY(yu_map_next(&runs, &it, &item, &got));
    if (!got) break;
    if (s->nruns == DLC_MAX_RUNS)
      return yu_fail_key(&item, DL_ERR_INVALID, "too many runs: at most %d", DLC_MAX_RUNS);
    DL_TRY(check_name(&item, "run", item.key, true));
    if (!yu_is_null(&item)) DL_TRY(yu_expect_mapping(&item));
    L->runs[s->nruns] = item;
    s->nruns++;
  }
  /* No runs is a scenario whose checks are all not_tested (an audit family
   * whose adapter piece is missing): need_run and read_pitfalls refuse any
   * check or pitfall that would need one. */
  for (int i = 0; i < s->nruns; i++) {
    yu_val where = L->runs[i]; /* path runs.NAME says which run */
    where.at = where.key_at;
    DL_TRY(dlc_build_run(L, i, NULL, &where, "", &s->runs[i]));
  }
  return DL_OK;
}

int dlc_scenario_find_run(const dlc_scenario *s, const char *name) {
  if (!s || !name) return -1;
  for (int i = 0; i < s->nruns; i++)
    if (!strcmp(s->runs[i].name, name)) return i;
  return -1;
}

static dl_status need_run(const loader *L, const yu_val *v, const char *name) {
  if (dlc_scenario_find_run(&L->os->pub, name) >= 0) return DL_OK;
  if (L->os->pub.nruns == 0)
    return yu_fail(v, DL_ERR_INVALID,
                   "unknown run '%s': the scenario has no runs; name at "
                   "least one under runs: (the first is the reference)",
                   name);
  char known[DLC_MAX_RUNS * (DLC_NAME_MAX + 2)] = "";
  for (int i = 0; i < L->os->pub.nruns; i++) {
    strcat(known, i ? ", " : "");
    strcat(known, L->os->pub.runs[i].name);
  }
  return yu_fail(v, DL_ERR_INVALID, "unknown run '%s'; the runs are: %s", name, known);
}

/* ---- checks ------------------------------------------------------------ */

static dl_status parse_quantities(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_check_spec *c = base;
  (void)ctx, (void)f;
  int count;
  DL_TRY(yu_seq_count(v, 1, DLC_MAX_QUANTITIES, &count));
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(v, i);
    DL_TRY(yu_str(&item, c->quantities[i], DLC_NAME_MAX, false));
  }
  c->nquantities = count;
  return DL_OK;
}

static dl_status parse_tolerance(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_check_spec *c = base;
  (void)ctx, (void)f;
  char text[128];
  DL_TRY(yu_str(v, text, sizeof text, false));
  if (dlc_tolerance_parse(text, &c->tol) != DL_OK)
    return yu_fail(v, DL_ERR_INVALID, "%s", dl_last_error());
  return DL_OK;
}

/* IDs of dlcheck's catalogue, each at most once. */
static dl_status parse_catalogue(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_check_spec *c = base;
  (void)ctx, (void)f;
  int count;
  DL_TRY(yu_seq_count(v, 1, DLC_MAX_CATALOGUE, &count));
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(v, i);
    DL_TRY(yu_str(&item, c->catalogue[i], DLC_CATALOGUE_ID_MAX, false));
    if (!dlc_catalogue_find(c->catalogue[i]))
      return yu_fail(&item, DL_ERR_INVALID,
                     "'%s' is not a catalogue ID; `dlcheck list` "
                     "shows them (G1 ... E3)",
                     c->catalogue[i]);
    for (int j = 0; j < i; j++)
      if (!strcmp(c->catalogue[j], c->catalogue[i]))
        return yu_fail(&item, DL_ERR_INVALID, "catalogue ID '%s' is listed twice", c->catalogue[i]);
  }
  c->ncatalogue = count;
  return DL_OK;
}

#define CF(k, t, member) .key = k, .type = t, .offset = offsetof(dlc_check_spec, member)
#define CSTR(k, member, req) \
  { CF(k, YU_STR, member), .size = DLC_NAME_MAX, .required = req }
static const yu_field check_fields[] = {
    CSTR("name", name, true),
    CSTR("kind", kind, true),
    CSTR("a", a, false),
    CSTR("b", b, false),
    {.key = "quantities", .type = YU_CUSTOM, .parse = parse_quantities},
    {.key = "tolerance", .type = YU_CUSTOM, .parse = parse_tolerance},
    {CF("threshold", YU_F64, threshold)},
    {CF("expect_divergence", YU_BOOL, expect_divergence)},
    CSTR("noise", noise, false),
    CSTR("noise_b", noise_b, false),
    {CF("widen", YU_F64, noise_widen)},
    {.key = "catalogue", .type = YU_CUSTOM, .parse = parse_catalogue},
    {CF("reason", YU_STR, reason), .size = MSIZE(dlc_check_spec, reason)},
    {CF("waived", YU_STR, waived), .size = MSIZE(dlc_check_spec, waived)},
};

static dl_status unknown_kind(const yu_val *v, const char *kind) {
  char known[1024] = "";
  size_t used = 0;
  for (int i = 0; i < dlc_check_kind_count() && used < sizeof known; i++) {
    int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                     dlc_check_kind_at(i)->kind);
    if (w < 0) break;
    used += (size_t)w;
  }
  return yu_fail(v, DL_ERR_INVALID, "unknown check kind '%s'; expected one of: %s", kind, known);
}

/* noise: a run, on an equivalence check only, replacing its tolerance;
 * widen: only with noise, a number >= 1. */
static dl_status check_noise(const loader *L, const yu_val *item, const dlc_check_spec *c) {
  yu_val v;
  bool has_noise = yu_map_find(item, "noise", &v);
  if (has_noise && strcmp(c->kind, "equivalence") != 0)
    return yu_fail(&v, DL_ERR_INVALID, "noise belongs to kind equivalence; remove it");
  if (has_noise) DL_TRY(need_run(L, &v, c->noise));
  if (yu_map_find(item, "noise_b", &v)) {
    if (!has_noise) return yu_fail(&v, DL_ERR_INVALID, "noise_b needs noise: RUN; add it");
    DL_TRY(need_run(L, &v, c->noise_b));
  }
  if (has_noise && yu_map_find(item, "tolerance", &v))
    return yu_fail(&v, DL_ERR_INVALID,
                   "check '%s' has noise: its band replaces the tolerance; remove tolerance",
                   c->name);
  if (!yu_map_find(item, "widen", &v)) return DL_OK;
  if (!has_noise) return yu_fail(&v, DL_ERR_INVALID, "widen belongs with noise: RUN; remove it");
  if (!(c->noise_widen >= 1.0) || !isfinite(c->noise_widen))
    return yu_fail(&v, DL_ERR_INVALID, "widen %g: expected a number >= 1", c->noise_widen);
  return DL_OK;
}

/* Kind registered; a named exactly when the kind reads a run, b exactly
 * when it compares two; quantities where the kind reads them; a reason
 * exactly for not_tested. */
static dl_status check_refs(const loader *L, const yu_val *item, const dlc_check_spec *c) {
  yu_val v;
  DL_TRY(find_key(item, "kind", &v));
  const dlc_check_kind *k = dlc_check_kind_find(c->kind);
  if (!k) return unknown_kind(&v, c->kind);
  bool has_a = yu_map_find(item, "a", &v);
  if (k->runs == 0 && has_a)
    return yu_fail(&v, DL_ERR_INVALID, "check kind '%s' reads no run; remove a", c->kind);
  if (k->runs > 0 && !has_a)
    return yu_fail(item, DL_ERR_FORMAT, "check '%s' of kind '%s' reads a run; add a: RUN", c->name,
                   c->kind);
  if (has_a) DL_TRY(need_run(L, &v, c->a));
  bool has_b = yu_map_find(item, "b", &v);
  if (k->runs == 2 && !has_b)
    return yu_fail(item, DL_ERR_FORMAT, "check '%s' of kind '%s' compares two runs; add b: RUN",
                   c->name, c->kind);
  if (k->runs < 2 && has_b)
    return yu_fail(&v, DL_ERR_INVALID, "check kind '%s' reads %s; remove b", c->kind,
                   k->runs ? "one run (a)" : "no run");
  if (has_b) DL_TRY(need_run(L, &v, c->b));
  DL_TRY(check_noise(L, item, c));
  if (k->needs_quantities && c->nquantities == 0)
    return yu_fail(item, DL_ERR_FORMAT,
                   "check '%s' of kind '%s' compares the quantities it names, and names none "
                   "(it would pass comparing nothing); add quantities: [%s]",
                   c->name, c->kind,
                   !strcmp(c->kind, "equivalence")         ? "loss, params"
                   : !strcmp(c->kind, "torch_environment") ? "E1"
                                                           : "METRIC");
  bool has_reason = yu_map_find(item, "reason", &v);
  if (!k->runs && !has_reason)
    return yu_fail(item, DL_ERR_FORMAT,
                   "check '%s' of kind '%s' says why it is not tested; "
                   "add reason: TEXT",
                   c->name, c->kind);
  if (k->runs && has_reason)
    return yu_fail(&v, DL_ERR_INVALID, "reason belongs to kind not_tested; remove it");
  return DL_OK;
}

static dl_status read_check(loader *L, const yu_val *item, int i) {
  dlc_scenario *s = &L->os->pub;
  dlc_check_spec *c = &s->checks[i];
  memset(c, 0, sizeof *c);
  c->tol = dlc_tolerance_default(DL_F32);
  c->noise_widen = DLC_ENVELOPE_WIDEN_DEFAULT;
  DL_TRY(yu_apply(item, check_fields, COUNT(check_fields), c, L, true, NULL));
  yu_val v;
  DL_TRY(find_key(item, "name", &v));
  DL_TRY(check_name(&v, "check", c->name, false));
  for (int j = 0; j < i; j++)
    if (!strcmp(s->checks[j].name, c->name))
      return yu_fail(&v, DL_ERR_INVALID, "duplicate check name '%s' (also checks[%d])", c->name, j);
  return check_refs(L, item, c);
}

static dl_status read_checks(loader *L) {
  yu_val checks;
  DL_TRY(find_key(&L->root, "checks", &checks));
  int count;
  DL_TRY(yu_seq_count(&checks, 1, DLC_MAX_CHECKS, &count));
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(&checks, i);
    DL_TRY(read_check(L, &item, i));
    L->os->pub.nchecks = i + 1;
  }
  return DL_OK;
}

/* ---- pitfalls ---------------------------------------------------------- */

typedef struct pitfall_src {
  char id[16], name[DLC_NAME_MAX], caught_by[DLC_NAME_MAX], description[512];
} pitfall_src;

#define PF(k, t, member, req)                                     \
  {                                                               \
    .key = k, .type = t, .offset = offsetof(pitfall_src, member), \
    .size = MSIZE(pitfall_src, member), .required = req           \
  }
static const yu_field pitfall_fields[] = {
    PF("id", YU_STR, id, true),
    PF("name", YU_STR, name, false),
    PF("description", YU_TEXT, description, false),
    PF("caught_by", YU_STR, caught_by, true),
    {.key = "runs", .type = YU_SKIP},
    {.key = "overrides", .type = YU_SKIP, .required = true},
};

/* Catalogue IDs: a capital letter and digits ("G1", "D7"). */
static bool is_pitfall_id(const char *id) {
  if (!(id[0] >= 'A' && id[0] <= 'Z') || !id[1]) return false;
  for (const char *p = id + 1; *p; p++)
    if (!(*p >= '0' && *p <= '9')) return false;
  return true;
}

static int find_check(const dlc_scenario *s, const char *name) {
  for (int i = 0; i < s->nchecks; i++)
    if (!strcmp(s->checks[i].name, name)) return i;
  return -1;
}

static dl_status pitfall_runs(const loader *L, const yu_val *item, bool applies[DLC_MAX_RUNS]) {
  yu_val runs;
  int n = L->os->pub.nruns;
  for (int i = 0; i < n; i++) applies[i] = true;
  if (!yu_map_find(item, "runs", &runs)) return DL_OK;
  int count;
  DL_TRY(yu_seq_count(&runs, 1, DLC_MAX_RUNS, &count));
  for (int i = 0; i < n; i++) applies[i] = false;
  for (int j = 0; j < count; j++) {
    yu_val r = yu_seq_at(&runs, j);
    char name[DLC_NAME_MAX];
    DL_TRY(yu_str(&r, name, sizeof name, false));
    DL_TRY(need_run(L, &r, name));
    applies[dlc_scenario_find_run(&L->os->pub, name)] = true;
  }
  return DL_OK;
}

static dl_status check_pitfall(const loader *L, const yu_val *item, const pitfall_src *p, int i) {
  const dlc_scenario *s = &L->os->pub;
  yu_val v;
  DL_TRY(find_key(item, "id", &v));
  if (!is_pitfall_id(p->id))
    return yu_fail(&v, DL_ERR_INVALID,
                   "'%s' is not a catalogue ID (a capital letter and digits, "
                   "as G1 or D7; see docs/pitfalls.md)",
                   p->id);
  if (!yu_map_find(item, "name", &v)) DL_TRY(find_key(item, "id", &v));
  DL_TRY(check_name(&v, "pitfall", p->name, false));
  for (int j = 0; j < i; j++)
    if (!strcmp(s->variants[j].name, p->name))
      return yu_fail(&v, DL_ERR_INVALID,
                     "duplicate pitfall name '%s' (also pitfalls[%d]); give "
                     "each a distinct name",
                     p->name, j);
  DL_TRY(find_key(item, "caught_by", &v));
  if (find_check(s, p->caught_by) < 0)
    return yu_fail(&v, DL_ERR_INVALID, "no check is named '%s'", p->caught_by);
  return DL_OK;
}

static dl_status read_pitfall(loader *L, const yu_val *item, int i) {
  dlc_scenario *s = &L->os->pub;
  pitfall_src p;
  memset(&p, 0, sizeof p);
  DL_TRY(yu_apply(item, pitfall_fields, COUNT(pitfall_fields), &p, L, true, NULL));
  if (!p.name[0]) memcpy(p.name, p.id, sizeof p.id);
  DL_TRY(check_pitfall(L, item, &p, i));
  bool applies[DLC_MAX_RUNS];
  DL_TRY(pitfall_runs(L, item, applies));
  yu_val ov, first;
  DL_TRY(find_key(item, "overrides", &ov));
  DL_TRY(yu_expect_mapping(&ov));
  if (!yu_map_find(&ov, NULL, &first))
    return yu_fail(&ov, DL_ERR_INVALID, "is empty; a pitfall variant must change something");
  dlc_variant *var = &s->variants[i];
  snprintf(var->name, sizeof var->name, "%s", p.name);
  snprintf(var->pitfall, sizeof var->pitfall, "%s", p.id);
  snprintf(var->caught_by, sizeof var->caught_by, "%s", p.caught_by);
  snprintf(var->description, sizeof var->description, "%s", p.description);
  for (int r = 0; r < s->nruns; r++) {
    char who[2 * DLC_NAME_MAX];
    snprintf(who, sizeof who, "run '%.100s': ", L->runs[r].key);
    DL_TRY(dlc_build_run(L, r, applies[r] ? &ov : NULL, &ov, who, &var->runs[r]));
  }
  return DL_OK;
}

static dl_status read_pitfalls(loader *L) {
  dlc_scenario *s = &L->os->pub;
  yu_val pitfalls;
  if (!yu_map_find(&L->root, "pitfalls", &pitfalls)) return DL_OK;
  int count;
  DL_TRY(yu_seq_count(&pitfalls, 0, MAX_PITFALLS, &count));
  if (count == 0) return DL_OK;
  if (s->nruns == 0)
    return yu_fail(&pitfalls, DL_ERR_INVALID,
                   "pitfall variants re-run the scenario's runs, "
                   "and it has none");
  s->variants = calloc((size_t)count, sizeof *s->variants);
  if (!s->variants) return yu_fail(&pitfalls, DL_ERR_NOMEM, "out of memory for %d variants", count);
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(&pitfalls, i);
    s->nvariants = i + 1;
    DL_TRY(read_pitfall(L, &item, i));
  }
  return DL_OK;
}

/* ---- loading ----------------------------------------------------------- */

static dl_status read_scenario(loader *L, const char *dir) {
  L->root = yu_doc_root(&L->doc);
  DL_TRY(yu_expect_mapping(&L->root));
  /* Validates every top-level key once, before anything refers to them. */
  dlc_run_config *scratch = malloc(sizeof *scratch);
  if (!scratch) return dl_fail(DL_ERR_NOMEM, "out of memory loading %s", L->doc.file);
  dlc_run_config_default(scratch);
  dl_status s = dlc_apply_top_level(L, scratch);
  free(scratch);
  DL_TRY(s);
  DL_TRY(read_header(L, dir));
  DL_TRY(read_runs(L));
  DL_TRY(read_checks(L));
  DL_TRY(read_pitfalls(L));
  L->os->pub.hash = dlc_digest(L->doc.bytes, L->doc.len);
  return DL_OK;
}

static dl_status store_dir(dlc_scenario *s, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  if (n + sizeof "/scenario.yaml" > sizeof s->dir)
    return dl_fail(DL_ERR_INVALID,
                   "scenario folder path of %zu characters is too long (at most %zu)", n,
                   sizeof s->dir - sizeof "/scenario.yaml");
  memcpy(s->dir, dir, n);
  s->dir[n] = '\0';
  return DL_OK;
}

dl_status dlc_scenario_load(dlc_scenario **out, const char *dir) {
  if (!out || !dir || !dir[0])
    return dl_fail(DL_ERR_INVALID,
                   "dlc_scenario_load: give an output pointer and a scenario folder");
  *out = NULL;
  owned_scenario *os = calloc(1, sizeof *os);
  if (!os) return dl_fail(DL_ERR_NOMEM, "out of memory loading scenario %s", dir);
  loader *L = calloc(1, sizeof *L);
  dl_status s = L ? store_dir(&os->pub, dir)
                  : dl_fail(DL_ERR_NOMEM, "out of memory loading scenario %s", dir);
  if (s == DL_OK) {
    L->os = os;
    char path[DLC_PATH_MAX + 16];
    if (snprintf(path, sizeof path, "%s/scenario.yaml", os->pub.dir) >= (int)sizeof path)
      s = dl_fail(DL_ERR_INTERNAL, "scenario path %s too long", os->pub.dir);
    if (s == DL_OK) s = yu_doc_load(&L->doc, path, SCENARIO_MAX_BYTES);
    if (s == DL_OK) s = read_scenario(L, os->pub.dir);
    yu_doc_free(&L->doc);
  }
  free(L);
  if (s != DL_OK) {
    dlc_scenario_free(&os->pub);
    return s;
  }
  *out = &os->pub;
  return DL_OK;
}

void dlc_scenario_free(dlc_scenario *s) {
  if (!s) return;
  owned_scenario *os = (owned_scenario *)s;
  while (os->bodies) {
    body_block *next = os->bodies->next;
    free(os->bodies);
    os->bodies = next;
  }
  free(s->variants);
  free(os);
}
