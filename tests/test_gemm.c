/* dl_sgemm (engine/backend/cpu/gemm*.c): bitwise equal to dl_sgemm_ref for every
 * shape, transpose combination, leading dimension, beta, thread count and
 * ISA; dl_sgemm_ref itself checked against a double-precision product. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/cpu/gemm_internal.h"
#include "backend/cpu/sgemm.h"
#include "core/threads.h"

/* ---- random matrices ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t next_u32(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 32);
}

/* Uniform in [-1, 1) scaled by 2^e, e in [-4, 3]: mixed magnitudes make
 * rounding depend on the order of the sum, so a reordering shows. */
static float next_value(void) {
  float u = (float)(next_u32() >> 8) / 8388608.0f - 1.0f;
  return ldexpf(u, (int)(next_u32() % 8) - 4);
}

static float *random_matrix(int64_t rows, int64_t ld) {
  size_t count = (size_t)(rows > 0 ? rows : 1) * (size_t)(ld > 0 ? ld : 1);
  float *m = malloc(count * sizeof(float));
  assert_non_null(m);
  for (size_t i = 0; i < count; i++) m[i] = next_value();
  return m;
}

/* ---- one comparison ---- */

typedef struct gemm_case {
  bool ta, tb;
  int64_t M, N, K;
  int64_t pad; /* added to each leading dimension */
  float beta;
} gemm_case;

typedef struct gemm_operands {
  int64_t lda, ldb, ldc;
  float *A, *B, *C0;
} gemm_operands;

static gemm_operands make_operands(const gemm_case *c) {
  gemm_operands o;
  o.lda = (c->ta ? c->M : c->K) + c->pad;
  o.ldb = (c->tb ? c->K : c->N) + c->pad;
  o.ldc = c->N + c->pad;
  o.A = random_matrix(c->ta ? c->K : c->M, o.lda);
  o.B = random_matrix(c->tb ? c->N : c->K, o.ldb);
  o.C0 = random_matrix(c->M, o.ldc);
  return o;
}

static void free_operands(gemm_operands *o) {
  free(o->A);
  free(o->B);
  free(o->C0);
}

static float *copy_of_c(const gemm_case *c, const gemm_operands *o) {
  size_t bytes = (size_t)(c->M > 0 ? c->M : 1) * (size_t)o->ldc * sizeof(float);
  float *m = malloc(bytes);
  assert_non_null(m);
  memcpy(m, o->C0, bytes);
  return m;
}

/* C from dl_sgemm under the current ISA and thread count. */
static float *fast_result(const gemm_case *c, const gemm_operands *o) {
  float *C = copy_of_c(c, o);
  dl_sgemm(c->ta, c->tb, c->M, c->N, c->K, o->A, o->lda, o->B, o->ldb, c->beta, C, o->ldc);
  return C;
}

static float *ref_result(const gemm_case *c, const gemm_operands *o) {
  float *C = copy_of_c(c, o);
  dl_sgemm_ref(c->ta, c->tb, c->M, c->N, c->K, o->A, o->lda, o->B, o->ldb, c->beta, C, o->ldc);
  return C;
}

/* Tolerance: none. The whole C buffer, padding included (which must be left
 * alone), is compared byte for byte. */
static void assert_same_bits(const gemm_case *c, const gemm_operands *o, const float *x,
                             const float *y, const char *what) {
  size_t count = (size_t)(c->M > 0 ? c->M : 1) * (size_t)o->ldc;
  if (memcmp(x, y, count * sizeof(float)) == 0) return;
  size_t i = 0;
  while (x[i] == y[i] || memcmp(&x[i], &y[i], sizeof(float)) == 0) i++;
  fail_msg("%s: ta=%d tb=%d M=%lld N=%lld K=%lld pad=%lld beta=%g: C[%zu] %a != %a", what, c->ta,
           c->tb, (long long)c->M, (long long)c->N, (long long)c->K, (long long)c->pad,
           (double)c->beta, i, (double)x[i], (double)y[i]);
}

static void check_against_ref(const gemm_case *c) {
  gemm_operands o = make_operands(c);
  float *want = ref_result(c, &o), *got = fast_result(c, &o);
  assert_same_bits(c, &o, want, got, dl_gemm_isa_name());
  free(want);
  free(got);
  free_operands(&o);
}

static void check_all_transposes(int64_t M, int64_t N, int64_t K, int64_t pad, float beta) {
  for (int t = 0; t < 4; t++) {
    gemm_case c = {t & 1, t >> 1, M, N, K, pad, beta};
    check_against_ref(&c);
  }
}

/* ---- tests ---- */

