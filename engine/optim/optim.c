#include "optim/optim.h"

#include "core/mem.h"
#include "core/threads.h"
#include "numerics/cpu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { OPTIM_MAX_STATE = 3, OPTIM_STATE_NAME_MAX = DL_NAME_MAX + 32 };

/* One owned param and its state. */
typedef struct optim_slot {
  dl_param *param;
  dl_tensor step;   /* float32 0-d: steps taken; 0 = no state yet */
  dl_tensor buf[2]; /* SGD: momentum_buffer; Adam(W): exp_avg, exp_avg_sq */
  int nstate, step_index;
  dl_tensor *state[OPTIM_MAX_STATE]; /* in checkpoint order */
  char names[OPTIM_MAX_STATE][OPTIM_STATE_NAME_MAX];
} optim_slot;

typedef struct update_part update_part;

struct dl_optim {
  dl_optim_desc desc;
  optim_slot *slots;
  update_part *parts; /* one per slot: the current step's plan */
  int n;
};

const char *const dl_optim_kind_names[DL_OPTIM_KINDS + 1] = {
    [DL_OPTIM_SGD] = "sgd", [DL_OPTIM_ADAM] = "adam", [DL_OPTIM_ADAMW] = "adamw", NULL};

const char *dl_optim_kind_name(dl_optim_kind k) {
  return (unsigned)k < DL_OPTIM_KINDS ? dl_optim_kind_names[k] : "unknown";
}

dl_status dl_optim_kind_parse(const char *name, dl_optim_kind *out) {
  for (int i = 0; name && i < DL_OPTIM_KINDS; i++)
    if (strcmp(name, dl_optim_kind_names[i]) == 0) {
      *out = (dl_optim_kind)i;
      return DL_OK;
    }
  return dl_fail(DL_ERR_INVALID, "unknown optimizer '%s': use sgd, adam or adamw",
                 name ? name : "(null)");
}

dl_optim_desc dl_optim_default(dl_optim_kind kind) {
  dl_optim_desc d = {0};
  d.kind = kind;
  d.lr = kind == DL_OPTIM_SGD ? 0.01 : 1e-3;
  d.beta1 = 0.9;
  d.beta2 = 0.999;
  d.eps = 1e-8;
  d.weight_decay = kind == DL_OPTIM_ADAMW ? 1e-2 : 0.0;
  return d;
}

/* x^n by squaring: a fixed sequence of double multiplications. */
static double pow_int(double x, int64_t n) {
  double r = 1.0;
  while (n > 0) {
    if (n & 1) r *= x;
    x *= x;
    n >>= 1;
  }
  return r;
}

/* ---- the updates: SGD and Adam/AdamW side by side --------------------- */

dl_optim_coeffs dl_optim_coeffs_for(const dl_optim_desc *d, float lr, int64_t step) {
  dl_optim_coeffs c = {.adam = d->kind != DL_OPTIM_SGD,
                       .use_wd = d->weight_decay != 0.0,
                       .wd = (float)d->weight_decay};
  if (!c.adam) { /* torch's _single_tensor_sgd */
    c.use_mom = d->momentum != 0.0;
    c.nesterov = d->nesterov;
    c.first = step == 1;
    c.mom = (float)d->momentum;
    c.keep = (float)(1.0 - d->dampening);
    c.neg_lr = -lr;
    return c;
  }
  /* torch's _single_tensor_adam / _single_tensor_adamw (not capturable, no
   * amsgrad) */
  double bc1 = 1.0 - pow_int(d->beta1, step), bc2 = 1.0 - pow_int(d->beta2, step);
  c.decoupled = d->kind == DL_OPTIM_ADAMW;
  c.shrink = (float)(1.0 - (double)lr * d->weight_decay);
  c.b1 = (float)d->beta1;
  c.b2 = (float)d->beta2;
  c.keep1 = (float)(1.0 - d->beta1);
  c.keep2 = (float)(1.0 - d->beta2);
  c.bc2_sqrt = (float)sqrt(bc2);
  c.eps = (float)d->eps;
  c.neg_step_size = (float)(-((double)lr / bc1));
  return c;
}

