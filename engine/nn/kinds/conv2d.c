/* Conv2d, NCHW, square kernel, stride, zero padding, as im2col + dl_sgemm,
 * or as the context's backend's convolutions (backend.h), bias on the CPU.
 *
 * Per sample n, col_n [R, P] holds the input patches (R = C*k*k patch rows,
 * P = Ho*Wo pixels), and
 *   forward  y_n [O, P] = W [O, R] @ col_n, the accumulator starting at b
 *   dx       dx_n = col2im(W^T @ dy_n), patch rows added in order
 *   dW       dW^T [R, O] = sum over n, in order, of col_n @ dy_n^T
 *   db       one more row of dW^T, from a patch row of ones
 * Each dW element is one sum over samples then pixels, as one GEMM over the
 * whole batch's columns would make it (the products are the same fmaf
 * either side of the transpose). dW^T rather than dW: R (144 = 16*9, 9*8)
 * and O fill the GEMM's 8-row panels and 32-wide columns better.
 * Same-size convolutions under AVX-512 (packs_patches) skip col: their
 * patches go straight into the GEMM's packed panels (dl_sgemm_packed_b),
 * as col_n for the forward and as col_n^T for dW = dy_n @ col_n^T (dy_n
 * read in place, db from a column of ones), and col2im gathers each input
 * pixel's sum in registers; the same products in the same order.
 *
 * Threads: forward and dx cut the batch into a few slices of samples per
 * thread, each with its own col buffer (it stays in cache); dW cuts the
 * patch rows into one part per thread, each part running through every
 * sample in order and im2col-ing only its rows. Whatever the cut, every
 * element is summed in the same order: bitwise the same for any thread
 * count.
 *
 * AMP emulation: x (through col), W and b are rounded to half, and so are
 * y, dy, dx, dW and db, as for Linear. */
#include "nn/kinds/kinds.h"

#include "numerics/cpu.h"
#include "backend/cpu/sgemm.h"
#include "numerics/half.h"
#include "core/mem.h"
#include "numerics/philox.h"
#include "numerics/transpose16.h"
#include "core/threads.h"

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
  dl_layer_init_uniform(l, seed, bound);
  return DL_OK;
}

/* Same-size patch rows under AVX-512 masks (below): up to this many
 * pixels (longer rows copy faster as one memcpy run, conv1 of a 28x28
 * image) and kernel offsets (7x7), 16 pixels a mask. */
enum { MASKED_MAX_PIXELS = 256, MASKED_MAX_SHIFTS = 49, MASK_BLOCKS = MASKED_MAX_PIXELS / 16 };
/* col2im's blocks of 16 pixels gathered together (MASK_BLOCKS a multiple). */
enum { GATHER_BLOCKS = 4 };

typedef struct conv_geom {
  int64_t n, c, h, w, o, oh, ow;
  int64_t k, stride, pad;
  int64_t rows;   /* C*k*k: rows of col, columns of W */
  int64_t pixels; /* Ho*Wo: columns of col */
  bool masked;    /* same-size patch rows with AVX-512 masks */
  /* masked: bit t of valid[s][b] is whether pixel 16b + t is inside the
   * plane for kernel offset s = ki*k + kj, the same for every channel;
   * bit t of landing[s][b] whether input pixel 16b + t is one (pixel
   * 16b + t - shift of offset s), so that col2im can gather */
  uint16_t valid[MASKED_MAX_SHIFTS][MASK_BLOCKS];
  uint16_t landing[MASKED_MAX_SHIFTS][MASK_BLOCKS];
  int64_t shift[MASKED_MAX_SHIFTS]; /* dh*W + dw of offset s */
  int64_t nr;                       /* masked: dl_sgemm_packed_b's panel width, a multiple of 16 */
} conv_geom;

static bool same_size(const conv_geom *g);
static int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }
static bool masked_rows_available(const conv_geom *g);
static void valid_lane_masks(conv_geom *g);

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
  g->nr = dl_sgemm_panel_width();
  g->masked = same_size(g) && masked_rows_available(g);
  if (g->masked) valid_lane_masks(g);
  return DL_OK;
}

/* ---- im2col and col2im, one patch row at a time ---- */

/* Patch row r reads channel c at offset (ki - pad, kj - pad) from each
 * output pixel (times the stride). */
typedef struct patch_row {
  int64_t c, dh, dw;
  int64_t lo, hi;      /* output columns ow whose input column is inside [0, W) */
  int64_t top, bottom; /* the same for output rows oh, stride 1 only */
} patch_row;

static patch_row patch_row_of(const conv_geom *g, int64_t r) {
  patch_row p = {.c = r / (g->k * g->k), .dh = r / g->k % g->k - g->pad, .dw = r % g->k - g->pad};
  p.lo = p.dw >= 0 ? 0 : (-p.dw + g->stride - 1) / g->stride;
  p.hi = p.dw >= g->w ? 0 : (g->w - 1 - p.dw) / g->stride + 1;
  if (p.hi > g->ow) p.hi = g->ow;
  if (p.lo > p.hi) p.lo = p.hi;
  p.top = p.dh < 0 ? -p.dh : 0;
  p.bottom = p.dh > 0 ? g->h - p.dh : g->h;
  if (p.bottom > g->oh) p.bottom = g->oh;
  if (p.top > p.bottom) p.top = p.bottom;
  return p;
}

