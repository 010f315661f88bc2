#include "core/tensor.h"

#include "core/mem.h"

#include <stdio.h>
#include <string.h>

size_t dl_dtype_size(dl_dtype dt) {
  switch (dt) {
  case DL_F32:
  case DL_I32: return 4;
  case DL_F16:
  case DL_BF16: return 2;
  case DL_I64: return 8;
  }
  return 0;
}

const char *dl_dtype_name(dl_dtype dt) {
  switch (dt) {
  case DL_F32: return "float32";
  case DL_F16: return "float16";
  case DL_BF16: return "bfloat16";
  case DL_I32: return "int32";
  case DL_I64: return "int64";
  }
  return "unknown";
}

static dl_status tensor_alloc(dl_tensor *t, dl_dtype dt, int ndim, const int64_t *shape,
                              const char *what, bool zero) {
  const char *name = what ? what : "tensor";
  if (ndim < 0 || ndim > DL_MAX_DIMS)
    return dl_fail(DL_ERR_INVALID, "%s: rank %d is outside 0..%d", name, ndim, DL_MAX_DIMS);
  if (dl_dtype_size(dt) == 0) return dl_fail(DL_ERR_INVALID, "%s: unknown dtype %d", name, (int)dt);
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return dl_fail(DL_ERR_INVALID, "%s: dimension %d is negative (%lld)", name, i,
                     (long long)shape[i]);
    if (shape[i] > 0 && numel > INT64_MAX / 8 / shape[i])
      return dl_fail(DL_ERR_INVALID, "%s: shape is too large", name);
    numel *= shape[i];
  }
  memset(t, 0, sizeof *t);
  size_t bytes = (size_t)numel * dl_dtype_size(dt);
  t->data = zero ? dl_mem_alloc(bytes, name) : dl_mem_alloc_uninit(bytes, name);
  if (!t->data) return DL_ERR_NOMEM;
  t->dtype = dt;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->numel = numel;
  return DL_OK;
}

dl_status dl_tensor_alloc(dl_tensor *t, dl_dtype dt, int ndim, const int64_t *shape,
                          const char *what) {
  return tensor_alloc(t, dt, ndim, shape, what, true);
}

dl_status dl_tensor_alloc_uninit(dl_tensor *t, dl_dtype dt, int ndim, const int64_t *shape,
                                 const char *what) {
  return tensor_alloc(t, dt, ndim, shape, what, false);
}

dl_status dl_tensor_f32(dl_tensor *t, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                        const char *what) {
  const int64_t shape[DL_MAX_DIMS] = {d0, d1, d2, d3};
  return dl_tensor_alloc(t, DL_F32, ndim, shape, what);
}

dl_status dl_tensor_clone(dl_tensor *dst, const dl_tensor *src, const char *what) {
  DL_TRY(dl_tensor_alloc(dst, src->dtype, src->ndim, src->shape, what));
  if (src->numel) memcpy(dst->data, src->data, dl_tensor_bytes(src));
  return DL_OK;
}

dl_status dl_tensor_copy_into(dl_tensor *dst, const dl_tensor *src, const char *what) {
  if (dst->dtype != src->dtype || !dl_tensor_same_shape(dst, src)) {
    char a[96], b[96];
    return dl_fail(DL_ERR_INVALID, "%s: expected %s, got %s", what ? what : "tensor",
                   dl_tensor_describe(dst, a, sizeof a), dl_tensor_describe(src, b, sizeof b));
  }
  if (src->numel) memcpy(dst->data, src->data, dl_tensor_bytes(src));
  return DL_OK;
}

void dl_tensor_free(dl_tensor *t) {
  if (!t) return;
  dl_mem_free(t->data);
  memset(t, 0, sizeof *t);
}

void dl_tensor_zero(dl_tensor *t) {
  if (t->data) memset(t->data, 0, dl_tensor_bytes(t));
}

dl_status dl_tensor_reshape(dl_tensor *t, int ndim, const int64_t *shape) {
  int64_t numel = 1;
  if (ndim < 0 || ndim > DL_MAX_DIMS)
    return dl_fail(DL_ERR_INVALID, "reshape: rank %d is outside 0..%d", ndim, DL_MAX_DIMS);
  for (int i = 0; i < ndim; i++) numel *= shape[i];
  if (numel != t->numel) {
    char a[96];
    return dl_fail(DL_ERR_INVALID, "reshape of %s to %lld elements",
                   dl_tensor_describe(t, a, sizeof a), (long long)numel);
  }
  t->ndim = ndim;
  for (int i = 0; i < DL_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 0;
  return DL_OK;
}

bool dl_tensor_same_shape(const dl_tensor *a, const dl_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

const char *dl_tensor_describe(const dl_tensor *t, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < t->ndim && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (n < len) snprintf(buf + n, len - n, "] %s", dl_dtype_name(t->dtype));
  return buf;
}
