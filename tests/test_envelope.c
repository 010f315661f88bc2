/* Calibrated goldens (envelope.h, engine/backend/perturb/perturb.h): backend_equiv's CPU
 * run (a CNN, 12 SGD steps with momentum) recorded 5 times - the engine's
 * order and perturbation seeds 1..4 - makes the envelope; the gate widens
 * it DLC_ENVELOPE_WIDEN_DEFAULT (4) times. Then:
 *   - perturbed runs with seeds 5..7 (other summation orders the envelope
 *     has not seen) must pass: the gate accepts harmless reordering;
 *   - changes of the size the catalogue cares about must fail: lr changed
 *     by 1%, the classifier layer's GEMM summed in bfloat16, every GEMM and
 *     convolution operand rounded to TF32 (tensor cores), one optimizer
 *     step skipped (step 5).
 * Each prints its distance from the envelope (in half-widths of the
 * repeats' band, 4 to pass). Also: the envelope survives the golden file
 * (save, load, same numbers), a perturbation seed repeats bit for bit, an
 * old-style golden reads as "single", and a data-parallel calibration
 * (4 ranks) covers a run whose allreduce alone sums in another order. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "judge/envelope.h"
#include "host_backend.h"
#include "inject_backend.h"
#include "run/runner.h"
#include "scenario/scenario.h"
#include "store/trace_io.h"
#include "tmpdir.h"

enum { REPEATS = 5 };

static dlc_scenario *scn;
static dlc_trace repeats[REPEATS];
static dlc_envelope env;

static dlc_run_config cpu_run(void) {
  int i = dlc_scenario_find_run(scn, "cpu");
  assert_true(i >= 0);
  return scn->runs[i];
}

/* Run c of scenario s with options o, in a fresh work folder. */
static void run_as(const dlc_scenario *s, const dlc_run_config *c, dlc_run_options o,
                   dlc_trace *t) {
  char workdir[DL_TMP_PATH_MAX];
  assert_non_null(make_tmp_dir(workdir, sizeof workdir, "dlcheck-env-XXXXXX"));
  o.root = DL_SOURCE_DIR;
  o.scenario = s->name;
  o.workdir = workdir;
  if (dlc_run(c, &o, t) != DL_OK) fail_msg("%s", dl_last_error());
  rmdir(workdir);
}

static void run(const dlc_run_config *c, uint64_t seed, const dl_backend *b, dlc_trace *t) {
  run_as(scn, c, (dlc_run_options){.backend_override = b, .perturb_seed = seed}, t);
}

static int setup(void **state) {
  (void)state;
  if (dlc_scenario_load(&scn, DL_SOURCE_DIR "/scenarios/backend_equiv") != DL_OK)
    fail_msg("%s", dl_last_error());
  dlc_run_config c = cpu_run();
  for (int i = 0; i < REPEATS; i++) run(&c, (uint64_t)i, NULL, &repeats[i]);
  if (dlc_envelope_build(repeats, REPEATS, DLC_ENVELOPE_WIDEN_DEFAULT, "test", &env))
    fail_msg("%s", dl_last_error());
  const dlc_envelope_series *loss = &env.series[0];
  printf("envelope of %d repeats: loss width at the last step %.3g (%.3g relative)\n", REPEATS,
         loss->v[loss->n - 1][DLC_ENV_MAX] - loss->v[loss->n - 1][DLC_ENV_MIN],
         (loss->v[loss->n - 1][DLC_ENV_MAX] - loss->v[loss->n - 1][DLC_ENV_MIN]) /
             loss->v[loss->n - 1][DLC_ENV_MEAN]);
  for (int k = 0; k < env.nfinals; k++)
    if (strncmp(env.finals[k].name, "param/", 6) == 0)
      printf("  %-18s spread %.3g, %.0f ulp\n", env.finals[k].name, env.finals[k].v[DLC_FIN_SPREAD],
             env.finals[k].v[DLC_FIN_MAX_ULP]);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dlc_envelope_free(&env);
  for (int i = 0; i < REPEATS; i++) dlc_trace_free(&repeats[i]);
  dlc_scenario_free(scn);
  return 0;
}

