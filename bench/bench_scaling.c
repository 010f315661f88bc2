/* The engine's side of the scaling benchmark (bench/scaling.py runs it next
 * to bench/scaling_torch.py, interleaved): training steps of three model
 * families at any size, one GEMM, one convolution layer's forward and
 * backward. It reads one command a line on stdin with --serve (so that one
 * process serves a whole interleaved run), or takes one command as its
 * arguments, and prints one result line per command:
 *
 *   train mlp H        THREADS WARMUP STEPS
 *   train cnn C1,C2    THREADS WARMUP STEPS
 *   train gpt E,L,HEADS,T,V,B THREADS WARMUP STEPS
 *       -> train FAMILY PARAMS THREADS STEPS SECONDS CPU_SECONDS LOSS DIGEST
 *   gemm M N K THREADS SECONDS
 *       -> gemm M N K THREADS GFLOPS          (best repetition)
 *   conv N C O H W THREADS SECONDS
 *       -> conv N C O H W THREADS MS          (best forward + backward)
 *
 * Models (bench/scaling_torch.py builds the same in PyTorch):
 *   mlp  digits [64,1,8,8]: flatten, linear 64->H, relu, linear H->H, relu,
 *        linear H->10 (H = 128 is bench_train's mlp)
 *   cnn  Fashion-MNIST [64,1,28,28]: conv 1->C1 3x3 pad 1, relu, maxpool 2,
 *        conv C1->C2 3x3 pad 1, relu, maxpool 2, flatten, linear 49*C2->10
 *        (16,32 is bench_train's cnn)
 *   gpt  B sequences of T tokens (vocab V): embedding, posembed, L pre-LN
 *        blocks of width E with HEADS causal heads and a 4E MLP (GELU),
 *        layernorm, linear E->V; tests/gpt_model.h, the model
 *        tests/test_conformance.c checks against PyTorch
 * mlp and cnn train with SGD lr 0.05 momentum 0.9 as bench_train; gpt with
 * AdamW lr 1e-3 (weight decay 0.01) on next-token prediction of sequences
 * that repeat a pattern of 8 tokens drawn per sequence from an LCG (the
 * same tokens as scaling_torch.py). Batches from shuffled epochs, last short
 * batch dropped. A train command starts from the same initial parameters
 * (seed 0) every time, so DIGEST (FNV-1a of the final parameters) depends
 * only on the model and WARMUP + STEPS: equal across thread counts, or the
 * engine is not bitwise deterministic (determinism rule 2).
 *
 * The conv command times one conv2d layer (3x3, pad 1, bias) on an
 * [N, C, H, W] input: forward, then backward with dx, dW and db, as in
 * training. DL_GEMM_ISA=portable|avx2|avx512 as in bench_train. */
#define _POSIX_C_SOURCE 200809L
#include "bench_common.h"
#include "data/data.h"
#include "nn/loss.h"
#include "core/mem.h"
#include "nn/model.h"
#include "optim/optim.h"
#include "data/sampler.h"
#include "backend/cpu/sgemm.h"
#include "core/threads.h"

#include "../tests/gpt_model.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { IMG_BATCH = 64, MAX_LAYERS = 64, MAX_PARAMS = 6, GPT_SEQS = 1024, GPT_PERIOD = 8 };

static const uint64_t SEED = 0;

/* ---- models -------------------------------------------------------------- */

typedef struct arch {
  char family[8];
  int64_t p[MAX_PARAMS];
  int np;
} arch;

/* The layers of `a` into d; returns their count, or 0 if `a` is malformed. */
static int build_layers(const arch *a, dl_layer_desc *d) {
  int n = 0;
  if (!strcmp(a->family, "mlp") && a->np == 1 && a->p[0] > 0) {
    int64_t h = a->p[0];
    d[n++] = dl_layer_default(DL_FLATTEN);
    d[n++] = bench_linear(64, h);
    d[n++] = dl_layer_default(DL_RELU);
    d[n++] = bench_linear(h, h);
    d[n++] = dl_layer_default(DL_RELU);
    d[n++] = bench_linear(h, 10);
  } else if (!strcmp(a->family, "cnn") && a->np == 2 && a->p[0] > 0 && a->p[1] > 0) {
    d[n++] = bench_conv3x3(1, a->p[0]);
    d[n++] = dl_layer_default(DL_RELU);
    d[n++] = bench_maxpool2();
    d[n++] = bench_conv3x3(a->p[0], a->p[1]);
    d[n++] = dl_layer_default(DL_RELU);
    d[n++] = bench_maxpool2();
    d[n++] = dl_layer_default(DL_FLATTEN);
    d[n++] = bench_linear(a->p[1] * 7 * 7, 10);
  } else if (!strcmp(a->family, "gpt") && a->np == 6) {
    const int64_t *p = a->p; /* E, L, heads, T, V, B */
    if (p[0] < 1 || p[1] < 1 || 4 + 2 * p[1] > MAX_LAYERS || p[2] < 1 || p[0] % p[2] || p[3] < 1 ||
        p[4] < 2 || p[4] > 1 << 20 || p[5] < 1)
      return 0;
    n = gpt_model(d, p[4], p[0], (int)p[2], p[3], (int)p[1]);
  }
  return n;
}

