#include "catalogue.h"

#include <string.h>

static const dlc_pitfall_entry entries[] = {
    {"G1", "gradients are never zeroed between optimizer steps",
     "earlier steps' gradients leak into every update", "grad_accum: params differ from the big batch", true},
    {"G2", "the loss of each micro-batch is not divided by the accumulation count K",
     "the update is K times too large", "grad_accum: gradient norm ratio close to K", true},
    {"G3", "gradients are zeroed inside the micro-batch loop",
     "only the last micro-batch contributes", "grad_accum: params differ from the big batch", true},
    {"G4", "a token-level mean is taken per micro-batch of variable-length sequences",
     "short micro-batches weigh too much", "grad_accum (tokens): differs from the all-token mean", true},
    {"G5", "BatchNorm statistics are computed over small micro-batches",
     "running statistics differ from the big batch (expected, reported with its size)",
     "grad_accum: buffers reported as expected divergence", true},
    {"A1", "float16 training without loss scaling", "small gradients flush to zero",
     "amp_fp32: fraction of zero gradients against fp32", true},
    {"A2", "gradients are clipped before unscaling", "the clip norm sees scaled gradients",
     "amp_fp32: update differs from fp32", true},
    {"A3", "a static loss scale that is too large", "inf/NaN gradients; steps must be skipped",
     "amp_fp32: overflowing steps counted", true},
    {"A4", "softmax/log/loss computed in half precision", "the loss drifts from fp32",
     "amp_fp32: loss drift against fp32", true},
    {"A5", "bf16 chosen instead of fp16 (or the reverse) without measuring",
     "a different error profile", "amp_fp32: both measured against fp32", true},
    {"D1", "no DistributedSampler", "every rank trains on the same data",
     "ddp_equiv: samples used more than once per epoch", true},
    {"D2", "sampler.set_epoch() is never called", "every epoch visits the data in the same order",
     "ddp_equiv: epoch orders repeat", true},
    {"D3", "gradients summed over ranks instead of averaged", "the update is W times too large",
     "ddp_equiv: differs from one process, gradient ratio close to W", true},
    {"D4", "buffers not synchronised across ranks (broadcast_buffers=False)",
     "the replicas' BatchNorm statistics drift apart", "ddp_equiv: buffers compared across ranks", true},
    {"D5", "an evaluation metric computed on rank 0's shard only", "the reported metric is a shard's",
     "ddp_equiv: rank-0 metric against the all-gathered one", true},
    {"D6", "dataset size not divisible by world size", "padding duplicates samples",
     "ddp_equiv: duplicated samples counted", true},
    {"D7", "per-rank random streams keyed by row instead of by sample",
     "ranks draw the same noise", "ddp_equiv: differs from one process with dropout", true},
    {"D8", "evaluation consumes the training random stream",
     "the training order changes when evaluation is on", "determinism: with and without evaluation", true},
    {"M1", "inference without model.eval()", "dropout and batch statistics make outputs vary",
     "train_eval: two identical inferences differ", true},
    {"M2", "inference without torch.no_grad()", "activations are kept as in training",
     "train_eval: inference peak memory against no_grad", true},
    {"M3", "torch.no_grad() without model.eval()", "as M1, silently",
     "train_eval: inference moves BatchNorm buffers", true},
    {"M4", "BatchNorm left in train mode while its parameters are frozen",
     "running statistics move during fine-tuning", "train_eval: frozen buffers moved", true},
    {"C1", "optimizer state not saved in the checkpoint", "resumed training differs",
     "ckpt_roundtrip: resumed against straight run", true},
    {"C2", "loss-scaler state not saved", "the scale restarts after resuming",
     "ckpt_roundtrip: loss scale series differ", true},
    {"C3", "data-order/RNG state not saved", "different batches after resuming",
     "ckpt_roundtrip: resumed against straight run", true},
    {"C4", "keys saved with DDP's module. prefix", "the load fails with unexpected keys",
     "ckpt_roundtrip: key diagnosis names the prefix and the fix", true},
    {"C5", "strict=False hides missing keys", "part of the model silently stays at its init",
     "ckpt_roundtrip: missing keys listed", true},
    {"C6", "architecture changed since the checkpoint", "shape mismatch on load",
     "ckpt_roundtrip: shape mismatches listed", true},
    {"F1", "backbone frozen by mistake (requires_grad=False)", "only the head trains",
     "frozen_params: tensors that never changed, prediction histogram", true},
    {"F2", "a parameter not given to the optimizer", "it gets gradients but never changes",
     "frozen_params: tensors that never changed", true},
    {"F3", "dead ReLUs or vanishing gradients", "layers stop learning",
     "frozen_params: per-tensor update ratios", true},
    {"N1", "exploding gradients without clipping", "the loss becomes NaN",
     "nan_guard: first step and layer with inf/NaN", true},
    {"N2", "a reduction whose order depends on timing", "runs differ bitwise",
     "determinism: the same run twice", true},
    {"N3", "random streams keyed by thread", "results depend on the thread count",
     "determinism: 1 against 2 threads", true},
    {"N4", "CUDA/cuDNN/cuBLAS/NCCL version changed", "silent numerical drift",
     "golden comparison with the environment difference", false},
    {"E1", "runtime newer than the driver supports", "CUDA errors at start", "dlcheck env", false},
    {"E2", "binary not built for the GPU's architecture", "no kernel image is available",
     "dlcheck env", false},
    {"E3", "library built against one version, another loaded", "crashes or drift",
     "dlcheck env", false},
};

int dlc_catalogue_count(void) { return (int)(sizeof entries / sizeof *entries); }

const dlc_pitfall_entry *dlc_catalogue_at(int i) {
  return i >= 0 && i < dlc_catalogue_count() ? &entries[i] : NULL;
}

const dlc_pitfall_entry *dlc_catalogue_find(const char *id) {
  for (int i = 0; i < dlc_catalogue_count(); i++)
    if (strcmp(entries[i].id, id) == 0) return &entries[i];
  return NULL;
}
