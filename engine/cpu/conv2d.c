/* Conv2d, NCHW, square kernel, stride, zero padding, as im2col + dl_sgemm.
 *
 * Per sample n: col_n [C*k*k, Ho*Wo] holds the input patches, and
 * y_n [O, Ho*Wo] = W [O, C*k*k] @ col_n (+ b). The batch is cut into one
 * slice of samples per thread, each with its own small col buffer (it
 * stays in cache; no batch-sized buffer), and every sample's im2col, GEMM
 * and col2im run on the thread owning it. dW sums over samples in sample
 * order (GEMMs with beta = 1 one sample after another), which is bitwise
 * one GEMM over the whole batch's columns, whatever the thread count.
 * dx = col2im(W^T @ dy_n) adds patches in a fixed order.
 *
 * AMP emulation: x (through col), W and b are rounded to half, and so are
 * y, dy, dx, dW and db, as for Linear. */
#include "kinds.h"

#include "gemm.h"
#include "half.h"
#include "mem.h"
#include "philox.h"
#include "threads.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

dl_status dl_conv2d_init(dl_layer *l, uint64_t seed) {
  const dl_layer_desc *d = &l->desc;
  const int64_t k = d->kernel;
  DL_TRY(dl_layer_add_param(l, "weight", 4, (const int64_t[]){d->out, d->in, k, k}));
  if (d->bias) DL_TRY(dl_layer_add_param(l, "bias", 1, (const int64_t[]){d->out}));
  /* kaiming_uniform_(a=sqrt(5)) and the bias rule: U(-b, b), b = 1/sqrt(fan_in). */
  float bound = (float)(1.0 / sqrt((double)(d->in * k * k)));
  for (int i = 0; i < l->nparams; i++) {
    dl_param *p = &l->params[i];
    char purpose[DL_NAME_MAX + 8];
    snprintf(purpose, sizeof purpose, "init/%s", p->name);
    dl_stream s = dl_stream_make(seed, purpose, NULL, 0);
    dl_stream_uniform_range(&s, 0, -bound, bound, dl_f32(&p->value), p->value.numel);
  }
  return DL_OK;
}

typedef struct conv_geom {
  int64_t n, c, h, w, o, oh, ow;
  int64_t k, stride, pad;
  int64_t rows;  /* C*k*k: rows of col, columns of W */
  int64_t pixels; /* Ho*Wo: columns of col */
} conv_geom;

static dl_status conv_geometry(const dl_layer *l, const dl_tensor *x, conv_geom *g) {
  const dl_layer_desc *d = &l->desc;
  char a[96];
  if (x->dtype != DL_F32 || x->ndim != 4 || x->shape[1] != d->in)
    return dl_fail(DL_ERR_INVALID, "input %s: expected [N, %lld, H, W] float32",
                   dl_tensor_describe(x, a, sizeof a), (long long)d->in);
  g->n = x->shape[0];
  g->c = x->shape[1];
  g->h = x->shape[2];
  g->w = x->shape[3];
  g->o = d->out;
  g->k = d->kernel;
  g->stride = d->stride;
  g->pad = d->padding;
  if (g->h + 2 * g->pad < g->k || g->w + 2 * g->pad < g->k)
    return dl_fail(DL_ERR_INVALID, "input %s is smaller than kernel %lld with padding %lld",
                   dl_tensor_describe(x, a, sizeof a), (long long)g->k, (long long)g->pad);
  g->oh = (g->h + 2 * g->pad - g->k) / g->stride + 1;
  g->ow = (g->w + 2 * g->pad - g->k) / g->stride + 1;
  g->rows = g->c * g->k * g->k;
  g->pixels = g->oh * g->ow;
  return DL_OK;
}

/* The range of output columns ow whose input column ow*stride - pad + kj
 * lies inside [0, W). */
