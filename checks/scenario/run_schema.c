/* The run settings of a scenario file (schema in scenarios/README.md):
 * model and layers, data, optimizer, schedule, clip, precision, parallel,
 * loss, backend, checkpoint, eval, frozen parameters, pitfall switches;
 * and a run built from the defaults, the top level and its overrides.
 *
 * Residual bodies: dl_layer_desc.body is a const pointer, so the nested
 * descs live in a pool owned by the scenario (freed by dlc_scenario_free).
 * Copies of a dlc_run_config (runs, variants, the runner's copies) share
 * them and stay valid as long as the scenario does. */
#include "scenario/loader.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Choices are stored as the index of the name: these orders are the enums'. */
_Static_assert(DL_F32 == 0 && DL_F16 == 1 && DL_BF16 == 2, "autocast names follow dl_dtype");
_Static_assert(DL_SCALER_OFF == 0 && DL_SCALER_DYNAMIC == 1 && DL_SCALER_STATIC == 2,
               "scaler names follow dl_scaler_mode");
_Static_assert(sizeof(dl_dtype) == sizeof(int) && sizeof(dlc_data_source) == sizeof(int) &&
                   sizeof(dl_optim_kind) == sizeof(int) &&
                   sizeof(dl_schedule_kind) == sizeof(int) && sizeof(dl_scaler_mode) == sizeof(int),
               "choices are written as int");

/* ---- model ------------------------------------------------------------- */

static dl_status parse_gelu(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  static const char *const names[] = {"none", "tanh", NULL};
  (void)ctx, (void)f;
  int i;
  DL_TRY(yu_choice(v, names, &i));
  ((dl_layer_desc *)base)->gelu_tanh = i == 1;
  return DL_OK;
}

static dl_status parse_body(void *ctx, const yu_val *v, const yu_field *f, void *base);

/* The YAML type and range of each dl_layer_desc member a layer key sets;
 * which keys each kind takes is its registry entry's (engine/nn/layer_kinds.h). */
#define LF(k, t, member) .key = k, .type = t, .offset = offsetof(dl_layer_desc, member)
#define KEY_in(k) \
  { LF(k, YU_I64, in), .range = YU_INTS(1, INT32_MAX), .required = true }
#define KEY_out(k) \
  { LF(k, YU_I64, out), .range = YU_INTS(1, INT32_MAX), .required = true }
#define KEY_kernel(k) \
  { LF(k, YU_INT, kernel), .range = YU_INTS(1, 1024), .required = true }
#define KEY_stride(k) \
  { LF(k, YU_INT, stride), .range = YU_INTS(1, 1024) }
#define KEY_padding(k) \
  { LF(k, YU_INT, padding), .range = YU_INTS(0, 1024) }
#define KEY_bias(k) \
  { LF(k, YU_BOOL, bias) }
#define KEY_eps(k) \
  { LF(k, YU_F32, eps), .range = YU_GT0 }
#define KEY_momentum(k) \
  { LF(k, YU_F32, momentum), .range = YU_UNIT }
#define KEY_affine(k) \
  { LF(k, YU_BOOL, affine) }
#define KEY_track_running_stats(k) \
  { LF(k, YU_BOOL, track_running_stats) }
#define KEY_p(k) \
  { LF(k, YU_F32, p), .range = YU_UNIT_OPEN }
#define KEY_gelu_tanh(k) \
  { .key = k, .type = YU_CUSTOM, .parse = parse_gelu }
#define KEY_body(k) \
  { .key = k, .type = YU_CUSTOM, .parse = parse_body, .required = true }
#define KEY_heads(k) \
  { LF(k, YU_INT, heads), .range = YU_INTS(1, 65536), .required = true }
#define KEY_causal(k) \
  { LF(k, YU_BOOL, causal) }

#define DL_KEY(k, member) KEY_##member(k),
#define KIND_FIELDS(id, name, ops, init, check, keys) \
  static const yu_field id##_fields[] = {{.key = "type", .type = YU_SKIP}, keys};
DL_LAYER_KINDS(KIND_FIELDS)

typedef struct layer_schema {
  const yu_field *fields;
  int n;
} layer_schema;

#define KIND_SCHEMA(id, name, ops, init, check, keys) [id] = {id##_fields, COUNT(id##_fields)},
static const layer_schema layer_schemas[] = {DL_LAYER_KINDS(KIND_SCHEMA)};
_Static_assert(COUNT(layer_schemas) == DL_LAYER_KIND_COUNT, "every layer kind has a schema");

