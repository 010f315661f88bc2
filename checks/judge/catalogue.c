#include "judge/catalogue.h"

#include <string.h>

static const dlc_pitfall_entry entries[] = {
    {"G1", "gradients are never zeroed between optimizer steps",
     "earlier steps' gradients leak into every update",
     "optimizer.zero_grad(set_to_none=True) after each optimizer.step()",
     "grad_accum: params differ from the big batch", DLC_REACH_CPU},
    {"G2", "the loss of each micro-batch is not divided by the accumulation count K",
     "the update is K times too large",
     "(loss / accumulation_steps).backward() for each micro-batch",
     "grad_accum: gradient norm ratio close to K", DLC_REACH_CPU},
    {"G3", "gradients are zeroed inside the micro-batch loop",
     "only the last micro-batch contributes",
     "call optimizer.zero_grad() once per optimizer step, outside the micro-batch loop",
     "grad_accum: params differ from the big batch", DLC_REACH_CPU},
    {"G4", "a token-level mean is taken per micro-batch of variable-length sequences",
     "short micro-batches weigh too much",
     "divide the summed token loss by the token count of the whole accumulated batch",
     "grad_accum (tokens): differs from the all-token mean", DLC_REACH_CPU},
    {"G5", "BatchNorm statistics are computed over small micro-batches",
     "running statistics differ from the big batch (expected, reported with its size)",
     "accumulate over micro-batches only with GroupNorm/LayerNorm, or accept and measure the drift",
     "grad_accum: buffers reported as expected divergence", DLC_REACH_CPU},
    {"A1", "float16 training without loss scaling", "small gradients flush to zero",
     "scaler = torch.cuda.amp.GradScaler(); scaler.scale(loss).backward()",
     "amp_fp32: fraction of zero gradients against fp32", DLC_REACH_CPU},
    {"A2", "gradients are clipped before unscaling", "the clip norm sees scaled gradients",
     "scaler.unscale_(optimizer) before clip_grad_norm_(model.parameters(), max_norm)",
     "amp_fp32: update differs from fp32", DLC_REACH_CPU},
    {"A3", "a static loss scale that is too large", "inf/NaN gradients; steps must be skipped",
     "use GradScaler's dynamic scale (growth/backoff) instead of a fixed large scale",
     "amp_fp32: overflowing steps counted", DLC_REACH_CPU},
    {"A4", "softmax/log/loss computed in half precision", "the loss drifts from fp32",
     "keep the loss in float32: F.cross_entropy(logits.float(), y)",
     "amp_fp32: loss drift against fp32", DLC_REACH_CPU},
    {"A5", "bf16 chosen instead of fp16 (or the reverse) without measuring",
     "a different error profile",
     "measure fp16 and bf16 against fp32 before choosing autocast(dtype=...)",
     "amp_fp32: both measured against fp32", DLC_REACH_CPU},
    {"A6", "GradScaler bypassed: optimizer.step() called on the scaled gradients",
     "every update is the loss scale times too large (SGD), and the scale never adapts",
     "scaler.step(optimizer); scaler.update() in place of optimizer.step(), after "
     "scaler.scale(loss).backward() (and scaler.unscale_(optimizer) before any clipping)",
     "amp_fp32: fp16 against fp32; the audit: the scaler's calls in each step", DLC_REACH_CPU},
    {"D1", "no DistributedSampler", "every rank trains on the same data",
     "DataLoader(ds, sampler=DistributedSampler(ds), ...)",
     "ddp_equiv: samples used more than once per epoch", DLC_REACH_CPU},
    {"D2", "sampler.set_epoch() is never called", "every epoch visits the data in the same order",
     "sampler.set_epoch(epoch) at the start of every epoch", "ddp_equiv: epoch orders repeat",
     DLC_REACH_CPU},
    {"D3", "gradients summed over ranks instead of averaged", "the update is W times too large",
     "average the gradients: all_reduce(grad); grad /= world_size (DDP does it)",
     "ddp_equiv: differs from one process, gradient ratio close to W", DLC_REACH_CPU},
    {"D4", "buffers not synchronised across ranks (broadcast_buffers=False)",
     "the replicas' BatchNorm statistics drift apart",
     "DistributedDataParallel(model, broadcast_buffers=True) or SyncBatchNorm",
     "ddp_equiv: buffers compared across ranks", DLC_REACH_CPU},
    {"D5", "an evaluation metric computed on rank 0's shard only",
     "the reported metric is a shard's",
     "all_reduce the metric's numerator and denominator before dividing",
     "ddp_equiv: rank-0 metric against the all-gathered one", DLC_REACH_CPU},
    {"D6", "dataset size not divisible by world size", "padding duplicates samples",
     "DistributedSampler(ds, drop_last=True), or count the padded duplicates out",
     "ddp_equiv: duplicated samples counted", DLC_REACH_CPU},
    {"D7", "per-rank random streams keyed by row instead of by sample", "ranks draw the same noise",
     "key each sample's random stream by its global sample index, not by its row",
     "ddp_equiv: differs from one process with dropout", DLC_REACH_CPU},
    {"D8", "evaluation consumes the training random stream",
     "the training order changes when evaluation is on",
     "give evaluation its own torch.Generator instead of the global one",
     "determinism: with and without evaluation", DLC_REACH_CPU},
    /* D9: seen in a team's own evaluation; the engine's ranks have no
     * validation loader to get wrong. */
    {"D9",
     "validation samples duplicated (or dropped) across ranks: a DistributedSampler on the "
     "validation set pads its shards with copies",
     "the metric all-reduced over the ranks counts the padded copies twice: it is not the "
     "validation set's",
     "shard the validation set without padding, Subset(val, range(rank, len(val), world_size)), "
     "and all_reduce the sums and counts before dividing (or count the sampler's padded tail "
     "out)",
     "the audit's ddp family: the samples the ranks' evaluate() feeds the model, counted "
     "against one process's",
     DLC_REACH_AUDIT},
    /* D10: seen in the module a team's wrap_ddp returns; the engine's ranks
     * are processes. */
    {"D10", "nn.DataParallel used where DistributedDataParallel is meant",
     "one process drives every device: the model is replicated and its buffers broadcast from "
     "device 0 at every forward, the gradients gathered through one Python interpreter (GIL-bound, "
     "slower than DDP and not multi-node); across processes it does nothing, every rank trains "
     "alone",
     "one process per device with torch.distributed.init_process_group and "
     "DistributedDataParallel(model, device_ids=[local_rank]) (on the CPU without device_ids), a "
     "DistributedSampler for the data",
     "the audit's ddp family: the module wrap_ddp returns (and make_model's), searched for "
     "nn.DataParallel",
     DLC_REACH_AUDIT},
    {"M1", "inference without model.eval()", "dropout and batch statistics make outputs vary",
     "model.eval() before inference (and model.train() after)",
     "train_eval: two identical inferences differ", DLC_REACH_CPU},
    {"M2", "inference without torch.no_grad()", "activations are kept as in training",
     "with torch.no_grad(): (or torch.inference_mode()) around inference",
     "train_eval: inference peak memory against no_grad", DLC_REACH_CPU},
    {"M3", "torch.no_grad() without model.eval()", "as M1, silently",
     "model.eval() as well as torch.no_grad() during inference",
     "train_eval: inference moves BatchNorm buffers", DLC_REACH_CPU},
    {"M4", "BatchNorm left in train mode while its parameters are frozen",
     "running statistics move during fine-tuning",
     "put frozen BatchNorm layers in eval mode: bn.eval() after every model.train()",
     "train_eval: frozen buffers moved", DLC_REACH_CPU},
    {"M5", "training goes on in eval mode after an evaluation",
     "dropout stays off and BatchNorm stops following the batches until the model is put back",
     "call model.train() after every evaluation (an evaluate() that calls model.eval() restores "
     "the mode it found: was_training = model.training ... model.train(was_training))",
     "determinism: a run evaluated every 3 steps against one never evaluated; the audit: "
     "training forwards after evaluate()",
     DLC_REACH_CPU},
    {"C1", "optimizer state not saved in the checkpoint", "resumed training differs",
     "save and load optimizer.state_dict() with the model",
     "ckpt_roundtrip: resumed against straight run", DLC_REACH_CPU},
    {"C2", "loss-scaler state not saved", "the scale restarts after resuming",
     "save and load scaler.state_dict() with the model", "ckpt_roundtrip: loss scale series differ",
     DLC_REACH_CPU},
    {"C3", "data-order/RNG state not saved", "different batches after resuming",
     "save and restore the RNG states (torch.get_rng_state(), the sampler's epoch and generator)",
     "ckpt_roundtrip: resumed against straight run", DLC_REACH_CPU},
    {"C4", "keys saved with DDP's module. prefix", "the load fails with unexpected keys",
     "save model.module.state_dict() (or strip the 'module.' prefix before loading)",
     "ckpt_roundtrip: key diagnosis names the prefix and the fix", DLC_REACH_CPU},
    {"C5", "strict=False hides missing keys", "part of the model silently stays at its init",
     "load_state_dict(sd, strict=True), or check the returned missing_keys",
     "ckpt_roundtrip: missing keys listed", DLC_REACH_CPU},
    {"C6", "architecture changed since the checkpoint", "shape mismatch on load",
     "rebuild the model with the checkpoint's architecture, or map the changed layer by hand",
     "ckpt_roundtrip: shape mismatches listed", DLC_REACH_CPU},
    {"C7", "LR scheduler state not saved in the checkpoint",
     "the schedule restarts after resuming (warm-up again, decay from the start)",
     "save and load scheduler.state_dict() with the optimizer's",
     "ckpt_roundtrip (with a warm-up schedule): resumed against straight run", DLC_REACH_CPU},
    /* C8: seen in what a team's save_checkpoint writes; the engine saves
     * tensors only. */
    {"C8",
     "the whole model pickled into the checkpoint (torch.save(model)) instead of its state dict",
     "the file loads only where the model's class is importable under the same module path and "
     "unpickles as it was defined then: a refactor or rename breaks every old checkpoint",
     "save model.state_dict() (model.module.state_dict() under DDP) and load it into a model "
     "built by the code: model.load_state_dict(torch.load(path)[\"model\"])",
     "the audit's checkpoint family: torch.load of what save_checkpoint wrote, searched for "
     "nn.Module objects",
     DLC_REACH_AUDIT},
    {"F1", "backbone frozen by mistake (requires_grad=False)", "only the head trains",
     "requires_grad_(True) on the parameters that should train",
     "frozen_params: tensors that never changed, prediction histogram", DLC_REACH_CPU},
    {"F2", "a parameter not given to the optimizer", "it gets gradients but never changes",
     "build the optimizer from model.parameters() (every param group included)",
     "frozen_params: tensors that never changed", DLC_REACH_CPU},
    {"F3", "dead ReLUs or vanishing gradients", "layers stop learning",
     "check initialisation and learning rate; watch per-layer update ratios",
     "frozen_params: per-tensor update ratios", DLC_REACH_CPU},
    /* F4: the engine's modules register all their state; a plain tensor
     * attribute exists only in a team's own PyTorch module. */
    {"F4",
     "module state kept as a plain tensor attribute instead of a registered buffer (running "
     "statistics, EMA weights, counters)",
     "it is not in state_dict(): a checkpoint loses it, .to() does not move it and DDP does not "
     "broadcast it",
     "self.register_buffer(name, tensor) in __init__ (persistent=False to keep it out of "
     "checkpoints)",
     "the audit's parameters family: plain tensors training changed, and two models reloaded "
     "from the state dict, one given those tensors too, answering differently",
     DLC_REACH_AUDIT},
    {"N1", "exploding gradients without clipping (or a function taken outside its domain)",
     "the loss becomes NaN",
     "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) before optimizer.step(); "
     "for log/sqrt/division of a value that reaches 0, clamp it (x.clamp_min(eps)) or use "
     "log_softmax/logsumexp: the evidence says which",
     "nan_guard: first step and layer with inf/NaN", DLC_REACH_CPU},
    {"N2", "a reduction whose order depends on timing", "runs differ bitwise",
     "torch.use_deterministic_algorithms(True), and reductions in a fixed order",
     "determinism: the same run twice", DLC_REACH_CPU},
    {"N3", "random draws from a stream per thread or per loader worker",
     "results depend on the thread count or num_workers",
     "seed a torch.Generator per sample from (base seed, epoch, sample index) in __getitem__; "
     "a seed per worker (worker_init_fn) still changes with num_workers",
     "determinism: 1 against 2 threads; the audit also 0 against 2 loader workers", DLC_REACH_CPU},
    {"N4", "CUDA/cuDNN/cuBLAS/NCCL version changed", "silent numerical drift",
     "record a golden on the new stack and compare with dlcheck compare before upgrading",
     "golden comparison with the environment difference", DLC_REACH_GPU},
    /* R: memory retention across steps, in a team's own loop (the audit's
     * memory family): the engine's steps keep nothing alive to break. */
    {"R1", "an autograd graph kept alive across training steps",
     "memory grows with every step (a loss or output kept without .item()/.detach(), state a "
     "forward appends to) until the process runs out",
     "keep numbers, not graphs: losses.append(loss.item()); a tensor kept across steps as "
     "t.detach() (and bounded: keep the last, or a running mean)",
     "the audit's memory family: autograd nodes reachable from live tensors after each of 10 "
     "steps, growing at every step after the first 2",
     DLC_REACH_AUDIT},
    {"R2", "tensors kept from one evaluation to the next",
     "memory grows with every evaluation (its outputs or predictions collected in a list that "
     "outlives it)",
     "collect an evaluation's outputs in a list local to it; keep what must outlive it as "
     "numbers (t.item(), t.tolist()) or in a bounded buffer",
     "the audit's memory family: bytes of live tensors outside any graph after each of 5 "
     "evaluate() calls, growing by more than one sample at every call after the first 2",
     DLC_REACH_AUDIT},
    {"E1", "runtime newer than the driver supports", "CUDA errors at start",
     "install a driver that supports the CUDA runtime the build uses",
     "dlcheck env; a team's torch: dlcheck env TRACE, the audit's environment family",
     DLC_REACH_GPU},
    {"E2", "binary not built for the GPU's architecture", "no kernel image is available",
     "build for the GPU's architecture (TORCH_CUDA_ARCH_LIST / CMAKE_CUDA_ARCHITECTURES)",
     "dlcheck env; a team's torch: dlcheck env TRACE, the audit's environment family",
     DLC_REACH_GPU},
    {"E3", "library built against one version, another loaded", "crashes or drift",
     "load the library version the binary was built against (check LD_LIBRARY_PATH)",
     "dlcheck env; a team's torch: dlcheck env TRACE, the audit's environment family",
     DLC_REACH_GPU},
    /* X: deployment parity. The engine exports nothing, so these are shown
     * in a team's own export and serving code (the audit's export family). */
    {"X1", "model exported while in training mode",
     "dropout stays on and BatchNorm's batch statistics are frozen into the graph: served "
     "outputs are random or depend on the batch",
     "model.eval() before torch.jit.trace / torch.onnx.export (and no TrainingMode.PRESERVE)",
     "the audit's export family: Dropout/BatchNorm ran in training mode during export() and the "
     "exported outputs differ from eager model.eval()",
     DLC_REACH_AUDIT},
    {"X2", "torch.jit.trace of a model with data-dependent control flow",
     "the graph keeps the branch the example input took: inputs that take the other branch get "
     "wrong outputs",
     "torch.jit.script(model) (or torch.jit.script the branching function) instead of "
     "torch.jit.trace",
     "the audit's export family: the export differs from eager on held-out batches, and "
     "torch.jit.trace warned or differs the same way while eager/script agree",
     DLC_REACH_AUDIT},
    {"X3", "ONNX export with a fixed batch (or sequence) axis",
     "the served model fails, or is wrong, at any batch size or length but the example's",
     "torch.onnx.export(model, example, path, input_names=[\"x\"], output_names=[\"y\"], "
     "dynamic_axes={\"x\": {0: \"batch\"}, \"y\": {0: \"batch\"}})",
     "the audit's export family: the ONNX input's fixed dimensions, onnxruntime run at two batch "
     "sizes",
     DLC_REACH_AUDIT},
    {"X4", "preprocessing differs between training and serving",
     "the served model sees inputs on another scale, channel order or dtype: accuracy drops "
     "silently",
     "serve with the training code's own transform (import preprocess, or export it inside the "
     "model) rather than constants copied by hand",
     "the audit's export family: serve(path)(raw) against eager model(preprocess(raw)), and the "
     "statistic of the served input that differs",
     DLC_REACH_AUDIT},
    {"X5", "reduced-precision (half/bfloat16) export beyond the task's tolerance",
     "the served outputs drift from the trained model's by more than the task accepts",
     "export in float32 (or keep the sensitive layers in float32: "
     "model.to(torch.float16) only where the drift stays within AUDIT[\"half_tolerance\"])",
     "the audit's export family: relative distance of the half export's outputs from eager "
     "float32 against the stated half_tolerance",
     DLC_REACH_AUDIT},
    {"X6",
     "an op exported with other semantics than eager (an opset- or version-dependent "
     "operator)",
     "exported outputs differ from eager beyond float rounding",
     "torch.onnx.export(..., opset_version=14) (an opset whose operator matches PyTorch), or "
     "rewrite the op",
     "the audit's export family: exported against eager outputs within the model's own float32 "
     "rounding (eager float32 against float64)",
     DLC_REACH_AUDIT},
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
