/* The scenario loader: a full scenario with every key set away from its
 * default arrives field by field; a minimal one gets PyTorch's defaults;
 * overrides merge key by key; pitfall variants; and bad files, each failing
 * with the right code and a message "FILE:LINE:COL: ..." whose position is
 * found independently, by searching the file's text for a marker.
 *
 * Tolerances: numbers written in the YAML are compared exactly against the
 * same literals converted by the C compiler (strtod and the compiler both
 * round correctly), so every float comparison here is ==. */
#define _XOPEN_SOURCE 700 /* mkdtemp, chdir */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "judge/check.h"
#include "scenario/scenario.h"
#include "tmpdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define FIXTURES DL_SOURCE_DIR "/tests/data/scenarios/"

static char tmp_root[DL_TMP_PATH_MAX];

/* ---- helpers ----------------------------------------------------------- */

static char *read_bytes(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* Writes TMP/folder/scenario.yaml with `len` bytes of text; returns the folder. */
static const char *write_scenario(const char *folder, const char *text, size_t len) {
  static char dir[256];
  char path[300];
  snprintf(dir, sizeof dir, "%s/%s", tmp_root, folder);
  mkdir(dir, 0700);
  snprintf(path, sizeof path, "%s/scenario.yaml", dir);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  fclose(f);
  return dir;
}

static void remove_scenario(const char *folder) {
  char path[300];
  snprintf(path, sizeof path, "%s/%s/scenario.yaml", tmp_root, folder);
  remove(path);
  snprintf(path, sizeof path, "%s/%s", tmp_root, folder);
  rmdir(path);
}

/* base with the first `from` replaced by `to` (from NULL: `to` itself). */
static char *mutate(const char *base, const char *from, const char *to) {
  if (!from) return strdup(to);
  const char *at = strstr(base, from);
  if (!at) fail_msg("test bug: '%s' is not in the base text", from);
  size_t n = strlen(base) - strlen(from) + strlen(to) + 1;
  char *out = malloc(n);
  assert_non_null(out);
  snprintf(out, n, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
  return out;
}

/* 1-based line:col of the first occurrence of marker in text, plus skip. */
static void position_of(const char *text, const char *marker, int skip, int *line, int *col) {
  const char *at = strstr(text, marker);
  if (!at) fail_msg("test bug: marker '%s' is not in the text", marker);
  at += skip;
  *line = 1;
  *col = 1;
  for (const char *p = text; p < at; p++) {
    if (*p == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

static bool all_bools(const void *p, size_t n, bool want) {
  const bool *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != want) return false;
  return true;
}

/* ---- a full scenario --------------------------------------------------- */

static dlc_scenario *load_ok(const char *dir) {
  dlc_scenario *s = NULL;
  dl_status st = dlc_scenario_load(&s, dir);
  if (st != DL_OK) fail_msg("loading %s: %s", dir, dl_last_error());
  assert_non_null(s);
  return s;
}

static void test_full_header(void **state) {
  (void)state;
  dlc_scenario *s = load_ok(FIXTURES "full/");
  assert_string_equal(s->name, "full");
  assert_string_equal(s->dir, FIXTURES "full"); /* trailing '/' dropped */
  assert_string_equal(s->description, "Every key of the schema, set away from its default.");
  size_t len;
  char *bytes = read_bytes(FIXTURES "full/scenario.yaml", &len);
  assert_true(s->hash == XXH64(bytes, len, 0));
  free(bytes);
  assert_int_equal(s->nruns, 3);
  assert_string_equal(s->runs[0].name, "reference");
  assert_string_equal(s->runs[1].name, "accumulated");
  assert_string_equal(s->runs[2].name, "buggy");
  assert_int_equal(dlc_scenario_find_run(s, "buggy"), 2);
  assert_int_equal(dlc_scenario_find_run(s, "nope"), -1);
  dlc_scenario_free(s);
}

static void check_full_model(const dlc_run_config *c) {
  assert_int_equal(c->nlayers, 12);
  const dl_layer_desc *l = c->layers;
  assert_int_equal(l[0].kind, DL_CONV2D);
  assert_int_equal(l[0].in, 1);
  assert_int_equal(l[0].out, 8);
  assert_int_equal(l[0].kernel, 3);
  assert_int_equal(l[0].stride, 2);
  assert_int_equal(l[0].padding, 1);
  assert_false(l[0].bias);
  assert_int_equal(l[1].kind, DL_BATCHNORM2D);
  assert_int_equal(l[1].out, 8);
  assert_true(l[1].eps == 1e-3f && l[1].momentum == 0.2f);
  assert_false(l[1].affine);
  assert_false(l[1].track_running_stats);
  assert_int_equal(l[2].kind, DL_RELU);
  assert_int_equal(l[3].kind, DL_MAXPOOL2D);
  assert_int_equal(l[3].kernel, 2);
  assert_int_equal(l[3].stride, 1);
  assert_int_equal(l[3].padding, 1);
  assert_int_equal(l[4].kind, DL_GLOBALAVGPOOL);
  assert_int_equal(l[5].kind, DL_FLATTEN);
  assert_int_equal(l[6].kind, DL_LINEAR);
  assert_int_equal(l[6].in, 8);
  assert_int_equal(l[6].out, 32);
  assert_true(l[6].bias);
  assert_int_equal(l[7].kind, DL_LAYERNORM);
  assert_int_equal(l[7].out, 32);
  assert_true(l[7].eps == 1e-6f);
  assert_false(l[7].affine);
  assert_int_equal(l[8].kind, DL_DROPOUT);
  assert_true(l[8].p == 0.25f);
  assert_int_equal(l[9].kind, DL_GELU);
  assert_true(l[9].gelu_tanh);
  assert_int_equal(l[10].kind, DL_RESIDUAL);
  assert_int_equal(l[10].nbody, 3);
  const dl_layer_desc *b = l[10].body;
  assert_non_null(b);
  assert_int_equal(b[0].kind, DL_LINEAR);
  assert_int_equal(b[0].in, 32);
  assert_false(b[0].bias);
  assert_int_equal(b[1].kind, DL_TANH);
  assert_int_equal(b[2].kind, DL_RESIDUAL);
  assert_int_equal(b[2].nbody, 1);
  assert_int_equal(b[2].body[0].kind, DL_BATCHNORM1D);
  assert_int_equal(b[2].body[0].out, 32);
  assert_true(b[2].body[0].eps == 1e-5f); /* default */
  assert_int_equal(l[11].kind, DL_LINEAR);
  assert_int_equal(l[11].out, 4);
}

static void check_full_data(const dlc_data_config *d) {
  assert_int_equal(d->source, DLC_DATA_BLOBS);
  assert_string_equal(d->path, "fixtures/digits.h5");
  assert_string_equal(d->split, "training");
  assert_string_equal(d->eval_split, "");
  assert_int_equal(d->limit, 512);
  assert_int_equal(d->eval_limit, 64);
  assert_int_equal(d->n, 300);
  assert_int_equal(d->dim, 17);
  assert_int_equal(d->classes, 5);
  assert_true(d->spread == 0.75f);
  assert_int_equal(d->vocab, 60);
  assert_int_equal(d->min_len, 4);
  assert_int_equal(d->max_len, 9);
  assert_true(d->shuffle && d->drop_last && d->augment);
  assert_int_equal(d->workers, 2);
}

static void check_full_training(const dlc_run_config *c) {
  assert_int_equal(c->optim.kind, DL_OPTIM_ADAMW);
  assert_true(c->optim.momentum == 0.9f && c->optim.dampening == 0.1f);
  assert_true(c->optim.weight_decay == 0.001f);
  assert_false(c->optim.nesterov);
  assert_true(c->optim.beta1 == 0.8f && c->optim.beta2 == 0.99f && c->optim.eps == 1e-6f);
  assert_int_equal(c->schedule.kind, DL_SCHEDULE_COSINE);
  assert_int_equal(c->schedule.step_size, 5);
  assert_true(c->schedule.gamma == 0.5f && c->schedule.min_lr == 1e-4f);
  assert_int_equal(c->schedule.warmup_steps, 3);
  assert_int_equal(c->schedule.total_steps, 18);
  assert_true(c->clip_max_norm == 1.5f);
  const dlc_precision_config *p = &c->precision;
  assert_int_equal(p->autocast, DL_BF16);
  assert_int_equal(p->scaler, DL_SCALER_DYNAMIC);
  assert_true(p->init_scale == 1024.0f && p->growth_factor == 4.0f && p->backoff_factor == 0.25f);
  assert_int_equal(p->growth_interval, 10);
  assert_int_equal(p->loss_half, 1);
  assert_int_equal(c->parallel.world, 4);
  assert_int_equal(c->parallel.threads, 2);
  assert_false(c->parallel.broadcast_buffers);
  assert_int_equal(c->steps, 20);
}

static void check_full_rest(const dlc_run_config *c) {
  assert_int_equal(c->seed, 1234);
  assert_string_equal(c->init_weights, "fixtures/init.h5");
  const dlc_checkpoint_config *k = &c->checkpoint;
  assert_int_equal(k->at_step, 10);
  assert_false(k->optimizer || k->scaler || k->rng || k->strict);
  assert_true(k->add_module_prefix && k->change_architecture);
  assert_string_equal(k->drop_key, "0.weight");
  assert_true(c->eval.enabled);
  assert_int_equal(c->eval.every, 5);
  assert_false(c->eval.eval_mode || c->eval.no_grad);
  assert_int_equal(c->eval.repeats, 3);
  assert_int_equal(c->nfrozen, 2);
  assert_string_equal(c->frozen[0], "0.");
  assert_string_equal(c->frozen[1], "1.weight");
  assert_int_equal(c->nnot_in_optimizer, 1);
  assert_string_equal(c->not_in_optimizer[0], "6.bias");
  assert_int_equal(c->stats_every, 4);
}

static void test_full_reference_run(void **state) {
  (void)state;
  dlc_scenario *s = load_ok(FIXTURES "full");
  const dlc_run_config *c = &s->runs[0];
  check_full_model(c);
  check_full_data(&c->data);
  assert_int_equal(c->data.batch, 32);
  check_full_training(c);
  assert_true(c->optim.lr == 0.05f);
  assert_int_equal(c->accumulation, 2);
  check_full_rest(c);
  assert_true(all_bools(&c->bug, sizeof c->bug, false));
  dlc_scenario_free(s);
}

/* Run overrides merge into the top level key by key; lists replace. */
static void test_full_overrides_merge(void **state) {
  (void)state;
  dlc_scenario *s = load_ok(FIXTURES "full");
  const dlc_run_config *acc = &s->runs[1];
  assert_int_equal(acc->accumulation, 4);
  assert_int_equal(acc->data.batch, 8);
  check_full_data(&acc->data); /* the other data keys are the top level's */
  assert_true(acc->optim.lr == 0.1f);
  check_full_training(acc);
  check_full_model(acc);
  check_full_rest(acc);

  const dlc_run_config *bug = &s->runs[2];
  assert_int_equal(bug->nlayers, 2);
  assert_int_equal(bug->layers[0].kind, DL_EMBEDDING);
  assert_int_equal(bug->layers[0].in, 100);
  assert_int_equal(bug->layers[0].out, 16);
  assert_int_equal(bug->layers[1].kind, DL_FLATTEN);
  assert_int_equal(bug->nfrozen, 0);           /* replaced by [] */
  assert_int_equal(bug->nnot_in_optimizer, 1); /* untouched */
  assert_true(all_bools(&bug->bug, sizeof bug->bug, true));
  assert_int_equal(bug->accumulation, 2);
  dlc_scenario_free(s);
}

static void test_full_checks(void **state) {
  (void)state;
  dlc_scenario *s = load_ok(FIXTURES "full");
  assert_int_equal(s->nchecks, 3);
  const dlc_check_spec *c = &s->checks[0];
  assert_string_equal(c->name, "params_match");
  assert_string_equal(c->kind, "equivalence");
  assert_string_equal(c->a, "reference");
  assert_string_equal(c->b, "accumulated");
  assert_int_equal(c->nquantities, 2);
  assert_string_equal(c->quantities[0], "loss");
  assert_string_equal(c->quantities[1], "params");
  assert_int_equal(c->tol.kind, DLC_TOL_CLOSE);
  assert_true(c->tol.rtol == 1e-5 && c->tol.atol == 1e-6);
  assert_true(c->threshold == 0.5);
  assert_true(c->expect_divergence);
  c = &s->checks[1];
  assert_string_equal(c->kind, "metric_max");
  assert_string_equal(c->b, "");
  assert_int_equal(c->tol.kind, DLC_TOL_ULP);
  assert_int_equal(c->tol.ulp, 4);
  assert_true(c->threshold == 0.0);
  assert_false(c->expect_divergence);
  assert_int_equal(s->checks[2].tol.kind, DLC_TOL_BITWISE);
  assert_int_equal(s->checks[2].nquantities, 1);
  dlc_scenario_free(s);
}

static void test_full_variants(void **state) {
  (void)state;
  dlc_scenario *s = load_ok(FIXTURES "full");
  assert_int_equal(s->nvariants, 2);
  const dlc_variant *v = &s->variants[0];
  assert_string_equal(v->name, "G1-no-zero-grad");
  assert_string_equal(v->pitfall, "G1");
  assert_string_equal(v->caught_by, "params_match");
  assert_string_equal(v->description, "zero_grad never called");
  /* Applied to the run it names only, on top of that run's overrides. */
  assert_true(v->runs[1].bug.no_zero_grad);
  assert_true(v->runs[1].optim.momentum == 0.5f);
  assert_int_equal(v->runs[1].accumulation, 4);
  assert_true(v->runs[1].optim.beta1 == 0.8f);
  assert_false(v->runs[0].bug.no_zero_grad);
  assert_true(v->runs[0].optim.momentum == 0.9f);
  assert_true(all_bools(&v->runs[2].bug, sizeof v->runs[2].bug, true));
  for (int r = 0; r < 3; r++) assert_string_equal(v->runs[r].name, s->runs[r].name);

  v = &s->variants[1];
  assert_string_equal(v->name, "D7"); /* name defaults to the id */
  assert_string_equal(v->description, "");
  for (int r = 0; r < 3; r++) { /* no runs list: every run */
    assert_int_equal(v->runs[r].parallel.world, 2);
    assert_int_equal(v->runs[r].nlayers, 1);
    assert_int_equal(v->runs[r].layers[0].kind, DL_LINEAR);
  }
  assert_int_equal(v->runs[1].accumulation, 4);
  /* The scenario's own runs are untouched by variants. */
  assert_int_equal(s->runs[0].parallel.world, 4);
  assert_int_equal(s->runs[0].nlayers, 12);
  dlc_scenario_free(s);
}

/* ---- defaults ---------------------------------------------------------- */

static void test_minimal_defaults(void **state) {
  (void)state;
  dlc_scenario *s = load_ok(FIXTURES "minimal");
  assert_string_equal(s->description, "Only the required keys.");
  assert_int_equal(s->nruns, 1);
  assert_int_equal(s->nvariants, 0);
  assert_null(s->variants);
  const dlc_run_config *c = &s->runs[0];
  assert_int_equal(c->seed, 0);
  assert_int_equal(c->nlayers, 1);
  assert_true(c->layers[0].bias);
  assert_string_equal(c->init_weights, "");
  assert_int_equal(c->data.source, DLC_DATA_FIXTURE);
  assert_string_equal(c->data.split, "train");
  assert_string_equal(c->data.eval_split, "test");
  assert_int_equal(c->data.limit, 0);
  assert_int_equal(c->data.batch, 1);
  assert_false(c->data.shuffle || c->data.drop_last || c->data.augment);
  assert_int_equal(c->data.workers, 0);
  assert_int_equal(c->optim.kind, DL_OPTIM_SGD);
  assert_true(c->optim.lr == 0.01f && c->optim.momentum == 0.0f && c->optim.dampening == 0.0f);
  assert_true(c->optim.weight_decay == 0.0f);
  assert_true(c->optim.beta1 == 0.9f && c->optim.beta2 == 0.999f && c->optim.eps == 1e-8f);
  assert_int_equal(c->schedule.kind, DL_SCHEDULE_CONSTANT);
  assert_true(c->clip_max_norm == 0.0f);
  assert_int_equal(c->precision.autocast, DL_F32);
  assert_int_equal(c->precision.scaler, DL_SCALER_OFF);
  assert_true(c->precision.init_scale == 65536.0f && c->precision.growth_factor == 2.0f);
  assert_true(c->precision.backoff_factor == 0.5f);
  assert_int_equal(c->precision.growth_interval, 2000);
  assert_int_equal(c->precision.loss_half, 0);
  assert_int_equal(c->parallel.world, 1);
  assert_int_equal(c->parallel.threads, 1);
  assert_true(c->parallel.broadcast_buffers);
  assert_int_equal(c->accumulation, 1);
  assert_int_equal(c->steps, 10);
  assert_int_equal(c->checkpoint.at_step, 0);
  assert_true(c->checkpoint.optimizer && c->checkpoint.scaler && c->checkpoint.rng);
  assert_true(c->checkpoint.strict);
  assert_false(c->checkpoint.add_module_prefix || c->checkpoint.change_architecture);
  assert_false(c->eval.enabled);
  assert_true(c->eval.eval_mode && c->eval.no_grad);
  assert_int_equal(c->eval.repeats, 2);
  assert_int_equal(c->nfrozen + c->nnot_in_optimizer, 0);
  assert_int_equal(c->stats_every, 0);
  assert_int_equal(c->loss.kind, DLC_LOSS_CROSS_ENTROPY); /* F.cross_entropy's defaults */
  assert_int_equal(c->loss.reduction, DL_REDUCTION_MEAN);
  assert_true(c->loss.label_smoothing == 0.0f);
  assert_int_equal(c->loss.ignore_index, -100);
  assert_string_equal(c->trace, "");
  assert_true(all_bools(&c->bug, sizeof c->bug, false));
  const dlc_tolerance def = dlc_tolerance_default(DL_F32);
  assert_int_equal(s->checks[0].tol.kind, def.kind);
  assert_true(s->checks[0].tol.rtol == def.rtol && s->checks[0].tol.atol == def.atol);
  dlc_scenario_free(s);
}

/* The base text every generated case starts from; it loads as it is. */
static const char *const BASE =
    "name: bad\n"
    "description: A small valid scenario that each case breaks once.\n"
    "model:\n"
    "  - {type: linear, in: 4, out: 3}\n"
    "  - {type: relu}\n"
    "  - {type: linear, in: 3, out: 2}\n"
    "data: {source: blobs, n: 64, dim: 4, classes: 2, batch: 8}\n"
    "optimizer: {type: sgd, lr: 0.1}\n"
    "steps: 4\n"
    "runs:\n"
    "  reference: {}\n"
    "  other: {data: {batch: 4}}\n"
    "checks:\n"
    "  - {name: same, kind: equivalence, quantities: [loss], a: reference, b: other}\n"
    "pitfalls:\n"
    "  - {id: G1, caught_by: same, overrides: {bugs: {no_zero_grad: true}}}\n";

static dlc_scenario *load_mutated(const char *from, const char *to) {
  char *text = mutate(BASE, from, to);
  const char *dir = write_scenario("bad", text, strlen(text));
  free(text);
  dlc_scenario *s = load_ok(dir);
  remove_scenario("bad");
  return s;
}

/* Defaults that depend on another setting, as PyTorch's do. */
static void test_dependent_defaults(void **state) {
  (void)state;
  dlc_scenario *s = load_mutated("{type: sgd, lr: 0.1}", "{type: adam}");
  assert_true(s->runs[0].optim.lr == 1e-3f);          /* torch.optim.Adam */
  assert_true(s->runs[0].optim.weight_decay == 0.0f); /* Adam: 0 */
  assert_int_equal(s->nvariants, 1);
  assert_true(s->variants[0].runs[1].bug.no_zero_grad);
  dlc_scenario_free(s);
  s = load_mutated("{type: sgd, lr: 0.1}", "{type: adamw}");
  assert_true(s->runs[1].optim.weight_decay == 0.01f); /* torch.optim.AdamW */
  dlc_scenario_free(s);
  s = load_mutated("steps: 4\n", "steps: 7\nschedule: {type: cosine}\n");
  assert_int_equal(s->runs[0].schedule.total_steps, 7); /* 0 means all steps */
  dlc_scenario_free(s);
  s = load_mutated("{type: relu}", "{type: maxpool2d, kernel: 3}");
  assert_int_equal(s->runs[0].layers[1].stride, 0); /* PyTorch: stride = kernel */
  dlc_scenario_free(s);
  s = load_mutated("{type: relu}", "{type: gelu}");
  assert_false(s->runs[0].layers[1].gelu_tanh);
  dlc_scenario_free(s);
  s = load_mutated("  reference: {}\n", "  reference:\n  ref2: ~\n");
  assert_int_equal(s->nruns, 3);
  assert_string_equal(s->runs[1].name, "ref2");
  dlc_scenario_free(s);
}

/* A check's catalogue IDs, in the order written. */
static void test_check_catalogue(void **state) {
  (void)state;
  dlc_scenario *s = load_mutated("b: other}", "b: other, catalogue: [G2, G1]}");
  assert_int_equal(s->checks[0].ncatalogue, 2);
  assert_string_equal(s->checks[0].catalogue[0], "G2");
  assert_string_equal(s->checks[0].catalogue[1], "G1");
  dlc_scenario_free(s);
  s = load_mutated("b: other}", "b: other}\n  - {name: n, kind: nonfinite, a: other}");
  assert_int_equal(s->checks[1].ncatalogue, 0); /* optional */
  dlc_scenario_free(s);
}

/* waived: the reason a failure is accepted, on any check kind. */
static void test_check_waived(void **state) {
  (void)state;
  dlc_scenario *s = load_mutated("b: other}", "b: other, waived: \"summed on purpose: #412\"}\n"
                                              "  - {name: ddp, kind: not_tested, reason: r, "
                                              "waived: accepted}");
  assert_string_equal(s->checks[0].waived, "summed on purpose: #412");
  assert_string_equal(s->checks[1].waived, "accepted");
  dlc_scenario_free(s);
  s = load_mutated("b: other}", "b: other}\n  - {name: n, kind: nonfinite, a: other}");
  assert_string_equal(s->checks[0].waived, ""); /* optional */
  assert_string_equal(s->checks[1].waived, "");
  dlc_scenario_free(s);
  /* at most 511 characters, as a reason */
  char longer[600], to[700];
  memset(longer, 'x', 512);
  longer[512] = '\0';
  snprintf(to, sizeof to, "b: other, waived: %s}", longer);
  char *text = mutate(BASE, "b: other}", to);
  const char *dir = write_scenario("bad", text, strlen(text));
  free(text);
  assert_int_equal(dlc_scenario_load(&s, dir), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "waived: too long: 512 characters, at most 511"));
  remove_scenario("bad");
}

/* noise: RUN gives an equivalence check its band; widen defaults to 4. */
static void test_check_noise(void **state) {
  (void)state;
  dlc_scenario *s = load_mutated("b: other}", "b: other, noise: reference, widen: 8, "
                                              "noise_b: other}\n"
                                              "  - {name: n, kind: equivalence, a: reference, "
                                              "b: other, noise: other, quantities: [loss]}");
  assert_string_equal(s->checks[0].noise, "reference");
  assert_true(s->checks[0].noise_widen == 8.0);
  assert_string_equal(s->checks[0].noise_b, "other");
  assert_string_equal(s->checks[1].noise_b, "");
  assert_string_equal(s->checks[1].noise, "other");
  assert_true(s->checks[1].noise_widen == 4.0);
  dlc_scenario_free(s);
}

/* not_tested reads no run and carries its reason. */
static void test_not_tested_check(void **state) {
  (void)state;
  dlc_scenario *s = load_mutated("b: other}", "b: other}\n  - {name: ddp, kind: not_tested, "
                                              "catalogue: [D1], reason: no DDP wrapper given}");
  assert_int_equal(s->nchecks, 2);
  assert_string_equal(s->checks[1].kind, "not_tested");
  assert_string_equal(s->checks[1].reason, "no DDP wrapper given");
  assert_string_equal(s->checks[1].a, "");
  dlc_scenario_free(s);
  /* Only not_tested checks: no run is needed, and none is given. */
  const char *text = "name: bad\ndescription: nothing could run\nruns: {}\nchecks:\n"
                     "  - {name: ddp, kind: not_tested, reason: no DDP wrapper given}\n";
  const char *dir = write_scenario("bad", text, strlen(text));
  s = load_ok(dir);
  remove_scenario("bad");
  assert_int_equal(s->nruns, 0);
  assert_int_equal(s->nchecks, 1);
  dlc_scenario_free(s);
  /* ... but a pitfall variant re-runs runs: refused. */
  char with_pitfall[512];
  snprintf(with_pitfall, sizeof with_pitfall,
           "%spitfalls:\n  - {id: D1, caught_by: ddp, "
           "overrides: {bugs: {no_distributed_sampler: true}}}\n",
           text);
  dir = write_scenario("bad", with_pitfall, strlen(with_pitfall));
  assert_int_equal(dlc_scenario_load(&s, dir), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "pitfall variants re-run the scenario's runs"));
  remove_scenario("bad");
}

/* The loss section: every key, and a run's override merging into it. */
static void test_loss_section(void **state) {
  (void)state;
  dlc_scenario *s = load_mutated("steps: 4\n", "steps: 4\nloss: {type: cross_entropy, reduction: "
                                               "sum, label_smoothing: 0.25, ignore_index: 7}\n");
  const dlc_loss_config *l = &s->runs[0].loss;
  assert_int_equal(l->kind, DLC_LOSS_CROSS_ENTROPY);
  assert_int_equal(l->reduction, DL_REDUCTION_SUM);
  assert_true(l->label_smoothing == 0.25f);
  assert_int_equal(l->ignore_index, 7);
  dlc_scenario_free(s);
  s = load_mutated("  other: {data: {batch: 4}}\n",
                   "  other: {loss: {label_smoothing: 1}}\nloss: {reduction: sum, "
                   "ignore_index: -2147483648}\n");
  assert_int_equal(s->runs[0].loss.reduction, DL_REDUCTION_SUM);
  assert_true(s->runs[0].loss.label_smoothing == 0.0f);
  assert_int_equal(s->runs[1].loss.reduction, DL_REDUCTION_SUM); /* merged key by key */
  assert_true(s->runs[1].loss.label_smoothing == 1.0f);
  assert_int_equal(s->runs[1].loss.ignore_index, INT32_MIN);
  dlc_scenario_free(s);
}

/* ---- runs given as recorded traces ------------------------------------- */

/* Only traces: no model, no data path needed. */
static const char *const TRACES =
    "name: bad\n"
    "description: Runs that are recorded traces.\n"
    "runs:\n"
    "  torch: {trace: fixtures/torch/a.h5}\n"
    "  other: {trace: /abs/b.h5, optimizer: {lr: 0.5}, parallel: {world: 2}}\n"
    "checks:\n"
    "  - {name: same, kind: equivalence, quantities: [loss], a: torch, b: other}\n"
    "pitfalls:\n"
    "  - {id: G1, caught_by: same, runs: [torch], overrides: {trace: broken.h5}}\n"
    "  - {id: G2, caught_by: same, overrides: {bugs: {no_zero_grad: true}}}\n";

static void test_trace_runs(void **state) {
  (void)state;
  const char *dir = write_scenario("bad", TRACES, strlen(TRACES));
  dlc_scenario *s = load_ok(dir);
  remove_scenario("bad");
  assert_string_equal(s->runs[0].trace, "fixtures/torch/a.h5");
  assert_string_equal(s->runs[1].trace, "/abs/b.h5");
  assert_string_equal(s->runs[1].name, "other");
  /* every other setting of a trace run is the default: none applies */
  dlc_run_config def;
  dlc_run_config_default(&def);
  assert_true(s->runs[1].optim.lr == def.optim.lr);
  assert_int_equal(s->runs[1].parallel.world, 1);
  assert_int_equal(s->runs[1].nlayers, 0);
  /* a variant may point a run at another trace ... */
  assert_string_equal(s->variants[0].runs[0].trace, "broken.h5");
  assert_memory_equal(&s->variants[0].runs[1], &s->runs[1], sizeof s->runs[1]);
  /* ... and settings it changes on a trace run leave the run as it was,
   * so the pipeline's trace is reused */
  assert_memory_equal(&s->variants[1].runs[0], &s->runs[0], sizeof s->runs[0]);
  assert_memory_equal(&s->variants[1].runs[1], &s->runs[1], sizeof s->runs[1]);
  dlc_scenario_free(s);
  /* an engine run beside a trace run reads the model as before */
  s = load_mutated("  other: {data: {batch: 4}}\n", "  other: {trace: t.h5}\n");
  assert_int_equal(s->runs[0].nlayers, 3);
  assert_string_equal(s->runs[0].trace, "");
  assert_string_equal(s->runs[1].trace, "t.h5");
  dlc_scenario_free(s);
}

/* The model is needed as soon as one run, of the scenario or of a
 * variant, trains in the engine. */
static void test_model_needed_by_engine_runs(void **state) {
  (void)state;
  char *text = mutate(TRACES, "{trace: /abs/b.h5,", "{");
  const char *dir = write_scenario("bad", text, strlen(text));
  dlc_scenario *s = NULL;
  assert_int_equal(dlc_scenario_load(&s, dir), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "scenario.yaml:1:1: missing required key 'model': run "
                                          "'other' trains in the engine"));
  assert_null(s);
  free(text);
  text = mutate(TRACES, "{bugs: {no_zero_grad: true}}", "{trace: \"\"}");
  dir = write_scenario("bad", text, strlen(text));
  assert_int_equal(dlc_scenario_load(&s, dir), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "pitfalls[1].overrides: missing required key 'model': "
                                          "run 'torch' trains in the engine"));
  free(text);
  remove_scenario("bad");
}