/* ---- data ---------------------------------------------------------------- */

/* Sequence i: a pattern of GPT_PERIOD tokens from a 64-bit LCG seeded by i,
 * repeated; inputs tokens 0..T-1, targets tokens 1..T. scaling_torch.py
 * generates the same. */
static dl_status gpt_dataset(dl_dataset *ds, int64_t T, int64_t V) {
  memset(ds, 0, sizeof *ds);
  const int64_t shape[2] = {GPT_SEQS, T};
  DL_TRY(dl_tensor_alloc(&ds->x, DL_I32, 2, shape, "tokens"));
  dl_status s = dl_tensor_alloc(&ds->y, DL_I32, 2, shape, "targets");
  if (s != DL_OK) {
    dl_tensor_free(&ds->x);
    return s;
  }
  for (int64_t i = 0; i < GPT_SEQS; i++) {
    uint64_t st = (uint64_t)i * 2654435761u + 12345u;
    int32_t pat[GPT_PERIOD];
    for (int j = 0; j < GPT_PERIOD; j++) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      pat[j] = (int32_t)((st >> 33) % (uint64_t)V);
    }
    for (int64_t t = 0; t < T; t++) {
      dl_i32(&ds->x)[i * T + t] = pat[t % GPT_PERIOD];
      dl_i32(&ds->y)[i * T + t] = pat[(t + 1) % GPT_PERIOD];
    }
  }
  ds->n = GPT_SEQS;
  ds->n_classes = (int)V;
  snprintf(ds->name, sizeof ds->name, "gpt tokens (T=%lld, V=%lld)", (long long)T, (long long)V);
  return DL_OK;
}

/* The dataset of family `a`, loaded once per process and kept. */
static dl_status dataset_for(const arch *a, const char *fixtures, const dl_dataset **out) {
  static dl_dataset digits, fashion, tokens;
  static int64_t tokens_t, tokens_v;
  char path[1100];
  if (!strcmp(a->family, "gpt")) {
    if (tokens.n && (tokens_t != a->p[3] || tokens_v != a->p[4])) dl_dataset_free(&tokens);
    if (!tokens.n) {
      DL_TRY(gpt_dataset(&tokens, a->p[3], a->p[4]));
      tokens_t = a->p[3];
      tokens_v = a->p[4];
    }
    *out = &tokens;
    return DL_OK;
  }
  bool mlp = !strcmp(a->family, "mlp");
  dl_dataset *ds = mlp ? &digits : &fashion;
  if (!ds->n) {
    snprintf(path, sizeof path, "%s/%s", fixtures, mlp ? "digits.h5" : "fashion_mnist.h5");
    DL_TRY(dl_dataset_load_h5(ds, path, "train"));
  }
  *out = ds;
  return DL_OK;
}

/* ---- training ------------------------------------------------------------ */

/* The optimizer and batch of family a: AdamW (lr 1e-3) and a->p[5]
 * sequences for the GPT, SGD momentum 0.9 (lr 0.05) and 64 images else. */
static dl_status trainer_init(bench_trainer *t, const arch *a, const dl_dataset *ds) {
  dl_layer_desc d[MAX_LAYERS];
  int nl = build_layers(a, d);
  if (!nl) return dl_fail(DL_ERR_INVALID, "bad model %s", a->family);
  bool gpt = !strcmp(a->family, "gpt");
  dl_optim_desc od = dl_optim_default(gpt ? DL_OPTIM_ADAMW : DL_OPTIM_SGD);
  if (!gpt) od.momentum = 0.9;
  return bench_trainer_init(t, a->family, d, nl, ds, gpt ? a->p[5] : IMG_BATCH, &od,
                            gpt ? 1e-3f : 0.05f, SEED);
}

static dl_status cmd_train(const arch *a, int threads, int64_t warmup, int64_t steps,
                           const char *fixtures, const char *params_text) {
  DL_TRY(dl_set_num_threads(threads));
  const dl_dataset *ds;
  DL_TRY(dataset_for(a, fixtures, &ds));
  bench_trainer t;
  DL_TRY(trainer_init(&t, a, ds));
  dl_status s = DL_OK;
  for (int64_t i = 0; s == DL_OK && i < warmup; i++) s = bench_train_step(&t);
  double t0 = bench_clock_s(CLOCK_MONOTONIC), c0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
  for (int64_t i = 0; s == DL_OK && i < steps; i++) s = bench_train_step(&t);
  double secs = bench_clock_s(CLOCK_MONOTONIC) - t0,
         cpu = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
  if (s == DL_OK)
    printf("train %s %s %d %lld %.6f %.6f %.6f %016llx\n", a->family, params_text, threads,
           (long long)steps, secs, cpu, (double)t.loss,
           (unsigned long long)bench_param_digest(t.model));
  bench_trainer_free(&t);
  return s;
}