static int teardown(void **state) {
  (void)state;
  dl_gemm_force_isa(DL_GEMM_AUTO);
  assert_int_equal(dl_set_num_threads(1), DL_OK);
  dl_threads_shutdown();
  return 0;
}

/* dl_sgemm_ref against the product in double precision. Tolerance: a chain
 * of K fused multiply-adds from c0 errs by at most
 * gamma_K * (|c0| + sum |a_k b_k|), gamma_K = K u / (1 - K u), u = 2^-24
 * (Higham, Accuracy and Stability, 3.1); (K+1) u bounds gamma_K here. */
static void ref_matches_double_precision(void **state) {
  (void)state;
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {17, 33, 65}, {9, 4, 300}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 8; t++) {
      gemm_case c = {t & 1, (t >> 1) & 1,          shapes[s][0], shapes[s][1], shapes[s][2],
                     2,     (t >> 2) ? 1.0f : 0.0f};
      gemm_operands o = make_operands(&c);
      float *C = ref_result(&c, &o);
      for (int64_t i = 0; i < c.M; i++)
        for (int64_t j = 0; j < c.N; j++) {
          double c0 = c.beta != 0.0f ? o.C0[i * o.ldc + j] : 0.0, exact = c0, mag = fabs(c0);
          for (int64_t k = 0; k < c.K; k++) {
            double a = c.ta ? o.A[k * o.lda + i] : o.A[i * o.lda + k];
            double b = c.tb ? o.B[j * o.ldb + k] : o.B[k * o.ldb + j];
            exact += a * b;
            mag += fabs(a * b);
          }
          double bound = (double)(c.K + 1) * ldexp(1.0, -24) * mag;
          assert_true(fabs(C[i * o.ldc + j] - exact) <= bound);
        }
      free(C);
      free_operands(&o);
    }
}

static void small_and_odd_shapes_match_ref(void **state) {
  (void)state;
  const int64_t sizes[] = {1, 7, 17, 33};
  const int64_t depths[] = {1, 17, 300};
  for (int mi = 0; mi < 4; mi++)
    for (int ni = 0; ni < 4; ni++)
      for (int ki = 0; ki < 3; ki++) {
        int64_t pad = (mi + ni + ki) % 3 == 0 ? 0 : (mi + ni + ki) % 3 == 1 ? 3 : 16;
        check_all_transposes(sizes[mi], sizes[ni], depths[ki], pad, 0.0f);
        check_all_transposes(sizes[mi], sizes[ni], depths[ki], pad, 1.0f);
      }
}

/* Shapes that cross the tile sizes (rows > 256, columns > 512), several K
 * blocks (K > 256, 512), and the engine's typical layer shapes. */
static void large_and_blocked_shapes_match_ref(void **state) {
  (void)state;
  const int64_t shapes[][3] = {{65, 129, 65}, {129, 65, 7},  {300, 40, 20}, {20, 530, 20},
                               {30, 33, 513}, {64, 64, 128}, {1000, 16, 9}, {200, 32, 144}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    check_all_transposes(shapes[s][0], shapes[s][1], shapes[s][2], (int64_t)s % 2 * 5, 0.0f);
    check_all_transposes(shapes[s][0], shapes[s][1], shapes[s][2], 1, 1.0f);
  }
}

/* Every width of a ragged column edge (33 to 64 columns: 1 to 31 past a
 * full panel, then two whole ones), under full panels of rows read in
 * place and a ragged one, over two K blocks: the edge kernels change their
 * lane width at 4, 8 and 16 columns. */
static void every_edge_width_matches_ref(void **state) {
  (void)state;
  for (int64_t n = 33; n <= 64; n++) {
    check_all_transposes(19, n, 300, n % 3, 0.0f);
    check_all_transposes(19, n, 300, 2, 1.0f);
  }
}

/* The result must not depend on the thread count: tile grids and which
 * thread computes what change, the bits may not. */
static void thread_counts_give_the_same_bits(void **state) {
  (void)state;
  const int64_t shapes[][3] = {{150, 140, 130}, {20000, 16, 9}, {16, 600, 300}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int t = 0; t < 4; t++) {
      gemm_case c = {t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], 3, (float)(t & 1)};
      gemm_operands o = make_operands(&c);
      float *want = ref_result(&c, &o);
      for (int threads = 1; threads <= 3; threads++) {
        assert_int_equal(dl_set_num_threads(threads), DL_OK);
        float *got = fast_result(&c, &o);
        assert_same_bits(&c, &o, want, got, "threads");
        free(got);
      }
      free(want);
      free_operands(&o);
    }
  assert_int_equal(dl_set_num_threads(1), DL_OK);
}