/* ---- bad files --------------------------------------------------------- */

typedef struct bad_case {
  const char *from, *to; /* replace `from` in BASE by `to`; from NULL: `to` is the file */
  dl_status status;
  const char *marker; /* the error points at its first occurrence ... */
  int skip;           /* ... plus this many characters */
  const char *words;  /* and says this */
} bad_case;

static const bad_case bad_cases[] = {
    /* YAML syntax, reported by libfyaml */
    {"  - {type: relu}\n", "  - {type: relu\n", DL_ERR_FORMAT, "data: {source", 0,
     "YAML syntax error: wrongly indented flow mapping"},
    {"steps: 4\n", "steps: 4\nsteps: 5\n", DL_ERR_FORMAT, "steps: 5", 0, "duplicate key"},
    {NULL, "", DL_ERR_FORMAT, "", 0, "no YAML document"},
    {NULL, "# nothing but a comment\n", DL_ERR_FORMAT, "#", 0, "no YAML document"},
    {"steps: 4\n", "steps: 4\n---\nname: again\n", DL_ERR_FORMAT, "name: again", 0,
     "a second YAML document"},
    {NULL, "name: bad\n---\nb: [\n", DL_ERR_FORMAT, "b: [\n", 5,
     "YAML syntax error: flow sequence without a closing bracket"},
    /* unknown keys */
    {"optimizer: {", "optimiser: {", DL_ERR_FORMAT, "optimiser", 0,
     "optimiser: unknown key 'optimiser'; expected one of: name, description, seed, model"},
    {"lr: 0.1", "lrr: 0.1", DL_ERR_FORMAT, "lrr", 0,
     "optimizer.lrr: unknown key 'lrr'; expected one of: type, lr, momentum"},
    {"{type: relu}", "{type: relu, in: 3}", DL_ERR_FORMAT, "in: 3}", 0,
     "model[1].in: unknown key 'in'; expected one of: type"},
    {"other: {data: {batch: 4}}", "other: {checks: []}", DL_ERR_FORMAT, "checks: []", 0,
     "runs.other.checks: unknown key 'checks'"},
    {"steps: 4\n", "steps: 4\n? [x]\n: 1\n", DL_ERR_FORMAT, "x]", 0, "keys must be plain names"},
    {"b: other}", "b: other, catalogue: [Z9]}", DL_ERR_INVALID, "Z9]", 0,
     "checks[0].catalogue[0]: 'Z9' is not a catalogue ID"},
    {"b: other}", "b: other, catalogue: [G1, G1]}", DL_ERR_INVALID, "G1]}", 0,
     "catalogue ID 'G1' is listed twice"},
    {"b: other}", "b: other, catalogue: []}", DL_ERR_INVALID, "catalogue: []", 0,
     "checks[0].catalogue: expected at least 1 item"},
    {"b: other}", "b: other}\n  - {name: x, kind: not_tested, a: other, reason: r}", DL_ERR_INVALID,
     "a: other, reason", 3, "check kind 'not_tested' reads no run; remove a"},
    {"b: other}", "b: other}\n  - {name: x, kind: not_tested}", DL_ERR_FORMAT, "{name: x", 1,
     "check 'x' of kind 'not_tested' says why it is not tested; add reason"},
    {"b: other}", "b: other, reason: why}", DL_ERR_INVALID, "why}", 0,
     "reason belongs to kind not_tested; remove it"},
    {"b: other}", "b: other, waived: \"\"}", DL_ERR_INVALID, "\"\"}", 0,
     "checks[0].waived: must not be empty"},
    {"b: other}", "b: other, waived: [why]}", DL_ERR_FORMAT, "why]", 0,
     "checks[0].waived: expected a string, got a list"},
    {"b: other}", "b: other, waived: \"a\\tb\"}", DL_ERR_FORMAT, "\"a", 0,
     "checks[0].waived: holds a control character"},
    {"a: reference, b: other}", "b: other}", DL_ERR_FORMAT, "{name: same", 1,
     "check 'same' of kind 'equivalence' reads a run; add a: RUN"},
    {"  reference: {}\n  other: {data: {batch: 4}}\n", "  {}\n", DL_ERR_INVALID, "reference, b", 0,
     "unknown run 'reference': the scenario has no runs; name at least one"},
    /* wrong types */
    {"lr: 0.1", "lr: abc", DL_ERR_FORMAT, "abc", 0, "optimizer.lr: expected a number, got 'abc'"},
    {"steps: 4", "steps: 2.5", DL_ERR_FORMAT, "2.5", 0, "steps: expected an integer, got '2.5'"},
    {"steps: 4\n", "steps: 4\neval: {enabled: yes}\n", DL_ERR_FORMAT, "yes", 0,
     "eval.enabled: expected true or false, got 'yes'"},
    {"name: bad", "name: [bad]", DL_ERR_FORMAT, "bad]", 0, "name: expected a string, got a list"},
    {NULL, "- a\n- b\n", DL_ERR_FORMAT, "a", 0, "expected a mapping (key: value, ...), got a list"},
    {"  - {type: relu}\n", "  - relu\n", DL_ERR_FORMAT, "relu", 0,
     "model[1]: expected a mapping (key: value, ...), got a scalar"},
    {"steps: 4\n", "steps: 4\nclip:\n", DL_ERR_FORMAT, "clip", 0,
     "clip: expected a mapping (key: value, ...), got nothing"},
    {"steps: 4\n", "steps: 4\nseed: -1\n", DL_ERR_FORMAT, "-1", 0,
     "seed: expected a non-negative integer, got '-1'"},
    {"lr: 0.1", "lr: .nan", DL_ERR_FORMAT, ".nan", 0, "expected a number, got '.nan'"},
    {"overrides: {bugs: {no_zero_grad: true}}", "overrides: 3", DL_ERR_FORMAT, "overrides: 3", 11,
     "pitfalls[0].overrides: expected a mapping"},
    {"steps: 4\n", "steps: &n 4\nstats_every: *n\n", DL_ERR_FORMAT, "*n", 0,
     "stats_every: aliases (*n) are not supported"},
    /* out of range */
    {"lr: 0.1", "lr: -0.1", DL_ERR_INVALID, "-0.1", 0, "optimizer.lr: must be > 0, got -0.1"},
    {"lr: 0.1", "lr: nan", DL_ERR_INVALID, "nan", 0, "expected a finite number, got 'nan'"},
    {"lr: 0.1", "lr: 1e39", DL_ERR_INVALID, "1e39", 0, "1e+39 is too large for a float32"},
    {"batch: 8}", "batch: 0}", DL_ERR_INVALID, "0}", 0, "data.batch: must be >= 1, got 0"},
    {"steps: 4\n", "steps: 4\nparallel: {world: 65}\n", DL_ERR_INVALID, "65", 0,
     "parallel.world: must be in [1, 64], got 65"},
    {"{type: relu}", "{type: dropout, p: 1}", DL_ERR_INVALID, "1}", 0,
     "model[1].p: must be in [0, 1), got 1"},
    {"steps: 4\n", "steps: 4\nseed: 99999999999999999999\n", DL_ERR_INVALID, "9999", 0,
     "integer '99999999999999999999' is out of range"},
    {"steps: 4\n", "steps: 4\nloss: {type: mse}\n", DL_ERR_INVALID, "mse}", 0,
     "loss.type: mse needs float targets shaped like the model's output, but the runner's data "
     "(fixture, blobs, tokens) are class labels: use cross_entropy"},
    {"steps: 4\n", "steps: 4\nloss: {type: hinge}\n", DL_ERR_INVALID, "hinge", 0,
     "loss.type: expected one of: cross_entropy, mse; got 'hinge'"},
    {"steps: 4\n", "steps: 4\nloss: {reduction: none}\n", DL_ERR_INVALID, "none", 0,
     "loss.reduction: expected one of: mean, sum; got 'none'"},
    {"steps: 4\n", "steps: 4\nloss: {label_smoothing: 1.5}\n", DL_ERR_INVALID, "1.5", 0,
     "loss.label_smoothing: must be in [0, 1], got 1.5"},
    {"steps: 4\n", "steps: 4\nloss: {label_smoothing: -0.1}\n", DL_ERR_INVALID, "-0.1", 0,
     "loss.label_smoothing: must be in [0, 1], got -0.1"},
    {"steps: 4\n", "steps: 4\nloss: {ignore_index: 2147483648}\n", DL_ERR_INVALID, "2147483648", 0,
     "loss.ignore_index: must be in"},
    {"steps: 4\n", "steps: 4\nloss: {ignore_index: 1.5}\n", DL_ERR_FORMAT, "1.5", 0,
     "loss.ignore_index: expected an integer, got '1.5'"},
    {"steps: 4\n", "steps: 4\nloss: {weight: 2}\n", DL_ERR_FORMAT, "weight", 0,
     "loss.weight: unknown key 'weight'; expected one of: type, reduction, label_smoothing, "
     "ignore_index"},
    {"type: sgd", "type: sgdd", DL_ERR_INVALID, "sgdd", 0,
     "optimizer.type: expected one of: sgd, adam, adamw; got 'sgdd'"},
    {"lr: 0.1}", "lr: 0.1, betas: [0.9]}", DL_ERR_INVALID, "0.9]", 0,
     "optimizer.betas: expected at least 2 items, got 1"},
    {"{type: relu}", "{type: maxpool2d, kernel: 2, padding: 2}", DL_ERR_INVALID, "2}", 0,
     "must be at most half the kernel size (1), got 2"},
    {"name: bad\n",
     "name: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
     DL_ERR_INVALID, "xxx", 0, "name: too long: 134 characters, at most 127"},
    /* missing required keys */
    {"description: A small valid scenario that each case breaks once.\n", "", DL_ERR_FORMAT,
     "name: bad", 0, "missing required key 'description'"},
    {"runs:\n  reference: {}\n  other: {data: {batch: 4}}\n", "", DL_ERR_FORMAT, "name: bad", 0,
     "missing required key 'runs'"},
    {"model:\n  - {type: linear, in: 4, out: 3}\n  - {type: relu}\n  - {type: linear, in: 3, "
     "out: 2}\n",
     "", DL_ERR_FORMAT, "name: bad", 0,
     "missing required key 'model': run 'reference' trains in the engine (only a run with "
     "trace: needs none)"},
    {"  reference: {}\n", "  reference: {trace: [a]}\n", DL_ERR_FORMAT, "a]", 0,
     "runs.reference.trace: expected a string, got a list"},
    {"{type: linear, in: 3, out: 2}", "{type: linear, in: 3}", DL_ERR_FORMAT,
     "type: linear, in: 3}", 0, "model[2]: missing required key 'out'"},
    {"{type: relu}", "{in: 3}", DL_ERR_FORMAT, "in: 3}", 0, "missing required key 'type'"},
    {", b: other}", "}", DL_ERR_FORMAT, "name: same", 0,
     "check 'same' of kind 'equivalence' compares two runs; add b: RUN"},
    /* bad names and references */
    {"{type: relu}", "{type: rleu}", DL_ERR_INVALID, "rleu", 0, "unknown layer kind 'rleu'"},
    {"name: bad\n", "name: good\n", DL_ERR_INVALID, "good", 0,
     "name: must equal the scenario's folder name 'bad', got 'good'"},
    {"b: other}\n", "b: other}\n  - {name: same, kind: nonfinite, a: other}\n", DL_ERR_INVALID,
     "same, kind: nonfinite", 0, "duplicate check name 'same' (also checks[0])"},
    {"a: reference, b: other}", "a: reference, b: nope}", DL_ERR_INVALID, "nope", 0,
     "checks[0].b: unknown run 'nope'; the runs are: reference, other"},
    {"caught_by: same", "caught_by: sane", DL_ERR_INVALID, "sane", 0,
     "pitfalls[0].caught_by: no check is named 'sane'"},
    {"caught_by: same,", "caught_by: same, runs: [nope],", DL_ERR_INVALID, "nope", 0,
     "pitfalls[0].runs[0]: unknown run 'nope'"},
    {"kind: equivalence", "kind: equivalance", DL_ERR_INVALID, "equivalance", 0,
     "unknown check kind 'equivalance'; expected one of: equivalence"},
    {"kind: equivalence", "kind: metric_max", DL_ERR_INVALID, "other}", 0,
     "check kind 'metric_max' reads one run (a); remove b"},
    {"id: G1", "id: g1", DL_ERR_INVALID, "g1", 0, "'g1' is not a catalogue ID"},
    {"true}}}\n", "true}}}\n  - {id: G1, caught_by: same, overrides: {seed: 1}}\n", DL_ERR_INVALID,
     "G1, caught_by: same, overrides: {seed", 0, "duplicate pitfall name 'G1'"},
    {"  other:", "  \"ot her\":", DL_ERR_INVALID, "\"ot her\"", 0,
     "run name 'ot her' may hold only letters, digits"},
    {"overrides: {bugs: {no_zero_grad: true}}", "overrides: {}", DL_ERR_INVALID, "overrides: {}", 0,
     "pitfalls[0].overrides: is empty"},
    {"b: other}", "b: other, tolerance: close(1e-5)}", DL_ERR_INVALID, "close(1e-5)", 0,
     "tolerance 'close(1e-5)': expected bitwise"},
    {"b: other}", "b: other, noise: nope}", DL_ERR_INVALID, "nope", 0,
     "checks[0].noise: unknown run 'nope'"},
    {"b: other}", "b: other, noise: other, tolerance: bitwise}", DL_ERR_INVALID, "bitwise}", 0,
     "check 'same' has noise: its band replaces the tolerance; remove tolerance"},
    {"b: other}", "b: other, noise_b: other}", DL_ERR_INVALID, "noise_b: other}", 9,
     "noise_b needs noise: RUN; add it"},
    {"b: other}", "b: other, noise: other, noise_b: nope}", DL_ERR_INVALID, "nope", 0,
     "checks[0].noise_b: unknown run 'nope'"},
    {"b: other}", "b: other, widen: 7}", DL_ERR_INVALID, "7}", 0,
     "widen belongs with noise: RUN; remove it"},
    {"b: other}", "b: other, noise: other, widen: 0.5}", DL_ERR_INVALID, "0.5", 0,
     "widen 0.5: expected a number >= 1"},
    {"b: other}", "b: other}\n  - {name: m, kind: metric_max, a: other, noise: other}",
     DL_ERR_INVALID, "noise: other}", 7, "noise belongs to kind equivalence; remove it"},
    {"quantities: [loss], ", "", DL_ERR_FORMAT, "name: same", 0,
     "check 'same' of kind 'equivalence' compares the quantities it names, and names none (it "
     "would pass comparing nothing); add quantities: [loss, params]"},
    {"b: other}", "b: other}\n  - {name: m, kind: metric_max, a: other, threshold: 1}",
     DL_ERR_FORMAT, "name: m,", 0, "add quantities: [METRIC]"},
    /* too many, too few */
    {"quantities: [loss]", "quantities: [a,b,c,d,e,f,g,h,i]", DL_ERR_INVALID, "a,b,c", 0,
     "checks[0].quantities: too many items: 9, at most 8"},
    {"checks:\n  - {name: same, kind: equivalence, quantities: [loss], a: reference, b: other}\n",
     "checks: []\n", DL_ERR_INVALID, "checks: []", 0, "checks: expected at least 1 item, got 0"},
    {"  other: {data: {batch: 4}}\n",
     "  other: {}\n  r2: {}\n  r3: {}\n  r4: {}\n  r5: {}\n  r6: {}\n  r7: {}\n  r8: {}\n",
     DL_ERR_INVALID, "r8:", 0, "runs.r8: too many runs: at most 8"},
    /* settings that contradict each other */
    {"{source: blobs,", "{source: tokens, min_len: 9, max_len: 3,", DL_ERR_INVALID, "reference: {}",
     0, "runs.reference: data.min_len 9 exceeds data.max_len 3"},
    {"lr: 0.1}", "lr: 0.1, nesterov: true}", DL_ERR_INVALID, "reference: {}", 0,
     "nesterov needs momentum > 0 and dampening 0"},
    {"steps: 4\n", "steps: 4\ncheckpoint: {at_step: 4}\n", DL_ERR_INVALID, "reference: {}", 0,
     "checkpoint.at_step 4 must be below steps 4"},
    {"steps: 4\n", "steps: 4\nschedule: {type: step}\n", DL_ERR_INVALID, "reference: {}", 0,
     "schedule type step needs step_size"},
    {"steps: 4\n", "steps: 4\nschedule: {type: cosine, warmup_steps: 5}\n", DL_ERR_INVALID,
     "reference: {}", 0, "schedule.warmup_steps 5 exceeds total_steps 4"},
    {"{source: blobs,", "{source: fixture,", DL_ERR_INVALID, "reference: {}", 0,
     "data.source fixture needs data.path"},
    {"{bugs: {no_zero_grad: true}}", "{checkpoint: {at_step: 9}}", DL_ERR_INVALID,
     "checkpoint: {at_step: 9}", 0, "pitfalls[0].overrides: run 'reference': checkpoint.at_step 9"},
};