static dl_status read_layer(loader *L, const yu_val *v, dl_layer_desc *d) {
  DL_TRY(yu_expect_mapping(v));
  yu_val t;
  if (!yu_map_find(v, "type", &t))
    return yu_fail(v, DL_ERR_FORMAT, "missing required key 'type' (linear, conv2d, relu, ...)");
  char name[32];
  DL_TRY(yu_str(&t, name, sizeof name, false));
  dl_layer_kind kind;
  if (dl_layer_kind_parse(name, &kind) != DL_OK)
    return yu_fail(&t, DL_ERR_INVALID, "%s", dl_last_error());
  *d = dl_layer_default(kind);
  const layer_schema *ls = &layer_schemas[kind];
  DL_TRY(yu_apply(v, ls->fields, ls->n, d, L, true, NULL));
  yu_val pad;
  if (kind == DL_MAXPOOL2D && d->padding > d->kernel / 2 && yu_map_find(v, "padding", &pad))
    return yu_fail(&pad, DL_ERR_INVALID,
                   "must be at most half the kernel size (%d), got %d (PyTorch refuses it)",
                   d->kernel / 2, d->padding);
  return DL_OK;
}

static dl_status read_layers(loader *L, const yu_val *seq, dl_layer_desc *out, int count) {
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(seq, i);
    DL_TRY(read_layer(L, &item, &out[i]));
  }
  return DL_OK;
}

static dl_status parse_body(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  loader *L = ctx;
  dl_layer_desc *d = base;
  (void)f;
  int count;
  DL_TRY(yu_seq_count(v, 1, DLC_MAX_LAYERS, &count));
  if (L->depth >= MAX_BODY_DEPTH)
    return yu_fail(v, DL_ERR_INVALID, "residual blocks nest deeper than %d levels", MAX_BODY_DEPTH);
  body_block *b = calloc(1, sizeof *b + (size_t)count * sizeof b->descs[0]);
  if (!b) return yu_fail(v, DL_ERR_NOMEM, "out of memory for a residual body");
  b->next = L->os->bodies;
  L->os->bodies = b;
  L->depth++;
  dl_status s = read_layers(L, v, b->descs, count);
  L->depth--;
  d->body = b->descs;
  d->nbody = count;
  return s;
}

static dl_status parse_model(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_run_config *c = base;
  (void)f;
  int count;
  DL_TRY(yu_seq_count(v, 1, DLC_MAX_LAYERS, &count));
  DL_TRY(read_layers(ctx, v, c->layers, count));
  c->nlayers = count;
  return DL_OK;
}

/* ---- other run settings ------------------------------------------------ */

static dl_status read_patterns(const yu_val *v, char (*dst)[DLC_NAME_MAX], int *n) {
  int count;
  DL_TRY(yu_seq_count(v, 0, DLC_MAX_PATTERNS, &count));
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(v, i);
    DL_TRY(yu_str(&item, dst[i], DLC_NAME_MAX, false));
  }
  *n = count;
  return DL_OK;
}

static dl_status parse_frozen(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_run_config *c = base;
  (void)ctx, (void)f;
  return read_patterns(v, c->frozen, &c->nfrozen);
}

static dl_status parse_not_in_optimizer(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_run_config *c = base;
  (void)ctx, (void)f;
  return read_patterns(v, c->not_in_optimizer, &c->nnot_in_optimizer);
}

/* Each beta is stored as soon as it is read: GCC 12's SLP vectorizer
 * drops the float32 rounding of two adjacent (double)(float) stores. */
static dl_status parse_betas(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_run_config *c = base;
  (void)ctx, (void)f;
  int count;
  DL_TRY(yu_seq_count(v, 2, 2, &count));
  double *betas[2] = {&c->optim.beta1, &c->optim.beta2};
  for (int i = 0; i < 2; i++) {
    yu_val item = yu_seq_at(v, i);
    double b;
    DL_TRY(yu_f64(&item, (yu_range)YU_UNIT_OPEN, &b));
    *betas[i] = (float)b; /* float32 values, as every real setting */
  }
  return DL_OK;
}

#define RF(k, t, member) .key = k, .type = t, .offset = offsetof(dlc_run_config, member)
#define RSTR(k, t, member) \
  { RF(k, t, member), .size = MSIZE(dlc_run_config, member) }
#define RSUB(k, table) \
  { .key = k, .type = YU_MAP, .sub = table, .nsub = COUNT(table) }

static const char *const source_names[] = {"fixture", "blobs", "tokens", NULL};
static const char *const autocast_names[] = {"fp32", "fp16", "bf16", NULL};
static const char *const scaler_names[] = {"none", "dynamic", "static", NULL};
static const char *const loss_half_names[] = {"none", "fp16", "bf16", NULL};