/* Stride 1 with output size = input size ("same" padding): a patch row is
 * the channel plane shifted by dh*W + dw, so it is copied (or added) as
 * one run from its first to its last valid pixel. The run also covers the
 * invalid columns of the rows in between, which then take in pixels of the
 * neighbouring row: im2col zeroes them afterwards, col2im beforehand. */
static bool same_size(const conv_geom *g) {
  return g->stride == 1 && g->ow == g->w && g->oh == g->h;
}

/* The run [first, last) of valid pixels of p in the output plane. */
static void same_size_run(const conv_geom *g, const patch_row *p, int64_t *first, int64_t *last) {
  *first = p->top * g->w + p->lo;
  *last = p->top < p->bottom && p->lo < p->hi ? (p->bottom - 1) * g->w + p->hi : *first;
}

static void zero_invalid_columns(const conv_geom *g, const patch_row *p, float *row) {
  for (int64_t oh = p->top; oh < p->bottom; oh++) {
    for (int64_t ow = 0; ow < p->lo; ow++) row[oh * g->w + ow] = 0.0f;
    for (int64_t ow = p->hi; ow < g->w; ow++) row[oh * g->w + ow] = 0.0f;
  }
}

/* Short runs (an output row, often < 32 floats) in fixed blocks of eight
 * and four, which -O2 vectorizes where a plain loop stays scalar (or
 * becomes a memmove call that costs more than the copy). */
enum { ROW_BLOCK = 8 };

static inline void copy_run(float *restrict dst, const float *restrict src, int64_t n) {
  int64_t i = 0;
  for (; i + ROW_BLOCK <= n; i += ROW_BLOCK) memcpy(dst + i, src + i, sizeof(float[ROW_BLOCK]));
  for (; i + ROW_BLOCK / 2 <= n; i += ROW_BLOCK / 2)
    memcpy(dst + i, src + i, sizeof(float[ROW_BLOCK / 2]));
  for (; i < n; i++) dst[i] = src[i];
}

static inline void add_run(float *restrict dst, const float *restrict src, int64_t n) {
  int64_t i = 0;
  for (; i + ROW_BLOCK <= n; i += ROW_BLOCK)
    for (int t = 0; t < ROW_BLOCK; t++) dst[i + t] += src[i + t];
  for (; i + ROW_BLOCK / 2 <= n; i += ROW_BLOCK / 2)
    for (int t = 0; t < ROW_BLOCK / 2; t++) dst[i + t] += src[i + t];
  for (; i < n; i++) dst[i] += src[i];
}

/* ---- same-size patch rows, 16 pixels at a time under AVX-512 masks ----
 *
 * A lane is valid when its pixel's row is in [top, bottom) and its column
 * in [lo, hi): im2col loads it from the shifted plane (zero elsewhere),
 * col2im adds it there. Masked-off lanes are never read or written, so
 * the shift may point outside the plane. The same values in the same
 * order as the scalar runs: im2col copies, and col2im adds each valid
 * pixel once per patch row, rows in order (and no padding zeros at all).
 * Chosen with dl_sgemm's ISA, so that tests forcing the portable GEMM
 * also run the scalar runs. */

static void valid_lane_masks(conv_geom *g) {
  memset(g->landing, 0, sizeof g->landing);
  for (int64_t s = 0; s < g->k * g->k; s++) {
    const patch_row p = patch_row_of(g, s); /* channel 0 at offset s */
    g->shift[s] = p.dh * g->w + p.dw;
    for (int64_t b = 0; b < MASK_BLOCKS; b++) {
      uint16_t m = 0;
      for (int64_t t = 0; t < 16; t++) {
        const int64_t i = 16 * b + t, oh = i / g->w, ow = i % g->w;
        if (i >= g->pixels || oh < p.top || oh >= p.bottom || ow < p.lo || ow >= p.hi) continue;
        m |= (uint16_t)(1u << t);
        const int64_t q = i + g->shift[s]; /* inside the plane, as i is valid */
        g->landing[s][q / 16] |= (uint16_t)(1u << (q % 16));
      }
      g->valid[s][b] = m;
    }
  }
}

static const uint16_t *valid_lanes_of(const conv_geom *g, int64_t r) {
  return g->valid[r % (g->k * g->k)];
}

/* plane + i + shift as an address: the lanes read are inside the plane,
 * the pointer to the first lane need not be. */