static void expect_bad(const bad_case *c, const char *text, size_t len) {
  const char *dir = write_scenario("bad", text, len);
  dlc_scenario *s = (dlc_scenario *)&s; /* must be reset to NULL */
  dl_status st = dlc_scenario_load(&s, dir);
  const char *msg = dl_last_error();
  int line, col;
  position_of(text, c->marker, c->skip, &line, &col);
  char where[400];
  snprintf(where, sizeof where, "%s/scenario.yaml:%d:%d: ", dir, line, col);
  if (st != c->status || !strstr(msg, where) || !strstr(msg, c->words)) {
    print_error("file:\n%s\nwant %s, '%s', '%s'\ngot  %s, '%s'\n", text, dl_status_name(c->status),
                where, c->words, dl_status_name(st), msg);
    fail();
  }
  assert_null(s);
  remove_scenario("bad");
}

static void test_bad_files(void **state) {
  (void)state;
  int n = 0;
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    const bad_case *c = &bad_cases[i];
    char *text = mutate(BASE, c->from, c->to);
    expect_bad(c, text, strlen(text));
    free(text);
    n++;
  }
  assert_true(n >= 40);
}

/* Generated texts: too many layers, residuals nested too deep, a NUL. */
static void test_bad_generated(void **state) {
  (void)state;
  const char *model = "model:\n  - {type: linear, in: 4, out: 3}\n  - {type: relu}\n"
                      "  - {type: linear, in: 3, out: 2}\n";
  char layers[2048] = "model: [";
  for (int i = 0; i < 65; i++) strcat(layers, "{type: relu}, ");
  strcat(layers, "]\n");
  char *text = mutate(BASE, model, layers);
  expect_bad(&(bad_case){NULL, NULL, DL_ERR_INVALID, "type: relu", 0,
                         "model: too many items: 65, at most 64"},
             text, strlen(text));
  free(text);

  char deep[1024] = "model: [";
  for (int i = 0; i < 9; i++) strcat(deep, "{type: residual, body: [");
  strcat(deep, "{type: relu}");
  for (int i = 0; i < 9; i++) strcat(deep, "]}");
  strcat(deep, "]\n");
  text = mutate(BASE, model, deep);
  expect_bad(&(bad_case){NULL, NULL, DL_ERR_INVALID, "type: relu", 0,
                         "residual blocks nest deeper than 8 levels"},
             text, strlen(text));
  free(text);

  char nul[1024];
  size_t len = strlen(BASE);
  memcpy(nul, BASE, len + 1);
  nul[20] = '\0'; /* in "description" on line 2 */
  expect_bad(&(bad_case){NULL, NULL, DL_ERR_FORMAT, "", 20, "a NUL byte"}, nul, len);
}

