/* Accounted allocation with a cache of freed blocks.
 *
 * Each block starts with a 64-byte header (requested size, size class, cache
 * link), so that dl_mem_free needs no size and the accounting cannot drift.
 * A freed block goes onto the free list of its size class, up to CACHE_MAX
 * bytes in all; the next allocation of that class takes it back. Without
 * this, every training step would fault in (and zero) fresh pages for its
 * large activations, which glibc serves from mmap and returns at free. */
#include "core/mem.h"

#include "core/status.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Under valgrind and AddressSanitizer, cached blocks are unaddressable and
 * reissued ones addressable (undefined, for memcheck) up to the size
 * asked, so that both still see use-after-free, overruns and reads of
 * memory nobody wrote, as they would without the cache. */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define DL_MEM_HAVE_MEMCHECK 1
#endif
#endif
#ifndef DL_MEM_HAVE_MEMCHECK
#define VALGRIND_MAKE_MEM_NOACCESS(p, n) ((void)(p), (void)(n))
#define VALGRIND_MAKE_MEM_UNDEFINED(p, n) ((void)(p), (void)(n))
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

static void hide(void *p, size_t n) {
  VALGRIND_MAKE_MEM_NOACCESS(p, n);
  ASAN_POISON_MEMORY_REGION(p, n);
}

static void reveal(void *p, size_t n) {
  VALGRIND_MAKE_MEM_UNDEFINED(p, n);
  ASAN_UNPOISON_MEMORY_REGION(p, n);
}

enum {
  DL_MEM_ALIGN = 64,
  SMALL_LIMIT = 1024, /* blocks up to this size: classes 64 bytes apart */
  SMALL_CLASSES = SMALL_LIMIT / DL_MEM_ALIGN,
  SUBCLASSES = 8,    /* above it: eight classes per power of two */
  LARGEST_LOG2 = 62, /* no block exceeds 2^62 bytes */
  NCLASSES = SMALL_CLASSES + (LARGEST_LOG2 - 10) * SUBCLASSES
};

static const size_t CACHE_MAX = (size_t)256 << 20;
static const size_t LARGEST_BLOCK = (size_t)1 << LARGEST_LOG2;

typedef struct block_header {
  size_t bytes;    /* as asked and accounted */
  size_t capacity; /* the whole block, header included */
  int size_class;
  struct block_header *next; /* while cached */
} block_header;

_Static_assert(sizeof(block_header) <= DL_MEM_ALIGN, "the header fits in front of the block");

static _Atomic int64_t mem_current, mem_peak, mem_fail_countdown;