static void valid_cols(const conv_geom *g, int64_t kj, int64_t *lo, int64_t *hi) {
  int64_t off = kj - g->pad;
  *lo = off >= 0 ? 0 : (-off + g->stride - 1) / g->stride;
  *hi = off >= g->w ? 0 : (g->w - 1 - off) / g->stride + 1;
  if (*hi > g->ow) *hi = g->ow;
  if (*lo > *hi) *lo = *hi;
}

static void im2col(const conv_geom *g, const float *x, float *col) {
  for (int64_t r = 0; r < g->rows; r++) {
    const int64_t c = r / (g->k * g->k), ki = r / g->k % g->k, kj = r % g->k;
    int64_t lo, hi;
    valid_cols(g, kj, &lo, &hi);
    for (int64_t oh = 0; oh < g->oh; oh++) {
      float *dst = col + r * g->pixels + oh * g->ow;
      const int64_t ih = oh * g->stride - g->pad + ki;
      if (ih < 0 || ih >= g->h) {
        memset(dst, 0, (size_t)g->ow * sizeof *dst);
        continue;
      }
      const float *src = x + (c * g->h + ih) * g->w;
      const int64_t off = kj - g->pad;
      for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
      if (g->stride == 1)
        memcpy(dst + lo, src + off + lo, (size_t)(hi - lo) * sizeof *dst);
      else
        for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[off + ow * g->stride];
      for (int64_t ow = hi; ow < g->ow; ow++) dst[ow] = 0.0f;
    }
  }
}

/* dx_n += every patch column of dcol, rows then pixels in order. */
static void col2im(const conv_geom *g, const float *dcol, float *dx) {
  for (int64_t r = 0; r < g->rows; r++) {
    const int64_t c = r / (g->k * g->k), ki = r / g->k % g->k, kj = r % g->k;
    int64_t lo, hi;
    valid_cols(g, kj, &lo, &hi);
    for (int64_t oh = 0; oh < g->oh; oh++) {
      const int64_t ih = oh * g->stride - g->pad + ki;
      if (ih < 0 || ih >= g->h) continue;
      const float *src = dcol + r * g->pixels + oh * g->ow;
      float *dst = dx + (c * g->h + ih) * g->w;
      const int64_t off = kj - g->pad;
      for (int64_t ow = lo; ow < hi; ow++) dst[off + ow * g->stride] += src[ow];
    }
  }
}

typedef struct conv_job {
  const conv_geom *g;
  int half;        /* autocast code for dl_round_inplace, 0 = off */
  const float *x;  /* input */
  float *bufs;     /* nslots col buffers of rows * pixels */
  int64_t nslots;
  const float *w;  /* possibly half-rounded weight */
  const float *b;  /* possibly half-rounded bias, or NULL */
  float *y;        /* forward output */
  const float *dy; /* backward: possibly half-rounded output gradient */
  float *dx;
} conv_job;

/* A 1x1 convolution without stride or padding reads x directly. */
static bool col_is_input(const conv_job *j) {
  const conv_geom *g = j->g;
  return g->k == 1 && g->stride == 1 && g->pad == 0 && !j->half;
}

/* col_n in buf (or x_n itself), rounded to half under autocast. */
static const float *sample_col(const conv_job *j, int64_t n, float *buf) {
  const conv_geom *g = j->g;
  const float *x = j->x + n * g->c * g->h * g->w;
  if (col_is_input(j)) return x;
  im2col(g, x, buf);
  dl_round_inplace(buf, g->rows * g->pixels, j->half);
  return buf;
}

static void slot_range(const conv_job *j, int64_t slot, int64_t *begin, int64_t *end) {
  *begin = slot * j->g->n / j->nslots;
  *end = (slot + 1) * j->g->n / j->nslots;
}

