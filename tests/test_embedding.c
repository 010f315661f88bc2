/* Embedding (engine/nn/kinds/embedding.c): row lookup, N(0, 1) init from the
 * parameter's stream, gradients (finite differences and the exact in-order
 * sum for repeated ids), id range errors naming the position. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"
#include "core/mem.h"

static dl_layer_desc emb_desc(int64_t num, int64_t dim) {
  dl_layer_desc d = dl_layer_default(DL_EMBEDDING);
  d.in = num;
  d.out = dim;
  return d;
}

static void ids_tensor(dl_tensor *t, int ndim, const int64_t *shape, const int32_t *ids) {
  assert_int_equal(dl_tensor_alloc(t, DL_I32, ndim, shape, "ids"), DL_OK);
  memcpy(t->data, ids, dl_tensor_bytes(t));
}

static void lookup_copies_rows(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = emb_desc(10, 3);
  assert_int_equal(dl_layer_init(&l, &d, "0.", 0, 1), DL_OK);
  dl_tensor ids = {0}, y = {0};
  const int32_t v[6] = {4, 0, 9, 4, 2, 7};
  ids_tensor(&ids, 2, (const int64_t[]){2, 3}, v);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &ids, &y), DL_OK);
  assert_int_equal(y.ndim, 3);
  assert_int_equal(y.shape[0], 2);
  assert_int_equal(y.shape[1], 3);
  assert_int_equal(y.shape[2], 3);
  const float *w = dl_f32(&l.params[0].value);
  for (int i = 0; i < 6; i++)
    assert_memory_equal(dl_f32(&y) + i * 3, w + v[i] * 3, 3 * sizeof(float));
  dl_tensor_free(&y);
  dl_tensor_free(&ids);
  ids_tensor(&ids, 1, (const int64_t[]){2}, v);
  assert_int_equal(l.ops->forward(&l, &ctx, &ids, &y), DL_OK);
  assert_int_equal(y.ndim, 2);
  assert_memory_equal(dl_f32(&y) + 3, w, 3 * sizeof(float));
  dl_tensor_free(&y);
  dl_tensor_free(&ids);
  dl_layer_destroy(&l);
}

static void init_is_standard_normal_from_its_stream(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = emb_desc(100, 40);
  assert_int_equal(dl_layer_init(&l, &d, "2.", 0, 8), DL_OK);
  assert_int_equal(l.nparams, 1);
  assert_string_equal(l.params[0].name, "2.weight");
  float *expect = test_malloc(4000 * sizeof *expect);
  dl_stream s = dl_stream_make(8, "init/2.weight", NULL, 0);
  dl_stream_normal(&s, 0, 0.0f, 1.0f, expect, 4000);
  assert_memory_equal(expect, dl_f32(&l.params[0].value), 4000 * sizeof *expect);
  test_free(expect);
  double sum = 0, sq = 0;
  for (int i = 0; i < 4000; i++) {
    double v = dl_f32(&l.params[0].value)[i];
    sum += v;
    sq += v * v;
  }
  /* 4000 N(0,1) draws: mean has sd 0.016, variance sd 0.022; 5 sd margins. */
  assert_true(fabs(sum / 4000) < 0.08);
  assert_true(fabs(sq / 4000 - 1.0) < 0.11);
  dl_layer_destroy(&l);
}

static void gradients_match_finite_differences(void **state) {
  (void)state;
  dl_tensor ids = {0};
  const int32_t v[8] = {1, 3, 1, 0, 4, 1, 3, 2};
  ids_tensor(&ids, 2, (const int64_t[]){2, 4}, v);
  dl_layer_desc d = emb_desc(6, 3); /* row 5 never used: zero gradient */
  double err = gc_layer_max_error(&d, &ids, true);
  /* A linear map (see gradcheck.h): expected ~1e-5. */
  if (!(err < 1e-2)) print_error("%s\n", gc_last_report);
  assert_true(err < 1e-2);
  dl_tensor_free(&ids);
}

/* An output gradient of another shape or dtype is refused, not read by
 * the shape the forward gave. */
static void misshapen_output_gradients_are_refused(void **state) {
  (void)state;
  dl_tensor ids = {0};
  const int32_t v[4] = {1, 3, 0, 2};
  ids_tensor(&ids, 2, (const int64_t[]){2, 2}, v);
  dl_layer_desc d = emb_desc(4, 3);
  bool refused = gc_refuses_misshapen_dy(&d, &ids);
  if (!refused) print_error("%s\n", gc_last_report);
  assert_true(refused);
  dl_tensor_free(&ids);
}