static void test_io_errors(void **state) {
  (void)state;
  dlc_scenario *s = NULL;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/missing", tmp_root);
  assert_int_equal(dlc_scenario_load(&s, dir), DL_ERR_IO);
  char want[400];
  snprintf(want, sizeof want, "%s/scenario.yaml: cannot open: No such file or directory", dir);
  assert_string_equal(dl_last_error(), want);
  assert_null(s);

  /* scenario.yaml that is a folder */
  snprintf(dir, sizeof dir, "%s/isdir", tmp_root);
  mkdir(dir, 0700);
  char path[400];
  snprintf(path, sizeof path, "%s/scenario.yaml", dir);
  mkdir(path, 0700);
  assert_int_equal(dlc_scenario_load(&s, dir), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "scenario.yaml: cannot read: Is a directory"));
  rmdir(path);
  rmdir(dir);

  /* more than 1 MiB */
  size_t big = (1u << 20) + 10;
  char *text = malloc(big);
  assert_non_null(text);
  memset(text, '#', big);
  write_scenario("big", text, big);
  free(text);
  snprintf(dir, sizeof dir, "%s/big", tmp_root);
  assert_int_equal(dlc_scenario_load(&s, dir), DL_ERR_FORMAT);
  assert_non_null(strstr(dl_last_error(), "larger than 1048576 bytes"));
  remove_scenario("big");

  char longdir[700];
  memset(longdir, 'a', sizeof longdir - 1);
  longdir[sizeof longdir - 1] = '\0';
  assert_int_equal(dlc_scenario_load(&s, longdir), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "too long"));
}