static dlc_verdict judge(const char *what, dlc_trace *t) {
  dlc_verdict v;
  dlc_verdict_init(&v, "golden", "", "");
  assert_int_equal(dlc_envelope_check(&env, &repeats[0], t, &v), DL_OK);
  printf("%-34s %s: distance %.3g (first outside: %s step %lld)\n", what, dlc_verdict_name(v.kind),
         v.value, v.tensor[0] ? v.tensor : "-", (long long)v.step);
  dlc_trace_free(t);
  return v;
}

/* Steps where the repeats agree on a value that is not a number: inf
 * (a step the loss scaler skipped: grad_norm overflowed in every repeat,
 * as a GPU's fp16 runs of ckpt_roundtrip do at step 9) and NaN. A run
 * that repeats them lies inside; a finite value there, or inf where the
 * repeats were finite, lies outside. One repeat inf and the others finite
 * leaves a band with an infinite edge that holds both. */
static void non_finite_steps_agree(void **state) {
  (void)state;
  const double steps[REPEATS][4] = {{1.0, INFINITY, NAN, 2.0},
                                    {1.0, INFINITY, NAN, INFINITY},
                                    {1.0, INFINITY, NAN, 2.0},
                                    {1.0, INFINITY, NAN, 2.0},
                                    {1.0, INFINITY, NAN, 2.0}};
  dlc_trace r[REPEATS];
  for (int i = 0; i < REPEATS; i++) {
    dlc_trace_init(&r[i], "synthetic", "run");
    for (int t = 0; t < 4; t++)
      assert_int_equal(dlc_trace_push(&r[i], "grad_norm", steps[i][t]), DL_OK);
  }
  dlc_envelope e;
  assert_int_equal(dlc_envelope_build(r, REPEATS, DLC_ENVELOPE_WIDEN_DEFAULT, "test", &e), DL_OK);
  const dlc_envelope_series *es = &e.series[0];
  assert_true(dlc_envelope_step_distance(es, 1, INFINITY) == 0);
  assert_true(dlc_envelope_step_distance(es, 2, NAN) == 0);
  assert_true(dlc_envelope_step_distance(es, 3, INFINITY) == 0);
  assert_true(dlc_envelope_step_distance(es, 3, 2.0) == 0);
  assert_true(isinf(dlc_envelope_step_distance(es, 0, INFINITY)));
  assert_true(isinf(dlc_envelope_step_distance(es, 0, NAN)));
  assert_true(isinf(dlc_envelope_step_distance(es, 1, 1e30)));
  assert_true(isinf(dlc_envelope_step_distance(es, 1, -INFINITY)));
  assert_true(isinf(dlc_envelope_step_distance(es, 2, 0.0)));
  assert_true(isinf(dlc_envelope_step_distance(es, 3, NAN)));
  dlc_verdict v;
  dlc_verdict_init(&v, "golden", "", "");
  assert_int_equal(dlc_envelope_check(&e, &r[0], &r[1], &v), DL_OK);
  assert_int_equal(v.kind, DLC_PASS);
  dlc_envelope_free(&e);
  for (int i = 0; i < REPEATS; i++) dlc_trace_free(&r[i]);
}

/* Other summation orders than the 5 calibrated ones lie inside. */
static void other_orders_pass(void **state) {
  (void)state;
  dlc_run_config c = cpu_run();
  for (uint64_t seed = 5; seed <= 7; seed++) {
    dlc_trace t;
    run(&c, seed, NULL, &t);
    char what[64];
    snprintf(what, sizeof what, "perturbation seed %llu", (unsigned long long)seed);
    dlc_verdict v = judge(what, &t);
    assert_int_equal(v.kind, DLC_PASS);
    assert_true(v.value > 0); /* it really differs from the reference */
  }
}

