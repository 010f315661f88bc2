#include "mem.h"

#include "status.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The block size is stored in a header in front of the block, so that
 * dl_mem_free needs no size and the accounting cannot drift. */
enum { DL_MEM_ALIGN = 64 };

static _Atomic int64_t mem_current, mem_peak, mem_fail_countdown;

void *dl_mem_alloc(size_t bytes, const char *what) {
  int64_t left = atomic_load(&mem_fail_countdown);
  if (left > 0 && atomic_fetch_sub(&mem_fail_countdown, 1) == 1) {
    dl_fail(DL_ERR_NOMEM, "out of memory allocating %zu bytes for %s (injected)",
            bytes, what ? what : "tensor");
    return NULL;
  }
  if (bytes > SIZE_MAX - 2 * DL_MEM_ALIGN) {
    dl_fail(DL_ERR_NOMEM, "allocation of %zu bytes for %s is too large", bytes,
            what ? what : "tensor");
    return NULL;
  }
  size_t total = (bytes + 2 * DL_MEM_ALIGN - 1) / DL_MEM_ALIGN * DL_MEM_ALIGN;
  unsigned char *base = aligned_alloc(DL_MEM_ALIGN, total);
  if (!base) {
    dl_fail(DL_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes,
            what ? what : "tensor");
    return NULL;
  }
  memset(base, 0, total);
  memcpy(base, &bytes, sizeof bytes);
  int64_t now = atomic_fetch_add(&mem_current, (int64_t)bytes) + (int64_t)bytes;
  int64_t peak = atomic_load(&mem_peak);
  while (now > peak && !atomic_compare_exchange_weak(&mem_peak, &peak, now)) {
  }
  return base + DL_MEM_ALIGN;
}

void dl_mem_free(void *p) {
  if (!p) return;
  unsigned char *base = (unsigned char *)p - DL_MEM_ALIGN;
  size_t bytes;
  memcpy(&bytes, base, sizeof bytes);
  atomic_fetch_sub(&mem_current, (int64_t)bytes);
  free(base);
}

int64_t dl_mem_current(void) { return atomic_load(&mem_current); }
int64_t dl_mem_peak(void) { return atomic_load(&mem_peak); }
void dl_mem_reset_peak(void) { atomic_store(&mem_peak, atomic_load(&mem_current)); }
void dl_mem_fail_after(int64_t n) { atomic_store(&mem_fail_countdown, n > 0 ? n : 0); }