static void test_fixture_syntax_error(void **state) {
  (void)state;
  dlc_scenario *s = NULL;
  assert_int_equal(dlc_scenario_load(&s, FIXTURES "syntax_error"), DL_ERR_FORMAT);
  /* libfyaml reports the unclosed '[' where the flow sequence should have
   * ended: the start of the next line. */
  assert_non_null(strstr(dl_last_error(), "syntax_error/scenario.yaml:5:1: YAML syntax error: "));
  assert_null(s);
}

static void test_api_misuse(void **state) {
  (void)state;
  dlc_scenario *s = NULL;
  assert_int_equal(dlc_scenario_load(NULL, FIXTURES "full"), DL_ERR_INVALID);
  assert_int_equal(dlc_scenario_load(&s, NULL), DL_ERR_INVALID);
  assert_int_equal(dlc_scenario_load(&s, ""), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "scenario folder"));
  dlc_scenario_free(NULL);
  assert_int_equal(dlc_scenario_find_run(NULL, "x"), -1);
}

/* "." names the folder by its real name. */
static void test_dot_dir(void **state) {
  (void)state;
  char *text = mutate(BASE, NULL, BASE);
  const char *dir = write_scenario("bad", text, strlen(text));
  free(text);
  char cwd[1024];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(dir), 0);
  dlc_scenario *s = NULL;
  dl_status st = dlc_scenario_load(&s, ".");
  assert_int_equal(chdir(cwd), 0);
  if (st != DL_OK) fail_msg("%s", dl_last_error());
  assert_string_equal(s->name, "bad");
  assert_string_equal(s->dir, ".");
  dlc_scenario_free(s);
  remove_scenario("bad");
}

static int make_tmp(void **state) {
  (void)state;
  return make_tmp_dir(tmp_root, sizeof tmp_root, "dlc_scenario_XXXXXX") ? 0 : -1;
}

static int remove_tmp(void **state) {
  (void)state;
  return rmdir(tmp_root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_header),
      cmocka_unit_test(test_full_reference_run),
      cmocka_unit_test(test_full_overrides_merge),
      cmocka_unit_test(test_full_checks),
      cmocka_unit_test(test_full_variants),
      cmocka_unit_test(test_minimal_defaults),
      cmocka_unit_test(test_dependent_defaults),
      cmocka_unit_test(test_loss_section),
      cmocka_unit_test(test_check_catalogue),
      cmocka_unit_test(test_check_waived),
      cmocka_unit_test(test_check_noise),
      cmocka_unit_test(test_not_tested_check),
      cmocka_unit_test(test_trace_runs),
      cmocka_unit_test(test_model_needed_by_engine_runs),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_bad_generated),
      cmocka_unit_test(test_io_errors),
      cmocka_unit_test(test_fixture_syntax_error),
      cmocka_unit_test(test_api_misuse),
      cmocka_unit_test(test_dot_dir),
  };
  return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