static const yu_field data_fields[] = {
    {RF("source", YU_CHOICE, data.source), .choices = source_names},
    RSTR("path", YU_STR, data.path),
    RSTR("split", YU_STR, data.split),
    RSTR("eval_split", YU_STR0, data.eval_split),
    {RF("limit", YU_I64, data.limit), .range = YU_GE0},
    {RF("eval_limit", YU_I64, data.eval_limit), .range = YU_GE0},
    {RF("n", YU_I64, data.n), .range = YU_GE1},
    {RF("dim", YU_I64, data.dim), .range = YU_GE1},
    {RF("classes", YU_I64, data.classes), .range = YU_INTS(2, INT32_MAX)},
    {RF("spread", YU_F32, data.spread), .range = YU_GE0},
    {RF("vocab", YU_I64, data.vocab), .range = YU_INTS(2, INT32_MAX)},
    {RF("min_len", YU_I64, data.min_len), .range = YU_GE1},
    {RF("max_len", YU_I64, data.max_len), .range = YU_GE1},
    {RF("batch", YU_I64, data.batch), .range = YU_GE1},
    {RF("shuffle", YU_BOOL, data.shuffle)},
    {RF("drop_last", YU_BOOL, data.drop_last)},
    {RF("workers", YU_INT, data.workers), .range = YU_INTS(0, 64)},
    {RF("augment", YU_BOOL, data.augment)},
};

/* A real setting of an engine description (a double) read as float32 and
 * widened, as scenario files have always been read: goldens hold those
 * bits. Range and messages are YU_F32's. */
static dl_status parse_f32_wide(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  (void)ctx;
  double x;
  DL_TRY(yu_f64(v, f->range, &x));
  if (fabs(x) > FLT_MAX) return yu_fail(v, DL_ERR_INVALID, "%g is too large for a float32", x);
  *(double *)((char *)base + f->offset) = (float)x;
  return DL_OK;
}
#define RF32(k, member) RF(k, YU_CUSTOM, member), .parse = parse_f32_wide

static const yu_field optim_fields[] = {
    {RF("type", YU_CHOICE, optim.kind), .choices = dl_optim_kind_names},
    {RF32("lr", optim.lr), .range = YU_GT0},
    {RF32("momentum", optim.momentum), .range = YU_GE0},
    {RF32("dampening", optim.dampening), .range = YU_UNIT},
    {RF32("weight_decay", optim.weight_decay), .range = YU_GE0},
    {RF("nesterov", YU_BOOL, optim.nesterov)},
    {.key = "betas", .type = YU_CUSTOM, .parse = parse_betas},
    {RF32("eps", optim.eps), .range = YU_GE0},
};

static const yu_field schedule_fields[] = {
    {RF("type", YU_CHOICE, schedule.kind), .choices = dl_schedule_kind_names},
    {RF("step_size", YU_I64, schedule.step_size), .range = YU_GE1},
    {RF32("gamma", schedule.gamma), .range = YU_GT0},
    {RF("warmup_steps", YU_I64, schedule.warmup_steps), .range = YU_GE0},
    {RF("total_steps", YU_I64, schedule.total_steps), .range = YU_GE0},
    {RF32("min_lr", schedule.min_lr), .range = YU_GE0},
};

/* max_norm 0 turns clipping off, so that an override can remove it. */
static const yu_field clip_fields[] = {{RF("max_norm", YU_F32, clip_max_norm), .range = YU_GE0}};

static const yu_field precision_fields[] = {
    {RF("autocast", YU_CHOICE, precision.autocast), .choices = autocast_names},
    {RF("scaler", YU_CHOICE, precision.scaler), .choices = scaler_names},
    {RF("init_scale", YU_F32, precision.init_scale), .range = YU_GT0},
    {RF("growth_factor", YU_F32, precision.growth_factor),
     .range = YU_RANGE(1, INFINITY, true, false)},
    {RF("backoff_factor", YU_F32, precision.backoff_factor), .range = YU_RANGE(0, 1, true, true)},
    {RF("growth_interval", YU_INT, precision.growth_interval), .range = YU_INTS(1, INT_MAX)},
    {RF("loss_half", YU_CHOICE, precision.loss_half), .choices = loss_half_names},
};

static const yu_field parallel_fields[] = {
    {RF("world", YU_INT, parallel.world), .range = YU_INTS(1, 64)},
    {RF("threads", YU_INT, parallel.threads), .range = YU_INTS(1, 256)},
    {RF("broadcast_buffers", YU_BOOL, parallel.broadcast_buffers)},
};

