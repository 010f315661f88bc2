/* A small GPT as layer descriptions (header-only, for tests), written the
 * way scenarios/README.md writes it and fixtures/pytorch/make_reference.py
 * builds it in PyTorch (gpt_block, tiny_gpt), so the state-dict names agree:
 *
 *   embedding(vocab, dim) -> posembed(max_len, dim)
 *   -> per block: residual[layernorm, attention(causal)]
 *                 residual[layernorm, linear(dim, 4 dim), gelu, linear(4 dim, dim)]
 *   -> layernorm -> linear(dim, vocab)
 *
 * The residual bodies live in static storage that every block shares. */
#ifndef DL_TESTS_GPT_MODEL_H
#define DL_TESTS_GPT_MODEL_H

#include "nn/layer.h"

static dl_layer_desc gpt_attn_body[2], gpt_mlp_body[4];

/* One pre-LayerNorm block: two residual layers into d[0..1]; returns 2. */
static inline int gpt_block(dl_layer_desc *d, int64_t dim, int heads) {
  gpt_attn_body[0] = dl_layer_default(DL_LAYERNORM);
  gpt_attn_body[0].out = dim;
  gpt_attn_body[1] = dl_layer_default(DL_ATTENTION);
  gpt_attn_body[1].out = dim;
  gpt_attn_body[1].heads = heads;
  gpt_attn_body[1].causal = true;
  gpt_mlp_body[0] = gpt_attn_body[0];
  gpt_mlp_body[1] = dl_layer_default(DL_LINEAR);
  gpt_mlp_body[1].in = dim;
  gpt_mlp_body[1].out = 4 * dim;
  gpt_mlp_body[2] = dl_layer_default(DL_GELU);
  gpt_mlp_body[3] = dl_layer_default(DL_LINEAR);
  gpt_mlp_body[3].in = 4 * dim;
  gpt_mlp_body[3].out = dim;
  d[0] = dl_layer_default(DL_RESIDUAL);
  d[0].body = gpt_attn_body;
  d[0].nbody = 2;
  d[1] = dl_layer_default(DL_RESIDUAL);
  d[1].body = gpt_mlp_body;
  d[1].nbody = 4;
  return 2;
}

/* The whole model into d (4 + 2 * blocks entries); returns the count. */
static inline int gpt_model(dl_layer_desc *d, int64_t vocab, int64_t dim, int heads,
                            int64_t max_len, int blocks) {
  int n = 0;
  d[n] = dl_layer_default(DL_EMBEDDING);
  d[n].in = vocab;
  d[n++].out = dim;
  d[n] = dl_layer_default(DL_POSEMBED);
  d[n].in = max_len;
  d[n++].out = dim;
  for (int b = 0; b < blocks; b++) n += gpt_block(d + n, dim, heads);
  d[n] = dl_layer_default(DL_LAYERNORM);
  d[n++].out = dim;
  d[n] = dl_layer_default(DL_LINEAR);
  d[n].in = dim;
  d[n++].out = vocab;
  return n;
}

#endif
