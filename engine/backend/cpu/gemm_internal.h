/* Inside dl_sgemm: the per-ISA pieces (micro-kernel and panel packing) the
 * blocked driver in gemm.c calls, and test hooks that pick the ISA.
 *
 * Packed layouts. A block of op(A) (m rows, kc columns) is packed into
 * ceil(m / mr) panels; panel p holds op(A)[p*mr + i][k] at p*mr*kc + k*mr + i,
 * rows past m zero. A block of op(B) (kc rows, n columns) is packed into
 * ceil(n / nr) panels; panel q holds op(B)[k][q*nr + j] at q*nr*kc + k*nr + j,
 * columns past n zero. Panels are only float-aligned: kernels load them
 * with unaligned loads.
 *
 * The kernel computes one mr x nr tile of C over kc: each accumulator starts
 * from its dl_gemm_start (C itself, the bias, or +0) and takes one fused
 * multiply-add per k in increasing k, then is stored to C. That per-element
 * order is sgemm.h's contract.
 * Which ISA runs: dl_gemm_force_isa (sgemm.h). */
#ifndef DL_CPU_GEMM_INTERNAL_H
#define DL_CPU_GEMM_INTERNAL_H

#include "backend/cpu/sgemm.h"

#include <stdbool.h>
#include <stdint.h>

/* Where a sub-tile's accumulators start: row i from from + i * ld (C
 * itself: from = c, ld = ldc; dl_sgemm_bias's first K block: from = the
 * bias, ld = 0, so that C is only written), or +0 when from is NULL. */
typedef struct dl_gemm_start {
  const float *from;
  int64_t ld;
} dl_gemm_start;

/* `a` points at op(A)[0][0] of the block: A + i0*lda + k0, or A + k0*lda + i0
 * when trans; likewise `b` at op(B)[0][0]. */
typedef void (*dl_gemm_pack_a_fn)(bool trans, const float *a, int64_t lda, int64_t m, int64_t kc,
                                  float *out);
typedef void (*dl_gemm_pack_b_fn)(bool trans, const float *b, int64_t ldb, int64_t n, int64_t kc,
                                  float *out);
typedef void (*dl_gemm_kernel_fn)(int64_t kc, const float *ap, const float *bp, float *c,
                                  int64_t ldc, dl_gemm_start start);
/* The kernel on a ragged sub-tile: only rows [0, rows) and columns
 * [0, cols) of C are read and written; the same order per element. */
typedef void (*dl_gemm_edge_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                                dl_gemm_start start, int rows, int cols);
/* The kernel on a full mr x nr sub-tile with op(A) read in place from mr
 * rows of an A that is not transposed: op(A)[i][k] = a[i * lda + k]. */
typedef void (*dl_gemm_direct_fn)(int64_t kc, const float *a, int64_t lda, const float *bp,
                                  float *c, int64_t ldc, dl_gemm_start start);
/* The direct kernel on mr rows and only columns [0, cols) of C. */
typedef void (*dl_gemm_direct_edge_fn)(int64_t kc, const float *a, int64_t lda, const float *bp,
                                       float *c, int64_t ldc, dl_gemm_start start, int cols);

/* Rows [0, m) of C (ldc) for a product with n <= narrow_nr columns: each
 * element starts from beta * C (beta 0: +0; 1: C) and takes one fused
 * multiply-add per k in increasing k, as the kernel does. op(A)[i][k] is
 * a[i * a_row + k * a_k], read in place; op(B)[k][j] is b[k * b_k + j],
 * columns past n ignored. */
typedef void (*dl_gemm_narrow_fn)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_row,
                                  int64_t a_k, const float *b, int64_t b_k, float beta, float *c,
                                  int64_t ldc);

/* B^T into one panel for the narrow path: B holds n rows of kc (ldb), and
 * out[k * narrow_nr + j] = B[j][k], lanes past n zero. */
typedef void (*dl_gemm_narrow_pack_fn)(const float *b, int64_t ldb, int64_t n, int64_t kc,
                                       float *out);

typedef struct dl_gemm_isa {
  const char *name;
  int mr, nr;
  dl_gemm_kernel_fn kernel;
  dl_gemm_edge_fn kernel_edge;     /* optional: else ragged tiles go through a scratch tile */
  dl_gemm_direct_fn kernel_direct; /* optional: else A is always packed */
  /* optional: else a full panel of rows with ragged columns packs A */
  dl_gemm_direct_edge_fn kernel_direct_edge;
  dl_gemm_pack_a_fn pack_a;
  dl_gemm_pack_b_fn pack_b;
  /* Optional (narrow_nr 0: none). A product with few columns (a weight
   * gradient of 9 patch rows by 16 channels, logits of 10 classes) would
   * leave most of an nr-wide kernel idle and pay for packing op(A): this
   * path runs it narrow_nr wide with op(A), and op(B) unless transposed,
   * read in place. */
  int narrow_nr;
  dl_gemm_narrow_pack_fn narrow_pack_bt;
  dl_gemm_narrow_fn narrow;
} dl_gemm_isa;

/* Each returns NULL when this CPU (or this compiler) cannot run it. */
const dl_gemm_isa *dl_gemm_isa_portable(void);
const dl_gemm_isa *dl_gemm_isa_avx2(void);
const dl_gemm_isa *dl_gemm_isa_avx512(void);

/* Portable packing, also used by the SIMD ISAs for ragged edges. */
void dl_gemm_pack_a_generic(int mr, bool trans, const float *a, int64_t lda, int64_t m, int64_t kc,
                            float *out);
void dl_gemm_pack_b_generic(int nr, bool trans, const float *b, int64_t ldb, int64_t n, int64_t kc,
                            float *out);

#endif
