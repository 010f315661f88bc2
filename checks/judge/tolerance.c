#include "judge/tolerance.h"

#include "numerics/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dlc_tolerance dlc_tolerance_default(dl_dtype dt) {
  switch (dt) {
  case DL_F16: return (dlc_tolerance){DLC_TOL_CLOSE, 0, 1e-3, 1e-5};
  case DL_BF16: return (dlc_tolerance){DLC_TOL_CLOSE, 0, 1.6e-2, 1e-5};
  case DL_I32:
  case DL_I64: return dlc_tolerance_bitwise();
  case DL_F32: break;
  }
  return (dlc_tolerance){DLC_TOL_CLOSE, 0, 1.3e-6, 1e-5};
}

dlc_tolerance dlc_tolerance_bitwise(void) { return (dlc_tolerance){DLC_TOL_BITWISE, 0, 0, 0}; }

static const char *skip_space(const char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

/* Parses a number followed by `end` (with optional spaces); NULL on error. */
static const char *parse_number(const char *p, double *v, char end) {
  char *q;
  p = skip_space(p);
  *v = strtod(p, &q);
  if (q == p || !isfinite(*v) || *v < 0) return NULL;
  q = (char *)skip_space(q);
  return *q == end ? q + 1 : NULL;
}

/* "rtol=" / "atol=" before a number are optional, so that what
 * dlc_tolerance_describe writes parses back. */
static const char *skip_keyword(const char *p, const char *kw) {
  p = skip_space(p);
  size_t n = strlen(kw);
  const char *q = strncmp(p, kw, n) == 0 ? skip_space(p + n) : p;
  return *q == '=' ? q + 1 : p;
}

/* No two float32 values are 2^32 ULPs apart; a larger count would not fit
 * the int64 it is stored in either. */
static const double max_ulp = 4294967296.0;

dl_status dlc_tolerance_parse(const char *text, dlc_tolerance *out) {
  const char *p = skip_space(text);
  double a, b;
  if (strncmp(p, "bitwise", 7) == 0 && *skip_space(p + 7) == '\0') {
    *out = dlc_tolerance_bitwise();
    return DL_OK;
  }
  if (strncmp(p, "ulp(", 4) == 0 && (p = parse_number(p + 4, &a, ')')) && *skip_space(p) == '\0' &&
      a == floor(a) && a <= max_ulp) {
    *out = (dlc_tolerance){DLC_TOL_ULP, (int64_t)a, 0, 0};
    return DL_OK;
  }
  p = skip_space(text);
  if (strncmp(p, "close(", 6) == 0 && (p = parse_number(skip_keyword(p + 6, "rtol"), &a, ',')) &&
      (p = parse_number(skip_keyword(p, "atol"), &b, ')')) && *skip_space(p) == '\0') {
    *out = (dlc_tolerance){DLC_TOL_CLOSE, 0, a, b};
    return DL_OK;
  }
  return dl_fail(DL_ERR_INVALID,
                 "tolerance '%s': expected bitwise, ulp(N) or close(RTOL, ATOL) with "
                 "non-negative numbers",
                 text);
}

const char *dlc_tolerance_describe(const dlc_tolerance *t, char *buf, size_t len) {
  switch (t->kind) {
  case DLC_TOL_BITWISE: snprintf(buf, len, "bitwise"); break;
  case DLC_TOL_ULP: snprintf(buf, len, "ulp(%lld)", (long long)t->ulp); break;
  case DLC_TOL_CLOSE: snprintf(buf, len, "close(rtol=%.3g, atol=%.3g)", t->rtol, t->atol); break;
  }
  return buf;
}

/* Maps float bits to a monotonic integer line, so that the distance of two
 * finite floats is the number of floats between them. */
static int64_t ordered_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u;
}

uint64_t dlc_ulp_distance(float a, float b) {
  if (isnan(a) || isnan(b)) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y ? 0 : UINT64_MAX;
  }
  int64_t d = ordered_bits(a) - ordered_bits(b);
  return (uint64_t)(d < 0 ? -d : d);
}

typedef struct acc {
  dlc_diff d;
  const dlc_tolerance *t;
} acc;

static void add_pair(acc *s, int64_t i, double a, double b, uint64_t ulp, bool same_bits) {
  dlc_diff *d = &s->d;
  double abs_err = fabs(a - b);
  if (isnan(abs_err)) abs_err = same_bits ? 0 : INFINITY;
  double rel = b != 0 ? abs_err / fabs(b) : (abs_err == 0 ? 0 : INFINITY);
  if (abs_err > d->max_abs) d->max_abs = abs_err;
  if (rel > d->max_rel) d->max_rel = rel;
  if (ulp > d->max_ulp) d->max_ulp = ulp;
  bool ok;
  switch (s->t->kind) {
  case DLC_TOL_BITWISE: ok = same_bits; break;
  case DLC_TOL_ULP: ok = ulp <= (uint64_t)s->t->ulp; break;
  default:
    ok = same_bits || (a == b) ||
         (isfinite(a) && isfinite(b) && abs_err <= s->t->atol + s->t->rtol * fabs(b));
  }
  if (ok) return;
  if (d->nbad++ == 0) {
    d->first_bad = i;
    d->a_at_first = a;
    d->b_at_first = b;
  }
}

