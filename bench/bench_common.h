/* What bench_train.c and bench_scaling.c share: the layer descriptions of
 * their models, the parameters' digest and the clocks. Header-only: each
 * benchmark is one executable from one .c file. */
#ifndef DL_BENCH_COMMON_H
#define DL_BENCH_COMMON_H

#include "layer.h"
#include "model.h"

#include <stdint.h>
#include <time.h>

static inline dl_layer_desc bench_linear(int64_t in, int64_t out) {
  dl_layer_desc d = dl_layer_default(DL_LINEAR);
  d.in = in;
  d.out = out;
  return d;
}

static inline dl_layer_desc bench_conv3x3(int64_t in, int64_t out) {
  dl_layer_desc d = dl_layer_default(DL_CONV2D);
  d.in = in;
  d.out = out;
  d.kernel = 3;
  d.padding = 1;
  return d;
}

static inline dl_layer_desc bench_maxpool2(void) {
  dl_layer_desc d = dl_layer_default(DL_MAXPOOL2D);
  d.kernel = 2;
  return d;
}

/* FNV-1a over the bytes of every parameter in state-dict order. */
static inline uint64_t bench_param_digest(dl_model *m) {
  uint64_t h = 14695981039346656037ull;
  for (int i = 0; i < dl_model_num_params(m); i++) {
    const dl_tensor *v = &dl_model_param(m, i)->value;
    const unsigned char *p = v->data;
    for (size_t k = 0; k < dl_tensor_bytes(v); k++) h = (h ^ p[k]) * 1099511628211ull;
  }
  return h;
}

static inline double bench_clock_s(clockid_t which) {
  struct timespec ts;
  clock_gettime(which, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
