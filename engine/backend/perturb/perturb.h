/* A CPU backend that computes GEMMs and convolutions in another fixed
 * summation order, chosen by a seed: the stand-in for another BLAS or
 * cuDNN when a golden is calibrated on the CPU (dlcheck record --repeat).
 *
 * dl_sgemm sums each output element as an fmaf chain over k = 0..K-1.
 * This backend forms each product in float (no fused multiply-add) and
 * sums the products in one of three orders, as other libraries do:
 *   rotated   the chain starts at k = r (r from the seed) and wraps around;
 *   blocked   blocks of B = 2, 4, 8 or 16 products are summed, then the
 *             block sums in order (split-K, tensor-core tiles);
 *   pairwise  recursive halving down to runs of B (tree reductions).
 * Seed s uses order s % 3 with r and B drawn from the seed, so a given seed
 * gives the same bits on every run and machine (calibrations repeat
 * exactly) and different seeds give different roundings. Convolutions sum
 * their taps the same way. Optimizer steps and dropout stay on the CPU. */
#ifndef DL_PERTURB_H
#define DL_PERTURB_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* *out: a new backend for one thread; seed 0 is refused (0 means "no
 * perturbation" to the callers). */
dl_status dl_perturb_backend_create(uint64_t seed, dl_backend **out);
void dl_perturb_backend_destroy(dl_backend *b); /* NULL allowed */
/* "rotated (start 5 of K)" etc. into buf, for notes and golden files. */
const char *dl_perturb_describe(uint64_t seed, char *buf, size_t len);

#endif
