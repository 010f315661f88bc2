/* Column sums of a row-major matrix in a fixed order: what a bias's
 * gradient is (db = the sum of dy's rows). */
#ifndef DL_SUMS_H
#define DL_SUMS_H

#include <stdint.h>

/* out[c] = (((+0 + x[0][c]) + x[1][c]) + ...) + x[rows-1][c] in float32, for
 * c in [0, cols), row r at x + r * ldx (ldx >= cols): rows in increasing
 * order, each column on its own, so the bits do not depend on the CPU.
 * out must not overlap x. */
void dl_sum_rows(const float *x, int64_t rows, int64_t cols, int64_t ldx, float *out);

#endif