/* One param's part of a step: its scalars and tensors, and where its
 * elements start in the step's one index over every part, so that a single
 * parallel job covers all params (small ones included) at once. */
struct update_part {
  dl_optim_coeffs c;
  optim_slot *slot;
  int64_t step; /* the count after this step */
  int64_t first, n;
  float *w, *g, *b0, *b1;
};

typedef struct update_job {
  const update_part *parts;
  int nparts;
  bool avx512;
} update_job;

static void update_scalar(const update_part *p, int64_t lo, int64_t hi) {
  const dl_optim_coeffs k = p->c; /* a local: stores to w cannot alias it */
  float *w = p->w, *g = p->g, *b0 = p->b0, *b1 = p->b1;
  if (k.adam)
    for (int64_t i = lo; i < hi; i++) dl_adam_elem(&k, i, w, g, b0, b1);
  else
    for (int64_t i = lo; i < hi; i++) dl_sgd_elem(&k, i, w, g, b0);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* dl_adam_elem and dl_sgd_elem on 16 lanes: the same float32 operations in
 * the same order. IEEE mul, add, div and sqrt round alike in any register
 * width, and no FMA is named (the build keeps -ffp-contract=off), so every
 * lane has the scalar code's bits. Lanes past hi are loaded as 0 and never
 * stored. */
#define OPTIM_AVX512 __attribute__((target("avx512f")))

static OPTIM_AVX512 void adam_avx512(const dl_optim_coeffs *c, int64_t lo, int64_t hi, float *w,
                                     const float *g, float *m, float *v) {
  const __m512 shrink = _mm512_set1_ps(c->shrink), wd = _mm512_set1_ps(c->wd);
  const __m512 b1 = _mm512_set1_ps(c->b1), b2 = _mm512_set1_ps(c->b2);
  const __m512 keep1 = _mm512_set1_ps(c->keep1), keep2 = _mm512_set1_ps(c->keep2);
  const __m512 bc2_sqrt = _mm512_set1_ps(c->bc2_sqrt), eps = _mm512_set1_ps(c->eps);
  const __m512 neg_step = _mm512_set1_ps(c->neg_step_size);
  for (int64_t i = lo; i < hi; i += 16) {
    __mmask16 k = dl_first_lanes16(hi - i);
    __m512 wi = _mm512_maskz_loadu_ps(k, w + i), gi = _mm512_maskz_loadu_ps(k, g + i);
    if (c->decoupled) wi = _mm512_mul_ps(wi, shrink);
    else if (c->use_wd) gi = _mm512_add_ps(gi, _mm512_mul_ps(wd, wi));
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, m + i), b1),
                              _mm512_mul_ps(keep1, gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + i), b2),
                              _mm512_mul_ps(_mm512_mul_ps(keep2, gi), gi));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2_sqrt), eps);
    wi = _mm512_add_ps(wi, _mm512_div_ps(_mm512_mul_ps(neg_step, mi), denom));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    _mm512_mask_storeu_ps(w + i, k, wi);
  }
}

static OPTIM_AVX512 void sgd_avx512(const dl_optim_coeffs *c, int64_t lo, int64_t hi, float *w,
                                    const float *g, float *buf) {
  const __m512 wd = _mm512_set1_ps(c->wd), mom = _mm512_set1_ps(c->mom);
  const __m512 keep = _mm512_set1_ps(c->keep), neg_lr = _mm512_set1_ps(c->neg_lr);
  for (int64_t i = lo; i < hi; i += 16) {
    __mmask16 k = dl_first_lanes16(hi - i);
    __m512 wi = _mm512_maskz_loadu_ps(k, w + i), dp = _mm512_maskz_loadu_ps(k, g + i);
    if (c->use_wd) dp = _mm512_add_ps(dp, _mm512_mul_ps(wd, wi));
    if (c->use_mom) {
      __m512 bi = c->first ? dp
                           : _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, buf + i), mom),
                                           _mm512_mul_ps(keep, dp));
      _mm512_mask_storeu_ps(buf + i, k, bi);
      dp = c->nesterov ? _mm512_add_ps(dp, _mm512_mul_ps(mom, bi)) : bi;
    }
    _mm512_mask_storeu_ps(w + i, k, _mm512_add_ps(wi, _mm512_mul_ps(neg_lr, dp)));
  }
}