/* ---- GEMM and convolution ------------------------------------------------- */

static float *random_floats(int64_t count, uint32_t seed) {
  float *p = malloc((size_t)count * sizeof(float));
  uint32_t s = seed;
  for (int64_t i = 0; p && i < count; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
  }
  return p;
}

/* C = A B, row-major, no transposes (torch.matmul(a, b, out=c)). */
static dl_status cmd_gemm(int64_t M, int64_t N, int64_t K, int threads, double seconds) {
  DL_TRY(dl_set_num_threads(threads));
  float *A = random_floats(M * K, 1), *B = random_floats(K * N, 2), *C = random_floats(M * N, 3);
  if (!A || !B || !C) {
    free(A), free(B), free(C);
    return dl_fail(DL_ERR_NOMEM, "out of memory for the GEMM operands");
  }
  double best = 1e30, start = bench_clock_s(CLOCK_MONOTONIC);
  int reps = 0;
  dl_sgemm(false, false, M, N, K, A, K, B, N, 0.0f, C, N); /* warm-up */
  while (reps < 3 || bench_clock_s(CLOCK_MONOTONIC) - start < seconds) {
    double t0 = bench_clock_s(CLOCK_MONOTONIC);
    dl_sgemm(false, false, M, N, K, A, K, B, N, 0.0f, C, N);
    double dt = bench_clock_s(CLOCK_MONOTONIC) - t0;
    if (dt < best) best = dt;
    reps++;
  }
  printf("gemm %lld %lld %lld %d %.3f\n", (long long)M, (long long)N, (long long)K, threads,
         2.0 * (double)M * (double)N * (double)K / best * 1e-9);
  free(A), free(B), free(C);
  return DL_OK;
}

static dl_status conv_once(dl_layer *l, const dl_tensor *x, const dl_tensor *dy) {
  dl_ctx ctx = {.grad_enabled = true, .seed = SEED};
  dl_tensor y = {0}, dx = {0};
  l->params[0].has_grad = l->params[1].has_grad = false;
  dl_status s = l->ops->forward(l, &ctx, x, &y);
  if (s == DL_OK) s = l->ops->backward(l, &ctx, x, &y, dy, &dx);
  dl_tensor_free(&y);
  dl_tensor_free(&dx);
  dl_layer_release(l);
  return s;
}

static dl_status cmd_conv(int64_t N, int64_t C, int64_t O, int64_t H, int64_t W, int threads,
                          double seconds) {
  DL_TRY(dl_set_num_threads(threads));
  dl_layer l;
  dl_layer_desc d = bench_conv3x3(C, O);
  DL_TRY(dl_layer_init(&l, &d, "", 0, SEED));
  dl_tensor x = {0}, dy = {0};
  dl_status s = dl_tensor_alloc(&x, DL_F32, 4, (const int64_t[]){N, C, H, W}, "x");
  if (s == DL_OK) s = dl_tensor_alloc(&dy, DL_F32, 4, (const int64_t[]){N, O, H, W}, "dy");
  if (s == DL_OK) {
    float *px = random_floats(x.numel, 4), *pdy = random_floats(dy.numel, 5);
    if (px && pdy) {
      memcpy(x.data, px, (size_t)x.numel * sizeof(float));
      memcpy(dy.data, pdy, (size_t)dy.numel * sizeof(float));
    } else {
      s = dl_fail(DL_ERR_NOMEM, "out of memory for the conv operands");
    }
    free(px), free(pdy);
  }
  double best = 1e30, start = bench_clock_s(CLOCK_MONOTONIC);
  if (s == DL_OK) s = conv_once(&l, &x, &dy); /* warm-up */
  for (int reps = 0; s == DL_OK && (reps < 3 || bench_clock_s(CLOCK_MONOTONIC) - start < seconds);
       reps++) {
    double t0 = bench_clock_s(CLOCK_MONOTONIC);
    s = conv_once(&l, &x, &dy);
    double dt = bench_clock_s(CLOCK_MONOTONIC) - t0;
    if (dt < best) best = dt;
  }
  if (s == DL_OK)
    printf("conv %lld %lld %lld %lld %lld %d %.4f\n", (long long)N, (long long)C, (long long)O,
           (long long)H, (long long)W, threads, best * 1e3);
  dl_tensor_free(&x);
  dl_tensor_free(&dy);
  dl_layer_destroy(&l);
  return s;
}

