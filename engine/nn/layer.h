/* Layers: forward and backward side by side, one file per kind under nn/kinds/,
 * one entry per kind in the registry (layer_kinds.h).
 *
 * A layer never owns its input or output: the sequence that runs it (seq.h)
 * keeps every activation and hands the layer its saved input x and output y
 * again at backward, as llm.c does. What else backward needs (dropout mask,
 * BatchNorm mean/rstd, max-pool argmax) the layer keeps in `saved` while
 * grad mode is on, and frees on release. */
#ifndef DL_LAYER_H
#define DL_LAYER_H

#include "backend/backend.h"
#include "nn/layer_kinds.h"
#include "core/tensor.h"

#include <stdbool.h>
#include <stdint.h>

enum { DL_NAME_MAX = 96 };
/* Most parameters and saved tensors a layer has (attention: in_proj weight
 * and bias, out_proj weight and bias; saved q/k/v, softmax probabilities,
 * dropout mask, heads' output). */
enum { DL_LAYER_MAX_PARAMS = 4, DL_LAYER_MAX_SAVED = 4 };

/* One per entry of the registry (layer_kinds.h), in its order. */
#define DL_LAYER_KIND_ENUM(id, name, ops, init, check, keys) id,
typedef enum dl_layer_kind { DL_LAYER_KINDS(DL_LAYER_KIND_ENUM) DL_LAYER_KIND_COUNT } dl_layer_kind;
#undef DL_LAYER_KIND_ENUM

const char *dl_layer_kind_name(dl_layer_kind k); /* "linear", "conv2d", ... */
/* Parses a name as written in scenario files; DL_ERR_INVALID if unknown. */
dl_status dl_layer_kind_parse(const char *name, dl_layer_kind *out);

/* What the scenario loader produces for one layer. */
typedef struct dl_layer_desc {
  dl_layer_kind kind;
  int64_t in, out;                  /* linear: features; conv2d: channels;
                              embedding: num_embeddings, embedding_dim;
                              batchnorm: out = num_features;
                              layernorm: out = normalized size;
                              attention: out = embed_dim;
                              posembed: in = max_len, out = dim */
  int kernel, stride, padding;      /* conv2d, maxpool2d */
  bool bias;                        /* linear, conv2d */
  bool affine, track_running_stats; /* batchnorm (layernorm: affine) */
  float eps, momentum;              /* norms */
  float p;                          /* dropout; attention: on the weights */
  bool gelu_tanh;
  int heads;                        /* attention: num_heads */
  bool causal;                      /* attention: mask keys after the query */
  const struct dl_layer_desc *body; /* residual: the layers of body(x) */
  int nbody;
} dl_layer_desc;

/* A description with PyTorch's defaults for `kind` (bias on, eps 1e-5,
 * momentum 0.1, affine and track_running_stats on, stride 1, p 0.5; for
 * attention p 0, nn.MultiheadAttention's dropout default, and 1 head). */
dl_layer_desc dl_layer_default(dl_layer_kind kind);

typedef struct dl_param {
  char name[DL_NAME_MAX]; /* state-dict name: "0.weight", "2.body.1.bias" */
  dl_tensor value;
  dl_tensor grad;     /* allocated with value; meaningful iff has_grad */
  bool has_grad;      /* false after zero_grad (PyTorch's grad = None) */
  bool requires_grad; /* false: backward computes no gradient for it */
  bool in_optimizer;  /* false: the optimizer never updates it (F2) */
} dl_param;

typedef struct dl_buffer {
  char name[DL_NAME_MAX]; /* "1.running_mean", "1.num_batches_tracked" */
  dl_tensor value;
} dl_buffer;

/* Called after each layer's forward (output) and backward (gradient w.r.t.
 * its output), in execution order; for activation statistics and for
 * locating the first non-finite value. Either may be NULL. */
typedef struct dl_hooks {
  void *user;
  void (*forward)(void *user, const char *layer, const dl_tensor *y);
  void (*backward)(void *user, const char *layer, const dl_tensor *dy);
} dl_hooks;

