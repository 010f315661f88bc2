/* Samplers (engine/data/sampler.c): sequential, random permutation and
 * torch.utils.data.DistributedSampler semantics. All checks here are exact
 * (index lists are integers); the one statistical check states its bound. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/mem.h"
#include "data/sampler.h"

static dl_sampler distributed(int64_t n, int rank, int world, bool shuffle, bool drop_last) {
  return (dl_sampler){.kind = DL_SAMPLER_DISTRIBUTED,
                      .n = n,
                      .seed = 42,
                      .shuffle = shuffle,
                      .drop_last = drop_last,
                      .rank = rank,
                      .world = world};
}

static void expect_indices(const dl_sampler *s, int64_t epoch, const int64_t *want, int64_t n) {
  dl_indices ix = {0};
  assert_int_equal(dl_sampler_indices(s, epoch, &ix), DL_OK);
  assert_int_equal(ix.n, n);
  assert_int_equal(dl_sampler_len(s), n);
  for (int64_t i = 0; i < n; i++) assert_int_equal(ix.v[i], want[i]);
  dl_indices_free(&ix);
}

static void sequential_is_identity(void **state) {
  (void)state;
  dl_sampler s = {.kind = DL_SAMPLER_SEQUENTIAL, .n = 5};
  expect_indices(&s, 3, (const int64_t[]){0, 1, 2, 3, 4}, 5);
}

/* Hand-computed from torch's code for N=10, world=3, shuffle off:
 * drop_last off pads 0..9 with 0, 1 to 12 and strides; on, truncates to 9. */
static void distributed_n10_world3_by_hand(void **state) {
  (void)state;
  const int64_t pad[3][4] = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  const int64_t cut[3][3] = {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}};
  for (int r = 0; r < 3; r++) {
    dl_sampler p = distributed(10, r, 3, false, false);
    dl_sampler c = distributed(10, r, 3, false, true);
    expect_indices(&p, 0, pad[r], 4);
    expect_indices(&c, 0, cut[r], 3);
  }
}

/* Padding longer than the list: torch repeats the list, (indices * k)[:pad].
 * N=2, world=5: [0, 1, 0, 1, 0], one per rank. */
static void distributed_pads_by_repeating_short_lists(void **state) {
  (void)state;
  const int64_t want[5] = {0, 1, 0, 1, 0};
  for (int r = 0; r < 5; r++) {
    dl_sampler s = distributed(2, r, 5, false, false);
    expect_indices(&s, 0, &want[r], 1);
    dl_sampler d = distributed(2, r, 5, false, true); /* total_size 0 */
    expect_indices(&d, 0, NULL, 0);
  }
}

/* torch's __iter__ written out as list operations (append copies of the
 * list, slice, stride), independently of the modular arithmetic in
 * sampler.c. */
static int64_t torch_distributed(const int64_t *order, int64_t n, int rank, int world,
                                 bool drop_last, int64_t *out) {
  int64_t list[256], len = n;
  memcpy(list, order, (size_t)n * sizeof *list);
  int64_t num_samples = (drop_last && n % world) ? (int64_t)ceil((double)(n - world) / world)
                                                 : (int64_t)ceil((double)n / world);
  int64_t total = num_samples * world;
  if (!drop_last) {
    int64_t padding = total - n;
    int64_t reps = n ? (padding + n - 1) / n : 0;
    int64_t rep[256], rn = 0;
    for (int64_t k = 0; k < reps; k++)
      for (int64_t i = 0; i < n; i++) rep[rn++] = order[i];
    for (int64_t i = 0; i < padding; i++) list[len++] = rep[i];
  } else {
    len = total;
  }
  assert_int_equal(len, total);
  int64_t m = 0;
  for (int64_t i = rank; i < total; i += world) out[m++] = list[i];
  assert_int_equal(m, num_samples);
  return m;
}

static void distributed_matches_torch_list_semantics(void **state) {
  (void)state;
  for (int64_t n = 0; n <= 13; n++)
    for (int world = 1; world <= 5; world++)
      for (int flags = 0; flags < 4; flags++) {
        bool shuffle = flags & 1, drop_last = flags & 2;
        int64_t order[16];
        if (shuffle) {
          dl_permutation(n, 42, 7, order);
        } else {
          for (int64_t i = 0; i < n; i++) order[i] = i;
        }
        for (int r = 0; r < world; r++) {
          int64_t want[64];
          int64_t m = torch_distributed(order, n, r, world, drop_last, want);
          dl_sampler s = distributed(n, r, world, shuffle, drop_last);
          expect_indices(&s, 7, want, m);
        }
      }
}

/* Without drop_last the ranks together see every sample (padding repeats
 * some); with it, every sample at most once. */
static void distributed_covers_every_sample(void **state) {
  (void)state;
  const int64_t n = 103;
  for (int drop = 0; drop < 2; drop++) {
    int seen[103] = {0};
    for (int r = 0; r < 4; r++) {
      dl_sampler s = distributed(n, r, 4, true, drop);
      dl_indices ix = {0};
      assert_int_equal(dl_sampler_indices(&s, 3, &ix), DL_OK);
      assert_int_equal(ix.n, drop ? 25 : 26);
      for (int64_t i = 0; i < ix.n; i++) seen[ix.v[i]]++;
      dl_indices_free(&ix);
    }
    int64_t missing = 0, twice = 0;
    for (int64_t i = 0; i < n; i++) {
      missing += seen[i] == 0;
      twice += seen[i] > 1;
    }
    assert_int_equal(missing, drop ? 3 : 0);
    assert_int_equal(twice, drop ? 0 : 1);
  }
}