_Static_assert(DL_REDUCTION_MEAN == 0 && DL_REDUCTION_SUM == 1 &&
                   sizeof(dl_reduction) == sizeof(int),
               "reduction names follow dl_reduction");
_Static_assert(sizeof(int32_t) == sizeof(int), "ignore_index is read as an int");
static const char *const reduction_names[] = {"mean", "sum", NULL};

/* mse needs float targets shaped like the model's output; the runner's data
 * are class labels, so only cross_entropy can train on them. */
static dl_status parse_loss_type(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  static const char *const names[] = {"cross_entropy", "mse", NULL};
  (void)ctx, (void)f;
  int i;
  DL_TRY(yu_choice(v, names, &i));
  if (i == 1)
    return yu_fail(v, DL_ERR_INVALID,
                   "mse needs float targets shaped like the model's output, "
                   "but the runner's data (fixture, blobs, tokens) are class labels: use "
                   "cross_entropy");
  ((dlc_run_config *)base)->loss.kind = DLC_LOSS_CROSS_ENTROPY;
  return DL_OK;
}

static const yu_field loss_fields[] = {
    {.key = "type", .type = YU_CUSTOM, .parse = parse_loss_type},
    {RF("reduction", YU_CHOICE, loss.reduction), .choices = reduction_names},
    {RF("label_smoothing", YU_F32, loss.label_smoothing), .range = YU_UNIT},
    {RF("ignore_index", YU_INT, loss.ignore_index), .range = YU_INTS(INT32_MIN, INT32_MAX)},
};

static const char *const device_names[] = {"default", "cpu", "cuda", NULL};
static const char *const math_names[] = {"fp32", "tf32", NULL};
static const char *const conv_algo_names[] = {"deterministic", "fastest", NULL};
static const yu_field backend_fields[] = {
    {RF("device", YU_CHOICE, backend.device), .choices = device_names},
    {RF("math", YU_CHOICE, backend.math), .choices = math_names},
    {RF("conv_algo", YU_CHOICE, backend.conv_algo), .choices = conv_algo_names},
};

static const yu_field checkpoint_fields[] = {
    {RF("at_step", YU_I64, checkpoint.at_step), .range = YU_GE0},
    {RF("optimizer", YU_BOOL, checkpoint.optimizer)},
    {RF("scaler", YU_BOOL, checkpoint.scaler)},
    {RF("rng", YU_BOOL, checkpoint.rng)},
    {RF("scheduler", YU_BOOL, checkpoint.scheduler)},
    {RF("module_prefix", YU_BOOL, checkpoint.add_module_prefix)},
    {RF("strict", YU_BOOL, checkpoint.strict)},
    RSTR("drop_key", YU_STR0, checkpoint.drop_key),
    {RF("change_architecture", YU_BOOL, checkpoint.change_architecture)},
};

static const yu_field eval_fields[] = {
    {RF("enabled", YU_BOOL, eval.enabled)},
    {RF("every", YU_I64, eval.every), .range = YU_GE0},
    {RF("eval_mode", YU_BOOL, eval.eval_mode)},
    {RF("no_grad", YU_BOOL, eval.no_grad)},
    {RF("repeats", YU_INT, eval.repeats), .range = YU_INTS(1, 100)},
};

#define BUG_FIELD(name, id, doc) {RF(#name, YU_BOOL, bug.name)},
static const yu_field bug_fields[] = {DLC_BUGS(BUG_FIELD)};

#define RUN_SETTINGS                                                                        \
  {RF("seed", YU_U64, seed)},                                                               \
      {.key = "model", .type = YU_CUSTOM, .parse = parse_model}, /* build_run needs it */   \
      RSTR("init_weights", YU_STR0, init_weights), RSTR("trace", YU_STR0, trace),           \
      RSUB("data", data_fields), RSUB("optimizer", optim_fields),                           \
      RSUB("schedule", schedule_fields), RSUB("clip", clip_fields),                         \
      RSUB("precision", precision_fields), RSUB("parallel", parallel_fields),               \
      RSUB("backend", backend_fields),                                                      \
      {RF("accumulation", YU_INT, accumulation), .range = YU_INTS(1, 1 << 20)},             \
      {RF("steps", YU_I64, steps), .range = YU_INTS(1, 1e9)},                               \
      {RF("loss_weight", YU_F32, loss_weight), .range = YU_GT0}, RSUB("loss", loss_fields), \
      RSUB("checkpoint", checkpoint_fields), RSUB("eval", eval_fields),                     \
      {.key = "frozen", .type = YU_CUSTOM, .parse = parse_frozen},                          \
      {.key = "not_in_optimizer", .type = YU_CUSTOM, .parse = parse_not_in_optimizer},      \
      {RF("stats_every", YU_I64, stats_every), .range = YU_GE0}, RSUB("bugs", bug_fields)