static inline uintptr_t shifted(const float *plane, int64_t i, const patch_row *p,
                                const conv_geom *g) {
  return (uintptr_t)plane + (uintptr_t)((i + p->dh * g->w + p->dw) * (int64_t)sizeof(float));
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define DL_AVX512 __attribute__((target("avx512f")))

static bool masked_rows_available(const conv_geom *g) {
  return round_up(g->pixels, g->nr) <= MASKED_MAX_PIXELS && g->k * g->k <= MASKED_MAX_SHIFTS &&
         g->nr % 16 == 0 && strcmp(dl_gemm_isa_name(), "avx512") == 0;
}

static inline __mmask16 lanes_inside(int64_t left) {
  return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

DL_AVX512 static void im2col_row_masked(const conv_geom *g, const patch_row *p,
                                        const uint16_t *valid, const float *plane, float *dst) {
  for (int64_t i = 0, b = 0; i < g->pixels; i += 16, b++) {
    const __m512 v = _mm512_maskz_loadu_ps(valid[b], (const void *)shifted(plane, i, p, g));
    _mm512_mask_storeu_ps(dst + i, lanes_inside(g->pixels - i), v);
  }
}

/* plane := the sum over kernel offsets s, in order, of patch row s of
 * dcol (the channel's k*k rows) shifted back into the plane: each input
 * pixel gathers, 16 in a register from +0, what lands on it, and is
 * stored once, so the plane needs no zeroing and no pass per row. The
 * same sums as adding the rows in order into a zeroed plane. */
DL_AVX512 static void col2im_plane_masked(const conv_geom *g, const float *dcol, float *plane) {
  const int64_t shifts = g->k * g->k;
  uintptr_t from[MASKED_MAX_SHIFTS]; /* row s minus its shift: where input pixel 0 reads */
  for (int64_t s = 0; s < shifts; s++)
    from[s] = (uintptr_t)(dcol + s * g->pixels) - (uintptr_t)g->shift[s] * sizeof(float);
  /* Four blocks at a time, four chains of adds in flight; the table's
   * blocks past the plane land nothing. */
  for (int64_t b0 = 0; 16 * b0 < g->pixels; b0 += GATHER_BLOCKS) {
    __m512 sum[GATHER_BLOCKS];
#pragma GCC unroll 4
    for (int j = 0; j < GATHER_BLOCKS; j++) sum[j] = _mm512_setzero_ps();
    for (int64_t s = 0; s < shifts; s++) {
#pragma GCC unroll 4
      for (int j = 0; j < GATHER_BLOCKS; j++) {
        const __mmask16 lands = g->landing[s][b0 + j];
        const void *at = (const void *)(from[s] + (uintptr_t)(16 * (b0 + j)) * sizeof(float));
        sum[j] = _mm512_mask_add_ps(sum[j], lands, sum[j], _mm512_maskz_loadu_ps(lands, at));
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < GATHER_BLOCKS; j++) {
      const int64_t i = 16 * (b0 + j);
      if (i < g->pixels) _mm512_mask_storeu_ps(plane + i, lanes_inside(g->pixels - i), sum[j]);
    }
  }
}

/* Where patch row r reads its plane: channel r / (k*k) of x, shifted. */
static inline uintptr_t patch_source(const conv_geom *g, const float *x, int64_t r) {
  const int64_t shifts = g->k * g->k;
  return (uintptr_t)(x + r / shifts * g->h * g->w) +
         (uintptr_t)g->shift[r % shifts] * sizeof(float);
}

/* col_n [rows, P] in dl_sgemm_packed_b's panels, patches straight from x:
 * row r's pixels 16b.. go to panel 16b / nr, row r. Invalid lanes, and
 * the blocks past the pixels up to the last panel's end, are zeros. */
DL_AVX512 static void pack_patch_rows(const conv_geom *g, const float *x, float *out) {
  const int64_t blocks = round_up(g->pixels, g->nr) / 16, shifts = g->k * g->k;
  int64_t at[MASK_BLOCKS]; /* where block b of row 0 goes */
  for (int64_t b = 0; b < blocks; b++) at[b] = 16 * b / g->nr * g->nr * g->rows + 16 * b % g->nr;
  for (int64_t r = 0; r < g->rows; r++, out += g->nr) {
    const uintptr_t from = patch_source(g, x, r);
    const uint16_t *valid = g->valid[r % shifts];
    for (int64_t b = 0; b < blocks; b++) {
      const void *in = (const void *)(from + (uintptr_t)(16 * b) * sizeof(float));
      _mm512_storeu_ps(out + at[b], _mm512_maskz_loadu_ps(valid[b], in));
    }
  }
}

/* col_n^T [P, r1 - r0] of patch rows [r0, r1) in the panels: blocks of 16
 * rows by 16 pixels loaded as im2col would and transposed in registers.
 * Row `rows`, when asked for, is ones (db, as in sample_rows); columns
 * past r1 - r0, up to the last panel's end, are zeros. */
DL_AVX512 static void pack_patch_columns(const conv_geom *g, const float *x, int64_t r0, int64_t r1,
                                         float *out) {
  const int64_t shifts = g->k * g->k;
  for (int64_t j0 = 0; j0 < round_up(r1 - r0, g->nr); j0 += 16) {
    uintptr_t from[16];
    const uint16_t *valid[16];
    int rows = 0;
    for (; rows < 16 && r0 + j0 + rows < r1 && r0 + j0 + rows < g->rows; rows++) {
      from[rows] = patch_source(g, x, r0 + j0 + rows);
      valid[rows] = g->valid[(r0 + j0 + rows) % shifts];
    }
    const bool ones = rows < 16 && r0 + j0 + rows < r1; /* row `rows` of col */
    float *dst = out + j0 / g->nr * g->nr * g->pixels + j0 % g->nr;
    for (int64_t i = 0, b = 0; i < g->pixels; i += 16, b++) {
      __m512 v[16];
#pragma GCC unroll 16
      for (int t = 0; t < 16; t++)
        v[t] = t < rows
                   ? _mm512_maskz_loadu_ps(valid[t][b],
                                           (const void *)(from[t] + (uintptr_t)i * sizeof(float)))
               : t == rows && ones ? _mm512_set1_ps(1.0f)
                                   : _mm512_setzero_ps();
      dl_transpose16(v);
      const int64_t pixels = g->pixels - i < 16 ? g->pixels - i : 16;
      for (int64_t t = 0; t < pixels; t++) _mm512_storeu_ps(dst + (i + t) * g->nr, v[t]);
    }
  }
}
#else
static bool masked_rows_available(const conv_geom *g) {
  (void)g;
  return false;
}
static void pack_patch_rows(const conv_geom *g, const float *x, float *out) {
  (void)g, (void)x, (void)out;
}
static void pack_patch_columns(const conv_geom *g, const float *x, int64_t r0, int64_t r1,
                               float *out) {
  (void)g, (void)x, (void)r0, (void)r1, (void)out;
}
static void im2col_row_masked(const conv_geom *g, const patch_row *p, const uint16_t *valid,
                              const float *plane, float *dst) {
  (void)g, (void)p, (void)valid, (void)plane, (void)dst;
}
static void col2im_plane_masked(const conv_geom *g, const float *dcol, float *plane) {
  (void)g, (void)dcol, (void)plane;
}
#endif

/* dst [P] := patch row r of sample x. */
static void im2col_row(const conv_geom *g, const float *restrict x, int64_t r,
                       float *restrict dst) {
  const patch_row p = patch_row_of(g, r);
  const float *plane = x + p.c * g->h * g->w;
  if (g->masked) {
    im2col_row_masked(g, &p, valid_lanes_of(g, r), plane, dst);
    return;
  }
  if (same_size(g)) {
    int64_t first, last;
    same_size_run(g, &p, &first, &last);
    memset(dst, 0, (size_t)first * sizeof *dst);
    memcpy(dst + first, plane + first + p.dh * g->w + p.dw, (size_t)(last - first) * sizeof *dst);
    memset(dst + last, 0, (size_t)(g->pixels - last) * sizeof *dst);
    zero_invalid_columns(g, &p, dst);
    return;
  }
  for (int64_t oh = 0; oh < g->oh; oh++, dst += g->ow) {
    const int64_t ih = oh * g->stride + p.dh;
    if (ih < 0 || ih >= g->h) {
      memset(dst, 0, (size_t)g->ow * sizeof *dst);
      continue;
    }
    const float *src = plane + ih * g->w + p.dw;
    for (int64_t ow = 0; ow < p.lo; ow++) dst[ow] = 0.0f;
    if (g->stride == 1) copy_run(dst + p.lo, src + p.lo, p.hi - p.lo);
    else
      for (int64_t ow = p.lo; ow < p.hi; ow++) dst[ow] = src[ow * g->stride];
    for (int64_t ow = p.hi; ow < g->ow; ow++) dst[ow] = 0.0f;
  }
}

/* dx_n += patch row r of dcol, pixels in order. Clobbers the row's invalid
 * columns (same size): adding their zeros leaves dx bitwise unchanged, as
 * dx, a sum begun at +0, is never -0. */
static void col2im_row(const conv_geom *g, float *restrict row, int64_t r, float *restrict dx) {
  const patch_row p = patch_row_of(g, r);
  float *plane = dx + p.c * g->h * g->w;
  if (same_size(g)) {
    int64_t first, last;
    same_size_run(g, &p, &first, &last);
    zero_invalid_columns(g, &p, row);
    add_run(plane + first + p.dh * g->w + p.dw, row + first, last - first);
    return;
  }
  for (int64_t oh = 0; oh < g->oh; oh++, row += g->ow) {
    const int64_t ih = oh * g->stride + p.dh;
    if (ih < 0 || ih >= g->h) continue;
    float *dst = plane + ih * g->w + p.dw;
    if (g->stride == 1) add_run(dst + p.lo, row + p.lo, p.hi - p.lo);
    else
      for (int64_t ow = p.lo; ow < p.hi; ow++) dst[ow * g->stride] += row[ow];
  }
}

/* dx_n := col2im(dcol), a plane per channel. */
static void col2im(const conv_geom *g, float *dcol, float *dx) {
  const int64_t plane = g->h * g->w, shifts = g->k * g->k;
  if (g->masked) {
    for (int64_t c = 0; c < g->c; c++)
      col2im_plane_masked(g, dcol + c * shifts * g->pixels, dx + c * plane);
    return;
  }
  memset(dx, 0, (size_t)(g->c * plane) * sizeof *dx);
  for (int64_t r = 0; r < g->rows; r++) col2im_row(g, dcol + r * g->pixels, r, dx);
}

/* ---- the jobs ---- */

typedef struct conv_job {
  const conv_geom *g;
  int half;       /* autocast code for dl_round_inplace, 0 = off */
  const float *x; /* input */
  float *bufs;    /* nslots buffers of slot_floats: col, or the GEMM's panels */
  int64_t nslots, slot_floats;
  int64_t dw_rows; /* rows of dW^T (columns of dW): rows, and one of ones for db */
  const float *w;  /* possibly half-rounded weight */
  const float *wt; /* dx: w transposed, [rows, O] */
  const float *b;  /* possibly half-rounded bias, or NULL */
  float *y;        /* forward output */
  const float *dy; /* backward: possibly half-rounded output gradient */
  float *dx;
  float *dw;                 /* dW's sum (weight_grad): [O, dw_rows] when
                                packs_patches, else dW^T [dw_rows, O] */
  int64_t nparts;            /* dW: parts of the patch rows */
  const dl_backend *offload; /* runs the convolutions (backend.h), or NULL */
  dl_conv2d_shape shape;     /* the geometry as the backend takes it */
} conv_job;

/* A 1x1 convolution without stride or padding reads x directly. */
static bool col_is_input(const conv_job *j) {
  const conv_geom *g = j->g;
  return g->k == 1 && g->stride == 1 && g->pad == 0 && !j->half;
}

/* The masked geometries write their patches straight into the GEMM's
 * panels (pack_patch_rows, pack_patch_columns) instead of into col for the
 * GEMM to copy: forward y_n = W @ col_n, and dW as dy_n @ col_n^T, whose
 * A, dy_n, is read in place. */
static bool packs_patches(const conv_job *j) { return j->g->masked && !col_is_input(j); }

/* Floats of one slot's buffer: col and its row of ones, or the panels of
 * col or of col^T and its column of ones (pixels and columns rounded up to
 * whole panels). */
static int64_t slot_floats(const conv_job *j) {
  const conv_geom *g = j->g;
  if (!packs_patches(j)) return (g->rows + 1) * g->pixels;
  const int64_t col = g->rows * round_up(g->pixels, g->nr);
  const int64_t col_t = g->pixels * round_up(g->rows + 1, g->nr);
  return col > col_t ? col : col_t;
}

/* Slot (or dW part) i's buffer. */
static float *slot_buffer(const conv_job *j, int64_t i) { return j->bufs + i * j->slot_floats; }

/* Patch rows [r0, r1) of col_n in buf (or x_n itself), rounded to half
 * under autocast; row `rows`, when asked for, is ones. */
static const float *sample_rows(const conv_job *j, int64_t n, int64_t r0, int64_t r1, float *buf) {
  const conv_geom *g = j->g;
  const float *x = j->x + n * g->c * g->h * g->w;
  if (col_is_input(j)) return x + r0 * g->pixels;
  for (int64_t r = r0; r < r1 && r < g->rows; r++) im2col_row(g, x, r, buf + (r - r0) * g->pixels);
  for (int64_t q = 0; r1 > g->rows && q < g->pixels; q++)
    buf[(g->rows - r0) * g->pixels + q] = 1.0f;
  dl_round_inplace(buf, (r1 - r0) * g->pixels, j->half);
  return buf;
}

static void slot_range(const conv_job *j, int64_t slot, int64_t *begin, int64_t *end) {
  *begin = slot * j->g->n / j->nslots;
  *end = (slot + 1) * j->g->n / j->nslots;
}

DL_AVX512_CLONES static void conv_forward_slots(void *ctx, int64_t first, int64_t last) {
  const conv_job *j = ctx;
  const conv_geom *g = j->g;
  for (int64_t slot = first; slot < last; slot++) {
    float *buf = slot_buffer(j, slot);
    int64_t begin, end;
    slot_range(j, slot, &begin, &end);
    for (int64_t n = begin; n < end; n++) {
      float *y = j->y + n * g->o * g->pixels;
      /* The accumulator starts at the bias, as in Linear. */
      for (int64_t o = 0; j->b && o < g->o; o++)
        for (int64_t p = 0; p < g->pixels; p++) y[o * g->pixels + p] = j->b[o];
      const float beta = j->b ? 1.0f : 0.0f;
      if (packs_patches(j)) {
        pack_patch_rows(g, j->x + n * g->c * g->h * g->w, buf);
        dl_round_inplace(buf, g->rows * round_up(g->pixels, g->nr), j->half);
        dl_sgemm_packed_b(g->o, g->pixels, g->rows, j->w, g->rows, buf, (int)g->nr, beta, y,
                          g->pixels);
      } else {
        const float *col = sample_rows(j, n, 0, g->rows, buf);
        dl_sgemm(false, false, g->o, g->pixels, g->rows, j->w, g->rows, col, g->pixels, beta, y,
                 g->pixels);
      }
      dl_round_inplace(y, g->o * g->pixels, j->half);
    }
  }
}

DL_AVX512_CLONES static void conv_dx_slots(void *ctx, int64_t first, int64_t last) {
  const conv_job *j = ctx;
  const conv_geom *g = j->g;
  for (int64_t slot = first; slot < last; slot++) {
    float *dcol = slot_buffer(j, slot);
    int64_t begin, end;
    slot_range(j, slot, &begin, &end);
    for (int64_t n = begin; n < end; n++) {
      float *dx = j->dx + n * g->c * g->h * g->w;
      const float *dy = j->dy + n * g->o * g->pixels;
      if (col_is_input(j)) { /* col2im of a 1x1 conv is the identity */
        dl_sgemm(false, false, g->rows, g->pixels, g->o, j->wt, g->o, dy, g->pixels, 0.0f, dx,
                 g->pixels);
        continue;
      }
      dl_sgemm(false, false, g->rows, g->pixels, g->o, j->wt, g->o, dy, g->pixels, 0.0f, dcol,
               g->pixels);
      col2im(g, dcol, dx);
      dl_round_inplace(dx, g->c * g->h * g->w, j->half);
    }
  }
}

/* dW's parts of the patch rows: whole GEMM panels, of eight rows of dW^T
 * or (packs_patches) of nr columns of dW. */
enum { PART_ROWS = 8 };

static int64_t part_unit(const conv_job *j) { return packs_patches(j) ? j->g->nr : PART_ROWS; }

/* Part `part` of `total` patch rows. */
static void part_rows(const conv_job *j, int64_t part, int64_t total, int64_t *r0, int64_t *r1) {
  const int64_t unit = part_unit(j), units = (total + unit - 1) / unit;
  *r0 = part * units / j->nparts * unit;
  *r1 = (part + 1) * units / j->nparts * unit;
  if (*r1 > total) *r1 = total;
}

/* Patch rows [r0, r1) of dW for n in order (the first GEMM overwrites,
 * the others add): dW^T[r0:r1] = col_n[r0:r1] @ dy_n^T, or (packs_patches)
 * dW[:, r0:r1] = dy_n @ col_n^T[:, r0:r1] with col_n^T written straight
 * into the panels; the same products in the same order. */
DL_AVX512_CLONES static void conv_dw_parts(void *ctx, int64_t first, int64_t last) {
  const conv_job *j = ctx;
  const conv_geom *g = j->g;
  for (int64_t part = first; part < last; part++) {
    float *buf = slot_buffer(j, part);
    int64_t r0, r1;
    part_rows(j, part, j->dw_rows, &r0, &r1);
    for (int64_t n = 0; n < g->n && r0 < r1; n++) {
      const float *dy = j->dy + n * g->o * g->pixels;
      const float beta = n > 0 ? 1.0f : 0.0f;
      if (packs_patches(j)) {
        pack_patch_columns(g, j->x + n * g->c * g->h * g->w, r0, r1, buf);
        dl_round_inplace(buf, g->pixels * round_up(r1 - r0, g->nr), j->half);
        dl_sgemm_packed_b(g->o, r1 - r0, g->pixels, dy, g->pixels, buf, (int)g->nr, beta,
                          j->dw + r0, j->dw_rows);
        continue;
      }
      const float *col = sample_rows(j, n, r0, r1, buf);
      dl_sgemm(false, true, r1 - r0, g->o, g->pixels, col, g->pixels, dy, g->pixels, beta,
               j->dw + r0 * g->o, g->o);
    }
  }
}

/* A half-rounded copy of src under autocast; src itself otherwise. */
static dl_status amp_operand(int half, const dl_tensor *src, dl_tensor *copy, const float **out) {
  *out = dl_f32(src);
  if (!half) return DL_OK;
  DL_TRY(dl_tensor_clone(copy, src, "autocast operand"));
  dl_round_inplace(dl_f32(copy), copy->numel, half);
  *out = dl_f32(copy);
  return DL_OK;
}

/* Scratch of the job: col buffers, half-rounded weight/bias copies, the
 * transposed weight. */
typedef struct conv_scratch {
  dl_tensor bufs, w, b, x, wt;
} conv_scratch;

static void scratch_free(conv_scratch *s) {
  dl_tensor_free(&s->wt);
  dl_tensor_free(&s->x);
  dl_tensor_free(&s->bufs);
  dl_tensor_free(&s->w);
  dl_tensor_free(&s->b);
}

static dl_status job_prepare(dl_layer *l, const dl_ctx *ctx, const conv_geom *g, const dl_tensor *x,
                             conv_job *j, conv_scratch *s) {
  memset(j, 0, sizeof *j);
  j->g = g;
  j->half = (int)ctx->autocast;
  j->x = dl_f32(x);
  DL_TRY(amp_operand(j->half, &l->params[0].value, &s->w, &j->w));
  if (l->desc.bias) DL_TRY(amp_operand(j->half, &l->params[1].value, &s->b, &j->b));
  if (dl_backend_has_conv2d(ctx->backend)) {
    j->offload = ctx->backend;
    j->shape = (dl_conv2d_shape){.n = g->n,
                                 .c = g->c,
                                 .h = g->h,
                                 .w = g->w,
                                 .o = g->o,
                                 .k = g->k,
                                 .stride = g->stride,
                                 .pad = g->pad,
                                 .oh = g->oh,
                                 .ow = g->ow};
    /* The backend reads x itself: rounded on a copy under autocast. */
    return amp_operand(j->half, x, &s->x, &j->x);
  }
  /* A few slices per thread, so that one slowed by a busy core does not
   * hold the others up (as threads.c splits its ranges); dW parts, which
   * each repeat the packing of dy, one per thread. */
  const int threads = dl_get_num_threads();
  j->nslots = threads == 1 ? 1 : 4 * (int64_t)threads;
  if (j->nslots > g->n) j->nslots = g->n;
  if (j->nslots < 1) j->nslots = 1;
  const int64_t units = (g->rows + part_unit(j) - 1) / part_unit(j);
  j->nparts = threads < units ? threads : units;
  if (j->nparts > j->nslots) j->nparts = j->nslots;
  j->slot_floats = slot_floats(j);
  const int64_t shape[2] = {j->nslots, j->slot_floats};
  DL_TRY(dl_tensor_alloc_uninit(&s->bufs, DL_F32, 2, shape, "conv2d im2col"));
  j->bufs = dl_f32(&s->bufs);
  return DL_OK;
}

/* y = conv(x, w) on the backend, then the bias per channel (added after
 * the sum, as cuDNN's separate bias add does), rounded under autocast. */
static dl_status offload_forward(conv_job *j) {
  const conv_geom *g = j->g;
  DL_TRY(j->offload->conv2d_forward(j->offload->impl, &j->shape, j->x, j->w, j->y));
  for (int64_t n = 0; j->b && n < g->n; n++)
    for (int64_t o = 0; o < g->o; o++) {
      float *plane = j->y + (n * g->o + o) * g->pixels;
      for (int64_t p = 0; p < g->pixels; p++) plane[p] += j->b[o];
    }
  dl_round_inplace(j->y, g->n * g->o * g->pixels, j->half);
  return DL_OK;
}

static dl_status conv_forward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y) {
  conv_geom g;
  DL_TRY(conv_geometry(l, x, &g));
  const int64_t shape[4] = {g.n, g.o, g.oh, g.ow};
  DL_TRY(dl_tensor_alloc_uninit(y, DL_F32, 4, shape, "conv2d output"));
  conv_job j;
  conv_scratch s = {{0}, {0}, {0}, {0}, {0}};
  dl_status st = job_prepare(l, ctx, &g, x, &j, &s);
  if (st == DL_OK) {
    j.y = dl_f32(y);
    if (j.offload) st = offload_forward(&j);
    else dl_parallel_for(j.nslots, 1, conv_forward_slots, &j);
  }
  if (st != DL_OK) dl_tensor_free(y);
  scratch_free(&s);
  return st;
}

/* gw [O, rows] := dW, and gb (unless NULL) := the products of the row
 * (col^T's column) of ones: fmaf(1, dy, acc) is acc + dy, so each db[o] is
 * the sum bias_grad makes, over samples then pixels in order, from +0,
 * without a pass of its own over dy. The packed GEMMs sum dW itself, the
 * others dW^T: (o, r) is at o * o_step + r * r_step, db at r = rows. */
static dl_status weight_grad(conv_job *j, float *gw, float *gb) {
  const conv_geom *g = j->g;
  const bool packed = packs_patches(j);
  dl_tensor sum = {0};
  j->dw_rows = g->rows + (gb ? 1 : 0);
  DL_TRY(dl_tensor_f32(&sum, 2, packed ? g->o : j->dw_rows, packed ? j->dw_rows : g->o, 0, 0,
                       "conv2d weight gradient"));
  j->dw = dl_f32(&sum);
  dl_parallel_for(j->nparts, 1, conv_dw_parts, j);
  const int64_t o_step = packed ? j->dw_rows : 1, r_step = packed ? 1 : g->o;
  for (int64_t o = 0; o < g->o; o++) {
    for (int64_t r = 0; r < g->rows; r++) gw[o * g->rows + r] = j->dw[o * o_step + r * r_step];
    if (gb) gb[o] = j->dw[o * o_step + g->rows * r_step];
  }
  dl_tensor_free(&sum);
  j->dw = NULL;
  return DL_OK;
}

enum { BIAS_LANES = 8 };

typedef struct bias_job {
  const conv_job *j;
  float *gb;
} bias_job;

/* db[o] = sum of dy over samples, then pixels, in order. Eight channels
 * are summed side by side: each sum is still one chain in a fixed order,
 * but eight chains hide the latency of the adds. Threads take blocks of
 * eight channels, each through every sample. */
static void bias_grad_blocks(void *ctx, int64_t begin, int64_t end) {
  const bias_job *bj = ctx;
  const conv_geom *g = bj->j->g;
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t o0 = blk * BIAS_LANES;
    const int64_t lanes = g->o - o0 < BIAS_LANES ? g->o - o0 : BIAS_LANES;
    float acc[BIAS_LANES] = {0};
    for (int64_t n = 0; n < g->n; n++) {
      const float *dy = bj->j->dy + (n * g->o + o0) * g->pixels;
      if (lanes == BIAS_LANES) {
        for (int64_t q = 0; q < g->pixels; q++)
          for (int64_t i = 0; i < BIAS_LANES; i++) acc[i] += dy[i * g->pixels + q];
      } else {
        for (int64_t i = 0; i < lanes; i++)
          for (int64_t q = 0; q < g->pixels; q++) acc[i] += dy[i * g->pixels + q];
      }
    }
    for (int64_t i = 0; i < lanes; i++) bj->gb[o0 + i] = acc[i];
  }
}

static void bias_grad(const conv_job *j, float *gb) {
  bias_job bj = {.j = j, .gb = gb};
  dl_parallel_for((j->g->o + BIAS_LANES - 1) / BIAS_LANES, 1, bias_grad_blocks, &bj);
}

/* dW and db, committed together or (on a failure) neither. db comes out of
 * dW's GEMM when both are wanted there (weight_grad); on its own, or with
 * dW on the backend, from bias_grad. */
static dl_status conv_param_grads(dl_layer *l, conv_job *j) {
  dl_param *w = &l->params[0], *b = l->nparams > 1 ? &l->params[1] : NULL;
  dl_tensor sw = {0}, sb = {0};
  float *gw = NULL, *gb = NULL;
  dl_status st = dl_param_grad_target(w, &sw, &gw);
  if (st == DL_OK && b) st = dl_param_grad_target(b, &sb, &gb);
  const bool with_bias = gw && gb && !j->offload && !col_is_input(j);
  if (st == DL_OK && gw && j->offload)
    st = j->offload->conv2d_backward_filter(j->offload->impl, &j->shape, j->x, j->dy, gw);
  else if (st == DL_OK && gw) st = weight_grad(j, gw, with_bias ? gb : NULL);
  if (st == DL_OK && gb && !with_bias) bias_grad(j, gb);
  if (st == DL_OK && gw) dl_param_grad_commit(w, gw, &sw, j->half);
  if (st == DL_OK && gb) dl_param_grad_commit(b, gb, &sb, j->half);
  dl_tensor_free(&sw);
  dl_tensor_free(&sb);
  return st;
}

/* dx_n's GEMM takes W^T [rows, O] as a plain operand, read in place, so
 * that W is transposed once per backward rather than packed per sample. */
static dl_status transposed_weight(conv_job *j, dl_tensor *wt) {
  const conv_geom *g = j->g;
  DL_TRY(dl_tensor_alloc_uninit(wt, DL_F32, 2, (const int64_t[]){g->rows, g->o},
                                "conv2d weight (transposed)"));
  float *t = dl_f32(wt);
  for (int64_t o = 0; o < g->o; o++)
    for (int64_t r = 0; r < g->rows; r++) t[r * g->o + o] = j->w[o * g->rows + r];
  j->wt = t;
  return DL_OK;
}

static dl_status conv_backward(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x,
                               const dl_tensor *y, const dl_tensor *dy, dl_tensor *dx) {
  (void)y;
  conv_geom g;
  DL_TRY(conv_geometry(l, x, &g));
  DL_TRY(dl_layer_check_dy_shape(l, dy, 4, (const int64_t[]){g.n, g.o, g.oh, g.ow}));
  conv_job j;
  conv_scratch s = {{0}, {0}, {0}, {0}, {0}};
  dl_tensor dyh = {0};
  dl_status st = job_prepare(l, ctx, &g, x, &j, &s);
  if (st == DL_OK) st = amp_operand(j.half, dy, &dyh, &j.dy);
  if (st == DL_OK) st = conv_param_grads(l, &j);
  if (st == DL_OK && dx) {
    /* Every sample's dx is zeroed (or overwritten) by its slot. */
    st = dl_tensor_alloc_uninit(dx, DL_F32, 4, x->shape, "conv2d input gradient");
    if (st == DL_OK && j.offload) {
      st = j.offload->conv2d_backward_data(j.offload->impl, &j.shape, j.dy, j.w, dl_f32(dx));
      if (st == DL_OK) dl_round_inplace(dl_f32(dx), dx->numel, j.half);
      else dl_tensor_free(dx);
    } else if (st == DL_OK) {
      j.dx = dl_f32(dx);
      st = transposed_weight(&j, &s.wt);
      if (st == DL_OK) dl_parallel_for(j.nslots, 1, conv_dx_slots, &j);
      else dl_tensor_free(dx);
    }
  }
  scratch_free(&s);
  dl_tensor_free(&dyh);
  return st;
}

dl_status dl_conv2d_check(const char *label, const dl_layer_desc *d) {
  DL_TRY(dl_layer_need_positive(label, "in_channels", d->in));
  DL_TRY(dl_layer_need_positive(label, "out_channels", d->out));
  return dl_layer_check_window(label, d, 1);
}

const dl_layer_ops dl_conv2d_ops = {.forward = conv_forward, .backward = conv_backward};
