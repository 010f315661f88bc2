/* A sequence of layers run in order, keeping activations for backward.
 * The model is one; a residual block's body is another. */
#ifndef DL_SEQ_H
#define DL_SEQ_H

#include "nn/layer.h"

typedef struct dl_seq {
  dl_layer *layers;
  int n;
  const dl_tensor *input; /* borrowed: must live until backward/release */
  dl_tensor *acts;        /* acts[i] = output of layer i (n of them) */
} dl_seq;

dl_status dl_seq_init(dl_seq *s, const dl_layer_desc *descs, int n, const char *prefix,
                      uint64_t *next_rng_id, uint64_t seed);
void dl_seq_destroy(dl_seq *s);
/* In grad mode keeps every activation; otherwise frees each as soon as the
 * next layer has consumed it. *out is owned by the sequence. */
dl_status dl_seq_forward(dl_seq *s, const dl_ctx *ctx, const dl_tensor *x, const dl_tensor **out);
/* dx may be NULL. Needs a grad-mode forward before it. */
dl_status dl_seq_backward(dl_seq *s, const dl_ctx *ctx, const dl_tensor *dy, dl_tensor *dx);
void dl_seq_release(dl_seq *s);

#endif