/* Every ISA this CPU runs gives the same bits as the portable C path. */
static void isa_paths_give_the_same_bits(void **state) {
  (void)state;
  const dl_gemm_isa_id ids[] = {DL_GEMM_PORTABLE, DL_GEMM_AVX2, DL_GEMM_AVX512};
  const char *names[] = {"portable", "avx2", "avx512"};
  const int64_t shapes[][3] = {{33, 65, 300}, {1, 1, 1}, {29, 47, 17}, {300, 600, 5}};
  int ran = 0;
  for (int i = 0; i < 3; i++) {
    if (!dl_gemm_force_isa(ids[i])) {
      printf("  (this CPU cannot run the %s kernels; skipped)\n", names[i]);
      continue;
    }
    assert_string_equal(dl_gemm_isa_name(), names[i]);
    ran++;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      check_all_transposes(shapes[s][0], shapes[s][1], shapes[s][2], 2, 0.0f);
      check_all_transposes(shapes[s][0], shapes[s][1], shapes[s][2], 0, 1.0f);
    }
  }
  assert_true(ran >= 1);
  assert_true(dl_gemm_force_isa(DL_GEMM_AUTO));
  assert_non_null(dl_gemm_isa_name());
}

/* dl_sgemm_bias against its definition: every row of C filled with the
 * bias, then the reference with beta 1; padding left alone. */
static void check_bias(const gemm_case *c) {
  gemm_operands o = make_operands(c);
  float *bias = random_matrix(1, c->N);
  float *want = copy_of_c(c, &o), *got = copy_of_c(c, &o);
  for (int64_t i = 0; i < c->M; i++) memcpy(want + i * o.ldc, bias, (size_t)c->N * sizeof *bias);
  dl_sgemm_ref(c->ta, c->tb, c->M, c->N, c->K, o.A, o.lda, o.B, o.ldb, 1.0f, want, o.ldc);
  dl_sgemm_bias(c->ta, c->tb, c->M, c->N, c->K, o.A, o.lda, o.B, o.ldb, bias, got, o.ldc);
  assert_same_bits(c, &o, want, got, "dl_sgemm_bias");
  free(bias);
  free(want);
  free(got);
  free_operands(&o);
}

/* Blocked, ragged, narrow (few columns), several K blocks, K = 0, and a
 * shape big enough for threads, on every ISA at 1 and 2 threads. */
static void bias_starts_every_sum(void **state) {
  (void)state;
  const dl_gemm_isa_id ids[] = {DL_GEMM_PORTABLE, DL_GEMM_AVX2, DL_GEMM_AVX512};
  const int64_t shapes[][3] = {{33, 65, 300},  {29, 47, 17}, {100, 10, 64},
                               {700, 40, 600}, {5, 7, 0},    {1024, 192, 64}};
  for (int i = 0; i < 3; i++) {
    if (!dl_gemm_force_isa(ids[i])) continue;
    for (int threads = 1; threads <= 2; threads++) {
      assert_int_equal(dl_set_num_threads(threads), DL_OK);
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
          gemm_case c = {t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2], t, 1.0f};
          check_bias(&c);
        }
    }
  }
}

/* B [K, N] (ldb) in dl_sgemm_packed_b's layout of nr-wide panels, the
 * padding columns zero. */
static float *packed_copy(const float *B, int64_t ldb, int64_t K, int64_t N, int nr) {
  const int64_t panels = (N + nr - 1) / nr;
  float *p = calloc((size_t)(panels > 0 ? panels : 1) * (size_t)nr * (size_t)(K > 0 ? K : 1),
                    sizeof(float));
  assert_non_null(p);
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < N; j++) p[j / nr * nr * K + k * nr + j % nr] = B[k * ldb + j];
  return p;
}

static void check_packed_b(const gemm_case *c, int nr) {
  gemm_operands o = make_operands(c);
  float *packed = packed_copy(o.B, o.ldb, c->K, c->N, nr);
  float *want = ref_result(c, &o), *got = copy_of_c(c, &o);
  dl_sgemm_packed_b(c->M, c->N, c->K, o.A, o.lda, packed, nr, c->beta, got, o.ldc);
  assert_same_bits(c, &o, want, got, nr == dl_sgemm_panel_width() ? "packed" : "packed, other nr");
  free(packed);
  free(want);
  free(got);
  free_operands(&o);
}

/* A caller's packed op(B): blocked, ragged, narrow, several K blocks,
 * K = 0 and threads, on every ISA at 1 and 2 threads, beta 0 and 1; and
 * panels of a width the ISA does not use (the reference loop). */
