/* A fixed pool of worker threads for the heavy kernels.
 *
 * Contract (determinism rule 2): fn(ctx, begin, end) computes each index of
 * its range independently of how the range was split, so results are
 * bitwise the same for every thread count. Never split a reduction across
 * threads: give each thread whole outputs. */
#ifndef DL_THREADS_H
#define DL_THREADS_H

#include "core/status.h"

#include <stdint.h>

typedef void (*dl_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Threads used by dl_parallel_for (>= 1). Default: DL_NUM_THREADS from the
 * environment, else 1. */
dl_status dl_set_num_threads(int n);
int dl_get_num_threads(void);

/* Runs fn over [0, n) in chunks of at least `grain` indices. Safe to call
 * from several threads at once (a busy pool runs the call inline). Workers
 * poll for the next job for up to 0.2 ms before they sleep (threads.c), so
 * they show as busy for that long after each job. */
void dl_parallel_for(int64_t n, int64_t grain, dl_range_fn fn, void *ctx);

/* Joins the pool's threads (tests, valgrind). The pool restarts on demand. */
void dl_threads_shutdown(void);

#endif
