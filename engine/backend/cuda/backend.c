/* The CUDA dl_backend (backend.h): staging of host arrays through
 * grow-only device buffers, GEMMs through dl_cuda_sgemm, convolutions
 * through cuDNN's legacy (v7-style) convolution API with the algorithm
 * chosen once per geometry, optimizer steps through kernels.cu's
 * optim_elem.h kernel (the CPU's element code), dropout masks through the
 * device Philox.
 *
 * Staging: three buffers (two inputs, one output) and one cuDNN workspace,
 * each grown to the largest call seen and freed only with the backend.
 * Every upload and the download wait for the stream (memory.c), so when a
 * call returns the GPU is idle and its buffers may be reused or grown.
 *
 * Convolutions: a small cache of the last few geometries holds the cuDNN
 * descriptors and, per operation, the algorithm, math type and workspace
 * chosen (choose_algo below). */
#define _POSIX_C_SOURCE 200809L
#include "backend/cuda/backend.h"

#include "backend/cuda/context.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dl_cuda_conv_algo_name(dl_cuda_conv_algo a) {
  switch (a) {
  case DL_CUDA_CONV_DETERMINISTIC: return "deterministic";
  case DL_CUDA_CONV_FASTEST: return "fastest";
  }
  return "unknown";
}

/* A device buffer that only grows. */
typedef struct dev_buf {
  void *p;
  size_t bytes;
} dev_buf;

#ifdef DL_CUDA_HAVE_CUDNN

typedef enum conv_op { OP_FWD = 0, OP_BWD_DATA, OP_BWD_FILTER, OP_COUNT } conv_op;

static const char *const op_title[OP_COUNT] = {"conv2d forward", "conv2d backward data",
                                               "conv2d backward filter"};

enum { PLAN_SLOTS = 32, MAX_ALGOS = 16 };

typedef struct conv_choice {
  bool chosen;
  int algo;             /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
  cudnnMathType_t math; /* set on the descriptor before each run */
  size_t workspace;
  bool deterministic;
} conv_choice;

/* One geometry: its descriptors and the algorithms chosen for it. */
typedef struct conv_plan {
  bool used;
  uint64_t last_use;
  dl_conv2d_shape g;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  conv_choice choice[OP_COUNT];
} conv_plan;

#endif

typedef struct cuda_backend {
  dl_backend iface; /* what users hold; iface.impl points back here */
  dl_cuda *ctx;
  dl_cuda_backend_options opt;
  dev_buf in1, in2, out, workspace;
  dev_buf opt_bufs[4]; /* optimizer step: w, g, buf0, buf1 */
  char device_name[256];
  int sm_major, sm_minor;
  char workspace_config[64]; /* CUBLAS_WORKSPACE_CONFIG as cuBLAS read it */
#ifdef DL_CUDA_HAVE_CUDNN
  cudnnHandle_t cudnn; /* bound to ctx->stream */
  conv_plan plans[PLAN_SLOTS];
  uint64_t clock;
  /* Algorithms chosen so far: seen[op][algo] bit 0 non-deterministic,
   * bit 1 deterministic. */
  unsigned char seen[OP_COUNT][MAX_ALGOS];
#endif
} cuda_backend;

/* ---- staging buffers ---- */

/* b holds at least `bytes` afterwards (contents not kept). The stream is
 * idle between calls, but wait anyway before freeing a block it may read. */
static dl_status buf_reserve(cuda_backend *cb, dev_buf *b, size_t bytes, const char *what) {
  if (bytes <= b->bytes) return DL_OK;
  DL_CUDA_TRY(cudaStreamSynchronize(cb->ctx->stream));
  dl_status s = dl_cuda_free(b->p);
  b->p = NULL;
  b->bytes = 0;
  DL_TRY(s);
  /* Whole pages, so that sizes a little apart share a block. */
  const size_t page = 4096;
  size_t want = bytes > SIZE_MAX - page ? bytes : (bytes + page - 1) / page * page;
  void *p = NULL;
  DL_TRY(dl_cuda_alloc(cb->ctx, want, what, &p));
  b->p = p;
  b->bytes = want;
  return DL_OK;
}

static dl_status upload(cuda_backend *cb, dev_buf *b, const float *src, size_t bytes,
                        const char *what) {
  DL_TRY(buf_reserve(cb, b, bytes, what));
  return dl_cuda_upload_bytes(cb->ctx, b->p, src, bytes, what);
}

/* ---- sgemm ---- */

static dl_status check_dim(const char *name, int64_t v) {
  if (v < 0 || v > INT_MAX)
    return dl_fail(DL_ERR_INVALID, "%s = %lld must lie in [0, %d] (cuBLAS takes int)", name,
                   (long long)v, INT_MAX);
  return DL_OK;
}