static void update_lanes(const update_part *p, int64_t lo, int64_t hi) {
  if (p->c.adam) adam_avx512(&p->c, lo, hi, p->w, p->g, p->b0, p->b1);
  else sgd_avx512(&p->c, lo, hi, p->w, p->g, p->b0);
}
#else
static void update_lanes(const update_part *p, int64_t lo, int64_t hi) { update_scalar(p, lo, hi); }
#endif

/* The last part starting at or before index i (parts are in index order;
 * an empty one covers no index). */
static int part_at(const update_job *j, int64_t i) {
  int lo = 0, hi = j->nparts - 1;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (j->parts[mid].first <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* Indices [begin, end) of the step's flat index, part by part; elements are
 * independent, so threads may split them anywhere. */
static void update_range(void *ctx, int64_t begin, int64_t end) {
  const update_job *j = ctx;
  for (int k = part_at(j, begin); k < j->nparts && j->parts[k].first < end; k++) {
    const update_part *p = &j->parts[k];
    int64_t lo = (begin > p->first ? begin : p->first) - p->first;
    int64_t hi = (end < p->first + p->n ? end : p->first + p->n) - p->first;
    if (j->avx512) update_lanes(p, lo, hi);
    else update_scalar(p, lo, hi);
  }
}

enum { UPDATE_GRAIN = 16384 };

/* The step count before this step, refusing one that a checkpoint filled
 * with something that is not a step count. */
static dl_status read_step(const optim_slot *s, int64_t *step) {
  float now = dl_f32(&s->step)[0];
  if (!(now >= 0.0f && now < 16777216.0f && floorf(now) == now))
    return dl_fail(DL_ERR_INVALID,
                   "optimizer: %s is %g, not a step count in [0, 2^24); was the "
                   "checkpoint written by another optimizer?",
                   s->names[s->step_index], (double)now);
  *step = (int64_t)now;
  return DL_OK;
}

/* The parts of this step, one per param with in_optimizer and a gradient;
 * a bad step count refuses the step before anything is updated. */
static dl_status plan_step(dl_optim *o, float lr, int *nparts, int64_t *total) {
  *nparts = 0;
  *total = 0;
  for (int i = 0; i < o->n; i++) {
    optim_slot *s = &o->slots[i];
    if (!s->param->in_optimizer || !s->param->has_grad) continue;
    int64_t step = 0;
    DL_TRY(read_step(s, &step));
    dl_param *p = s->param;
    o->parts[(*nparts)++] = (update_part){.c = dl_optim_coeffs_for(&o->desc, lr, step + 1),
                                          .slot = s,
                                          .step = step + 1,
                                          .first = *total,
                                          .n = p->value.numel,
                                          .w = dl_f32(&p->value),
                                          .g = dl_f32(&p->grad),
                                          .b0 = dl_f32(&s->buf[0]),
                                          .b1 = dl_f32(&s->buf[1])};
    *total += p->value.numel;
  }
  return DL_OK;
}

static void count_step(const update_part *p) { dl_f32(&p->slot->step)[0] = (float)p->step; }

/* Param by param on a backend that runs optimizer steps; a failure stops
 * there, the params before it updated and counted. */
static dl_status step_on_backend(const dl_backend *b, const update_part *parts, int nparts) {
  for (int k = 0; k < nparts; k++) {
    const update_part *p = &parts[k];
    dl_status st = b->optim_step(b->impl, &p->c, p->n, p->w, p->g, p->b0, p->b1);
    if (st != DL_OK) return dl_fail_context(st, "optimizer step of %s: ", p->slot->param->name);
    count_step(p);
  }
  return DL_OK;
}

dl_status dl_optim_step(dl_optim *o, float lr) { return dl_optim_step_on(o, lr, NULL); }

dl_status dl_optim_step_on(dl_optim *o, float lr, const dl_backend *b) {
  if (!(lr >= 0.0f) || isinf(lr))
    return dl_fail(DL_ERR_INVALID, "optimizer %s: learning rate %g must be finite and >= 0",
                   dl_optim_kind_name(o->desc.kind), (double)lr);
  int nparts = 0;
  int64_t total = 0;
  DL_TRY(plan_step(o, lr, &nparts, &total));
  if (b && b->optim_step) return step_on_backend(b, o->parts, nparts);
  update_job j = {.parts = o->parts, .nparts = nparts, .avx512 = dl_cpu_has_avx512f()};
  dl_parallel_for(total, UPDATE_GRAIN, update_range, &j);
  for (int k = 0; k < nparts; k++) count_step(&o->parts[k]);
  return DL_OK;
}

void dl_optim_reset(dl_optim *o) {
  for (int i = 0; i < o->n; i++) {
    dl_tensor_zero(&o->slots[i].step);
    dl_tensor_zero(&o->slots[i].buf[0]);
    dl_tensor_zero(&o->slots[i].buf[1]);
  }
}

/* ---- creation and state ----------------------------------------------- */

static dl_status check_desc(const dl_optim_desc *d) {
  const char *k = dl_optim_kind_name(d->kind);
  if (d->kind != DL_OPTIM_SGD && d->kind != DL_OPTIM_ADAM && d->kind != DL_OPTIM_ADAMW)
    return dl_fail(DL_ERR_INVALID, "optimizer: unknown kind %d", (int)d->kind);
  if (!(d->weight_decay >= 0.0) || isinf(d->weight_decay))
    return dl_fail(DL_ERR_INVALID, "%s: weight_decay %g must be finite and >= 0", k,
                   d->weight_decay);
  if (d->kind == DL_OPTIM_SGD) {
    if (!(d->momentum >= 0.0) || isinf(d->momentum) || !(d->dampening >= 0.0) ||
        isinf(d->dampening))
      return dl_fail(DL_ERR_INVALID, "sgd: momentum %g and dampening %g must be finite and >= 0",
                     d->momentum, d->dampening);
    if (d->nesterov && (d->momentum <= 0.0 || d->dampening != 0.0))
      return dl_fail(DL_ERR_INVALID,
                     "sgd: nesterov needs momentum > 0 and dampening 0 (got momentum "
                     "%g, dampening %g)",
                     d->momentum, d->dampening);
    return DL_OK;
  }
  if (!(d->beta1 >= 0.0 && d->beta1 < 1.0) || !(d->beta2 >= 0.0 && d->beta2 < 1.0))
    return dl_fail(DL_ERR_INVALID, "%s: betas (%g, %g) must be in [0, 1)", k, d->beta1, d->beta2);
  if (!(d->eps >= 0.0) || isinf(d->eps))
    return dl_fail(DL_ERR_INVALID, "%s: eps %g must be finite and >= 0", k, d->eps);
  return DL_OK;
}

static dl_status check_params(dl_param *const *params, int n, int *owned) {
  if (n < 0 || (n > 0 && !params))
    return dl_fail(DL_ERR_INVALID, "optimizer: %d params at %p", n, (const void *)params);
  *owned = 0;
  for (int i = 0; i < n; i++) {
    const dl_param *p = params[i];
    if (!p) return dl_fail(DL_ERR_INVALID, "optimizer: param %d is NULL", i);
    if (!p->in_optimizer) continue;
    char a[96], b[96];
    if (p->value.dtype != DL_F32 || p->grad.dtype != DL_F32 ||
        !dl_tensor_same_shape(&p->value, &p->grad) || p->grad.numel != p->value.numel)
      return dl_fail(DL_ERR_INVALID,
                     "optimizer: param %s must be float32 with a grad of its shape; "
                     "value %s, grad %s",
                     p->name, dl_tensor_describe(&p->value, a, sizeof a),
                     dl_tensor_describe(&p->grad, b, sizeof b));
    for (int j = 0; j < i; j++)
      if (params[j] == p)
        return dl_fail(DL_ERR_INVALID, "optimizer: param %s is given twice (%d and %d)", p->name, j,
                       i);
    (*owned)++;
  }
  if (*owned == 0)
    return dl_fail(DL_ERR_INVALID,
                   "optimizer got an empty parameter list (%d params, none with "
                   "in_optimizer)",
                   n);
  return DL_OK;
}

/* Names and allocates one state tensor: 0-d, or shaped like the param. */
static dl_status add_state(optim_slot *s, dl_tensor *t, const char *what, bool scalar) {
  char *name = s->names[s->nstate];
  const dl_tensor *v = &s->param->value;
  snprintf(name, OPTIM_STATE_NAME_MAX, "state.%s.%s", s->param->name, what);
  s->state[s->nstate++] = t;
  return dl_tensor_alloc(t, DL_F32, scalar ? 0 : v->ndim, v->shape, name);
}

/* Allocates the state of one param, in checkpoint order. */
static dl_status slot_init(optim_slot *s, const dl_optim_desc *d, dl_param *p) {
  s->param = p;
  if (d->kind == DL_OPTIM_SGD) {
    if (d->momentum != 0.0) DL_TRY(add_state(s, &s->buf[0], "momentum_buffer", false));
    s->step_index = s->nstate;
    return add_state(s, &s->step, "step", true);
  }
  s->step_index = s->nstate;
  DL_TRY(add_state(s, &s->step, "step", true));
  DL_TRY(add_state(s, &s->buf[0], "exp_avg", false));
  return add_state(s, &s->buf[1], "exp_avg_sq", false);
}

dl_status dl_optim_create(dl_optim **out, const dl_optim_desc *d, dl_param *const *params, int n) {
  *out = NULL;
  int owned = 0;
  DL_TRY(check_desc(d));
  DL_TRY(check_params(params, n, &owned));
  dl_optim *o = dl_mem_alloc(sizeof *o, "optimizer");
  if (!o) return DL_ERR_NOMEM;
  o->desc = *d;
  o->slots = dl_mem_alloc((size_t)owned * sizeof *o->slots, "optimizer state");
  o->parts = dl_mem_alloc((size_t)owned * sizeof *o->parts, "optimizer step plan");
  if (!o->slots || !o->parts) {
    dl_mem_free(o->slots);
    dl_mem_free(o->parts);
    dl_mem_free(o);
    return DL_ERR_NOMEM;
  }
  for (int i = 0; i < n; i++) {
    if (!params[i]->in_optimizer) continue;
    dl_status s = slot_init(&o->slots[o->n++], d, params[i]);
    if (s != DL_OK) {
      dl_optim_destroy(o);
      return dl_fail_context(s, "%s optimizer: ", dl_optim_kind_name(d->kind));
    }
  }
  *out = o;
  return DL_OK;
}

void dl_optim_destroy(dl_optim *o) {
  if (!o) return;
  for (int i = 0; i < o->n; i++) {
    dl_tensor_free(&o->slots[i].step);
    dl_tensor_free(&o->slots[i].buf[0]);
    dl_tensor_free(&o->slots[i].buf[1]);
  }
  dl_mem_free(o->slots);
  dl_mem_free(o->parts);
  dl_mem_free(o);
}

const dl_optim_desc *dl_optim_get_desc(const dl_optim *o) { return &o->desc; }
int dl_optim_num_params(const dl_optim *o) { return o->n; }

int dl_optim_num_state(const dl_optim *o) { return o->n == 0 ? 0 : o->n * o->slots[0].nstate; }

dl_status dl_optim_state(dl_optim *o, int i, const char **name, dl_tensor **t) {
  int total = dl_optim_num_state(o);
  if (i < 0 || i >= total)
    return dl_fail(DL_ERR_INVALID, "optimizer state %d is outside [0, %d)", i, total);
  optim_slot *s = &o->slots[i / o->slots[0].nstate];
  int k = i % o->slots[0].nstate;
  *name = s->names[k];
  *t = s->state[k];
  return DL_OK;
}
