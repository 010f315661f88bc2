/* dl_sgemm: a blocked, packed, multi-threaded SGEMM whose every element is
 * summed in the order gemm.h fixes, and dl_sgemm_ref, the triple loop that
 * defines that order.
 *
 * C is cut into tiles (a grid of row x column blocks); threads take whole
 * tiles, never parts of K. Inside a tile, K is walked in blocks of KC: the
 * tile's slices of op(A) and op(B) are packed into panels (gemm_internal.h)
 * and the ISA's micro-kernel runs over each mr x nr sub-tile, reading C back
 * in after the first K block, so each element still sees one fused
 * multiply-add per k in increasing k, from beta*C or +0 (dl_sgemm_bias: from
 * the bias, which the kernels load in place of C in the first K block, so
 * that C is written and never read). A
 * product of few columns takes the ISA's narrow path instead, where it has
 * one (gemm_internal.h): whole rows per thread, the same order per element. */
#define _POSIX_C_SOURCE 200809L
#include "backend/cpu/sgemm.h"

#include "backend/cpu/gemm_internal.h"
#include "core/threads.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Block sizes: a KC-deep panel of A (mr x KC floats, 8 KiB for avx512)
 * stays in L1 while the kernel sweeps the tile's columns, streaming B's
 * panels from L2, where a tile's packed A and B (MC_MAX and NC_MAX by KC)
 * stay. Sweeping rows under one B panel instead (32 KiB, two thirds of a
 * 48 KiB L1) was 5% slower at 1024^3. */
enum { KC = 256, MC_MAX = 256, NC_MAX = 512 };
/* Below this many multiply-adds a gemm runs on the calling thread: waking
 * the pool costs more than it saves. */
static const double PARALLEL_MIN_FMAS = 1 << 21;
enum { MAX_MR = 16, MAX_NR = 32 }; /* bounds of every ISA's kernel tile */

/* ---- the definition ---- */

static float initial_acc(float beta, float c) {
  if (beta == 0.0f) return 0.0f;
  return beta == 1.0f ? c : beta * c;
}

void dl_sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      float acc = initial_acc(beta, C[i * ldc + j]);
      for (int64_t k = 0; k < K; k++) {
        float a = trans_a ? A[k * lda + i] : A[i * lda + k];
        float b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc = fmaf(a, b, acc);
      }
      C[i * ldc + j] = acc;
    }
}

/* ---- ISA choice ---- */

static const dl_gemm_isa *_Atomic current_isa;

static const dl_gemm_isa *best_isa(void) {
  const dl_gemm_isa *isa = dl_gemm_isa_avx512();
  if (!isa) isa = dl_gemm_isa_avx2();
  return isa ? isa : dl_gemm_isa_portable();
}

static const dl_gemm_isa *isa_now(void) {
  const dl_gemm_isa *isa = atomic_load(&current_isa);
  if (!isa) {
    isa = best_isa();
    atomic_store(&current_isa, isa);
  }
  return isa;
}

bool dl_gemm_force_isa(dl_gemm_isa_id id) {
  const dl_gemm_isa *isa = NULL;
  switch (id) {
  case DL_GEMM_AUTO: isa = best_isa(); break;
  case DL_GEMM_PORTABLE: isa = dl_gemm_isa_portable(); break;
  case DL_GEMM_AVX2: isa = dl_gemm_isa_avx2(); break;
  case DL_GEMM_AVX512: isa = dl_gemm_isa_avx512(); break;
  }
  if (!isa) return false;
  atomic_store(&current_isa, isa);
  return true;
}

const char *dl_gemm_isa_name(void) { return isa_now()->name; }

/* ---- the blocked driver ---- */

typedef struct gemm_job {
  const dl_gemm_isa *isa;
  bool trans_a, trans_b;
  int64_t M, N, K;
  const float *A, *B;
  int64_t lda, ldb;
  float beta;
  const float *bias;     /* dl_sgemm_bias's, or NULL; with beta 1 */
  const float *packed_b; /* dl_sgemm_packed_b's op(B), or NULL */
  int64_t packed_nr;     /* its panels' width */
  float *C;
  int64_t ldc;
  int64_t kc;               /* K block depth */
  int64_t pm, pn;           /* mr-row and nr-column panels of C */
  int64_t tiles_m, tiles_n; /* the tile grid; tiles split panels evenly */
  int64_t tile_pm, tile_pn; /* the most panels in one tile */
} gemm_job;

/* One kernel call on a sub-tile of rows x cols (<= mr x nr). A ragged
 * sub-tile takes the ISA's edge kernel, or goes through a full-size scratch
 * tile, so that the kernel never reads or writes outside C; the extra lanes
 * only see padding zeros. */