static dl_status check_ld(const char *name, int64_t ld, int64_t row_length) {
  int64_t least = row_length > 1 ? row_length : 1;
  if (ld < least || ld > INT_MAX)
    return dl_fail(DL_ERR_INVALID,
                   "%s = %lld must be at least %lld (the stored row length) "
                   "and at most %d",
                   name, (long long)ld, (long long)least, INT_MAX);
  return DL_OK;
}

/* Bytes a row-major rows x cols matrix with leading dimension ld spans,
 * from its first element to its last: rows*ld - (ld - cols) floats. rows,
 * cols and ld are at most INT_MAX (checked), so this does not overflow. */
static size_t span_bytes(int64_t rows, int64_t cols, int64_t ld) {
  if (rows == 0 || cols == 0) return 0;
  return (size_t)((rows - 1) * ld + cols) * sizeof(float);
}

typedef struct sgemm_args {
  bool trans_a, trans_b;
  int64_t M, N, K;
  const float *A;
  int64_t lda;
  const float *B;
  int64_t ldb;
  float beta;
  float *C;
  int64_t ldc;
} sgemm_args;

static dl_status sgemm_run(cuda_backend *cb, const sgemm_args *a) {
  DL_TRY(check_dim("M", a->M));
  DL_TRY(check_dim("N", a->N));
  DL_TRY(check_dim("K", a->K));
  DL_TRY(check_ld("lda", a->lda, a->trans_a ? a->M : a->K));
  DL_TRY(check_ld("ldb", a->ldb, a->trans_b ? a->K : a->N));
  DL_TRY(check_ld("ldc", a->ldc, a->N));
  if (a->M == 0 || a->N == 0) return DL_OK;
  if (!a->C || (a->K > 0 && (!a->A || !a->B)))
    return dl_fail(DL_ERR_INVALID, "a NULL matrix (A %p, B %p, C %p)", (const void *)a->A,
                   (const void *)a->B, (void *)a->C);
  if (a->K == 0) { /* an empty sum: C = beta C, beta 0 or 1 (dl_sgemm's contract) */
    for (int64_t m = 0; a->beta == 0.0f && m < a->M; m++)
      memset(a->C + m * a->ldc, 0, (size_t)a->N * sizeof(float));
    return DL_OK;
  }
  DL_TRY(dl_cuda_enter(cb->ctx, "cuda backend sgemm"));
  /* op(A) is M x K: stored M x K, or K x M when transposed; likewise B. */
  const size_t a_bytes = a->trans_a ? span_bytes(a->K, a->M, a->lda)
                                    : span_bytes(a->M, a->K, a->lda);
  const size_t b_bytes = a->trans_b ? span_bytes(a->N, a->K, a->ldb)
                                    : span_bytes(a->K, a->N, a->ldb);
  const size_t c_bytes = span_bytes(a->M, a->N, a->ldc);
  DL_TRY(upload(cb, &cb->in1, a->A, a_bytes, "sgemm A"));
  DL_TRY(upload(cb, &cb->in2, a->B, b_bytes, "sgemm B"));
  /* beta 0: cuBLAS does not read C (NaN there cannot leak), so C is not
   * uploaded; the download below then writes only the M x N elements. */
  if (a->beta != 0.0f) DL_TRY(upload(cb, &cb->out, a->C, c_bytes, "sgemm C"));
  else DL_TRY(buf_reserve(cb, &cb->out, c_bytes, "sgemm C"));
  float *dC = cb->out.p;
  DL_TRY(dl_cuda_sgemm(cb->ctx, a->trans_a, a->trans_b, a->M, a->N, a->K, cb->in1.p, a->lda,
                       cb->in2.p, a->ldb, a->beta, dC, a->ldc));
  if (a->ldc == a->N || a->M == 1)
    return dl_cuda_download_bytes(cb->ctx, a->C, dC, c_bytes, "sgemm C");
  /* Rows with gaps: the host's elements between rows are not C's and must
   * stay as they are. */
  const size_t pitch = (size_t)a->ldc * sizeof(float);
  DL_CUDA_TRY(cudaMemcpy2DAsync(a->C, pitch, dC, pitch, (size_t)a->N * sizeof(float), (size_t)a->M,
                                cudaMemcpyDeviceToHost, cb->ctx->stream));
  DL_CUDA_TRY(cudaStreamSynchronize(cb->ctx->stream));
  return DL_OK;
}

static dl_status cb_sgemm(void *impl, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                          float *C, int64_t ldc) {
  cuda_backend *cb = impl;
  sgemm_args a = {trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc};
  dl_status s = sgemm_run(cb, &a);
  if (s != DL_OK)
    return dl_fail_context(s, "cuda sgemm %s%s M=%lld N=%lld K=%lld: ", trans_a ? "T" : "N",
                           trans_b ? "T" : "N", (long long)M, (long long)N, (long long)K);
  return DL_OK;
}