static void conv_forward_slots(void *ctx, int64_t first, int64_t last) {
  const conv_job *j = ctx;
  const conv_geom *g = j->g;
  for (int64_t slot = first; slot < last; slot++) {
    float *buf = j->bufs + slot * g->rows * g->pixels;
    int64_t begin, end;
    slot_range(j, slot, &begin, &end);
    for (int64_t n = begin; n < end; n++) {
      const float *col = sample_col(j, n, buf);
      float *y = j->y + n * g->o * g->pixels;
      /* The accumulator starts at the bias, as in Linear. */
      for (int64_t o = 0; j->b && o < g->o; o++)
        for (int64_t p = 0; p < g->pixels; p++) y[o * g->pixels + p] = j->b[o];
      dl_sgemm(false, false, g->o, g->pixels, g->rows, j->w, g->rows, col, g->pixels,
               j->b ? 1.0f : 0.0f, y, g->pixels);
      dl_round_inplace(y, g->o * g->pixels, j->half);
    }
  }
}

static void conv_dx_slots(void *ctx, int64_t first, int64_t last) {
  const conv_job *j = ctx;
  const conv_geom *g = j->g;
  for (int64_t slot = first; slot < last; slot++) {
    float *dcol = j->bufs + slot * g->rows * g->pixels;
    int64_t begin, end;
    slot_range(j, slot, &begin, &end);
    for (int64_t n = begin; n < end; n++) {
      float *dx = j->dx + n * g->c * g->h * g->w;
      const float *dy = j->dy + n * g->o * g->pixels;
      if (col_is_input(j)) { /* col2im of a 1x1 conv is the identity */
        dl_sgemm(true, false, g->rows, g->pixels, g->o, j->w, g->rows, dy, g->pixels, 0.0f,
                 dx, g->pixels);
        continue;
      }
      dl_sgemm(true, false, g->rows, g->pixels, g->o, j->w, g->rows, dy, g->pixels, 0.0f,
               dcol, g->pixels);
      col2im(g, dcol, dx);
      dl_round_inplace(dx, g->c * g->h * g->w, j->half);
    }
  }
}

/* A half-rounded copy of src under autocast; src itself otherwise. */
static dl_status amp_operand(int half, const dl_tensor *src, dl_tensor *copy,
                             const float **out) {
  *out = dl_f32(src);
  if (!half) return DL_OK;
  DL_TRY(dl_tensor_clone(copy, src, "autocast operand"));
  dl_round_inplace(dl_f32(copy), copy->numel, half);
  *out = dl_f32(copy);
  return DL_OK;
}

/* Scratch of the job: col buffers and half-rounded weight/bias copies. */
typedef struct conv_scratch {
  dl_tensor bufs, w, b;
} conv_scratch;

static void scratch_free(conv_scratch *s) {
  dl_tensor_free(&s->bufs);
  dl_tensor_free(&s->w);
  dl_tensor_free(&s->b);
}

static dl_status job_prepare(dl_layer *l, const dl_ctx *ctx, const conv_geom *g,
                             const dl_tensor *x, conv_job *j, conv_scratch *s) {
  memset(j, 0, sizeof *j);
  j->g = g;
  j->half = (int)ctx->autocast;
  j->x = dl_f32(x);
  j->nslots = dl_get_num_threads();
  if (j->nslots > g->n) j->nslots = g->n;
  if (j->nslots < 1) j->nslots = 1;
  DL_TRY(dl_tensor_f32(&s->bufs, 3, j->nslots, g->rows, g->pixels, 0, "conv2d im2col"));
  j->bufs = dl_f32(&s->bufs);
  DL_TRY(amp_operand(j->half, &l->params[0].value, &s->w, &j->w));
  if (l->desc.bias) DL_TRY(amp_operand(j->half, &l->params[1].value, &s->b, &j->b));
  return DL_OK;
}

static dl_status conv_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                              dl_tensor *y) {
  conv_geom g;
  DL_TRY(conv_geometry(l, x, &g));
  DL_TRY(dl_tensor_f32(y, 4, g.n, g.o, g.oh, g.ow, "conv2d output"));
  conv_job j;
  conv_scratch s = {{0}, {0}, {0}};
  dl_status st = job_prepare(l, ctx, &g, x, &j, &s);
  if (st == DL_OK) {
    j.y = dl_f32(y);
    dl_parallel_for(j.nslots, 1, conv_forward_slots, &j);
  } else {
    dl_tensor_free(y);
  }
  scratch_free(&s);
  return st;
}