static void run_kernel(const dl_gemm_isa *isa, int64_t kc, const float *ap, const float *bp,
                       float *c, int64_t ldc, int rows, int cols, dl_gemm_start start) {
  if (rows == isa->mr && cols == isa->nr) {
    isa->kernel(kc, ap, bp, c, ldc, start);
    return;
  }
  if (isa->kernel_edge) {
    isa->kernel_edge(kc, ap, bp, c, ldc, start, rows, cols);
    return;
  }
  _Alignas(64) float tile[MAX_MR * MAX_NR];
  int nr = isa->nr;
  if (start.from) {
    for (int i = 0; i < rows; i++)
      memcpy(tile + i * nr, start.from + i * start.ld, (size_t)cols * sizeof(float));
    start = (dl_gemm_start){tile, nr};
  }
  isa->kernel(kc, ap, bp, tile, nr, start);
  for (int i = 0; i < rows; i++) memcpy(c + i * ldc, tile + i * nr, (size_t)cols * sizeof(float));
}

/* C[i0:i0+m, j0:j0+n] := the bias's columns j0.. in every row, where the
 * job has one: the start of those elements' sums (beta is then 1), for the
 * paths whose kernels start from C (the blocked kernels start from the
 * bias itself, start_at). */
static void fill_bias(const gemm_job *g, int64_t i0, int64_t m, int64_t j0, int64_t n) {
  if (!g->bias) return;
  for (int64_t i = i0; i < i0 + m; i++)
    memcpy(g->C + i * g->ldc + j0, g->bias + j0, (size_t)n * sizeof(float));
}

static const float *a_at(const gemm_job *g, int64_t i, int64_t k) {
  return g->trans_a ? g->A + k * g->lda + i : g->A + i * g->lda + k;
}

static const float *b_at(const gemm_job *g, int64_t k, int64_t j) {
  return g->trans_b ? g->B + j * g->ldb + k : g->B + k * g->ldb + j;
}

/* The reference order on C[i0:i0+m, j0:j0+n], from the bias where the job
 * has one: the blocked path's fallback, the same bits. */
static void ref_tile(const gemm_job *g, int64_t i0, int64_t m, int64_t j0, int64_t n) {
  fill_bias(g, i0, m, j0, n);
  float *c = g->C + i0 * g->ldc + j0;
  if (!g->packed_b) {
    dl_sgemm_ref(g->trans_a, g->trans_b, m, n, g->K, a_at(g, i0, 0), g->lda, b_at(g, 0, j0), g->ldb,
                 g->beta, c, g->ldc);
    return;
  }
  const int64_t nr = g->packed_nr;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = j0; j < j0 + n; j++) {
      const float *col = g->packed_b + j / nr * nr * g->K + j % nr;
      float acc = initial_acc(g->beta, c[i * g->ldc + j - j0]);
      for (int64_t k = 0; k < g->K; k++) acc = fmaf(*a_at(g, i0 + i, k), col[k * nr], acc);
      c[i * g->ldc + j - j0] = acc;
    }
}

/* An A that is not transposed is read in place where the ISA has a direct
 * kernel; a panel of it is packed only for the ragged sub-tiles, which the
 * direct kernel does not take. */
static bool reads_a_in_place(const gemm_job *g) { return !g->trans_a && g->isa->kernel_direct; }

/* The floats of a chunk's A packing buffer: the tile's panels, or one. */
static size_t a_buffer_floats(const gemm_job *g) {
  return (size_t)((reads_a_in_place(g) ? 1 : g->tile_pm) * g->isa->mr * g->kc);
}

/* Where the sums of the sub-tile at c (columns from j) start in the K
 * block from k0: C after the first block, else the bias, C when beta is
 * not 0 (scaled by compute_tile first), or +0. */
static dl_gemm_start start_at(const gemm_job *g, int64_t k0, const float *c, int64_t j) {
  if (k0 == 0 && g->bias) return (dl_gemm_start){g->bias + j, 0};
  if (k0 > 0 || g->beta != 0.0f) return (dl_gemm_start){c, g->ldc};
  return (dl_gemm_start){NULL, 0};
}

/* C[i0:i0+m, j0:j0+n] with packing buffers ap (a_buffer_floats) and bp
 * (tile_pn*nr*kc floats). */