/* ---- optimizer steps ---- */

/* w, g and the state buffers up, optim_elem.h's update on the GPU
 * (kernels.cu), w and the state back. */
static dl_status optim_run(cuda_backend *cb, const dl_optim_coeffs *c, int64_t n, float *w,
                           const float *g, float *buf0, float *buf1) {
  if (n < 0 || !w || !g || (!buf0 && (c->adam || c->use_mom)) || (!buf1 && c->adam))
    return dl_fail(DL_ERR_INVALID,
                   "%lld elements, a missing array (w %p, g %p, buffers %p, "
                   "%p)",
                   (long long)n, (void *)w, (const void *)g, (void *)buf0, (void *)buf1);
  if (n == 0) return DL_OK;
  DL_TRY(dl_cuda_enter(cb->ctx, "cuda backend optimizer step"));
  const size_t bytes = (size_t)n * sizeof(float);
  float *host[4] = {w, (float *)g, buf0, buf1};
  static const char *const what[4] = {"optimizer w", "optimizer g", "optimizer state 0",
                                      "optimizer state 1"};
  for (int i = 0; i < 4; i++)
    if (host[i]) DL_TRY(upload(cb, &cb->opt_bufs[i], host[i], bytes, what[i]));
  DL_TRY(dl_cuda_optim_step(cb->ctx, c, n, cb->opt_bufs[0].p, cb->opt_bufs[1].p,
                            buf0 ? cb->opt_bufs[2].p : NULL, buf1 ? cb->opt_bufs[3].p : NULL));
  for (int i = 0; i < 4; i++)
    if (host[i] && i != 1)
      DL_TRY(dl_cuda_download_bytes(cb->ctx, host[i], cb->opt_bufs[i].p, bytes, what[i]));
  return DL_OK;
}

static dl_status cb_optim_step(void *impl, const dl_optim_coeffs *c, int64_t n, float *w,
                               const float *g, float *buf0, float *buf1) {
  if (!c) return dl_fail(DL_ERR_INVALID, "cuda optimizer step: no coefficients");
  dl_status s = optim_run(impl, c, n, w, g, buf0, buf1);
  if (s != DL_OK)
    return dl_fail_context(s, "cuda %s step of %lld elements: ", c->adam ? "adam" : "sgd",
                           (long long)n);
  return DL_OK;
}

/* ---- dropout masks ---- */

/* The rows' streams up, the masks made by the device Philox (kernels.cu),
 * the masks back. */
static dl_status cb_dropout_mask(void *impl, const dl_stream *streams, int64_t rows,
                                 int64_t features, float keep_prob, float scale, float *mask) {
  cuda_backend *cb = impl;
  if (rows < 0 || features < 0 || (features > 0 && rows > INT64_MAX / features) ||
      (rows * features > 0 && (!streams || !mask)))
    return dl_fail(DL_ERR_INVALID,
                   "cuda dropout mask [%lld, %lld]: bad shape or a missing "
                   "array",
                   (long long)rows, (long long)features);
  if (rows * features == 0) return DL_OK;
  DL_TRY(dl_cuda_enter(cb->ctx, "cuda backend dropout mask"));
  const size_t bytes = (size_t)(rows * features) * sizeof(float);
  DL_TRY(buf_reserve(cb, &cb->in1, (size_t)rows * sizeof *streams, "dropout streams"));
  DL_TRY(dl_cuda_upload_bytes(cb->ctx, cb->in1.p, streams, (size_t)rows * sizeof *streams,
                              "dropout streams"));
  DL_TRY(buf_reserve(cb, &cb->out, bytes, "dropout mask"));
  DL_TRY(dl_cuda_dropout_mask(cb->ctx, cb->in1.p, rows, features, keep_prob, scale, cb->out.p));
  return dl_cuda_download_bytes(cb->ctx, mask, cb->out.p, bytes, "dropout mask");
}

/* ---- convolutions ---- */

#ifdef DL_CUDA_HAVE_CUDNN

static const char *algo_name(conv_op op, int algo) {
  static const char *const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM",
                                    "GEMM",          "DIRECT",
                                    "FFT",           "FFT_TILING",
                                    "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static const char *const data[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                     "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char *const filter[] = {"ALGO_0",    "ALGO_1",   "FFT",
                                       "ALGO_3",    "WINOGRAD", "WINOGRAD_NONFUSED",
                                       "FFT_TILING"};
  const char *const *names = op == OP_FWD ? fwd : op == OP_BWD_DATA ? data : filter;
  int count = op == OP_FWD ? 8 : op == OP_BWD_DATA ? 6 : 7;
  return algo >= 0 && algo < count ? names[algo] : "UNKNOWN";
}

/* cuDNN's documentation names these as using atomics: never taken as
 * deterministic, whatever a perf result says. */