/* Repeated ids sum their rows of dy in position order, exactly. */
static void repeated_ids_accumulate_in_order(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = emb_desc(5, 2);
  assert_int_equal(dl_layer_init(&l, &d, "", 0, 1), DL_OK);
  dl_tensor ids = {0}, y = {0}, dy = {0};
  const int32_t v[5] = {3, 1, 3, 3, 0};
  ids_tensor(&ids, 1, (const int64_t[]){5}, v);
  dl_ctx ctx = gc_ctx();
  assert_int_equal(l.ops->forward(&l, &ctx, &ids, &y), DL_OK);
  assert_int_equal(dl_tensor_f32(&dy, 2, 5, 2, 0, 0, "dy"), DL_OK);
  gc_fill_uniform(&dy, 4, -1.0f, 1.0f);
  for (int round = 1; round <= 2; round++) {
    assert_int_equal(l.ops->backward(&l, &ctx, &ids, &y, &dy, NULL), DL_OK);
    const float *g = dl_f32(&l.params[0].grad), *D = dl_f32(&dy);
    for (int k = 0; k < 2; k++) {
      float row3 = ((0.0f + D[k]) + D[4 + k]) + D[6 + k];
      assert_true(g[3 * 2 + k] == (round == 1 ? row3 : row3 + row3));
      assert_true(g[1 * 2 + k] == (float)round * D[2 + k]);
      assert_true(g[2 * 2 + k] == 0.0f && g[4 * 2 + k] == 0.0f);
    }
  }
  l.params[0].requires_grad = false;
  l.params[0].has_grad = false;
  assert_int_equal(l.ops->backward(&l, &ctx, &ids, &y, &dy, NULL), DL_OK);
  assert_false(l.params[0].has_grad);
  dl_tensor_free(&y);
  dl_tensor_free(&dy);
  dl_tensor_free(&ids);
  dl_layer_destroy(&l);
}

static void bad_ids_are_refused_with_position(void **state) {
  (void)state;
  dl_layer l;
  dl_layer_desc d = emb_desc(10, 3);
  assert_int_equal(dl_layer_init(&l, &d, "0.", 0, 1), DL_OK);
  dl_tensor ids = {0}, y = {0};
  dl_ctx ctx = gc_ctx();
  const int32_t v[6] = {4, 0, 9, 4, 2, 10};
  ids_tensor(&ids, 2, (const int64_t[]){2, 3}, v);
  assert_int_equal(l.ops->forward(&l, &ctx, &ids, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "id 10 at position [1, 2] is outside [0, 10)"));
  assert_null(y.data);
  dl_tensor_free(&ids);
  const int32_t neg[3] = {1, -1, 2};
  ids_tensor(&ids, 1, (const int64_t[]){3}, neg);
  assert_int_equal(l.ops->forward(&l, &ctx, &ids, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "id -1 at position [1] is outside"));
  dl_tensor_free(&ids);
  assert_int_equal(dl_tensor_f32(&ids, 1, 3, 0, 0, 0, "x"), DL_OK);
  assert_int_equal(l.ops->forward(&l, &ctx, &ids, &y), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "expected int32 ids"));
  dl_tensor_free(&ids);
  dl_layer_destroy(&l);
  d = emb_desc(10, 0);
  assert_int_equal(dl_layer_init(&l, &d, "1.", 0, 1), DL_ERR_INVALID);
  assert_non_null(strstr(dl_last_error(), "layer 1 (embedding): embedding_dim must be > 0"));
}

static void allocation_failures_leak_nothing(void **state) {
  (void)state;
  dl_layer_desc d = emb_desc(4, 2);
  dl_tensor ids = {0}, dy = {0};
  const int32_t v[3] = {0, 3, 0};
  ids_tensor(&ids, 1, (const int64_t[]){3}, v);
  assert_int_equal(dl_tensor_f32(&dy, 2, 3, 2, 0, 0, "dy"), DL_OK);
  const int64_t base = dl_mem_current();
  int failures = 0;
  for (int64_t n = 1; n < 20; n++) {
    dl_layer l;
    dl_tensor y = {0};
    dl_ctx ctx = gc_ctx();
    dl_mem_fail_after(n);
    dl_status s = dl_layer_init(&l, &d, "", 0, 1);
    if (s == DL_OK) {
      s = l.ops->forward(&l, &ctx, &ids, &y);
      l.params[0].has_grad = true;
      if (s == DL_OK) s = l.ops->backward(&l, &ctx, &ids, &y, &dy, NULL);
      dl_tensor_free(&y);
      dl_layer_destroy(&l);
    }
    dl_mem_fail_after(0);
    if (s != DL_OK) {
      assert_int_equal(s, DL_ERR_NOMEM);
      failures++;
    }
    assert_int_equal(dl_mem_current(), base);
    if (s == DL_OK) break;
  }
  assert_int_equal(failures, 4); /* weight, grad, output, scratch */
  dl_tensor_free(&ids);
  dl_tensor_free(&dy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(lookup_copies_rows),
      cmocka_unit_test(init_is_standard_normal_from_its_stream),
      cmocka_unit_test(gradients_match_finite_differences),
      cmocka_unit_test(repeated_ids_accumulate_in_order),
      cmocka_unit_test(bad_ids_are_refused_with_position),
      cmocka_unit_test(misshapen_output_gradients_are_refused),
      cmocka_unit_test(allocation_failures_leak_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
