/* dl_sgemm against OpenBLAS's cblas_sgemm: GFLOP/s (best of several runs)
 * for the engine's typical shapes at 1 and 2 threads, and the two bitwise
 * checks the contract promises (dl_sgemm == dl_sgemm_ref; 1 thread == 2
 * threads). Exits 1 if a check fails. Performance is reported, not gated:
 * it depends on what else the machine is running.
 *
 *   bench_gemm [max_threads]      (default 2)
 *   DL_GEMM_ISA=avx2 bench_gemm   (time another ISA's kernels)
 *   OPENBLAS_CORETYPE=SkylakeX bench_gemm   (OpenBLAS's AVX-512 kernels) */
#define _POSIX_C_SOURCE 200809L
#include "backend/cpu/sgemm.h"
#include "core/threads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DL_HAVE_OPENBLAS
/* Declared here rather than through <cblas.h>, which may be netlib's
 * (without openblas_set_num_threads) depending on the alternatives. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
void cblas_sgemm(int order, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
void openblas_set_num_threads(int n);
char *openblas_get_corename(void);
#endif

typedef struct bench_shape {
  int64_t M, N, K;
  bool ta, tb;
  const char *what;
} bench_shape;

static const bench_shape shapes[] = {
    {64, 128, 64, false, false, "MLP layer"},
    {256, 256, 256, false, false, "square"},
    {256, 256, 256, false, true, "square, B^T (linear fwd)"},
    {1024, 1024, 1024, false, false, "square"},
    {12544, 32, 144, false, false, "conv im2col"},
};

typedef struct operands {
  float *A, *B, *C;
  int64_t lda, ldb, ldc;
} operands;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *random_floats(int64_t count, uint32_t seed) {
  float *p = malloc((size_t)count * sizeof(float));
  if (!p) return NULL;
  uint32_t s = seed;
  for (int64_t i = 0; i < count; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
  }
  return p;
}

static bool make_operands(const bench_shape *s, operands *o) {
  o->lda = s->ta ? s->M : s->K;
  o->ldb = s->tb ? s->K : s->N;
  o->ldc = s->N;
  o->A = random_floats(s->M * s->K, 1);
  o->B = random_floats(s->K * s->N, 2);
  o->C = random_floats(s->M * s->N, 3);
  return o->A && o->B && o->C;
}

static void free_operands(operands *o) {
  free(o->A);
  free(o->B);
  free(o->C);
}

static void run_dl(const bench_shape *s, operands *o) {
  dl_sgemm(s->ta, s->tb, s->M, s->N, s->K, o->A, o->lda, o->B, o->ldb, 0.0f, o->C, o->ldc);
}

#ifdef DL_HAVE_OPENBLAS
static void run_openblas(const bench_shape *s, operands *o) {
  cblas_sgemm(CBLAS_ROW_MAJOR, s->ta ? CBLAS_TRANS : CBLAS_NO_TRANS,
              s->tb ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)s->M, (int)s->N, (int)s->K, 1.0f, o->A,
              (int)o->lda, o->B, (int)o->ldb, 0.0f, o->C, (int)o->ldc);
}
#endif

/* Best GFLOP/s over enough repetitions for about 0.3 s of work. */
static double best_gflops(void (*run)(const bench_shape *, operands *), const bench_shape *s,
                          operands *o) {
  double flops = 2.0 * (double)s->M * (double)s->N * (double)s->K;
  run(s, o); /* warm caches, start thread pools */
  double t0 = now_s();
  run(s, o);
  double once = now_s() - t0;
  int reps = once > 0 ? (int)(0.3 / once) : 1000;
  reps = reps < 3 ? 3 : reps > 1000 ? 1000 : reps;
  double best = once;
  for (int r = 0; r < reps; r++) {
    t0 = now_s();
    run(s, o);
    double t = now_s() - t0;
    if (t < best) best = t;
  }
  return flops / best * 1e-9;
}

