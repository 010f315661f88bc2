/* Training throughput of the engine on the two fixture models, and its
 * bitwise determinism across thread counts.
 *
 *   mlp  digits [N,1,8,8]: flatten, linear 64->128, relu, linear 128->128,
 *        relu, linear 128->10
 *   cnn  Fashion-MNIST [N,1,28,28]: conv 1->16 3x3 pad 1, relu, maxpool 2,
 *        conv 16->32 3x3 pad 1, relu, maxpool 2, flatten, linear 1568->10
 *
 * Both train with batch 64 (shuffled epochs, last short batch dropped),
 * cross-entropy and SGD momentum 0.9, as bench/torch_train.py does in
 * PyTorch. Each (model, threads) config starts from the same initial
 * parameters, runs warm-up steps, then timed steps, and prints steps/s and
 * an FNV-1a digest of the final parameters. Every thread count runs the same
 * number of steps, so their digests must be equal (determinism rule 2):
 * exit status 1 if they are not.
 *
 *   bench_train [--model mlp|cnn|all] [--steps N] [--threads 1,2]
 *               [--fixtures DIR] [--digest-only]
 *
 * Without --steps the first thread count of each model runs timed steps for
 * about 2.5 s and the others repeat that count. --digest-only trains a fixed
 * number of steps without warm-up (mlp 50, cnn 5, or --steps) and prints
 * one "digest" line per config, for ci/determinism.sh.
 *
 * DL_GEMM_ISA=portable|avx2|avx512 in the environment makes dl_sgemm use
 * that ISA's kernels (as in bench_gemm), so that one machine can check the
 * bits of the others; exit status 3 if this CPU cannot run it. */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include "data/data.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "data/sampler.h"
#include "backend/cpu/sgemm.h"
#include "core/threads.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH = 64, MAX_LAYERS = 10, MAX_THREAD_CONFIGS = 8, WARMUP_STEPS = 20 };

static const double TARGET_SECONDS = 2.5;
static const uint64_t SEED = 0;
static const float LR = 0.05f;

typedef struct model_spec {
  const char *name;
  const char *fixture; /* file name under the fixtures folder */
  int64_t digest_steps;
  dl_layer_desc layers[MAX_LAYERS];
  int nlayers;
} model_spec;

static model_spec mlp_spec(void) {
  model_spec s = {.name = "mlp", .fixture = "digits.h5", .digest_steps = 50};
  const dl_layer_desc l[] = {dl_layer_default(DL_FLATTEN), bench_linear(64, 128),
                             dl_layer_default(DL_RELU),    bench_linear(128, 128),
                             dl_layer_default(DL_RELU),    bench_linear(128, 10)};
  s.nlayers = (int)(sizeof l / sizeof l[0]);
  memcpy(s.layers, l, sizeof l);
  return s;
}

static model_spec cnn_spec(void) {
  model_spec s = {.name = "cnn", .fixture = "fashion_mnist.h5", .digest_steps = 5};
  const dl_layer_desc l[] = {
      bench_conv3x3(1, 16),         dl_layer_default(DL_RELU),   bench_maxpool2(),
      bench_conv3x3(16, 32),        dl_layer_default(DL_RELU),   bench_maxpool2(),
      dl_layer_default(DL_FLATTEN), bench_linear(32 * 7 * 7, 10)};
  s.nlayers = (int)(sizeof l / sizeof l[0]);
  memcpy(s.layers, l, sizeof l);
  return s;
}

/* ---- one config ---------------------------------------------------------- */

typedef struct run_result {
  int threads;
  int64_t steps;      /* timed steps */
  double seconds;     /* wall-clock time of the timed steps */
  double cpu_seconds; /* CPU time of the process (all threads) during them */
  float loss;
  uint64_t digest;
} run_result;

/* Trains `warmup` steps, then `steps` timed steps; steps == 0 means "for
 * TARGET_SECONDS" and stores the count reached in r->steps. */