/* Per-call settings of a forward/backward pass. */
typedef struct dl_ctx {
  bool grad_enabled;         /* false = torch.no_grad(): nothing kept for backward */
  dl_dtype autocast;         /* DL_F32: off; DL_F16/DL_BF16: emulate CUDA autocast */
  uint64_t seed;             /* for dropout streams */
  int64_t step;              /* optimizer step, for dropout streams */
  const int64_t *sample_ids; /* global dataset index of each batch row, for
                                dropout streams; NULL: the row number */
  dl_hooks hooks;
  const dl_backend *backend; /* NULL: the CPU; else GEMMs and convolutions run
                                there (backend.h) */
} dl_ctx;

typedef struct dl_layer dl_layer;

typedef struct dl_layer_ops {
  /* Allocates y (dl_mem) and computes it. */
  dl_status (*forward)(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, dl_tensor *y);
  /* x, y: this layer's input and output of the last forward; dy: gradient
   * w.r.t. y. Allocates and fills dx unless dx is NULL (input needs no
   * gradient). For each param with requires_grad: grad = dW if !has_grad,
   * else grad += dW (PyTorch accumulation); then has_grad = true. */
  dl_status (*backward)(dl_layer *l, const dl_ctx *ctx, const dl_tensor *x, const dl_tensor *y,
                        const dl_tensor *dy, dl_tensor *dx);
  /* Whether backward also takes dx == dy: one tensor the caller owns,
   * holding dy, that it overwrites with dx (an elementwise kind). seq.c
   * passes it so wherever it owns the gradient, which saves allocating dx
   * and a pass over memory. */
  bool backward_in_place;
  /* Optional, for what a kind holds beyond params, buffers and `saved`
   * (a residual's body): release frees what backward would have needed,
   * destroy everything. NULL: nothing beyond. */
  void (*release)(dl_layer *l);
  void (*destroy)(dl_layer *l);
} dl_layer_ops;

struct dl_layer {
  dl_layer_desc desc;
  const dl_layer_ops *ops;
  char prefix[DL_NAME_MAX];             /* "3." or "2.body.0.": prepended to param names */
  uint64_t rng_id;                      /* distinct per layer in the model, for dropout */
  bool training;                        /* module.train() / .eval(), per layer (M4) */
  dl_param params[DL_LAYER_MAX_PARAMS]; /* weight, bias, as present */
  int nparams;
  dl_buffer buffers[3]; /* running_mean, running_var, num_batches_tracked */
  int nbuffers;
  dl_tensor saved[DL_LAYER_MAX_SAVED]; /* kept for backward in grad mode */
  struct dl_seq *body;                 /* residual */
};

/* Creates params and buffers of `d` named with `prefix` and initialises them
 * with PyTorch's default distributions from the stream (seed, "init/" + name).
 * On failure everything allocated is freed. */
dl_status dl_layer_init(dl_layer *l, const dl_layer_desc *d, const char *prefix, uint64_t rng_id,
                        uint64_t seed);
void dl_layer_release(dl_layer *l); /* frees `saved` (and the body's) */
/* "layer 3 (linear)" or "layer 2.body.0 (conv2d)"; "linear layer" for a
 * layer standing alone (empty prefix): how messages name a layer. */
const char *dl_layer_label(const dl_layer *l, char *buf, size_t len);
void dl_layer_destroy(dl_layer *l);

/* Accumulate a parameter gradient per the rule above: grad = g or grad += g. */
void dl_param_accumulate(dl_param *p, const float *g);

/* For a backward that computes a gradient in one piece: where to write
 * p's, *out = p->grad itself while it holds none, else a scratch allocated
 * here (the caller frees it); NULL when p is frozen. dl_param_grad_commit
 * then rounds it under autocast (half: dl_round_inplace's code) and takes
 * it into p, adding the scratch if there was one. */
dl_status dl_param_grad_target(dl_param *p, dl_tensor *scratch, float **out);
void dl_param_grad_commit(dl_param *p, float *g, const dl_tensor *scratch, int half);

#endif