/* The top level: run settings plus the keys read by read_scenario. */
static const yu_field top_fields[] = {
    {.key = "name", .type = YU_SKIP, .required = true},
    {.key = "description", .type = YU_SKIP, .required = true},
    RUN_SETTINGS,
    {.key = "runs", .type = YU_SKIP, .required = true},
    {.key = "checks", .type = YU_SKIP, .required = true},
    {.key = "pitfalls", .type = YU_SKIP},
};
static const yu_field override_fields[] = {RUN_SETTINGS};

/* ---- building a run ---------------------------------------------------- */

/* Settings whose default depends on another setting, and constraints
 * between settings; `where` and `who` ("" or "run 'x': ") locate the run
 * for messages. */
static dl_status finish_run(dlc_run_config *c, const yu_val *where, const char *who) {
  dlc_run_config_resolve(c);
  const dl_optim_desc *o = &c->optim;
  if (o->kind == DL_OPTIM_SGD && o->nesterov && (o->momentum <= 0 || o->dampening != 0))
    return yu_fail(where, DL_ERR_INVALID,
                   "%snesterov needs momentum > 0 and dampening 0 "
                   "(as torch.optim.SGD)",
                   who);
  dl_schedule *sc = &c->schedule;
  if (sc->kind == DL_SCHEDULE_STEP && sc->step_size == 0)
    return yu_fail(where, DL_ERR_INVALID, "%sschedule type step needs step_size", who);
  if (sc->kind == DL_SCHEDULE_COSINE && sc->warmup_steps > sc->total_steps)
    return yu_fail(where, DL_ERR_INVALID, "%sschedule.warmup_steps %lld exceeds total_steps %lld",
                   who, (long long)sc->warmup_steps, (long long)sc->total_steps);
  const dlc_data_config *d = &c->data;
  if (d->source == DLC_DATA_FIXTURE && d->path[0] == '\0')
    return yu_fail(where, DL_ERR_INVALID, "%sdata.source fixture needs data.path", who);
  if (d->source == DLC_DATA_TOKENS && d->min_len > d->max_len)
    return yu_fail(where, DL_ERR_INVALID, "%sdata.min_len %lld exceeds data.max_len %lld", who,
                   (long long)d->min_len, (long long)d->max_len);
  if (c->checkpoint.at_step >= c->steps)
    return yu_fail(where, DL_ERR_INVALID,
                   "%scheckpoint.at_step %lld must be below steps %lld (0 = no checkpoint)", who,
                   (long long)c->checkpoint.at_step, (long long)c->steps);
  return DL_OK;
}

dl_status dlc_build_run(loader *L, int run, const yu_val *extra, const yu_val *where,
                        const char *who, dlc_run_config *c) {
  dlc_run_config_default(c);
  /* Not given in the file: the default of the optimizer type the file
   * chooses, known once it is read (dlc_run_config_resolve). */
  c->optim.lr = NAN;
  c->optim.weight_decay = NAN;
  snprintf(c->name, sizeof c->name, "%s", L->runs[run].key);
  DL_TRY(yu_apply(&L->root, top_fields, COUNT(top_fields), c, L, true, NULL));
  const yu_val *ov = &L->runs[run];
  const int n = COUNT(override_fields);
  if (!yu_is_null(ov)) DL_TRY(yu_apply(ov, override_fields, n, c, L, false, NULL));
  if (extra) DL_TRY(yu_apply(extra, override_fields, n, c, L, false, NULL));
  if (c->trace[0]) {
    /* Nothing but the file applies to a recorded run: defaults everywhere
     * else keep --world and the variants' reuse test (memcmp) off it. */
    char trace[DLC_PATH_MAX];
    memcpy(trace, c->trace, sizeof trace);
    dlc_run_config_default(c);
    snprintf(c->name, sizeof c->name, "%s", L->runs[run].key);
    memcpy(c->trace, trace, sizeof trace);
    return DL_OK;
  }
  /* Only runs the engine trains need a model; a pitfall's message points
   * at its overrides, the scenario's at the top level. */
  if (c->nlayers == 0)
    return yu_fail(extra ? where : &L->root, DL_ERR_FORMAT,
                   "missing required key 'model': run "
                   "'%s' trains in the engine (only a run with trace: needs none)",
                   c->name);
  return finish_run(c, where, who);
}

dl_status dlc_apply_top_level(loader *L, dlc_run_config *c) {
  return yu_apply(&L->root, top_fields, COUNT(top_fields), c, L, true, NULL);
}