static bool known_nondeterministic(conv_op op, int algo) {
  if (op == OP_BWD_DATA) return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  if (op == OP_BWD_FILTER)
    return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
           algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  return false;
}

/* FP32: FMA only, no tensor cores and so no TF32 (allow_tf32 = False).
 * TF32: the default, which lets cuDNN use TF32 tensor cores for float. */
static cudnnMathType_t base_math(const cuda_backend *cb) {
  return cb->opt.math == DL_CUDA_MATH_TF32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

static const char *math_name(cudnnMathType_t m) {
  switch (m) {
  case CUDNN_DEFAULT_MATH: return "DEFAULT_MATH";
  case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP_MATH";
  case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_MATH_ALLOW_CONVERSION";
  case CUDNN_FMA_MATH: return "FMA_MATH";
  }
  return "?";
}

static void plan_release(conv_plan *p) {
  if (p->x) cudnnDestroyTensorDescriptor(p->x);
  if (p->y) cudnnDestroyTensorDescriptor(p->y);
  if (p->w) cudnnDestroyFilterDescriptor(p->w);
  if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
  memset(p, 0, sizeof *p);
}

static bool same_shape(const dl_conv2d_shape *a, const dl_conv2d_shape *b) {
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->o == b->o &&
         a->k == b->k && a->stride == b->stride && a->pad == b->pad && a->oh == b->oh &&
         a->ow == b->ow;
}

static dl_status plan_build(cuda_backend *cb, conv_plan *p, const dl_conv2d_shape *g) {
  p->g = *g;
  DL_CUDNN_TRY(cudnnCreateTensorDescriptor(&p->x));
  DL_CUDNN_TRY(cudnnCreateTensorDescriptor(&p->y));
  DL_CUDNN_TRY(cudnnCreateFilterDescriptor(&p->w));
  DL_CUDNN_TRY(cudnnCreateConvolutionDescriptor(&p->conv));
  DL_CUDNN_TRY(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g->n,
                                          (int)g->c, (int)g->h, (int)g->w));
  DL_CUDNN_TRY(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)g->o,
                                          (int)g->c, (int)g->k, (int)g->k));
  DL_CUDNN_TRY(cudnnSetConvolution2dDescriptor(p->conv, (int)g->pad, (int)g->pad, (int)g->stride,
                                               (int)g->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT));
  DL_CUDNN_TRY(cudnnSetConvolutionMathType(p->conv, base_math(cb)));
  int n = 0, o = 0, oh = 0, ow = 0;
  DL_CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &n, &o, &oh, &ow));
  if (n != g->n || o != g->o || oh != g->oh || ow != g->ow)
    return dl_fail(DL_ERR_INVALID,
                   "cuDNN computes the output as [%d,%d,%d,%d], the layer "
                   "expects [%lld,%lld,%lld,%lld]",
                   n, o, oh, ow, (long long)g->n, (long long)g->o, (long long)g->oh,
                   (long long)g->ow);
  DL_CUDNN_TRY(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g->n,
                                          (int)g->o, (int)g->oh, (int)g->ow));
  return DL_OK;
}

/* The plan of geometry g: cached, or built in a free or the least recently
 * used slot. */
static dl_status plan_for(cuda_backend *cb, const dl_conv2d_shape *g, conv_plan **out) {
  conv_plan *slot = NULL;
  for (int i = 0; i < PLAN_SLOTS; i++) {
    conv_plan *p = &cb->plans[i];
    if (p->used && same_shape(&p->g, g)) {
      p->last_use = ++cb->clock;
      *out = p;
      return DL_OK;
    }
    if (!slot || (slot->used && (!p->used || p->last_use < slot->last_use))) slot = p;
  }
  plan_release(slot);
  dl_status s = plan_build(cb, slot, g);
  if (s != DL_OK) {
    plan_release(slot);
    return s;
  }
  slot->used = true;
  slot->last_use = ++cb->clock;
  *out = slot;
  return DL_OK;
}

/* One entry of cuDNN's ranking, whichever operation it is for. */
typedef struct algo_perf {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
} algo_perf;

#define COPY_PERF(dst, src, count)                                                    \
  for (int i_ = 0; i_ < (count); i_++) (dst)[i_] = (algo_perf) {                      \
      (int)(src)[i_].algo, (src)[i_].status, (src)[i_].memory, (src)[i_].determinism, \
          (src)[i_].mathType                                                          \
    }

/* How many ranking entries to ask for: cuDNN's count, within 1..MAX_ALGOS. */
static int ranking_size(int max) { return max < 1 ? 1 : max > MAX_ALGOS ? MAX_ALGOS : max; }