static dl_status run_config(const model_spec *spec, const dl_dataset *ds, int threads,
                            int64_t warmup, int64_t steps, run_result *r) {
  DL_TRY(dl_set_num_threads(threads));
  dl_optim_desc od = dl_optim_default(DL_OPTIM_SGD);
  od.momentum = 0.9;
  bench_trainer t;
  DL_TRY(bench_trainer_init(&t, spec->name, spec->layers, spec->nlayers, ds, BATCH, &od, LR, SEED));
  dl_status s = DL_OK;
  for (int64_t i = 0; s == DL_OK && i < warmup; i++) s = bench_train_step(&t);
  double t0 = bench_clock_s(CLOCK_MONOTONIC), cpu0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
  double elapsed = 0;
  int64_t done = 0;
  while (s == DL_OK && (steps > 0 ? done < steps : elapsed < TARGET_SECONDS)) {
    s = bench_train_step(&t);
    done++;
    elapsed = bench_clock_s(CLOCK_MONOTONIC) - t0;
  }
  *r = (run_result){.threads = threads,
                    .steps = done,
                    .seconds = elapsed,
                    .cpu_seconds = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0,
                    .loss = t.loss,
                    .digest = bench_param_digest(t.model)};
  bench_trainer_free(&t);
  if (s != DL_OK) dl_fail_context(s, "%s, %d threads: ", spec->name, threads);
  return s;
}

/* ---- command line -------------------------------------------------------- */

typedef struct options {
  bool mlp, cnn, digest_only;
  int64_t steps; /* 0: automatic */
  int threads[MAX_THREAD_CONFIGS];
  int nthreads;
  char fixtures[1024];
} options;

static const char USAGE[] = "usage: bench_train [--model mlp|cnn|all] [--steps N] [--threads 1,2]\n"
                            "                   [--fixtures DIR] [--digest-only]\n";

static int usage(const char *msg) {
  fprintf(stderr, "bench_train: %s\n%s", msg, USAGE);
  return 2;
}

static bool parse_threads(const char *text, options *o) {
  o->nthreads = 0;
  const char *p = text;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > 256 || o->nthreads == MAX_THREAD_CONFIGS) return false;
    o->threads[o->nthreads++] = (int)v;
    if (*end == ',') end++;
    else if (*end) return false;
    p = end;
  }
  return o->nthreads > 0;
}

/* 0: go on; -1: --help was answered; 2: bad usage (reported). */
static int parse_options(int argc, char **argv, options *o) {
  *o = (options){.mlp = true, .cnn = true, .threads = {1, 2}, .nthreads = 2};
  bench_default_fixtures(o->fixtures, sizeof o->fixtures);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--digest-only")) {
      o->digest_only = true;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(USAGE, stdout);
      return -1;
    }
    if (!v) {
      fprintf(stderr, "bench_train: %s needs a value\n%s", a, USAGE);
      return 2;
    }
    i++;
    if (!strcmp(a, "--model")) {
      o->mlp = !strcmp(v, "mlp") || !strcmp(v, "all");
      o->cnn = !strcmp(v, "cnn") || !strcmp(v, "all");
      if (!o->mlp && !o->cnn) return usage("--model takes mlp, cnn or all");
    } else if (!strcmp(a, "--steps")) {
      char *end;
      o->steps = strtoll(v, &end, 10);
      if (*end || o->steps < 1) return usage("--steps takes a positive integer");
    } else if (!strcmp(a, "--threads")) {
      if (!parse_threads(v, o)) return usage("--threads takes a list like 1,2 (1..256, at most 8)");
    } else if (!strcmp(a, "--fixtures")) {
      if (snprintf(o->fixtures, sizeof o->fixtures, "%s", v) >= (int)sizeof o->fixtures)
        return usage("--fixtures path is too long");
    } else {
      fprintf(stderr, "bench_train: unknown option %s\n%s", a, USAGE);
      return 2;
    }
  }
  return 0;
}

/* ---- main ---------------------------------------------------------------- */