/* dW += dy_n @ col_n^T for n in order (the first GEMM overwrites). */
static void weight_grad(const conv_job *j, float *gw) {
  const conv_geom *g = j->g;
  for (int64_t n = 0; n < g->n; n++) {
    const float *col = sample_col(j, n, j->bufs);
    dl_sgemm(false, true, g->o, g->rows, g->pixels, j->dy + n * g->o * g->pixels, g->pixels,
             col, g->pixels, n > 0 ? 1.0f : 0.0f, gw, g->rows);
  }
  if (g->n == 0) memset(gw, 0, (size_t)(g->o * g->rows) * sizeof *gw);
}

enum { BIAS_LANES = 8 };

/* db[o] = sum of dy over samples, then pixels, in order. Eight channels
 * are summed side by side: each sum is still one chain in a fixed order,
 * but eight chains hide the latency of the adds. */
static void bias_grad(const conv_job *j, float *gb) {
  const conv_geom *g = j->g;
  memset(gb, 0, (size_t)g->o * sizeof *gb);
  for (int64_t n = 0; n < g->n; n++) {
    for (int64_t o0 = 0; o0 < g->o; o0 += BIAS_LANES) {
      const int64_t lanes = g->o - o0 < BIAS_LANES ? g->o - o0 : BIAS_LANES;
      const float *dy = j->dy + (n * g->o + o0) * g->pixels;
      float acc[BIAS_LANES];
      for (int64_t i = 0; i < lanes; i++) acc[i] = gb[o0 + i];
      if (lanes == BIAS_LANES) {
        for (int64_t q = 0; q < g->pixels; q++)
          for (int64_t i = 0; i < BIAS_LANES; i++) acc[i] += dy[i * g->pixels + q];
      } else {
        for (int64_t i = 0; i < lanes; i++)
          for (int64_t q = 0; q < g->pixels; q++) acc[i] += dy[i * g->pixels + q];
      }
      for (int64_t i = 0; i < lanes; i++) gb[o0 + i] = acc[i];
    }
  }
}

static dl_status conv_param_grads(dl_layer *l, const conv_job *j) {
  for (int i = 0; i < l->nparams; i++) {
    dl_param *p = &l->params[i];
    if (!p->requires_grad) continue;
    dl_tensor scratch = {0};
    float *gp = dl_f32(&p->grad);
    if (p->has_grad) {
      DL_TRY(dl_tensor_alloc(&scratch, DL_F32, p->grad.ndim, p->grad.shape, p->name));
      gp = dl_f32(&scratch);
    }
    if (i == 0)
      weight_grad(j, gp);
    else
      bias_grad(j, gp);
    dl_round_inplace(gp, p->grad.numel, j->half);
    if (scratch.data) dl_param_accumulate(p, gp);
    p->has_grad = true;
    dl_tensor_free(&scratch);
  }
  return DL_OK;
}

static dl_status conv_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                               const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)y;
  conv_geom g;
  DL_TRY(conv_geometry(l, x, &g));
  conv_job j;
  conv_scratch s = {{0}, {0}, {0}};
  dl_tensor dyh = {0};
  dl_status st = job_prepare(l, ctx, &g, x, &j, &s);
  if (st == DL_OK) st = amp_operand(j.half, dy, &dyh, &j.dy);
  if (st == DL_OK) st = conv_param_grads(l, &j);
  if (st == DL_OK && dx) {
    st = dl_tensor_alloc(dx, DL_F32, 4, x->shape, "conv2d input gradient");
    if (st == DL_OK) {
      j.dx = dl_f32(dx);
      dl_parallel_for(j.nslots, 1, conv_dx_slots, &j);
    }
  }
  scratch_free(&s);
  dl_tensor_free(&dyh);
  return st;
}

const dl_layer_ops dl_conv2d_ops = {conv_forward, conv_backward};