static acc acc_start(int64_t n, const dlc_tolerance *t) {
  return (acc){.d = {.ok = true, .n = n, .first_bad = -1}, .t = t};
}

static dlc_diff acc_end(acc *s) {
  s->d.ok = s->d.nbad == 0;
  return s->d;
}

dlc_diff dlc_compare_f32(const float *a, const float *b, int64_t n, const dlc_tolerance *t) {
  acc s = acc_start(n, t);
  for (int64_t i = 0; i < n; i++)
    add_pair(&s, i, a[i], b[i], dlc_ulp_distance(a[i], b[i]), memcmp(&a[i], &b[i], sizeof *a) == 0);
  return acc_end(&s);
}

dlc_diff dlc_compare_f64(const double *a, const double *b, int64_t n, const dlc_tolerance *t) {
  acc s = acc_start(n, t);
  for (int64_t i = 0; i < n; i++)
    add_pair(&s, i, a[i], b[i], dlc_ulp_distance((float)a[i], (float)b[i]),
             memcmp(&a[i], &b[i], sizeof *a) == 0);
  return acc_end(&s);
}

/* float16/bfloat16 storage: the values compare as float32 under the rule;
 * ULPs count steps of the storage format, so ulp(n) allows n representable
 * half values between them (float32 ULPs would be 2^13 or 2^16 apart). */
static int64_t ordered_half(uint16_t h) {
  return (h & 0x8000u) ? -(int64_t)(h & 0x7fffu) : (int64_t)h;
}

static dlc_diff compare_half(const dl_tensor *a, const dl_tensor *b, const dlc_tolerance *t) {
  acc s = acc_start(a->numel, t);
  const uint16_t *ha = a->data, *hb = b->data;
  bool brain = a->dtype == DL_BF16;
  for (int64_t i = 0; i < a->numel; i++) {
    float fa = brain ? dl_bf16_to_f32(ha[i]) : dl_f16_to_f32(ha[i]);
    float fb = brain ? dl_bf16_to_f32(hb[i]) : dl_f16_to_f32(hb[i]);
    int64_t d = ordered_half(ha[i]) - ordered_half(hb[i]);
    uint64_t ulp = isnan(fa) || isnan(fb) ? (ha[i] == hb[i] ? 0 : UINT64_MAX)
                                          : (uint64_t)(d < 0 ? -d : d);
    add_pair(&s, i, fa, fb, ulp, ha[i] == hb[i]);
  }
  return acc_end(&s);
}

dlc_diff dlc_compare_tensors(const dl_tensor *a, const dl_tensor *b, const dlc_tolerance *t) {
  if (a->dtype != b->dtype || !dl_tensor_same_shape(a, b))
    return (dlc_diff){.ok = false, .n = -1, .first_bad = -1};
  if (a->dtype == DL_F32) return dlc_compare_f32(dl_f32(a), dl_f32(b), a->numel, t);
  if (a->dtype == DL_F16 || a->dtype == DL_BF16) return compare_half(a, b, t);
  acc s = acc_start(a->numel, t);
  size_t sz = dl_dtype_size(a->dtype);
  dlc_tolerance exact = dlc_tolerance_bitwise();
  s.t = &exact; /* integers compare exactly */
  for (int64_t i = 0; i < a->numel; i++) {
    const char *pa = (const char *)a->data + (size_t)i * sz,
               *pb = (const char *)b->data + (size_t)i * sz;
    bool same = memcmp(pa, pb, sz) == 0;
    double va = a->dtype == DL_I64 ? (double)*(const int64_t *)pa : (double)*(const int32_t *)pa;
    double vb = a->dtype == DL_I64 ? (double)*(const int64_t *)pb : (double)*(const int32_t *)pb;
    add_pair(&s, i, va, vb, same ? 0 : 1, same);
  }
  return acc_end(&s);
}

const char *dlc_diff_describe(const dlc_diff *d, const dlc_tolerance *t, char *buf, size_t len) {
  char tol[64];
  dlc_tolerance_describe(t, tol, sizeof tol);
  if (d->n < 0) {
    snprintf(buf, len, "shapes or dtypes differ");
    return buf;
  }
  int k = snprintf(buf, len, "max abs %.3g, max rel %.3g, %llu ulp", d->max_abs, d->max_rel,
                   (unsigned long long)d->max_ulp);
  if (d->ok || k < 0 || (size_t)k >= len) {
    if (d->ok && k >= 0 && (size_t)k < len) snprintf(buf + k, len - (size_t)k, ", within %s", tol);
    return buf;
  }
  snprintf(buf + k, len - (size_t)k,
           "; %lld of %lld elements outside %s, first at [%lld]: %.9g vs %.9g", (long long)d->nbad,
           (long long)d->n, tol, (long long)d->first_bad, d->a_at_first, d->b_at_first);
  return buf;
}

double dlc_ulp32(double m) {
  float f = fabsf((float)m);
  if (f == 0.0f || !isfinite(f)) return 0;
  return (double)nextafterf(f, INFINITY) - (double)f;
}

double dlc_max_magnitude(const dl_tensor *t) {
  double m = 0;
  for (int64_t i = 0; t->dtype == DL_F32 && i < t->numel; i++) m = fmax(m, fabs(dl_f32(t)[i]));
  return m;
}
