/* The per-kind pieces layer.c dispatches to, and the helpers they share.
 * Each engine/nn/kinds/<kind>.c defines its ops table, its check (if its
 * description has something to check) and, if the kind has parameters or
 * buffers, an init function that creates them in l->params / l->buffers
 * (named l->prefix + "weight", ...) and fills them with PyTorch's default
 * initialisation drawn from the stream (seed, "init/" + full name). The
 * registry (layer_kinds.h) names them; kinds without parameters or without
 * anything to check name dl_layer_no_init / dl_layer_no_check. */
#ifndef DL_CPU_KINDS_H
#define DL_CPU_KINDS_H

#include "nn/layer.h"
#include "numerics/philox.h"

/* Every ops table, init and check function the registry (layer_kinds.h)
 * names; a kind shared by two entries (batchnorm1d and 2d) is declared
 * twice, which C allows. */
#define DL_DECLARE_KIND(id, name, ops, init, check, keys) \
  extern const dl_layer_ops ops;                          \
  dl_status init(dl_layer *l, uint64_t seed);             \
  dl_status check(const char *label, const dl_layer_desc *d);
DL_LAYER_KINDS(DL_DECLARE_KIND)
#undef DL_DECLARE_KIND

/* How messages name a layer with this prefix and kind (dl_layer_label's
 * rule), before the layer exists. */
const char *dl_layer_label_of(const char *prefix, dl_layer_kind kind, char *buf, size_t len);

/* Validation helpers the kinds' checks share (layer.c); each fails with
 * "LABEL: FIELD must be ..., got VALUE". */
dl_status dl_layer_need_positive(const char *label, const char *field, int64_t v);
/* kernel > 0, stride >= min_stride (0 means "as the kernel"), padding >= 0. */
dl_status dl_layer_check_window(const char *label, const dl_layer_desc *d, int min_stride);
/* num_features > 0, finite eps > 0, and momentum in [0, 1] if it has one. */
dl_status dl_layer_check_norm(const char *label, const dl_layer_desc *d, bool has_momentum);

/* A backward's output gradient dy: float32 of exactly the shape the
 * forward gave its output (ndim <= DL_MAX_DIMS), else "LAYER: output
 * gradient is [..] T; expected [..] float32". A backward reads dy by that
 * shape, never past it. dl_layer_check_dy: the shape of `like` (the input
 * or activation, for layers whose output is shaped like it). */
dl_status dl_layer_check_dy_shape(const dl_layer *l, const dl_tensor *dy, int ndim,
                                  const int64_t *shape);
dl_status dl_layer_check_dy(const dl_layer *l, const dl_tensor *dy, const dl_tensor *like);

/* Creates l->params[l->nparams++] named prefix+suffix, shaped as given,
 * requires_grad and in_optimizer on; grad allocated alongside. */
dl_status dl_layer_add_param(dl_layer *l, const char *suffix, int ndim, const int64_t *shape);
dl_status dl_layer_add_buffer(dl_layer *l, const char *suffix, dl_dtype dt, int ndim,
                              const int64_t *shape);

/* The stream that initialises parameter p: (seed, "init/" + p's name). */
dl_stream dl_param_init_stream(const dl_param *p, uint64_t seed);
/* Every parameter of l drawn from U(-bound, bound) (PyTorch's
 * kaiming_uniform_(a=sqrt(5)) and bias rule, bound = 1/sqrt(fan_in)). */
void dl_layer_init_uniform(dl_layer *l, uint64_t seed, float bound);

/* y [rows, out] = x [rows, in] w^T + bias on ctx's backend: Linear's
 * addmm, with x, w and bias (NULL: none) as the caller rounded them under
 * autocast, each element's sum starting from the bias (dl_sgemm_bias), and
 * y rounded under autocast after. */
dl_status dl_layer_affine_forward(const dl_ctx *ctx, const float *x, const float *w,
                                  const float *bias, int64_t rows, int64_t in, int64_t out,
                                  float *y);

/* Keeps a and b in l->saved for backward in grad mode, else frees them. */
void dl_layer_keep_saved(dl_layer *l, const dl_ctx *ctx, dl_tensor *a, dl_tensor *b);

#endif
