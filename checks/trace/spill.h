/* Where a trace's per-step arrays live (a series' values, the digests):
 * on the heap while they are small, and past DLC_SPILL_AFTER bytes in an
 * unnamed file in $TMPDIR (/tmp without it) mapped shared. The array stays
 * one pointer that checks and writers index as before; what a long run
 * keeps in the process is about one chunk, since the pages behind the last
 * DLC_SPILL_CHUNK bytes are dropped from it as the array grows (they stay
 * in the file, where the kernel writes them back; reading them again
 * faults them in as reclaimable page cache, not as the process's own
 * memory). The file's space is reserved (posix_fallocate) before it is
 * mapped, so a full disk or `ulimit -f` is an error naming the folder,
 * never a SIGBUS; the file is unlinked at once, so nothing is left
 * whatever way the process ends. */
#ifndef DLC_SPILL_H
#define DLC_SPILL_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>

enum {
  DLC_SPILL_AFTER = 1 << 20, /* bytes an array may hold on the heap (131072 steps) */
  DLC_SPILL_CHUNK = 1 << 20  /* bytes a spilled array keeps mapped in the process */
};

typedef struct dlc_spill {
  size_t cap;  /* bytes the array has room for */
  bool mapped; /* in a file (fd), else on the heap */
  int fd;
  size_t dropped; /* mapped: bytes [0, dropped) are out of the process */
} dlc_spill;

/* *data has room for `bytes` (at least), its contents kept: the heap (a
 * doubling realloc) up to DLC_SPILL_AFTER, then the file. `what` names the
 * array in messages. On failure *data and sp are as they were. */
dl_status dlc_spill_grow(void **data, dlc_spill *sp, size_t bytes, const char *what);
/* The array's bytes [0, end) are written: a mapped one drops from the
 * process the whole chunks below end (a system call once per chunk). */
void dlc_spill_written(void *data, dlc_spill *sp, size_t end);
/* *data (empty: NULL, sp zeroed) := a copy of src's `bytes`, a chunk at a
 * time (dlc_spill_written after each), so that a long copy stays out of
 * the process too. */
dl_status dlc_spill_copy(void **data, dlc_spill *sp, const void *src, size_t bytes,
                         const char *what);
/* Frees the array (NULL: nothing) and empties sp. */
void dlc_spill_free(void *data, dlc_spill *sp);

#endif