static void print_result(const model_spec *spec, const run_result *r, bool digest_only) {
  if (digest_only) {
    printf("digest %s isa=%s threads=%d steps=%lld %016llx\n", spec->name, dl_gemm_isa_name(),
           r->threads, (long long)r->steps, (unsigned long long)r->digest);
    return;
  }
  printf("%-5s %7d %7lld %9.3f %10.1f %12.3f %9.4f  %016llx\n", spec->name, r->threads,
         (long long)r->steps, r->seconds, (double)r->steps / r->seconds,
         1e3 * r->cpu_seconds / (double)r->steps, (double)r->loss, (unsigned long long)r->digest);
  fflush(stdout);
}

/* All configs of one model; returns 0, 1 (digests differ) or 3 (a failure). */
static int bench_model(const model_spec *spec, const options *o) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", o->fixtures, spec->fixture);
  dl_dataset ds = {0};
  if (dl_dataset_load_h5(&ds, path, "train") != DL_OK) {
    fprintf(stderr, "bench_train: %s (pass --fixtures DIR)\n", dl_last_error());
    return 3;
  }
  int64_t warmup = o->digest_only ? 0 : WARMUP_STEPS;
  int64_t steps = o->steps ? o->steps : o->digest_only ? spec->digest_steps : 0;
  run_result first = {0};
  int rc = 0;
  for (int i = 0; i < o->nthreads && rc == 0; i++) {
    run_result r;
    if (run_config(spec, &ds, o->threads[i], warmup, steps, &r) != DL_OK) {
      fprintf(stderr, "bench_train: %s\n", dl_last_error());
      rc = 3;
      break;
    }
    print_result(spec, &r, o->digest_only);
    if (i == 0) {
      first = r;
      steps = r.steps; /* the other thread counts repeat the same steps */
    } else if (r.digest != first.digest) {
      fprintf(stderr,
              "bench_train: %s: parameters after %lld steps differ between %d and %d "
              "threads (digest %016llx vs %016llx): the engine is not bitwise "
              "deterministic across thread counts\n",
              spec->name, (long long)(warmup + steps), first.threads, r.threads,
              (unsigned long long)first.digest, (unsigned long long)r.digest);
      rc = 1;
    }
  }
  dl_dataset_free(&ds);
  return rc;
}

/* DL_GEMM_ISA from the environment; false if unknown or not runnable here. */
static bool force_gemm_isa(void) {
  const char *isa = getenv("DL_GEMM_ISA");
  if (!isa || !*isa) return true;
  dl_gemm_isa_id id = !strcmp(isa, "portable") ? DL_GEMM_PORTABLE
                      : !strcmp(isa, "avx2")   ? DL_GEMM_AVX2
                      : !strcmp(isa, "avx512") ? DL_GEMM_AVX512
                                               : DL_GEMM_AUTO;
  if (id != DL_GEMM_AUTO && dl_gemm_force_isa(id)) return true;
  fprintf(stderr,
          "bench_train: DL_GEMM_ISA=%s: unknown (portable, avx2, avx512) or this CPU "
          "cannot run it\n",
          isa);
  return false;
}

int main(int argc, char **argv) {
  options o;
  int rc = parse_options(argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  if (!force_gemm_isa()) return 3;
  if (!o.digest_only) {
    printf("# bench_train: engine training throughput, batch %d, SGD momentum 0.9, lr %g,"
           " %d warm-up steps, GEMM %s\n",
           BATCH, (double)LR, WARMUP_STEPS, dl_gemm_isa_name());
    printf("%-5s %7s %7s %9s %10s %12s %9s  %s\n", "model", "threads", "steps", "seconds",
           "steps/s", "cpu_ms/step", "loss", "digest(fnv1a)");
  }
  model_spec specs[2] = {mlp_spec(), cnn_spec()};
  bool wanted[2] = {o.mlp, o.cnn};
  int worst = 0;
  for (int i = 0; i < 2; i++) {
    if (!wanted[i]) continue;
    int r = bench_model(&specs[i], &o);
    if (r > worst) worst = r;
  }
  dl_threads_shutdown();
  return worst ? 1 : 0;
}