static int print_table(int max_threads) {
  printf("# dl_sgemm (%s kernels) vs OpenBLAS cblas_sgemm, row-major, beta = 0\n",
         dl_gemm_isa_name());
#ifdef DL_HAVE_OPENBLAS
  /* OpenBLAS picks its kernels by CPU model and falls back to old generic
   * ones (Prescott: SSE3) on models it does not know; compare against its
   * best by naming a core, e.g. OPENBLAS_CORETYPE=SkylakeX. */
  printf("# OpenBLAS kernels: %s%s\n", openblas_get_corename(),
         getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : " (auto-detected)");
#endif
  printf("# %6s %6s %6s %3s %3s %7s %12s %12s %7s  %s\n", "M", "N", "K", "tA", "tB", "threads",
         "dlcheck", "OpenBLAS", "ratio", "shape");
  printf("# %6s %6s %6s %3s %3s %7s %12s %12s %7s\n", "", "", "", "", "", "", "GFLOP/s", "GFLOP/s",
         "");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const bench_shape *s = &shapes[i];
    operands o;
    if (!make_operands(s, &o)) {
      free_operands(&o);
      fprintf(stderr, "bench_gemm: out of memory for %lldx%lldx%lld\n", (long long)s->M,
              (long long)s->N, (long long)s->K);
      return 1;
    }
    for (int t = 1; t <= max_threads; t++) {
      dl_set_num_threads(t);
      double dl = best_gflops(run_dl, s, &o);
#ifdef DL_HAVE_OPENBLAS
      openblas_set_num_threads(t);
      double ob = best_gflops(run_openblas, s, &o);
      printf("  %6lld %6lld %6lld %3c %3c %7d %12.1f %12.1f %7.2f  %s\n", (long long)s->M,
             (long long)s->N, (long long)s->K, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', t, dl, ob,
             dl / ob, s->what);
#else
      printf("  %6lld %6lld %6lld %3c %3c %7d %12.1f %12s %7s  %s\n", (long long)s->M,
             (long long)s->N, (long long)s->K, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', t, dl, "n/a",
             "n/a", s->what);
#endif
    }
    free_operands(&o);
  }
  return 0;
}

/* dl_sgemm with `threads` threads into a fresh copy of C. */
static float *result_with_threads(const bench_shape *s, operands *o, int threads) {
  float *C = malloc((size_t)(s->M * s->N) * sizeof(float));
  if (!C) return NULL;
  memcpy(C, o->C, (size_t)(s->M * s->N) * sizeof(float));
  dl_set_num_threads(threads);
  dl_sgemm(s->ta, s->tb, s->M, s->N, s->K, o->A, o->lda, o->B, o->ldb, 1.0f, C, o->ldc);
  return C;
}

static bool check(const char *name, bool ok) {
  printf("# check: %-44s %s\n", name, ok ? "bitwise equal" : "MISMATCH");
  return ok;
}

static int bitwise_checks(int max_threads) {
  const bench_shape sq256 = {256, 256, 256, false, false, ""};
  const bench_shape sq1024 = {1024, 1024, 1024, false, true, ""};
  operands a = {0}, b = {0};
  bool ok = make_operands(&sq256, &a) && make_operands(&sq1024, &b);
  float *one = ok ? result_with_threads(&sq256, &a, 1) : NULL;
  float *ref = one ? malloc((size_t)(256 * 256) * sizeof(float)) : NULL;
  float *many = ref ? result_with_threads(&sq256, &a, max_threads) : NULL;
  float *big1 = many ? result_with_threads(&sq1024, &b, 1) : NULL;
  float *bign = big1 ? result_with_threads(&sq1024, &b, max_threads) : NULL;
  int status = 1;
  if (bign) {
    memcpy(ref, a.C, (size_t)(256 * 256) * sizeof(float));
    dl_sgemm_ref(false, false, 256, 256, 256, a.A, 256, a.B, 256, 1.0f, ref, 256);
    size_t small = (size_t)(256 * 256) * sizeof(float), big = (size_t)(1024 * 1024) * sizeof(float);
    char name[64];
    bool pass = check("256^3 dl_sgemm == dl_sgemm_ref", memcmp(one, ref, small) == 0);
    snprintf(name, sizeof name, "256^3 1 thread == %d threads", max_threads);
    pass &= check(name, memcmp(one, many, small) == 0);
    snprintf(name, sizeof name, "1024^3 (B^T) 1 thread == %d threads", max_threads);
    pass &= check(name, memcmp(big1, bign, big) == 0);
    status = pass ? 0 : 1;
  } else {
    fprintf(stderr, "bench_gemm: out of memory for the bitwise checks\n");
  }
  free(one), free(ref), free(many), free(big1), free(bign);
  free_operands(&a);
  free_operands(&b);
  return status;
}

int main(int argc, char **argv) {
  int max_threads = argc > 1 ? atoi(argv[1]) : 2;
  if (max_threads < 1 || dl_set_num_threads(max_threads) != DL_OK) {
    fprintf(stderr, "usage: bench_gemm [max_threads 1..1024] (DL_GEMM_ISA=portable|avx2|avx512)\n");
    return 2;
  }
  const char *isa = getenv("DL_GEMM_ISA");
  if (isa) {
    dl_gemm_isa_id id = !strcmp(isa, "portable") ? DL_GEMM_PORTABLE
                        : !strcmp(isa, "avx2")   ? DL_GEMM_AVX2
                        : !strcmp(isa, "avx512") ? DL_GEMM_AVX512
                                                 : DL_GEMM_AUTO;
    if (id == DL_GEMM_AUTO || !dl_gemm_force_isa(id)) {
      fprintf(stderr, "bench_gemm: DL_GEMM_ISA=%s: unknown, or this CPU cannot run it\n", isa);
      return 2;
    }
  }
  int status = bitwise_checks(max_threads);
  if (print_table(max_threads) != 0) status = 1;
  dl_threads_shutdown();
  return status;
}