static struct {
  pthread_mutex_t mu;
  block_header *free[NCLASSES];
  size_t bytes;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The class of a block of `total` bytes (header included), 64 < total <=
 * LARGEST_BLOCK, and the class's block size in *capacity: a multiple of 64
 * up to SMALL_LIMIT, then one of eight steps between powers of two, so
 * that a block is at most an eighth larger than asked. */
static int size_class(size_t total, size_t *capacity) {
  if (total <= SMALL_LIMIT) {
    *capacity = (total + DL_MEM_ALIGN - 1) / DL_MEM_ALIGN * DL_MEM_ALIGN;
    return (int)(*capacity / DL_MEM_ALIGN) - 1;
  }
  const int e = 63 - __builtin_clzll((unsigned long long)(total - 1)); /* 2^e < total */
  const size_t step = (size_t)1 << (e - 3);
  const size_t units = (total + step - 1) / step; /* 9 .. 16 */
  *capacity = units * step;
  return SMALL_CLASSES + (e - 10) * SUBCLASSES + (int)(units - 9);
}

static block_header *cache_take(int cls) {
  pthread_mutex_lock(&cache.mu);
  block_header *h = cache.free[cls];
  if (h) {
    cache.free[cls] = h->next;
    cache.bytes -= h->capacity;
  }
  pthread_mutex_unlock(&cache.mu);
  return h;
}

/* Returns whether the cache kept h. The payload is made unaddressable
 * before h is published: another thread may take it at once. */
static bool cache_put(block_header *h) {
  hide((unsigned char *)h + DL_MEM_ALIGN, h->capacity - DL_MEM_ALIGN);
  bool kept = false;
  pthread_mutex_lock(&cache.mu);
  if (h->capacity <= CACHE_MAX - cache.bytes) {
    h->next = cache.free[h->size_class];
    cache.free[h->size_class] = h;
    cache.bytes += h->capacity;
    kept = true;
  }
  pthread_mutex_unlock(&cache.mu);
  return kept;
}

/* Back to the system, addressable again for its allocator. */
static void release(block_header *h) {
  ASAN_UNPOISON_MEMORY_REGION((unsigned char *)h + DL_MEM_ALIGN, h->capacity - DL_MEM_ALIGN);
  free(h);
}

static block_header *fresh_block(size_t capacity, int cls) {
  block_header *h = aligned_alloc(DL_MEM_ALIGN, capacity);
  if (!h) {
    dl_mem_trim(); /* the cache may hold what the system lacks */
    h = aligned_alloc(DL_MEM_ALIGN, capacity);
  }
  if (!h) return NULL;
  h->capacity = capacity;
  h->size_class = cls;
  return h;
}

static void count_allocation(size_t bytes) {
  int64_t now = atomic_fetch_add(&mem_current, (int64_t)bytes) + (int64_t)bytes;
  int64_t peak = atomic_load(&mem_peak);
  while (now > peak && !atomic_compare_exchange_weak(&mem_peak, &peak, now)) {
  }
}

static void *allocate(size_t bytes, const char *what, bool zero) {
  const char *name = what ? what : "tensor";
  int64_t left = atomic_load(&mem_fail_countdown);
  if (left > 0 && atomic_fetch_sub(&mem_fail_countdown, 1) == 1) {
    dl_fail(DL_ERR_NOMEM, "out of memory allocating %zu bytes for %s (injected)", bytes, name);
    return NULL;
  }
  if (bytes > LARGEST_BLOCK - DL_MEM_ALIGN) {
    dl_fail(DL_ERR_NOMEM, "allocation of %zu bytes for %s is too large", bytes, name);
    return NULL;
  }
  size_t capacity;
  const int cls = size_class(bytes + DL_MEM_ALIGN, &capacity);
  block_header *h = cache_take(cls);
  if (!h) h = fresh_block(capacity, cls);
  if (!h) {
    dl_fail(DL_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes, name);
    return NULL;
  }
  h->bytes = bytes;
  unsigned char *p = (unsigned char *)h + DL_MEM_ALIGN;
  reveal(p, bytes);
  hide(p + bytes, h->capacity - DL_MEM_ALIGN - bytes); /* the class's slack */
  if (zero) memset(p, 0, bytes);
  count_allocation(bytes);
  return p;
}

void *dl_mem_alloc(size_t bytes, const char *what) { return allocate(bytes, what, true); }

void *dl_mem_alloc_uninit(size_t bytes, const char *what) { return allocate(bytes, what, false); }

void dl_mem_free(void *p) {
  if (!p) return;
  block_header *h = (block_header *)((unsigned char *)p - DL_MEM_ALIGN);
  atomic_fetch_sub(&mem_current, (int64_t)h->bytes);
  if (!cache_put(h)) release(h);
}

void dl_mem_trim(void) {
  block_header *lists[NCLASSES];
  pthread_mutex_lock(&cache.mu);
  memcpy(lists, cache.free, sizeof lists);
  memset(cache.free, 0, sizeof cache.free);
  cache.bytes = 0;
  pthread_mutex_unlock(&cache.mu);
  for (int c = 0; c < NCLASSES; c++) {
    while (lists[c]) {
      block_header *next = lists[c]->next;
      release(lists[c]);
      lists[c] = next;
    }
  }
}

int64_t dl_mem_cached(void) {
  pthread_mutex_lock(&cache.mu);
  size_t bytes = cache.bytes;
  pthread_mutex_unlock(&cache.mu);
  return (int64_t)bytes;
}

int64_t dl_mem_current(void) { return atomic_load(&mem_current); }
int64_t dl_mem_peak(void) { return atomic_load(&mem_peak); }
void dl_mem_reset_peak(void) { atomic_store(&mem_peak, atomic_load(&mem_current)); }
void dl_mem_fail_after(int64_t n) { atomic_store(&mem_fail_countdown, n > 0 ? n : 0); }