/* ---- commands ------------------------------------------------------------ */

static bool parse_params(const char *text, arch *a) {
  a->np = 0;
  const char *p = text;
  while (*p) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 1 || v > (1ll << 30) || a->np == MAX_PARAMS) return false;
    a->p[a->np++] = v;
    if (*end == ',') end++;
    else if (*end) return false;
    p = end;
  }
  return a->np > 0;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  long long v = s ? strtoll(s, &end, 10) : 0;
  if (!s || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static bool parse_seconds(const char *s, double *out) {
  char *end;
  double v = s ? strtod(s, &end) : 0;
  if (!s || end == s || *end || !(v >= 0 && v <= 600)) return false;
  *out = v;
  return true;
}

/* Runs one command (argv-style); 0 done, 2 bad command, 3 failed. */
static int run_command(int argc, char **argv, const char *fixtures) {
  int64_t v[7];
  double secs;
  if (argc == 6 && !strcmp(argv[0], "train")) {
    arch a = {0};
    snprintf(a.family, sizeof a.family, "%s", argv[1]);
    if (!parse_params(argv[2], &a) || !parse_int(argv[3], 1, 256, &v[0]) ||
        !parse_int(argv[4], 0, 1 << 30, &v[1]) || !parse_int(argv[5], 0, 1 << 30, &v[2])) {
      fprintf(stderr, "bench_scaling: bad train command\n");
      return 2;
    }
    if (cmd_train(&a, (int)v[0], v[1], v[2], fixtures, argv[2]) == DL_OK) return 0;
  } else if (argc == 6 && !strcmp(argv[0], "gemm")) {
    for (int i = 0; i < 3; i++)
      if (!parse_int(argv[1 + i], 1, 1 << 14, &v[i])) return 2;
    if (!parse_int(argv[4], 1, 256, &v[3]) || !parse_seconds(argv[5], &secs)) return 2;
    if (cmd_gemm(v[0], v[1], v[2], (int)v[3], secs) == DL_OK) return 0;
  } else if (argc == 8 && !strcmp(argv[0], "conv")) {
    for (int i = 0; i < 5; i++)
      if (!parse_int(argv[1 + i], 1, 1 << 12, &v[i])) return 2;
    if (!parse_int(argv[6], 1, 256, &v[5]) || !parse_seconds(argv[7], &secs)) return 2;
    if (cmd_conv(v[0], v[1], v[2], v[3], v[4], (int)v[5], secs) == DL_OK) return 0;
  } else {
    fprintf(stderr, "bench_scaling: unknown command%s%s\n", argc ? " " : "", argc ? argv[0] : "");
    return 2;
  }
  fprintf(stderr, "bench_scaling: %s\n", dl_last_error());
  return 3;
}

static const char USAGE[] =
    "usage: bench_scaling [--fixtures DIR] --serve       (commands on stdin)\n"
    "       bench_scaling [--fixtures DIR] COMMAND...\n"
    "  train mlp|cnn|gpt PARAMS THREADS WARMUP STEPS   (mlp H; cnn C1,C2; gpt E,L,HEADS,T,V,B)\n"
    "  gemm M N K THREADS SECONDS\n"
    "  conv N C O H W THREADS SECONDS\n";

int main(int argc, char **argv) {
  char fixtures[1024];
  bench_default_fixtures(fixtures, sizeof fixtures);
  int i = 1;
  if (i + 1 < argc && !strcmp(argv[i], "--fixtures")) {
    snprintf(fixtures, sizeof fixtures, "%s", argv[i + 1]);
    i += 2;
  }
  if (i >= argc || !strcmp(argv[i], "--help")) {
    fputs(USAGE, i >= argc ? stderr : stdout);
    return i >= argc ? 2 : 0;
  }
  if (strcmp(argv[i], "--serve") != 0) {
    int rc = run_command(argc - i, argv + i, fixtures);
    dl_threads_shutdown();
    return rc;
  }
  /* One command a line; a failed command prints "error ..." and goes on. */
  char line[512];
  int worst = 0;
  while (fgets(line, sizeof line, stdin)) {
    char *words[16];
    int n = 0;
    for (char *w = strtok(line, " \t\r\n"); w && n < 16; w = strtok(NULL, " \t\r\n"))
      words[n++] = w;
    if (n == 0) continue;
    if (!strcmp(words[0], "quit")) break;
    int rc = run_command(n, words, fixtures);
    if (rc) {
      printf("error %d\n", rc);
      worst = rc > worst ? rc : worst;
    }
    fflush(stdout);
  }
  dl_threads_shutdown();
  return worst;
}
