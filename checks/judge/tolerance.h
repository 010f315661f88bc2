/* The tolerance model: every comparison names its rule, per quantity.
 *   bitwise        identical bits (NaN == NaN only if the same bits)
 *   ulp(n)         at most n units in the last place apart (float32)
 *   close(rt, at)  |a - b| <= at + rt * |b|, as torch.testing.assert_close
 * Defaults by dtype follow torch.testing: float32 1.3e-6/1e-5, float16
 * 1e-3/1e-5, bfloat16 1.6e-2/1e-5. A failed comparison says where it first
 * failed and by how much, never just "mismatch". */
#ifndef DLC_TOLERANCE_H
#define DLC_TOLERANCE_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { DLC_TOL_BITWISE, DLC_TOL_ULP, DLC_TOL_CLOSE } dlc_tol_kind;

typedef struct dlc_tolerance {
  dlc_tol_kind kind;
  int64_t ulp;       /* ulp(n) */
  double rtol, atol; /* close */
} dlc_tolerance;

dlc_tolerance dlc_tolerance_default(dl_dtype dt); /* close(...) by dtype */
dlc_tolerance dlc_tolerance_bitwise(void);
/* Parses "bitwise", "ulp(4)", "close(1e-5, 1e-6)"; DL_ERR_INVALID otherwise. */
dl_status dlc_tolerance_parse(const char *text, dlc_tolerance *out);
/* "close(rtol=1.3e-06, atol=1e-05)" into buf; returns buf. */
const char *dlc_tolerance_describe(const dlc_tolerance *t, char *buf, size_t len);

/* Result of comparing a against b (b is the reference) element by element. */
typedef struct dlc_diff {
  bool ok;
  int64_t n;               /* elements compared */
  int64_t nbad;            /* elements outside the tolerance */
  int64_t first_bad;       /* index of the first, -1 if none */
  double max_abs, max_rel; /* over all elements */
  uint64_t max_ulp;        /* over all elements (float32 ULP distance) */
  double a_at_first, b_at_first;
} dlc_diff;

/* ULP distance between two float32 values (0 for identical bits; huge for
 * opposite signs or NaN against a number). */
uint64_t dlc_ulp_distance(float a, float b);

dlc_diff dlc_compare_f32(const float *a, const float *b, int64_t n, const dlc_tolerance *t);
dlc_diff dlc_compare_f64(const double *a, const double *b, int64_t n, const dlc_tolerance *t);
/* Tensors of any dtype (int tensors compare exactly); shape mismatch -> ok=false, n=-1. */
dlc_diff dlc_compare_tensors(const dl_tensor *a, const dl_tensor *b, const dlc_tolerance *t);

/* One float32 ULP at magnitude m: the least error a float32 value carries
 * (0 at 0 and for inf/NaN). */
double dlc_ulp32(double m);
/* The largest |x| of a float32 tensor (0 for other dtypes and empty ones). */
double dlc_max_magnitude(const dl_tensor *t);

/* "max abs 1.2e-03, max rel 4.0e-05, 812 ulp, 3 of 640 elements outside
 * close(rtol=1.3e-06, atol=1e-05), first at [17]: 0.1234 vs 0.1221" */
const char *dlc_diff_describe(const dlc_diff *d, const dlc_tolerance *t, char *buf, size_t len);

#endif