static void compute_tile(const gemm_job *g, int64_t i0, int64_t m, int64_t j0, int64_t n, float *ap,
                         float *bp) {
  const dl_gemm_isa *isa = g->isa;
  const bool direct = reads_a_in_place(g);
  float *c = g->C + i0 * g->ldc + j0;
  if (g->beta != 0.0f && g->beta != 1.0f)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) c[i * g->ldc + j] *= g->beta;
  for (int64_t k0 = 0; k0 < g->K; k0 += g->kc) {
    int64_t kc = g->K - k0 < g->kc ? g->K - k0 : g->kc;
    /* Floats from one B panel to the next: the packed block's, or the
     * whole K of a caller's packed op(B). */
    const int64_t panel_k = g->packed_b ? g->K : kc;
    const float *b = bp;
    if (g->packed_b) b = g->packed_b + j0 * g->K + k0 * isa->nr;
    else isa->pack_b(g->trans_b, b_at(g, k0, j0), g->ldb, n, kc, bp);
    if (!direct) isa->pack_a(g->trans_a, a_at(g, i0, k0), g->lda, m, kc, ap);
    for (int64_t ir = 0; ir < m; ir += isa->mr) {
      int rows = m - ir < isa->mr ? (int)(m - ir) : isa->mr;
      const float *a = a_at(g, i0 + ir, k0), *panel = direct ? NULL : ap + ir * kc;
      for (int64_t jr = 0; jr < n; jr += isa->nr) {
        int cols = n - jr < isa->nr ? (int)(n - jr) : isa->nr;
        float *cij = c + ir * g->ldc + jr;
        const dl_gemm_start start = start_at(g, k0, cij, j0 + jr);
        if (!panel && rows == isa->mr && cols == isa->nr) {
          isa->kernel_direct(kc, a, g->lda, b + jr * panel_k, cij, g->ldc, start);
          continue;
        }
        if (!panel && rows == isa->mr && isa->kernel_direct_edge) {
          isa->kernel_direct_edge(kc, a, g->lda, b + jr * panel_k, cij, g->ldc, start, cols);
          continue;
        }
        if (!panel) {
          isa->pack_a(false, a, g->lda, rows, kc, ap);
          panel = ap;
        }
        run_kernel(isa, kc, panel, b + jr * panel_k, cij, g->ldc, rows, cols, start);
      }
    }
  }
}

static void tile_extent(int64_t t, int64_t tiles, int64_t panels, int64_t width, int64_t total,
                        int64_t *start, int64_t *len) {
  int64_t p0 = t * panels / tiles, p1 = (t + 1) * panels / tiles;
  int64_t end = p1 * width < total ? p1 * width : total;
  *start = p0 * width;
  *len = end - *start;
}

/* Scratch is per chunk of tiles: malloc'd, not accounted memory (like a BLAS
 * workspace, it is not a tensor). If it cannot be had, the tiles are
 * computed by the reference loop: slower, the same bits. */
static void compute_tiles(void *ctx, int64_t begin, int64_t end) {
  const gemm_job *g = ctx;
  size_t a_floats = a_buffer_floats(g);
  size_t b_floats = g->packed_b ? 0 : (size_t)(g->tile_pn * g->isa->nr * g->kc);
  size_t bytes = ((a_floats + b_floats) * sizeof(float) + 63) / 64 * 64;
  float *buf = aligned_alloc(64, bytes);
  for (int64_t t = begin; t < end; t++) {
    int64_t i0, m, j0, n;
    tile_extent(t % g->tiles_m, g->tiles_m, g->pm, g->isa->mr, g->M, &i0, &m);
    tile_extent(t / g->tiles_m, g->tiles_n, g->pn, g->isa->nr, g->N, &j0, &n);
    if (buf) compute_tile(g, i0, m, j0, n, buf + b_floats, buf);
    else ref_tile(g, i0, m, j0, n);
  }
  free(buf);
}

/* ---- the narrow path (gemm_internal.h) ---- */

enum { NARROW_GRAIN = 16 }; /* rows per chunk when threads share the rows */

typedef struct narrow_job {
  const gemm_job *g;
  const float *b; /* op(B)[k][j] at b[k * b_k + j] */
  int64_t b_k;
} narrow_job;

static void narrow_rows(void *ctx, int64_t begin, int64_t end) {
  const narrow_job *nj = ctx;
  const gemm_job *g = nj->g;
  fill_bias(g, begin, end - begin, 0, g->N);
  g->isa->narrow(end - begin, g->N, g->K, a_at(g, begin, 0), g->trans_a ? 1 : g->lda,
                 g->trans_a ? g->lda : 1, nj->b, nj->b_k, g->beta, g->C + begin * g->ldc, g->ldc);
}

/* A transposed B is copied into one panel (malloc'd scratch, like the
 * blocked path's); returns false, computing nothing, if it cannot be had. */
