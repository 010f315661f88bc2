/* The layer registry: one entry per layer kind, and nothing else to edit to
 * add one but its kernel file under nn/kinds/ and its tests.
 *
 *   X(ID, name, ops, init, check, keys)
 *
 *   ID     its dl_layer_kind enumerator (layer.h builds the enum from here)
 *   name   as scenario files, state dicts and messages write it
 *   ops    its forward/backward table, defined in nn/kinds/<kind>.c
 *   init   creates and initialises its params and buffers (nn/kinds/kinds.h says
 *          how); dl_layer_no_init when it has none
 *   check  validates its description with PyTorch's rules, naming the layer
 *          by `label`; dl_layer_no_check when there is nothing to check
 *   keys   the description fields a scenario file sets, DL_KEY(key, member)
 *          items in the order the schema lists them: the YAML key and the
 *          dl_layer_desc member it sets ("type" is implied). The engine
 *          never expands this column; checks/scenario/run_schema.c gives each
 *          member its YAML type and range (one line per member).
 *
 * nn/kinds/registry.c builds its dispatch table from this list, layer.c its
 * names, and nn/kinds/kinds.h declares
 * every ops, init and check named here. */
#ifndef DL_LAYER_KINDS_H
#define DL_LAYER_KINDS_H

/* The table is aligned by hand: clang-format 14 does not converge on it. */
/* clang-format off */
#define DL_LAYER_KINDS(X)                                                                    \
  /* y = x W^T + b over the last dim; any leading dims */                                    \
  X(DL_LINEAR, "linear", dl_linear_ops, dl_linear_init, dl_linear_check,                     \
    DL_KEY("in", in) DL_KEY("out", out) DL_KEY("bias", bias))                                \
  /* NCHW, square kernel, stride, zero padding */                                            \
  X(DL_CONV2D, "conv2d", dl_conv2d_ops, dl_conv2d_init, dl_conv2d_check,                     \
    DL_KEY("in", in) DL_KEY("out", out) DL_KEY("kernel", kernel) DL_KEY("stride", stride)    \
        DL_KEY("padding", padding) DL_KEY("bias", bias))                                     \
  /* [N, C] or [N, C, L] */                                                                  \
  X(DL_BATCHNORM1D, "batchnorm1d", dl_batchnorm_ops, dl_batchnorm_init, dl_batchnorm_check,  \
    DL_BATCHNORM_KEYS)                                                                       \
  /* [N, C, H, W] */                                                                         \
  X(DL_BATCHNORM2D, "batchnorm2d", dl_batchnorm_ops, dl_batchnorm_init, dl_batchnorm_check,  \
    DL_BATCHNORM_KEYS)                                                                       \
  /* over the last dim */                                                                    \
  X(DL_LAYERNORM, "layernorm", dl_layernorm_ops, dl_layernorm_init, dl_layernorm_check,      \
    DL_KEY("features", out) DL_KEY("eps", eps) DL_KEY("affine", affine))                     \
  /* inverted scaling 1/(1-p), keyed by (layer, step, sample) */                             \
  X(DL_DROPOUT, "dropout", dl_dropout_ops, dl_layer_no_init, dl_dropout_check,               \
    DL_KEY("p", p))                                                                          \
  X(DL_RELU, "relu", dl_relu_ops, dl_layer_no_init, dl_layer_no_check, )                     \
  /* erf form; approximate: tanh sets gelu_tanh */                                           \
  X(DL_GELU, "gelu", dl_gelu_ops, dl_layer_no_init, dl_layer_no_check,                       \
    DL_KEY("approximate", gelu_tanh))                                                        \
  X(DL_TANH, "tanh", dl_tanh_ops, dl_layer_no_init, dl_layer_no_check, )                     \
  /* kernel, stride (0 = kernel), padding */                                                 \
  X(DL_MAXPOOL2D, "maxpool2d", dl_maxpool2d_ops, dl_layer_no_init, dl_maxpool2d_check,       \
    DL_KEY("kernel", kernel) DL_KEY("stride", stride) DL_KEY("padding", padding))            \
  /* [N, C, H, W] -> [N, C] */                                                               \
  X(DL_GLOBALAVGPOOL, "globalavgpool", dl_globalavgpool_ops, dl_layer_no_init,               \
    dl_layer_no_check, )                                                                     \
  /* [N, ...] -> [N, prod(...)] */                                                           \
  X(DL_FLATTEN, "flatten", dl_flatten_ops, dl_layer_no_init, dl_layer_no_check, )            \
  /* int32 ids [N] or [N, T] -> [..., out] */                                                \
  X(DL_EMBEDDING, "embedding", dl_embedding_ops, dl_embedding_init, dl_embedding_check,      \
    DL_KEY("num", in) DL_KEY("dim", out))                                                    \
  /* y = x + body(x) */                                                                      \
  X(DL_RESIDUAL, "residual", dl_residual_ops, dl_residual_init, dl_residual_check,           \
    DL_KEY("body", body))                                                                    \
  /* [N, T, E] self-attention, nn.MultiheadAttention(batch_first=True)(x, x, x) */           \
  X(DL_ATTENTION, "attention", dl_attention_ops, dl_attention_init, dl_attention_check,      \
    DL_KEY("dim", out) DL_KEY("heads", heads) DL_KEY("causal", causal) DL_KEY("p", p))       \
  /* [N, T, E] -> x + weight[:T], learned positions, weight [max_len, E] */                  \
  X(DL_POSEMBED, "posembed", dl_posembed_ops, dl_posembed_init, dl_posembed_check,           \
    DL_KEY("max_len", in) DL_KEY("dim", out))

#define DL_BATCHNORM_KEYS                                                                    \
  DL_KEY("features", out) DL_KEY("eps", eps) DL_KEY("momentum", momentum)                    \
  DL_KEY("affine", affine) DL_KEY("track_running_stats", track_running_stats)

/* clang-format on */

#endif