static void packed_b_matches_ref(void **state) {
  (void)state;
  const dl_gemm_isa_id ids[] = {DL_GEMM_PORTABLE, DL_GEMM_AVX2, DL_GEMM_AVX512};
  const int64_t shapes[][3] = {{33, 65, 300},
                               {29, 47, 17},
                               {100, 10, 64},
                               {64, 100, 330},
                               {5, 7, 0}};
  for (int i = 0; i < 3; i++) {
    if (!dl_gemm_force_isa(ids[i])) continue;
    for (int threads = 1; threads <= 2; threads++) {
      assert_int_equal(dl_set_num_threads(threads), DL_OK);
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 2; t++) {
          gemm_case c = {false, false, shapes[s][0], shapes[s][1], shapes[s][2], 3 * t, (float)t};
          check_packed_b(&c, dl_sgemm_panel_width());
        }
    }
    gemm_case c = {false, false, 21, 45, 70, 1, 1.0f};
    check_packed_b(&c, dl_sgemm_panel_width() + 4);
  }
}

static void zero_sizes_and_beta(void **state) {
  (void)state;
  /* K = 0: C := beta * C (beta 0 gives +0 even over NaN). */
  float C[6] = {1, -2, NAN, 4, 5, 6}, B[1] = {0}, A[1] = {0};
  dl_sgemm(false, false, 2, 3, 0, A, 1, B, 3, 1.0f, C, 3);
  assert_true(C[0] == 1.0f && C[1] == -2.0f && isnan(C[2]));
  dl_sgemm(false, false, 2, 3, 0, A, 1, B, 3, 0.0f, C, 3);
  for (int i = 0; i < 6; i++) assert_true(C[i] == 0.0f && !signbit(C[i]));
  /* M or N = 0: nothing is touched. */
  C[0] = 7.0f;
  dl_sgemm(false, false, 0, 3, 4, A, 4, B, 3, 0.0f, C, 3);
  dl_sgemm(true, true, 2, 0, 4, A, 2, B, 4, 0.0f, C, 3);
  assert_true(C[0] == 7.0f);
  /* beta = 0 ignores what C held (NaN), as PyTorch's addmm does. */
  float a[2] = {2.0f, 3.0f}, b[2] = {4.0f, 5.0f}, c[1] = {NAN};
  dl_sgemm(false, false, 1, 1, 2, a, 2, b, 1, 0.0f, c, 1);
  assert_true(c[0] == 23.0f);
  /* beta = 1 accumulates. */
  dl_sgemm(false, false, 1, 1, 2, a, 2, b, 1, 1.0f, c, 1);
  assert_true(c[0] == 46.0f);
  /* Any other beta scales C first, as the reference does (N = 9: the
   * narrow path of AVX-512 too). */
  check_all_transposes(17, 40, 9, 1, 0.5f);
  check_all_transposes(17, 9, 20, 1, 0.5f);
  check_all_transposes(5, 3, 0, 2, -2.0f);
}

/* Infinities (and the NaNs they make) flow as in the reference. Inputs hold
 * no NaN of their own: which of two different NaNs an FMA returns depends
 * on operand order, which the contract does not fix. */
static void non_finite_values_match_ref(void **state) {
  (void)state;
  gemm_case c = {false, true, 31, 45, 40, 0, 1.0f};
  gemm_operands o = make_operands(&c);
  o.A[3] = INFINITY;
  o.A[5 * o.lda + 7] = -INFINITY;
  o.B[2 * o.ldb + 7] = 0.0f;
  o.B[9] = INFINITY;
  o.C0[4] = -INFINITY;
  float *want = ref_result(&c, &o), *got = fast_result(&c, &o);
  assert_same_bits(&c, &o, want, got, "non-finite");
  free(want);
  free(got);
  free_operands(&o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ref_matches_double_precision),
      cmocka_unit_test_teardown(small_and_odd_shapes_match_ref, teardown),
      cmocka_unit_test_teardown(large_and_blocked_shapes_match_ref, teardown),
      cmocka_unit_test_teardown(every_edge_width_matches_ref, teardown),
      cmocka_unit_test_teardown(thread_counts_give_the_same_bits, teardown),
      cmocka_unit_test_teardown(isa_paths_give_the_same_bits, teardown),
      cmocka_unit_test_teardown(bias_starts_every_sum, teardown),
      cmocka_unit_test_teardown(packed_b_matches_ref, teardown),
      cmocka_unit_test_teardown(zero_sizes_and_beta, teardown),
      cmocka_unit_test_teardown(non_finite_values_match_ref, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