static bool run_narrow(const gemm_job *g, int threads) {
  narrow_job nj = {.g = g, .b = g->B, .b_k = g->ldb};
  if (g->packed_b) nj = (narrow_job){.g = g, .b = g->packed_b, .b_k = g->packed_nr};
  float *bt = NULL;
  if (g->trans_b && !g->packed_b) {
    const size_t bytes = ((size_t)g->K * (size_t)g->isa->narrow_nr * sizeof(float) + 63) / 64 * 64;
    bt = aligned_alloc(64, bytes);
    if (!bt) return false;
    g->isa->narrow_pack_bt(g->B, g->ldb, g->N, g->K, bt);
    nj.b = bt;
    nj.b_k = g->isa->narrow_nr;
  }
  const double fmas = (double)g->M * (double)g->N * (double)g->K;
  if (threads > 1 && fmas >= PARALLEL_MIN_FMAS)
    dl_parallel_for(g->M, NARROW_GRAIN, narrow_rows, &nj);
  else narrow_rows(&nj, 0, g->M);
  free(bt);
  return true;
}

/* ---- the tile grid ---- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The tile grid: tiles no larger than MC_MAX x NC_MAX, and, when the work
 * is worth threads, at least two per thread (so that a thread slowed by a
 * busy core does not hold the others up), split along the longer side.
 * MC_MAX bounds the packed A a tile keeps in L2; an A read in place has
 * nothing to keep, so its tiles take every row, and B, packed per tile, is
 * packed once per column block rather than once per MC_MAX rows. */
static void choose_tiles(gemm_job *g, int threads) {
  const dl_gemm_isa *isa = g->isa;
  g->pm = ceil_div(g->M, isa->mr);
  g->pn = ceil_div(g->N, isa->nr);
  g->tiles_m = reads_a_in_place(g) ? 1 : ceil_div(g->pm, MC_MAX / isa->mr);
  g->tiles_n = ceil_div(g->pn, NC_MAX / isa->nr);
  double fmas = (double)g->M * (double)g->N * (double)g->K;
  int64_t want = 1;
  if (threads > 1 && fmas >= PARALLEL_MIN_FMAS) want = 2 * (int64_t)threads;
  while (g->tiles_m * g->tiles_n < want) {
    bool can_m = g->tiles_m < g->pm, can_n = g->tiles_n < g->pn;
    if (!can_m && !can_n) break;
    int64_t rows = ceil_div(g->pm, g->tiles_m) * isa->mr;
    int64_t cols = ceil_div(g->pn, g->tiles_n) * isa->nr;
    if (can_m && (rows >= cols || !can_n)) g->tiles_m++;
    else g->tiles_n++;
  }
  g->tile_pm = ceil_div(g->pm, g->tiles_m);
  g->tile_pn = ceil_div(g->pn, g->tiles_n);
}

static void run_gemm(gemm_job *g) {
  if (g->M <= 0 || g->N <= 0) return;
  if (g->K <= 0 || (g->packed_b && g->packed_nr != g->isa->nr)) {
    ref_tile(g, 0, g->M, 0, g->N);
    return;
  }
  int threads = dl_get_num_threads();
  /* The narrow path reads a packed op(B) of one panel as it is. */
  if (g->N <= g->isa->narrow_nr && g->N <= g->isa->nr && run_narrow(g, threads)) return;
  choose_tiles(g, threads);
  int64_t tiles = g->tiles_m * g->tiles_n;
  if (tiles == 1) compute_tiles(g, 0, 1);
  else dl_parallel_for(tiles, 1, compute_tiles, g);
}

static gemm_job job_for(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                        int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                        int64_t ldc) {
  return (gemm_job){.isa = isa_now(),
                    .trans_a = trans_a,
                    .trans_b = trans_b,
                    .M = M,
                    .N = N,
                    .K = K,
                    .A = A,
                    .B = B,
                    .lda = lda,
                    .ldb = ldb,
                    .beta = beta,
                    .C = C,
                    .ldc = ldc,
                    .kc = K < KC ? K : KC};
}

void dl_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  gemm_job g = job_for(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  run_gemm(&g);
}

void dl_sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                   int64_t lda, const float *B, int64_t ldb, const float *bias, float *C,
                   int64_t ldc) {
  gemm_job g = job_for(trans_a, trans_b, M, N, K, A, lda, B, ldb, 1.0f, C, ldc);
  g.bias = bias;
  run_gemm(&g);
}

void dl_sgemm_packed_b(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                       const float *packed_b, int nr, float beta, float *C, int64_t ldc) {
  gemm_job g = job_for(false, false, M, N, K, A, lda, NULL, 0, beta, C, ldc);
  g.packed_b = packed_b;
  g.packed_nr = nr;
  run_gemm(&g);
}

int dl_sgemm_panel_width(void) { return isa_now()->nr; }
