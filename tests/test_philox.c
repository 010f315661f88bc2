/* Philox4x32-10 and the keyed streams (engine/numerics/philox.c). Known answers come
 * from Random123's kat_vectors and from an independent Python
 * implementation of philox.h's spec; statistical checks use 5-sigma bounds,
 * and the streams are deterministic, so they pass or fail the same way on
 * every run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numerics/philox.h"

enum { DRAWS = 100000 };

static void philox_matches_random123_known_answers(void **state) {
  (void)state;
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
    uint32_t out[4];
    dl_philox4x32_10(kat[i].ctr, kat[i].key, out);
    for (int j = 0; j < 4; j++) assert_int_equal(out[j], kat[i].out[j]);
  }
}

/* Values from a Python implementation of the spec in philox.h (the one
 * fixtures/pytorch mirrors in numpy). */
static void streams_match_the_spec(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(42, "dropout", (const uint64_t[]){1, 2, 3}, 3);
  assert_true(s.id == 0xbd84b85781174347ULL);
  assert_int_equal(s.key[0], 42);
  assert_int_equal(s.key[1], 0);
  static const uint32_t want[10] = {0xecdb0fc9, 0xfde61f08, 0xf3fb6b28, 0x138a44bd, 0x8b1ccfcf,
                                    0x208de175, 0x7b6153f8, 0x390f8935, 0xb089fa75, 0xbc3d6ad3};
  uint32_t got[10];
  dl_stream_u32(&s, 0, got, 10);
  for (int i = 0; i < 10; i++) assert_int_equal(got[i], want[i]);

  dl_stream t = dl_stream_make(0x123456789abcdef0ULL, "init/0.weight", NULL, 0);
  assert_true(t.id == 0xd5403d306f2447ceULL);
  assert_int_equal(t.key[0], 0x9abcdef0);
  assert_int_equal(t.key[1], 0x12345678);
  static const uint32_t want_t[6] = {0xfda6432e, 0x2ee49666, 0x54f69aa0,
                                     0x21d74ab3, 0x68871714, 0x4c0942b6};
  dl_stream_u32(&t, 6, got, 6);
  for (int i = 0; i < 6; i++) assert_int_equal(got[i], want_t[i]);

  /* An empty or missing purpose is the FNV offset basis itself. */
  assert_true(dl_stream_make(7, "", NULL, 0).id == 0xcbf29ce484222325ULL);
  assert_true(dl_stream_make(7, NULL, NULL, 0).id == 0xcbf29ce484222325ULL);
}

static void same_inputs_same_values_different_inputs_different(void **state) {
  (void)state;
  const uint64_t idx[2] = {5, 9}, swapped[2] = {9, 5}, other[2] = {5, 10};
  dl_stream base = dl_stream_make(1, "shuffle", idx, 2);
  dl_stream again = dl_stream_make(1, "shuffle", idx, 2);
  dl_stream variants[5] = {
      dl_stream_make(2, "shuffle", idx, 2),   dl_stream_make(1, "shufflf", idx, 2),
      dl_stream_make(1, "shuffle", other, 2), dl_stream_make(1, "shuffle", swapped, 2),
      dl_stream_make(1, "shuffle", idx, 1),
  };
  uint32_t a[8], b[8], c[8];
  dl_stream_u32(&base, 100, a, 8);
  dl_stream_u32(&again, 100, b, 8);
  assert_memory_equal(a, b, sizeof a);
  dl_stream_u32(&base, 101, c, 8);
  assert_memory_not_equal(a, c, sizeof a);
  for (int v = 0; v < 5; v++) {
    dl_stream_u32(&variants[v], 100, c, 8);
    assert_memory_not_equal(a, c, sizeof a);
  }
  /* The seed's high half matters too. */
  dl_stream high = dl_stream_make(1 | (1ULL << 32), "shuffle", idx, 2);
  dl_stream_u32(&high, 100, c, 8);
  assert_memory_not_equal(a, c, sizeof a);
}

/* Any split of a range gives the same words, whatever the alignment to the
 * 4-word blocks. */
static void any_split_of_a_range_gives_the_same_words(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(3, "split", NULL, 0);
  enum { N = 37 };
  for (uint64_t start = 0; start < 8; start++) {
    uint32_t whole[N], parts[N];
    dl_stream_u32(&s, start, whole, N);
    for (int cut1 = 0; cut1 <= N; cut1++) {
      for (int cut2 = cut1; cut2 <= N; cut2 += 3) {
        memset(parts, 0, sizeof parts);
        dl_stream_u32(&s, start, parts, cut1);
        dl_stream_u32(&s, start + (uint64_t)cut1, parts + cut1, cut2 - cut1);
        dl_stream_u32(&s, start + (uint64_t)cut2, parts + cut2, N - cut2);
        assert_memory_equal(whole, parts, sizeof whole);
      }
    }
    for (int i = 0; i < N; i++) {
      uint32_t one;
      dl_stream_u32(&s, start + (uint64_t)i, &one, 1);
      assert_int_equal(one, whole[i]);
    }
  }
}

