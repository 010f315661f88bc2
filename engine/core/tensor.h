/* Tensors: a dtype, a shape of up to 4 dimensions (0-D scalars too) and an
 * owned, accounted buffer. Compute is float32; float16/bfloat16 are storage
 * formats (see half.h); int32 holds labels and token ids; int64 holds
 * counters such as BatchNorm's num_batches_tracked, as in PyTorch. */
#ifndef DL_TENSOR_H
#define DL_TENSOR_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum dl_dtype { DL_F32 = 0, DL_F16, DL_BF16, DL_I32, DL_I64 } dl_dtype;

enum { DL_MAX_DIMS = 4 };

typedef struct dl_tensor {
  dl_dtype dtype;
  int ndim;
  int64_t shape[DL_MAX_DIMS];
  int64_t numel;
  void *data; /* owned; from dl_mem_alloc; NULL for an empty tensor */
} dl_tensor;

size_t dl_dtype_size(dl_dtype dt);
const char *dl_dtype_name(dl_dtype dt);

/* Allocates a zeroed tensor. `t` must be empty ({0} or freed). `what` names
 * the tensor in error messages ("0.weight", "activation 3"). */
dl_status dl_tensor_alloc(dl_tensor *t, dl_dtype dt, int ndim, const int64_t *shape,
                          const char *what);
/* The same with unspecified contents, for outputs of which every element is
 * written before it is read (saves the zeroing on hot paths). */
dl_status dl_tensor_alloc_uninit(dl_tensor *t, dl_dtype dt, int ndim, const int64_t *shape,
                                 const char *what);
/* Shorthands for float32 tensors of rank 1..4. */
dl_status dl_tensor_f32(dl_tensor *t, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                        const char *what);
/* dst := a new copy of src. */
dl_status dl_tensor_clone(dl_tensor *dst, const dl_tensor *src, const char *what);
/* Same shape and dtype? Then copy the bytes; else DL_ERR_INVALID naming `what`. */
dl_status dl_tensor_copy_into(dl_tensor *dst, const dl_tensor *src, const char *what);
void dl_tensor_free(dl_tensor *t); /* leaves t empty; safe on empty */
void dl_tensor_zero(dl_tensor *t);
/* Same element count, new shape, no copy. */
dl_status dl_tensor_reshape(dl_tensor *t, int ndim, const int64_t *shape);

bool dl_tensor_same_shape(const dl_tensor *a, const dl_tensor *b);
static inline bool dl_tensor_empty(const dl_tensor *t) { return t->data == NULL; }
static inline size_t dl_tensor_bytes(const dl_tensor *t) {
  return (size_t)t->numel * dl_dtype_size(t->dtype);
}
static inline float *dl_f32(const dl_tensor *t) { return (float *)t->data; }
static inline int32_t *dl_i32(const dl_tensor *t) { return (int32_t *)t->data; }

/* "[64, 1, 28, 28] float32" into buf (>= 64 bytes); returns buf. */
const char *dl_tensor_describe(const dl_tensor *t, char *buf, size_t len);

#endif