static int is_permutation(const int64_t *v, int64_t n) {
  char seen[1000] = {0};
  for (int64_t i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= n || seen[v[i]]) return 0;
    seen[v[i]] = 1;
  }
  return 1;
}

static void random_epochs_differ_and_repeat(void **state) {
  (void)state;
  dl_sampler s = {.kind = DL_SAMPLER_RANDOM, .n = 1000, .seed = 5};
  dl_indices a = {0}, b = {0}, c = {0}, d = {0};
  assert_int_equal(dl_sampler_indices(&s, 0, &a), DL_OK);
  assert_int_equal(dl_sampler_indices(&s, 0, &b), DL_OK);
  assert_int_equal(dl_sampler_indices(&s, 1, &c), DL_OK);
  s.seed = 6;
  assert_int_equal(dl_sampler_indices(&s, 0, &d), DL_OK);
  assert_true(is_permutation(a.v, 1000));
  assert_true(is_permutation(c.v, 1000));
  assert_memory_equal(a.v, b.v, 1000 * sizeof *a.v);
  int64_t same_c = 0, same_d = 0, fixed = 0;
  for (int64_t i = 0; i < 1000; i++) {
    same_c += a.v[i] == c.v[i];
    same_d += a.v[i] == d.v[i];
    fixed += a.v[i] == i;
  }
  /* Two independent permutations agree in ~1 place on average (Poisson(1)):
   * more than 10 would be a broken shuffle. */
  assert_true(same_c <= 10 && same_d <= 10 && fixed <= 10);
  dl_indices_free(&a);
  dl_indices_free(&b);
  dl_indices_free(&c);
  dl_indices_free(&d);
}

/* Fisher-Yates gives each of the 6 orders of 3 items probability 1/6. Over
 * 12000 epochs a count has std sqrt(12000 * 1/6 * 5/6) = 41; we allow
 * +-200 (about 5 std), which a biased shuffle such as swapping with
 * below(n) instead of below(i+1) (counts 1333/1778) fails. */
static void random_permutations_are_uniform(void **state) {
  (void)state;
  int count[3][3][3] = {{{0}}};
  for (int64_t e = 0; e < 12000; e++) {
    int64_t p[3];
    dl_permutation(3, 11, e, p);
    count[p[0]][p[1]][p[2]]++;
  }
  const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (int k = 0; k < 6; k++) {
    int c = count[orders[k][0]][orders[k][1]][orders[k][2]];
    assert_true(c > 1800 && c < 2200);
  }
}

static void shuffled_distributed_uses_the_epoch_permutation(void **state) {
  (void)state;
  int64_t perm[10];
  dl_permutation(10, 42, 4, perm);
  for (int r = 0; r < 3; r++) {
    int64_t want[4] = {perm[r], perm[r + 3], perm[r + 6], perm[(r + 9) % 10]};
    dl_sampler s = distributed(10, r, 3, true, false);
    expect_indices(&s, 4, want, 4);
  }
  dl_sampler rs = {.kind = DL_SAMPLER_RANDOM, .n = 10, .seed = 42};
  expect_indices(&rs, 4, perm, 10);
}

static void bad_samplers_are_refused(void **state) {
  (void)state;
  dl_indices ix = {0};
  dl_sampler s = distributed(10, 0, 0, false, false);
  assert_int_equal(dl_sampler_indices(&s, 0, &ix), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "world size 0"));
  assert_null(ix.v);
  s = distributed(10, 3, 3, false, false);
  assert_int_equal(dl_sampler_indices(&s, 0, &ix), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "rank 3 is outside [0, 2]"));
  s = distributed(10, -1, 3, false, false);
  assert_int_equal(dl_sampler_indices(&s, 0, &ix), DL_ERR_INVALID);
  assert_int_equal(dl_sampler_len(&s), -1);
  s = distributed(-4, 0, 1, false, false);
  assert_int_equal(dl_sampler_indices(&s, 0, &ix), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "negative"));
  s = (dl_sampler){.kind = (dl_sampler_kind)9, .n = 3};
  assert_int_equal(dl_sampler_indices(&s, 0, &ix), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "unknown kind"));
  /* rank and world do not matter to a plain sampler */
  s = (dl_sampler){.kind = DL_SAMPLER_RANDOM, .n = 3, .world = 0, .rank = 7};
  assert_int_equal(dl_sampler_indices(&s, 0, &ix), DL_OK);
  assert_int_equal(ix.n, 3);
  dl_indices_free(&ix);
  dl_indices_free(&ix);
}

static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  int64_t before = dl_mem_current();
  dl_indices ix = {0};
  dl_sampler s = distributed(10, 1, 3, true, false);
  for (int k = 1; k <= 2; k++) {
    dl_mem_fail_after(k);
    assert_int_equal(dl_sampler_indices(&s, 0, &ix), DL_ERR_NOMEM);
    assert_null(ix.v);
  }
  dl_mem_fail_after(1);
  s.kind = DL_SAMPLER_SEQUENTIAL;
  assert_int_equal(dl_sampler_indices(&s, 0, &ix), DL_ERR_NOMEM);
  dl_mem_fail_after(0);
  assert_int_equal(dl_mem_current(), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sequential_is_identity),
      cmocka_unit_test(distributed_n10_world3_by_hand),
      cmocka_unit_test(distributed_pads_by_repeating_short_lists),
      cmocka_unit_test(distributed_matches_torch_list_semantics),
      cmocka_unit_test(distributed_covers_every_sample),
      cmocka_unit_test(random_epochs_differ_and_repeat),
      cmocka_unit_test(random_permutations_are_uniform),
      cmocka_unit_test(shuffled_distributed_uses_the_epoch_permutation),
      cmocka_unit_test(bad_samplers_are_refused),
      cmocka_unit_test(allocation_failures_leak_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