/* Word w comes from block w/4, lane w%4, with the block number split over
 * counter words 0 and 1: check across the 2^32-block carry. */
static void words_follow_the_block_layout(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(0xfeedface12345678ULL, "layout", (const uint64_t[]){77}, 1);
  uint64_t first_block = 0xffffffffULL;
  uint32_t got[8];
  dl_stream_u32(&s, first_block * 4 + 2, got, 8);
  for (int i = 0; i < 8; i++) {
    uint64_t w = first_block * 4 + 2 + (uint64_t)i, b = w / 4;
    uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)s.id, (uint32_t)(s.id >> 32)};
    uint32_t block[4];
    dl_philox4x32_10(ctr, s.key, block);
    assert_int_equal(got[i], block[w % 4]);
  }
  uint32_t nothing = 0xabcdef01;
  dl_stream_u32(&s, 0, &nothing, 0);
  assert_int_equal(nothing, 0xabcdef01);
}

static void uniform_is_in_unit_interval_with_mean_one_half(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(11, "uniform", NULL, 0);
  float *u = malloc(DRAWS * sizeof *u);
  uint32_t *w = malloc(DRAWS * sizeof *w);
  assert_non_null(u);
  assert_non_null(w);
  dl_stream_uniform(&s, 5, u, DRAWS);
  dl_stream_u32(&s, 5, w, DRAWS);
  double sum = 0.0;
  for (int i = 0; i < DRAWS; i++) {
    assert_true(u[i] >= 0.0f && u[i] < 1.0f);
    assert_true(u[i] == (float)(w[i] >> 8) * 0x1p-24f);
    sum += u[i];
  }
  /* sd of the mean of n U(0,1) draws: sqrt(1/12/n) = 9.1e-4; bound 5 sd. */
  double mean = sum / DRAWS;
  printf("uniform mean over %d draws: %.6f\n", DRAWS, mean);
  assert_true(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12.0 / DRAWS));
  free(u);
  free(w);
}

static void uniform_range_stays_below_hi(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(12, "range", NULL, 0);
  enum { N = 4096 };
  float u[N], r[N];
  dl_stream_uniform(&s, 0, u, N);
  dl_stream_uniform_range(&s, 0, -0.25f, 0.75f, r, N);
  for (int i = 0; i < N; i++) {
    assert_true(r[i] >= -0.25f && r[i] < 0.75f);
    assert_true(r[i] == u[i] * 1.0f - 0.25f);
  }
  /* A word whose uniform is 1 - 2^-24 (found by scanning this stream): in
   * [1, 2) it rounds (tie to even) to 2, which must come back as the float
   * below 2. */
  const uint64_t found = 22312838;
  uint32_t w;
  dl_stream_u32(&s, found, &w, 1);
  assert_int_equal(w >> 8, 0xffffff);
  float v;
  dl_stream_uniform_range(&s, found, 1.0f, 2.0f, &v, 1);
  assert_true(v == 2.0f - 0x1p-23f);
  /* A degenerate range gives lo; a reversed one is not clamped. */
  dl_stream_uniform_range(&s, found, 3.0f, 3.0f, &v, 1);
  assert_true(v == 3.0f);
  dl_stream_uniform_range(&s, found, 0.0f, -2.0f, &v, 1);
  assert_true(v == -2.0f + 0x1p-23f);
}

static void normal_has_the_asked_mean_and_std(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(13, "normal", NULL, 0);
  float *z = malloc(DRAWS * sizeof *z);
  assert_non_null(z);
  dl_stream_normal(&s, 0, 3.0f, 2.0f, z, DRAWS);
  double sum = 0.0, sq = 0.0;
  for (int i = 0; i < DRAWS; i++) {
    assert_true(isfinite(z[i]));
    /* |z| <= sqrt(-2 log 2^-32) = 6.66 because u1 >= 2^-32. */
    assert_true(fabs(z[i] - 3.0) <= 2.0 * 6.67);
    sum += z[i];
  }
  double mean = sum / DRAWS;
  for (int i = 0; i < DRAWS; i++) sq += (z[i] - mean) * (z[i] - mean);
  double sd = sqrt(sq / (DRAWS - 1));
  printf("normal(3, 2) over %d draws: mean %.5f std %.5f\n", DRAWS, mean, sd);
  /* sd of the sample mean: 2/sqrt(n) = 0.0063; of the sample std: about
   * 2/sqrt(2n) = 0.0045. Bounds are 5 sd. */
  assert_true(fabs(mean - 3.0) < 5 * 2.0 / sqrt(DRAWS));
  assert_true(fabs(sd - 2.0) < 5 * 2.0 / sqrt(2.0 * DRAWS));
  free(z);
}

