/* Memory accounting: every tensor's bytes go through here, so that the
 * engine can report bytes held now and the peak, like PyTorch's
 * memory_allocated / max_memory_allocated. Activations kept for backward are
 * tensors too, which is what makes inference without no-grad visibly cost
 * memory (pitfall M2). Counters are process-wide and atomic.
 *
 * Freed blocks go to a cache of size classes (PyTorch's caching allocator
 * idea), so that a training loop allocating the same activations every step
 * reuses warm pages instead of faulting in fresh ones. Cached bytes are not
 * "allocated": dl_mem_current and dl_mem_peak count live blocks only. */
#ifndef DL_MEM_H
#define DL_MEM_H

#include <stddef.h>
#include <stdint.h>

/* Zeroed, 64-byte aligned block of `bytes` (0 allowed); NULL on failure,
 * with a message naming `what`. */
void *dl_mem_alloc(size_t bytes, const char *what);
/* The same, but the contents are unspecified: only for buffers the caller
 * overwrites entirely before reading them. */
void *dl_mem_alloc_uninit(size_t bytes, const char *what);
void dl_mem_free(void *p); /* NULL allowed */

int64_t dl_mem_current(void);
int64_t dl_mem_peak(void);
void dl_mem_reset_peak(void); /* peak := current */

/* Bytes of freed blocks kept for reuse, and returning them to the system
 * (PyTorch's empty_cache). Safe at any time, from any thread. */
int64_t dl_mem_cached(void);
void dl_mem_trim(void);

/* Tests: make the n-th allocation from now fail (n >= 1); 0 disables. */
void dl_mem_fail_after(int64_t n);

#endif
