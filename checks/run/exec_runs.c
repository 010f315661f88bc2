#define _POSIX_C_SOURCE 200809L /* strdup */
/* A scenario's runs trained by the engine or read from recorded traces,
 * its checks evaluated, and failed equivalences located to a layer. */
#include "run/exec_internal.h"

#include "judge/catalogue.h"
#include "judge/check.h"
#include "judge/checks_impl.h"
#include "run/locate.h"
#include "store/path.h"
#include "store/trace_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device of runs that name none: --backend. */
dlc_device dlc_exec_device(const dlc_exec_options *o) {
  dlc_device d = DLC_DEVICE_CPU;
  if (o->backend && dlc_device_parse(o->backend, &d) != DL_OK) d = DLC_DEVICE_CPU;
  return d;
}

/* A run given as a recorded trace: the file read, named and hashed as the
 * engine's runs are, so that every check finds it, with the fingerprint of
 * where it computed (out->origin_env). */
dl_status dlc_exec_load_trace_run(const dlc_scenario *s, const dlc_run_config *c, const char *root,
                                  dlc_trace *out) {
  char path[2 * DLC_PATH_MAX];
  dlc_golden_meta *meta = calloc(1, sizeof *meta); /* 14 KiB: off the stack */
  dl_status st = meta ? dlc_path_under(path, sizeof path, root, c->trace)
                      : dl_fail(DL_ERR_NOMEM, "out of memory for a trace's metadata");
  if (!st) st = dlc_trace_load(path, out, meta);
  if (!st && meta->env_json[0] && !(out->origin_env = strdup(meta->env_json))) {
    dlc_trace_free(out);
    st = dl_fail(DL_ERR_NOMEM, "out of memory for a trace's fingerprint");
  }
  free(meta);
  if (st)
    return dl_fail_context(st, "scenario %s, run %s (trace: %s): ", s->name, c->name, c->trace);
  snprintf(out->run, sizeof out->run, "%s", c->name);
  snprintf(out->scenario, sizeof out->scenario, "%s", s->name);
  out->scenario_hash = s->hash;
  return DL_OK;
}

/* Reports say where a run computed (the "backend" note): for a trace, the
 * file, then what the recorder said, if anything. */
static dl_status note_trace_origin(const dlc_run_config *c, dlc_trace *t) {
  const char *recorded = dlc_trace_note(t, "backend");
  char text[DLC_PATH_MAX + 1024];
  snprintf(text, sizeof text, "trace: %s%s%.1000s", c->trace, recorded ? "; " : "",
           recorded ? recorded : "");
  return dlc_trace_set_note(t, "backend", text);
}

void dlc_exec_on_step(void *user, const char *run, int64_t step, int64_t steps) {
  (void)run;
  dlc_progress_ctx *p = user;
  if (p->o->progress) p->o->progress(p->o->user, p->scenario, p->what, step, steps);
}

dl_status dlc_exec_run_all(const dlc_scenario *s, const dlc_run_config *runs,
                           const dlc_exec_options *o, const char *label, dlc_trace *traces,
                           const dlc_trace *reuse) {
  dlc_progress_ctx p = {.o = o, .scenario = s->name};
  dlc_run_options ro = {.root = o->root,
                        .scenario = s->name,
                        .workdir = o->workdir,
                        .progress = dlc_exec_on_step,
                        .user = &p,
                        .comm = o->comm,
                        .device = dlc_exec_device(o)};
  for (int i = 0; i < s->nruns; i++) {
    /* A variant's run that its overrides left untouched is the correct
     * pipeline's run: its trace is reused, not recomputed. */
    if (reuse && memcmp(&runs[i], &s->runs[i], sizeof runs[i]) == 0) {
      dlc_trace_init(&traces[i], s->name, runs[i].name);
      DL_TRY(dlc_trace_copy(&traces[i], &reuse[i]));
      continue;
    }
    if (runs[i].trace[0]) {
      DL_TRY(dlc_exec_load_trace_run(s, &runs[i], o->root, &traces[i]));
      DL_TRY(note_trace_origin(&runs[i], &traces[i]));
      continue;
    }
    snprintf(p.what, sizeof p.what, "%.60s%.60s", label, runs[i].name); /* a progress label */
    DL_TRY(dlc_run(&runs[i], &ro, &traces[i]));
    traces[i].scenario_hash = s->hash;
  }
  return DL_OK;
}

/* A failed check with catalogue IDs says, for each, what the mistake is
 * and the line that fixes it: the report speaks to the team. Then its
 * waiver, if the scenario accepts its failure. */
static void name_findings(const dlc_check_spec *spec, dlc_verdict *v) {
  memcpy(v->catalogue, spec->catalogue, sizeof v->catalogue);
  v->ncatalogue = spec->ncatalogue;
  for (int i = 0; v->kind == DLC_FAIL && i < spec->ncatalogue; i++) {
    const dlc_pitfall_entry *p = dlc_catalogue_find(spec->catalogue[i]);
    if (p) dlc_evidence(v, " %s: %s. Fix: %s.", p->id, p->mistake, p->fix);
  }
  dlc_verdict_waive(v, spec->waived);
}

dl_status dlc_evaluate_checks(const dlc_scenario *s, const dlc_trace *traces, int ntraces,
                              const char *variant, const char *pitfall, dlc_verdict *out) {
  for (int i = 0; i < s->nchecks; i++) {
    const dlc_check_spec *spec = &s->checks[i];
    dlc_verdict *v = &out[i];
    dlc_verdict_init(v, spec->name, variant, pitfall);
    const dlc_check_kind *kind = dlc_check_kind_find(spec->kind);
    dl_status st = kind ? kind->fn(spec, traces, ntraces, v)
                        : dl_fail(DL_ERR_INVALID, "unknown check kind '%s'", spec->kind);
    if (st) {
      v->kind = DLC_ERROR;
      snprintf(v->evidence, sizeof v->evidence, "the check could not run: %s", dl_last_error());
    }
    name_findings(spec, v);
  }
  return DL_OK;
}

/* A failed equivalence check between two engine runs whose statistics do
 * not name a layer: both are trained again up to the first differing step
 * with statistics there (locate.h). Only on failure: passing runs cost
 * nothing. */
dl_status dlc_exec_locate_failures(const dlc_scenario *s, const dlc_exec_options *o,
                                   const dlc_trace *traces, dlc_verdict *verdicts) {
  dlc_run_options ro = {.root = o->root,
                        .scenario = s->name,
                        .workdir = o->workdir,
                        .comm = o->comm,
                        .device = dlc_exec_device(o)};
  for (int i = 0; i < s->nchecks; i++) {
    const dlc_check_spec *c = &s->checks[i];
    int a = dlc_scenario_find_run(s, c->a), b = dlc_scenario_find_run(s, c->b);
    bool failed = verdicts[i].kind == DLC_FAIL || verdicts[i].kind == DLC_WAIVED;
    if (!failed || verdicts[i].layer[0] || strcmp(c->kind, "equivalence") || a < 0 || b < 0 ||
        s->runs[a].trace[0] || s->runs[b].trace[0])
      continue;
    int64_t step = dlc_first_digest_step(&traces[a], &traces[b], NULL);
    if (step >= 0)
      DL_TRY(dlc_locate_layer(&c->tol, &s->runs[a], &ro, &s->runs[b], &ro, step, &verdicts[i]));
  }
  return DL_OK;
}