/* A seed is an order, not noise: the same seed gives the same bits. */
static void perturbation_repeats_exactly(void **state) {
  (void)state;
  dlc_run_config c = cpu_run();
  dlc_trace t;
  run(&c, 3, NULL, &t);
  const dl_tensor *a = dlc_trace_final(&t, "param/7.weight"),
                  *b = dlc_trace_final(&repeats[3], "param/7.weight");
  assert_non_null(a);
  assert_non_null(b);
  assert_memory_equal(a->data, b->data, dl_tensor_bytes(a));
  dlc_trace_free(&t);
}

static void lr_one_percent_fails(void **state) {
  (void)state;
  dlc_run_config c = cpu_run();
  c.optim.lr *= 1.01f;
  dlc_trace t;
  run(&c, 0, NULL, &t);
  assert_int_equal(judge("lr +1%", &t).kind, DLC_FAIL);
}

/* Injected changes through a backend (inject_backend.h). */
static void run_injected(const char *what, dl_backend *b) {
  dlc_run_config c = cpu_run();
  dlc_trace t;
  run(&c, 0, b, &t);
  assert_int_equal(judge(what, &t).kind, DLC_FAIL);
}

static void bf16_layer_fails(void **state) {
  (void)state;
  inject in = {.bf16_classifier = true};
  dl_backend b = inject_table(&in);
  run_injected("classifier GEMM in bfloat16", &b);
}

static void skipped_step_fails(void **state) {
  (void)state;
  inject in = {.skip_step5 = true};
  dl_backend b = inject_table(&in);
  run_injected("optimizer step 5 skipped", &b);
  assert_int_equal(in.optim_calls, 12 * INJECT_PARAMS); /* every param, every step, went there */
}

static void tf32_fails(void **state) {
  (void)state;
  host_backend hb;
  dl_backend b = host_backend_table(&hb);
  hb.tf32 = true;
  dlc_run_config c = cpu_run();
  dlc_trace t;
  run(&c, 0, &b, &t);
  assert_int_equal(judge("TF32-rounded operands", &t).kind, DLC_FAIL);
}

/* The golden file keeps the envelope; a golden without golden_kind (every
 * one recorded before calibration existed) reads as single. */
static void envelope_survives_the_file(void **state) {
  (void)state;
  char dir[DL_TMP_PATH_MAX], path[DL_TMP_PATH_MAX + 8];
  assert_non_null(make_tmp_dir(dir, sizeof dir, "dlcheck-envio-XXXXXX"));
  snprintf(path, sizeof path, "%s/g.h5", dir);
  static dlc_golden_meta meta;
  assert_int_equal(dlc_golden_meta_init(&meta), DL_OK);
  assert_int_equal(dlc_golden_save_calibrated(path, &repeats[0], &meta, &env), DL_OK);
  dlc_trace back;
  dlc_envelope e2;
  assert_int_equal(dlc_golden_load(path, &back, &meta, &e2), DL_OK);
  assert_string_equal(meta.golden_kind, "calibrated");
  assert_int_equal(e2.repeats, REPEATS);
  assert_true(e2.widen == env.widen);
  assert_int_equal(e2.nseries, env.nseries);
  assert_int_equal(e2.nfinals, env.nfinals);
  for (int k = 0; k < env.nseries; k++)
    assert_memory_equal(e2.series[k].v, env.series[k].v,
                        (size_t)env.series[k].n * sizeof *env.series[k].v);
  for (int k = 0; k < env.nfinals; k++)
    assert_memory_equal(e2.finals[k].v, env.finals[k].v, sizeof env.finals[k].v);
  dlc_envelope_free(&e2);
  dlc_trace_free(&back);
  assert_int_equal(dlc_golden_load(DL_SOURCE_DIR "/golden/grad_accum/cpu.h5", &back, &meta, &e2),
                   DL_OK);
  assert_string_equal(meta.golden_kind, "single");
  assert_int_equal(e2.repeats, 0);
  dlc_trace_free(&back);
  /* Too few repeats, or a widening below 1, are refused with a message. */
  assert_int_equal(dlc_envelope_build(repeats, 2, 4.0, "", &e2), DL_ERR_INVALID);
  assert_int_equal(dlc_envelope_build(repeats, 3, 0.5, "", &e2), DL_ERR_INVALID);
  unlink(path);
  rmdir(dir);
}