/* cuDNN's heuristic ranking for op on plan p (best first). */
static dl_status rank_algos(cuda_backend *cb, conv_plan *p, conv_op op, algo_perf *perf,
                            int *count) {
  int max = 0;
  *count = 0;
  DL_CUDNN_TRY(cudnnSetConvolutionMathType(p->conv, base_math(cb)));
  if (op == OP_FWD) {
    cudnnConvolutionFwdAlgoPerf_t r[MAX_ALGOS];
    DL_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithmMaxCount(cb->cudnn, &max));
    max = ranking_size(max);
    DL_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(cb->cudnn, p->x, p->w, p->conv, p->y, max,
                                                        count, r));
    COPY_PERF(perf, r, *count);
  } else if (op == OP_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t r[MAX_ALGOS];
    DL_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cb->cudnn, &max));
    max = ranking_size(max);
    DL_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(cb->cudnn, p->w, p->y, p->conv, p->x,
                                                             max, count, r));
    COPY_PERF(perf, r, *count);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t r[MAX_ALGOS];
    DL_CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cb->cudnn, &max));
    max = ranking_size(max);
    DL_CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(cb->cudnn, p->x, p->y, p->conv, p->w,
                                                               max, count, r));
    COPY_PERF(perf, r, *count);
  }
  if (*count < 0 || *count > max) *count = 0;
  return DL_OK;
}

/* The workspace op needs with `algo` under math type `math` (set on the
 * descriptor); a status other than success means it cannot run. */
