/* spill.h: per-step arrays on the heap, then in a mapped unnamed file. */
#define _GNU_SOURCE /* mremap, O_TMPFILE */
#include "trace/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *spill_dir(void) {
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

/* An unnamed file in dir: O_TMPFILE where the file system has it, else a
 * named one unlinked at once. -1 with errno set. */
static int unnamed_file(const char *dir) {
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/dlcheck-spill-%ld-XXXXXX", dir, (long)getpid()) >=
      sizeof path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  fd = mkostemp(path, O_CLOEXEC);
  if (fd >= 0) unlink(path);
  return fd;
}

/* The file's blocks for [0, bytes), reserved now so that writing through
 * the mapping cannot fail later. */
static dl_status reserve(int fd, size_t bytes, const char *what) {
  int e = posix_fallocate(fd, 0, (off_t)bytes);
  if (e == 0) return DL_OK;
  return dl_fail(DL_ERR_IO,
                 "cannot hold the trace's %s of a long run in %s (%.1f MiB): %s (free space "
                 "there, or set TMPDIR to a folder on a disk with room)",
                 what, spill_dir(), (double)bytes / (1 << 20), strerror(e));
}

/* Room past `bytes`: a quarter more, at least 16 MiB, whole pages. */
static size_t next_cap(size_t cap, size_t bytes) {
  size_t want = cap + (cap / 4 > (16u << 20) ? cap / 4 : (16u << 20));
  if (want < bytes) want = bytes;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (want + page - 1) / page * page;
}

/* From the heap into a new file, mapped. */
static dl_status to_file(void **data, dlc_spill *sp, size_t bytes, const char *what) {
  size_t cap = next_cap(sp->cap, bytes);
  int fd = unnamed_file(spill_dir());
  if (fd < 0)
    return dl_fail(DL_ERR_IO,
                   "cannot create a file in %s for the trace's %s of a long run: %s (set "
                   "TMPDIR to a writable folder on a disk)",
                   spill_dir(), what, strerror(errno));
  dl_status s = reserve(fd, cap, what);
  void *m = s == DL_OK ? mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (s == DL_OK && m == MAP_FAILED)
    s = dl_fail(DL_ERR_NOMEM, "cannot map the trace's %s (%.1f MiB): %s", what,
                (double)cap / (1 << 20), strerror(errno));
  if (s != DL_OK) {
    close(fd);
    return s;
  }
  if (*data) memcpy(m, *data, sp->cap < bytes ? sp->cap : bytes);
  free(*data);
  *data = m;
  *sp = (dlc_spill){.cap = cap, .mapped = true, .fd = fd};
  return DL_OK;
}

static dl_status grow_file(void **data, dlc_spill *sp, size_t bytes, const char *what) {
  size_t cap = next_cap(sp->cap, bytes);
  DL_TRY(reserve(sp->fd, cap, what));
  void *m = mremap(*data, sp->cap, cap, MREMAP_MAYMOVE);
  if (m == MAP_FAILED)
    return dl_fail(DL_ERR_NOMEM, "cannot map the trace's %s (%.1f MiB): %s", what,
                   (double)cap / (1 << 20), strerror(errno));
  *data = m;
  sp->cap = cap;
  return DL_OK;
}

dl_status dlc_spill_grow(void **data, dlc_spill *sp, size_t bytes, const char *what) {
  if (bytes <= sp->cap) return DL_OK;
  if (sp->mapped) return grow_file(data, sp, bytes, what);
  if (bytes > DLC_SPILL_AFTER) return to_file(data, sp, bytes, what);
  size_t cap = sp->cap > SIZE_MAX / 2 ? bytes : sp->cap * 2;
  if (cap < bytes) cap = bytes;
  if (cap > DLC_SPILL_AFTER) cap = DLC_SPILL_AFTER;
  void *p = realloc(*data, cap);
  if (!p) return dl_fail(DL_ERR_NOMEM, "out of memory growing the trace's %s", what);
  *data = p;
  sp->cap = cap;
  return DL_OK;
}

void dlc_spill_written(void *data, dlc_spill *sp, size_t end) {
  if (!sp->mapped || end < sp->dropped + 2 * (size_t)DLC_SPILL_CHUNK) return;
  size_t upto = (end / DLC_SPILL_CHUNK - 1) * DLC_SPILL_CHUNK; /* a chunk stays mapped */
  /* Shared file pages: dropped from the process, kept in the file. */
  if (madvise((char *)data + sp->dropped, upto - sp->dropped, MADV_DONTNEED) == 0)
    sp->dropped = upto;
}

dl_status dlc_spill_copy(void **data, dlc_spill *sp, const void *src, size_t bytes,
                         const char *what) {
  DL_TRY(dlc_spill_grow(data, sp, bytes ? bytes : 1, what));
  for (size_t at = 0; at < bytes; at += DLC_SPILL_CHUNK) {
    size_t n = bytes - at < DLC_SPILL_CHUNK ? bytes - at : DLC_SPILL_CHUNK;
    memcpy((char *)*data + at, (const char *)src + at, n);
    dlc_spill_written(*data, sp, at + n);
  }
  return DL_OK;
}

void dlc_spill_free(void *data, dlc_spill *sp) {
  if (sp->mapped) {
    if (data) munmap(data, sp->cap);
    close(sp->fd);
  } else {
    free(data);
  }
  *sp = (dlc_spill){0};
}