/* Data parallel: ddp_equiv's run over 4 ranks (batch 24 each; with 2
 * ranks every allreduce order gives the same bits, a + b = b + a), 12
 * steps. Its calibration's repeats also sum the allreduce in other orders
 * (dl_comm_set_order_seed: rotated rings for seeds 1 and 3, pairwise trees
 * for 2 and 4), so a run whose only change is the allreduce order, NCCL's
 * ring or tree choice, passes: it differs from the reference, inside the
 * envelope. */
static void allreduce_order_covered(void **state) {
  (void)state;
  dlc_scenario *ddp = NULL;
  if (dlc_scenario_load(&ddp, DL_SOURCE_DIR "/scenarios/ddp_equiv") != DL_OK)
    fail_msg("%s", dl_last_error());
  int i = dlc_scenario_find_run(ddp, "ddp");
  assert_true(i >= 0);
  dlc_run_config c = ddp->runs[i];
  c.parallel.world = 4;
  c.data.batch = 24;
  c.steps = 12;
  dlc_trace reps[REPEATS], t, same;
  for (int k = 0; k < REPEATS; k++)
    run_as(ddp, &c, (dlc_run_options){.perturb_seed = (uint64_t)k}, &reps[k]);
  dlc_envelope e;
  if (dlc_envelope_build(reps, REPEATS, DLC_ENVELOPE_WIDEN_DEFAULT, "ddp", &e))
    fail_msg("%s", dl_last_error());
  for (int k = 0; k < e.nfinals; k++)
    if (strncmp(e.finals[k].name, "param/", 6) == 0)
      printf("  4 ranks: %-14s spread %.3g, %.0f ulp\n", e.finals[k].name,
             e.finals[k].v[DLC_FIN_SPREAD], e.finals[k].v[DLC_FIN_MAX_ULP]);
  for (uint64_t seed = 1; seed <= 4; seed++) {
    run_as(ddp, &c, (dlc_run_options){.allreduce_seed = seed}, &t);
    run_as(ddp, &c, (dlc_run_options){.allreduce_seed = seed}, &same);
    dlc_verdict v;
    dlc_verdict_init(&v, "golden", "", "");
    assert_int_equal(dlc_envelope_check(&e, &reps[0], &t, &v), DL_OK);
    printf("allreduce order seed %llu (%s) alone (4 ranks)  %s: distance %.3g\n",
           (unsigned long long)seed, seed % 2 ? "ring" : "tree", dlc_verdict_name(v.kind), v.value);
    assert_int_equal(v.kind, DLC_PASS);
    assert_true(v.value > 0); /* the order changed the bits */
    const dl_tensor *a = dlc_trace_final(&t, "param/1.weight"),
                    *b = dlc_trace_final(&same, "param/1.weight");
    assert_non_null(a);
    assert_memory_equal(a->data, b->data, dl_tensor_bytes(a)); /* an order, not noise */
    dlc_trace_free(&t);
    dlc_trace_free(&same);
  }
  dlc_envelope_free(&e);
  for (int k = 0; k < REPEATS; k++) dlc_trace_free(&reps[k]);
  dlc_scenario_free(ddp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(non_finite_steps_agree),
      cmocka_unit_test(other_orders_pass),
      cmocka_unit_test(perturbation_repeats_exactly),
      cmocka_unit_test(lr_one_percent_fails),
      cmocka_unit_test(bf16_layer_fails),
      cmocka_unit_test(tf32_fails),
      cmocka_unit_test(skipped_step_fails),
      cmocka_unit_test(envelope_survives_the_file),
      cmocka_unit_test(allreduce_order_covered),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