static cudnnStatus_t workspace_of(cuda_backend *cb, conv_plan *p, conv_op op, int algo,
                                  cudnnMathType_t math, size_t *bytes) {
  *bytes = 0;
  cudnnStatus_t st = cudnnSetConvolutionMathType(p->conv, math);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  switch (op) {
  case OP_FWD:
    return cudnnGetConvolutionForwardWorkspaceSize(cb->cudnn, p->x, p->w, p->conv, p->y,
                                                   (cudnnConvolutionFwdAlgo_t)algo, bytes);
  case OP_BWD_DATA:
    return cudnnGetConvolutionBackwardDataWorkspaceSize(cb->cudnn, p->w, p->y, p->conv, p->x,
                                                        (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
  default:
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(cb->cudnn, p->x, p->y, p->conv, p->w,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo,
                                                          bytes);
  }
}

static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}

/* Picks op's algorithm for plan p, once: walking cuDNN's ranking in order,
 * the first entry with status success, deterministic if the options ask
 * for it (reported CUDNN_DETERMINISTIC and not one cuDNN documents as
 * using atomics), whose workspace query succeeds within the limit. The
 * math type it runs under is FMA in FP32 mode whatever the entry says (an
 * entry that needs tensor cores then fails its workspace query and is
 * passed over), the entry's own in TF32 mode. */
static dl_status choose_algo(cuda_backend *cb, conv_plan *p, conv_op op) {
  conv_choice *c = &p->choice[op];
  if (c->chosen) return DL_OK;
  algo_perf perf[MAX_ALGOS];
  int count = 0;
  DL_TRY(rank_algos(cb, p, op, perf, &count));
  const bool want_det = cb->opt.conv == DL_CUDA_CONV_DETERMINISTIC;
  char seen[1024] = "";
  for (int i = 0; i < count; i++) {
    const algo_perf *e = &perf[i];
    const bool det = e->determinism == CUDNN_DETERMINISTIC && !known_nondeterministic(op, e->algo);
    append(seen, sizeof seen, "%s%s (%s, %s, status %d", i ? ", " : "", algo_name(op, e->algo),
           det ? "deterministic" : "non-deterministic", math_name(e->math), (int)e->status);
    if (e->status != CUDNN_STATUS_SUCCESS || (want_det && !det)) {
      append(seen, sizeof seen, ")");
      continue;
    }
    const cudnnMathType_t math = cb->opt.math == DL_CUDA_MATH_TF32 ? e->math : CUDNN_FMA_MATH;
    size_t ws = 0;
    cudnnStatus_t st = workspace_of(cb, p, op, e->algo, math, &ws);
    append(seen, sizeof seen, ", workspace %zu%s)", ws,
           st != CUDNN_STATUS_SUCCESS ? " query failed" : "");
    if (st != CUDNN_STATUS_SUCCESS || ws > DL_CUDA_CONV_WORKSPACE_LIMIT) continue;
    *c = (conv_choice){true, e->algo, math, ws, det};
    if (e->algo >= 0 && e->algo < MAX_ALGOS) cb->seen[op][e->algo] |= det ? 2 : 1;
    return DL_OK;
  }
  return dl_fail(DL_ERR_UNSUPPORTED,
                 "cuDNN ranks no %salgorithm that can run with at most "
                 "%zu MiB of workspace; its ranking: %s",
                 want_det ? "deterministic " : "", DL_CUDA_CONV_WORKSPACE_LIMIT >> 20,
                 count ? seen : "empty");
}

/* The geometry as messages name it. */
static const char *geometry_text(const dl_conv2d_shape *g, char *buf, size_t len) {
  snprintf(buf, len, "[%lld,%lld,%lld,%lld] k%lld s%lld p%lld -> [%lld,%lld,%lld,%lld]",
           (long long)g->n, (long long)g->c, (long long)g->h, (long long)g->w, (long long)g->k,
           (long long)g->stride, (long long)g->pad, (long long)g->n, (long long)g->o,
           (long long)g->oh, (long long)g->ow);
  return buf;
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* Checks g and gives the element counts of x, w and y. */
static dl_status check_shape(const dl_conv2d_shape *g, int64_t *nx, int64_t *nw, int64_t *ny) {
  if (g->n < 0 || g->c < 1 || g->h < 1 || g->w < 1 || g->o < 1 || g->k < 1 || g->stride < 1 ||
      g->pad < 0 || g->oh < 1 || g->ow < 1)
    return dl_fail(DL_ERR_INVALID, "not a convolution: sizes must be positive (batch and "
                                   "padding at least 0)");
  const int64_t v[] = {g->n, g->c, g->h, g->w, g->o, g->k, g->stride, g->pad, g->oh, g->ow};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (!fits_int(v[i]))
      return dl_fail(DL_ERR_UNSUPPORTED, "a size exceeds %d (cuDNN takes int)", INT_MAX);
  /* Each product of two ints fits int64; stop as soon as one exceeds int. */
  int64_t x = g->n * g->c, y = g->n * g->o, w = g->o * g->c;
  x = fits_int(x) ? x * g->h : x;
  x = fits_int(x) ? x * g->w : x;
  y = fits_int(y) ? y * g->oh : y;
  y = fits_int(y) ? y * g->ow : y;
  w = fits_int(w) ? w * g->k : w;
  w = fits_int(w) ? w * g->k : w;
  if (!fits_int(x) || !fits_int(y) || !fits_int(w))
    return dl_fail(DL_ERR_UNSUPPORTED,
                   "a tensor of more than %d elements (cuDNN's legacy "
                   "convolutions take int sizes)",
                   INT_MAX);
  if ((g->h + 2 * g->pad - g->k) / g->stride + 1 != g->oh ||
      (g->w + 2 * g->pad - g->k) / g->stride + 1 != g->ow || g->h + 2 * g->pad < g->k ||
      g->w + 2 * g->pad < g->k)
    return dl_fail(DL_ERR_INVALID, "the output size does not follow from the input, kernel, "
                                   "stride and padding");
  *nx = x;
  *nw = w;
  *ny = y;
  return DL_OK;
}

/* The run of op: in1/in2 are the host inputs (forward x, w; backward data
 * dy, w; backward filter x, dy), out the host output. */
static dl_status conv_run(cuda_backend *cb, conv_op op, const dl_conv2d_shape *g, const float *in1,
                          const float *in2, float *out) {
  int64_t nx = 0, nw = 0, ny = 0;
  DL_TRY(check_shape(g, &nx, &nw, &ny));
  const int64_t n1 = op == OP_BWD_DATA ? ny : nx;
  const int64_t n2 = op == OP_FWD ? nw : op == OP_BWD_DATA ? nw : ny;
  const int64_t nout = op == OP_FWD ? ny : op == OP_BWD_DATA ? nx : nw;
  if ((nout > 0 && !out) || (g->n > 0 && (!in1 || !in2)))
    return dl_fail(DL_ERR_INVALID, "a NULL array (inputs %p, %p, output %p)", (const void *)in1,
                   (const void *)in2, (void *)out);
  if (g->n == 0) { /* an empty batch: y and dx are empty, dW is a sum of nothing */
    if (op == OP_BWD_FILTER) memset(out, 0, (size_t)nout * sizeof *out);
    return DL_OK;
  }
  DL_TRY(dl_cuda_enter(cb->ctx, op_title[op]));
  conv_plan *p = NULL;
  DL_TRY(plan_for(cb, g, &p));
  DL_TRY(choose_algo(cb, p, op));
  const conv_choice *c = &p->choice[op];
  DL_TRY(buf_reserve(cb, &cb->workspace, c->workspace, "cuDNN workspace"));
  static const char *const what1[OP_COUNT] = {"conv2d x", "conv2d dy", "conv2d x"};
  static const char *const what2[OP_COUNT] = {"conv2d w", "conv2d w", "conv2d dy"};
  static const char *const what_out[OP_COUNT] = {"conv2d y", "conv2d dx", "conv2d dw"};
  DL_TRY(upload(cb, &cb->in1, in1, (size_t)n1 * sizeof(float), what1[op]));
  DL_TRY(upload(cb, &cb->in2, in2, (size_t)n2 * sizeof(float), what2[op]));
  DL_TRY(buf_reserve(cb, &cb->out, (size_t)nout * sizeof(float), what_out[op]));
  DL_CUDNN_TRY(cudnnSetConvolutionMathType(p->conv, c->math));
  const float alpha = 1.0f, beta = 0.0f; /* beta 0: the output is written, not read */
  void *ws = c->workspace ? cb->workspace.p : NULL;
  switch (op) {
  case OP_FWD:
    DL_CUDNN_TRY(cudnnConvolutionForward(cb->cudnn, &alpha, p->x, cb->in1.p, p->w, cb->in2.p,
                                         p->conv, (cudnnConvolutionFwdAlgo_t)c->algo, ws,
                                         c->workspace, &beta, p->y, cb->out.p));
    break;
  case OP_BWD_DATA:
    DL_CUDNN_TRY(cudnnConvolutionBackwardData(cb->cudnn, &alpha, p->w, cb->in2.p, p->y, cb->in1.p,
                                              p->conv, (cudnnConvolutionBwdDataAlgo_t)c->algo, ws,
                                              c->workspace, &beta, p->x, cb->out.p));
    break;
  default:
    DL_CUDNN_TRY(cudnnConvolutionBackwardFilter(cb->cudnn, &alpha, p->x, cb->in1.p, p->y, cb->in2.p,
                                                p->conv, (cudnnConvolutionBwdFilterAlgo_t)c->algo,
                                                ws, c->workspace, &beta, p->w, cb->out.p));
    break;
  }
  return dl_cuda_download_bytes(cb->ctx, out, cb->out.p, (size_t)nout * sizeof(float),
                                what_out[op]);
}

static dl_status conv_call(void *impl, conv_op op, const dl_conv2d_shape *g, const float *in1,
                           const float *in2, float *out) {
  if (!g) return dl_fail(DL_ERR_INVALID, "%s: no geometry", op_title[op]);
  dl_status s = conv_run(impl, op, g, in1, in2, out);
  if (s != DL_OK) {
    char geom[160];
    return dl_fail_context(s, "%s %s: ", op_title[op], geometry_text(g, geom, sizeof geom));
  }
  return DL_OK;
}

static dl_status cb_conv_forward(void *impl, const dl_conv2d_shape *g, const float *x,
                                 const float *w, float *y) {
  return conv_call(impl, OP_FWD, g, x, w, y);
}

static dl_status cb_conv_backward_data(void *impl, const dl_conv2d_shape *g, const float *dy,
                                       const float *w, float *dx) {
  return conv_call(impl, OP_BWD_DATA, g, dy, w, dx);
}

static dl_status cb_conv_backward_filter(void *impl, const dl_conv2d_shape *g, const float *x,
                                         const float *dy, float *dw) {
  return conv_call(impl, OP_BWD_FILTER, g, x, dy, dw);
}

#endif /* DL_CUDA_HAVE_CUDNN */

/* ---- the backend ---- */

static void impl_destroy(cuda_backend *cb) {
  if (!cb) return;
  if (cb->ctx) {
    cudaSetDevice(cb->ctx->device);
    cudaStreamSynchronize(cb->ctx->stream);
  }
#ifdef DL_CUDA_HAVE_CUDNN
  for (int i = 0; i < PLAN_SLOTS; i++) plan_release(&cb->plans[i]);
  if (cb->cudnn) cudnnDestroy(cb->cudnn);
#endif
  dev_buf *bufs[] = {&cb->in1,         &cb->in2,         &cb->out,         &cb->workspace,
                     &cb->opt_bufs[0], &cb->opt_bufs[1], &cb->opt_bufs[2], &cb->opt_bufs[3]};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) (void)dl_cuda_free(bufs[i]->p);
  dl_cuda_destroy(cb->ctx);
  (void)cudaGetLastError();
  free(cb);
}

static dl_status impl_setup(cuda_backend *cb) {
  DL_TRY(dl_cuda_enter(cb->ctx, "dl_cuda_backend_create"));
  struct cudaDeviceProp prop;
  DL_CUDA_TRY(cudaGetDeviceProperties(&prop, cb->ctx->device));
  snprintf(cb->device_name, sizeof cb->device_name, "%s", prop.name);
  cb->sm_major = prop.major;
  cb->sm_minor = prop.minor;
  const char *wc = getenv("CUBLAS_WORKSPACE_CONFIG");
  snprintf(cb->workspace_config, sizeof cb->workspace_config, "%s", wc ? wc : "unset");
#ifdef DL_CUDA_HAVE_CUDNN
  DL_CUDNN_TRY(cudnnCreate(&cb->cudnn));
  DL_CUDNN_TRY(cudnnSetStream(cb->cudnn, cb->ctx->stream));
#endif
  return DL_OK;
}

dl_status dl_cuda_backend_create(const dl_cuda_backend_options *o, dl_backend **out) {
  if (!out) return dl_fail(DL_ERR_INVALID, "dl_cuda_backend_create: no place for the backend");
  *out = NULL;
  if (!o) return dl_fail(DL_ERR_INVALID, "dl_cuda_backend_create: no options");
  if (o->math != DL_CUDA_MATH_FP32 && o->math != DL_CUDA_MATH_TF32)
    return dl_fail(DL_ERR_INVALID,
                   "dl_cuda_backend_create: unknown math mode %d (fp32 or "
                   "tf32)",
                   (int)o->math);
  if (o->conv != DL_CUDA_CONV_DETERMINISTIC && o->conv != DL_CUDA_CONV_FASTEST)
    return dl_fail(DL_ERR_INVALID,
                   "dl_cuda_backend_create: unknown convolution algorithm "
                   "choice %d (deterministic or fastest)",
                   (int)o->conv);
  int n = 0;
  DL_TRY(dl_cuda_device_count(&n)); /* "no CUDA device: <reason>" */
  cuda_backend *cb = calloc(1, sizeof *cb);
  if (!cb) return dl_fail(DL_ERR_NOMEM, "dl_cuda_backend_create: no memory for the backend");
  cb->opt = *o;
  dl_status s = dl_cuda_init(o->device, o->math, &cb->ctx);
  if (s == DL_OK) s = impl_setup(cb);
  if (s != DL_OK) {
    impl_destroy(cb);
    return dl_fail_context(s, "CUDA backend on GPU %d: ", o->device);
  }
  cb->iface.name = "cuda";
  cb->iface.impl = cb;
  cb->iface.sgemm = cb_sgemm;
  cb->iface.optim_step = cb_optim_step;
  cb->iface.dropout_mask = cb_dropout_mask;
#ifdef DL_CUDA_HAVE_CUDNN
  cb->iface.conv2d_forward = cb_conv_forward;
  cb->iface.conv2d_backward_data = cb_conv_backward_data;
  cb->iface.conv2d_backward_filter = cb_conv_backward_filter;
#endif
  *out = &cb->iface;
  return DL_OK;
}

void dl_cuda_backend_destroy(dl_backend *b) {
  if (b) impl_destroy(b->impl);
}

/* "13.0.2" from cuBLAS's own properties (the loaded library). */
static void cublas_version(char *buf, size_t len) {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    snprintf(buf, len, "unknown");
  else snprintf(buf, len, "%d.%d.%d", major, minor, patch);
}

static void cudnn_version(char *buf, size_t len) {
#ifdef DL_CUDA_HAVE_CUDNN
  size_t v = cudnnGetVersion(); /* 9: major*10000 + minor*100 + patch; 8: *1000 */
  if (v >= 90000) snprintf(buf, len, "%zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
  else snprintf(buf, len, "%zu.%zu.%zu", v / 1000, v % 1000 / 100, v % 100);
#else
  snprintf(buf, len, "not built (convolutions on the CPU)");
#endif
}

const char *dl_cuda_backend_describe(const dl_backend *b, char *buf, size_t len) {
  if (!buf || len == 0) return buf;
  if (!b || !b->impl) {
    snprintf(buf, len, "no CUDA backend");
    return buf;
  }
  const cuda_backend *cb = b->impl;
  char blas[32], dnn[64];
  cublas_version(blas, sizeof blas);
  cudnn_version(dnn, sizeof dnn);
  snprintf(buf, len,
           "cuda:%d %s (sm_%d%d), math %s, conv %s, cuBLAS %s, cuDNN %s, "
           "CUBLAS_WORKSPACE_CONFIG=%s",
           cb->ctx->device, cb->device_name, cb->sm_major, cb->sm_minor,
           dl_cuda_math_name(cb->opt.math), dl_cuda_conv_algo_name(cb->opt.conv), blas, dnn,
           cb->workspace_config);
  return buf;
}

const char *dl_cuda_backend_algorithms(const dl_backend *b, char *buf, size_t len) {
  if (!buf || len == 0) return buf;
  buf[0] = '\0';
  if (!b || !b->impl) return buf;
#ifdef DL_CUDA_HAVE_CUDNN
  const cuda_backend *cb = b->impl;
  static const char *const op_short[OP_COUNT] = {"fwd", "bwd-data", "bwd-filter"};
  for (int op = 0; op < OP_COUNT; op++)
    for (int a = 0; a < MAX_ALGOS; a++)
      for (int det = 1; det >= 0; det--)
        if (cb->seen[op][a] & (det ? 2 : 1))
          append(buf, len, "%s%s %s (%s)", buf[0] ? ", " : "", op_short[op],
                 algo_name((conv_op)op, a), det ? "deterministic" : "non-deterministic");
#else
  snprintf(buf, len, "on the CPU (this build has no cuDNN)");
#endif
  return buf;
}
