/* A model: an ordered list of layers built from descriptions, with
 * PyTorch-style state-dict names, per-parameter requires_grad and
 * in-optimizer flags, train/eval mode, and grad mode per call (dl_ctx). */
#ifndef DL_MODEL_H
#define DL_MODEL_H

#include "nn/layer.h"

typedef struct dl_model dl_model;

dl_status dl_model_create(dl_model **out, const dl_layer_desc *layers, int n, uint64_t seed);
void dl_model_destroy(dl_model *m); /* NULL allowed */

/* x must stay alive until backward or release. *out is owned by the model. */
dl_status dl_model_forward(dl_model *m, const dl_ctx *ctx, const dl_tensor *x,
                           const dl_tensor **out);
dl_status dl_model_backward(dl_model *m, const dl_ctx *ctx, const dl_tensor *dout);
void dl_model_release(dl_model *m);   /* drop activations kept for backward */
void dl_model_zero_grad(dl_model *m); /* PyTorch set_to_none: has_grad = false */

void dl_model_train(dl_model *m, bool training); /* every layer, nested too */

/* Parameters and buffers in state-dict order (layer order, weight before
 * bias, nested bodies in place). Pointers stay valid for the model's life. */
int dl_model_num_params(const dl_model *m);
dl_param *dl_model_param(dl_model *m, int i);
int dl_model_num_buffers(const dl_model *m);
dl_buffer *dl_model_buffer(dl_model *m, int i);
dl_param *dl_model_find_param(dl_model *m, const char *name);
dl_buffer *dl_model_find_buffer(dl_model *m, const char *name);

/* Top-level layers, for per-layer settings (eval on one BatchNorm: M4). */
int dl_model_num_layers(const dl_model *m);
dl_layer *dl_model_layer(dl_model *m, int i);

#endif