/* Box-Muller values from Python's math.log/math.cos on the same words; the
 * engine uses its own log and cos, so allow 1 float ulp. Output i uses words
 * index+2i and index+2i+1, so a later start shifts by pairs. */
static void normal_matches_box_muller_on_the_spec_words(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(42, "dropout", (const uint64_t[]){1, 2, 3}, 3);
  static const float want[4] = {0.3937506675720215f, 0.2751207947731018f, 0.7702621817588806f,
                                0.204787477850914f};
  float z[4], shifted[2];
  dl_stream_normal(&s, 0, 0.0f, 1.0f, z, 4);
  for (int i = 0; i < 4; i++) assert_true(fabsf(z[i] - want[i]) <= 0x1p-24f);
  dl_stream_normal(&s, 4, 0.0f, 1.0f, shifted, 2);
  assert_true(shifted[0] == z[2] && shifted[1] == z[3]);
  /* Longer than one internal chunk: same values as drawing in pieces. */
  enum { N = 1000 };
  float all[N], piece[N];
  dl_stream_normal(&s, 10, 1.0f, 0.5f, all, N);
  dl_stream_normal(&s, 10, 1.0f, 0.5f, piece, 300);
  dl_stream_normal(&s, 10 + 600, 1.0f, 0.5f, piece + 300, N - 300);
  assert_memory_equal(all, piece, sizeof all);
}

static void bernoulli_frequency_matches_p(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(14, "bernoulli", NULL, 0);
  uint8_t *b = malloc(DRAWS);
  float *u = malloc(DRAWS * sizeof *u);
  assert_non_null(b);
  assert_non_null(u);
  dl_stream_bernoulli(&s, 9, 0.3f, b, DRAWS);
  dl_stream_uniform(&s, 9, u, DRAWS);
  int64_t ones = 0;
  for (int i = 0; i < DRAWS; i++) {
    assert_true(b[i] == (u[i] < 0.3f));
    ones += b[i];
  }
  /* sd of the frequency: sqrt(0.3*0.7/n) = 1.45e-3; bound 5 sd. */
  double freq = (double)ones / DRAWS;
  printf("bernoulli(0.3) frequency over %d draws: %.5f\n", DRAWS, freq);
  assert_true(fabs(freq - 0.3) < 5 * sqrt(0.3 * 0.7 / DRAWS));
  dl_stream_bernoulli(&s, 0, 0.0f, b, 1000);
  for (int i = 0; i < 1000; i++) assert_int_equal(b[i], 0);
  dl_stream_bernoulli(&s, 0, 1.0f, b, 1000);
  for (int i = 0; i < 1000; i++) assert_int_equal(b[i], 1);
  free(b);
  free(u);
}

static void below_is_in_range_and_roughly_uniform(void **state) {
  (void)state;
  dl_stream s = dl_stream_make(42, "dropout", (const uint64_t[]){1, 2, 3}, 3);
  /* Known answers from the Python implementation of the spec. */
  assert_true(dl_stream_below(&s, 3, 10) == 5);
  assert_true(dl_stream_below(&s, 3, 1000003) == 543410);
  assert_true(dl_stream_below(&s, 3, 1ULL << 63) == 5012057679456445022ULL);
  assert_true(dl_stream_below(&s, 3, UINT64_MAX) == 10024115358912890044ULL);
  assert_true(dl_stream_below(&s, 3, 0) == 0);
  assert_true(dl_stream_below(&s, 3, 1) == 0);

  enum { K = 10 };
  int64_t count[K] = {0};
  for (uint64_t i = 0; i < DRAWS; i++) {
    uint64_t v = dl_stream_below(&s, 2 * i, K);
    assert_true(v < K);
    count[v]++;
  }
  /* Each count is Binomial(n, 1/10): sd = sqrt(n*0.1*0.9) = 95; bound 5 sd. */
  for (int k = 0; k < K; k++) {
    printf("below(10) count[%d] = %lld\n", k, (long long)count[k]);
    assert_true(llabs(count[k] - DRAWS / K) < 5 * sqrt(DRAWS * 0.1 * 0.9));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(philox_matches_random123_known_answers),
      cmocka_unit_test(streams_match_the_spec),
      cmocka_unit_test(same_inputs_same_values_different_inputs_different),
      cmocka_unit_test(any_split_of_a_range_gives_the_same_words),
      cmocka_unit_test(words_follow_the_block_layout),
      cmocka_unit_test(uniform_is_in_unit_interval_with_mean_one_half),
      cmocka_unit_test(uniform_range_stays_below_hi),
      cmocka_unit_test(normal_has_the_asked_mean_and_std),
      cmocka_unit_test(normal_matches_box_muller_on_the_spec_words),
      cmocka_unit_test(bernoulli_frequency_matches_p),
      cmocka_unit_test(below_is_in_range_and_roughly_uniform),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
