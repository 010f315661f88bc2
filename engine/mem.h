/* Memory accounting: every tensor's bytes go through here, so that the
 * engine can report bytes held now and the peak, like PyTorch's
 * memory_allocated / max_memory_allocated. Activations kept for backward are
 * tensors too, which is what makes inference without no-grad visibly cost
 * memory (pitfall M2). Counters are process-wide and atomic. */
#ifndef DL_MEM_H
#define DL_MEM_H

#include <stddef.h>
#include <stdint.h>

/* Zeroed, 64-byte aligned block of `bytes` (0 allowed); NULL on failure,
 * with a message naming `what`. */
void *dl_mem_alloc(size_t bytes, const char *what);
void dl_mem_free(void *p); /* NULL allowed */

int64_t dl_mem_current(void);
int64_t dl_mem_peak(void);
void dl_mem_reset_peak(void); /* peak := current */

/* Tests: make the n-th allocation from now fail (n >= 1); 0 disables. */
void dl_mem_fail_after(int64_t n);

#endif
