/* The per-kind pieces layer.c dispatches to. Each engine/cpu/<kind>.c
 * defines its ops table and, if the kind has parameters or buffers, an init
 * function that creates them in l->params / l->buffers (named
 * l->prefix + "weight", ...) and fills them with PyTorch's default
 * initialisation drawn from the stream (seed, "init/" + full name).
 * Kinds without parameters have no init function. */
#ifndef DL_CPU_KINDS_H
#define DL_CPU_KINDS_H

#include "layer.h"
#include "philox.h"

extern const dl_layer_ops dl_linear_ops, dl_conv2d_ops, dl_batchnorm_ops,
    dl_layernorm_ops, dl_dropout_ops, dl_relu_ops, dl_gelu_ops, dl_tanh_ops,
    dl_maxpool2d_ops, dl_globalavgpool_ops, dl_flatten_ops, dl_embedding_ops,
    dl_residual_ops;

dl_status dl_linear_init(dl_layer *l, uint64_t seed);
dl_status dl_conv2d_init(dl_layer *l, uint64_t seed);
dl_status dl_batchnorm_init(dl_layer *l, uint64_t seed);   /* 1d and 2d */
dl_status dl_layernorm_init(dl_layer *l, uint64_t seed);
dl_status dl_embedding_init(dl_layer *l, uint64_t seed);
/* residual: layer.c builds l->body with dl_seq_init. */

/* Creates l->params[l->nparams++] named prefix+suffix, shaped as given,
 * requires_grad and in_optimizer on; grad allocated alongside. */
dl_status dl_layer_add_param(dl_layer *l, const char *suffix, int ndim,
                             const int64_t *shape);
dl_status dl_layer_add_buffer(dl_layer *l, const char *suffix, dl_dtype dt,
                              int ndim, const int64_t *shape);

/* The stream that initialises parameter p: (seed, "init/" + p's name). */
dl_stream dl_param_init_stream(const dl_param *p, uint64_t seed);
/* Every parameter of l drawn from U(-bound, bound) (PyTorch's
 * kaiming_uniform_(a=sqrt(5)) and bias rule, bound = 1/sqrt(fan_in)). */
void dl_layer_init_uniform(dl_layer *l, uint64_t seed, float bound);

/* Keeps a and b in l->saved for backward in grad mode, else frees them. */
void dl_layer_keep_saved(dl_layer *l, const dl_ctx *ctx, dl_tensor *a, dl_tensor *b);

#endif
