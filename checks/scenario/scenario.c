/* The scenario loader: scenario.yaml (schema in scenarios/README.md) into
 * runs, checks and pitfall variants.
 *
 * Every run is built the same way: PyTorch's defaults, then the file's
 * top-level run settings, then the run's overrides, then (in a pitfall
 * variant) the pitfall's overrides. Each layer of settings is applied with
 * field tables that set only the keys present, so nested mappings merge key
 * by key while lists (model, frozen, ...) replace. Errors point at the
 * offending key or value: "FILE:LINE:COL: path: what, expected what".
 *
 * Residual bodies: dl_layer_desc.body is a const pointer, so the nested
 * descs live in a pool owned by the scenario (freed by dlc_scenario_free).
 * Copies of a dlc_run_config (runs, variants, the runner's copies) share
 * them and stay valid as long as the scenario does. */
#define _XOPEN_SOURCE 700 /* realpath */

#include "scenario/scenario.h"

#include "judge/catalogue.h"
#include "judge/check.h"
#include "trace/trace.h"
#include "scenario/yaml_util.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SCENARIO_MAX_BYTES = 1 << 20, MAX_BODY_DEPTH = 8, MAX_PITFALLS = DLC_MAX_VARIANTS };

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MSIZE(type, member) sizeof(((type *)0)->member)

/* Choices are stored as the index of the name: these orders are the enums'. */
_Static_assert(DL_F32 == 0 && DL_F16 == 1 && DL_BF16 == 2, "autocast names follow dl_dtype");
_Static_assert(DL_OPTIM_SGD == 0 && DL_OPTIM_ADAM == 1 && DL_OPTIM_ADAMW == 2,
               "optimizer names follow dl_optim_kind");
_Static_assert(DL_SCHEDULE_CONSTANT == 0 && DL_SCHEDULE_STEP == 1 && DL_SCHEDULE_COSINE == 2,
               "schedule names follow dl_schedule_kind");
_Static_assert(DL_SCALER_OFF == 0 && DL_SCALER_DYNAMIC == 1 && DL_SCALER_STATIC == 2,
               "scaler names follow dl_scaler_mode");
_Static_assert(sizeof(dl_dtype) == sizeof(int) && sizeof(dlc_data_source) == sizeof(int) &&
                   sizeof(dl_optim_kind) == sizeof(int) &&
                   sizeof(dl_schedule_kind) == sizeof(int) && sizeof(dl_scaler_mode) == sizeof(int),
               "choices are written as int");

typedef struct body_block {
  struct body_block *next;
  dl_layer_desc descs[];
} body_block;

/* What dlc_scenario_load allocates: the public struct and the body pool. */
typedef struct owned_scenario {
  dlc_scenario pub;
  body_block *bodies;
} owned_scenario;

typedef struct loader {
  yu_doc doc;
  owned_scenario *os;
  int depth; /* residual nesting while reading a model */
  yu_val root;
  yu_val runs[DLC_MAX_RUNS]; /* each run: its name (key) and overrides */
} loader;

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
 * which keys each kind takes is its registry entry's (engine/layer_kinds.h). */
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
static const char *const optim_names[] = {"sgd", "adam", "adamw", NULL};
static const char *const sched_names[] = {"constant", "step", "cosine", NULL};
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
    {RF("type", YU_CHOICE, optim.kind), .choices = optim_names},
    {RF32("lr", optim.lr), .range = YU_GT0},
    {RF32("momentum", optim.momentum), .range = YU_GE0},
    {RF32("dampening", optim.dampening), .range = YU_UNIT},
    {RF32("weight_decay", optim.weight_decay), .range = YU_GE0},
    {RF("nesterov", YU_BOOL, optim.nesterov)},
    {.key = "betas", .type = YU_CUSTOM, .parse = parse_betas},
    {RF32("eps", optim.eps), .range = YU_GE0},
};

static const yu_field schedule_fields[] = {
    {RF("type", YU_CHOICE, schedule.kind), .choices = sched_names},
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
  dl_optim_desc *o = &c->optim;
  if (isnan(o->lr)) o->lr = o->kind == DL_OPTIM_SGD ? 0.01f : 1e-3f;
  if (isnan(o->weight_decay)) o->weight_decay = o->kind == DL_OPTIM_ADAMW ? 0.01f : 0.0f;
  if (o->kind == DL_OPTIM_SGD && o->nesterov && (o->momentum <= 0 || o->dampening != 0))
    return yu_fail(where, DL_ERR_INVALID,
                   "%snesterov needs momentum > 0 and dampening 0 "
                   "(as torch.optim.SGD)",
                   who);
  dl_schedule *sc = &c->schedule;
  if (sc->kind == DL_SCHEDULE_STEP && sc->step_size == 0)
    return yu_fail(where, DL_ERR_INVALID, "%sschedule type step needs step_size", who);
  if (sc->kind == DL_SCHEDULE_COSINE && sc->total_steps == 0) sc->total_steps = c->steps;
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

/* Defaults, the top level, the run's overrides, then `extra` (a pitfall's
 * overrides) when given. */
static dl_status build_run(loader *L, int run, const yu_val *extra, const yu_val *where,
                           const char *who, dlc_run_config *c) {
  dlc_run_config_default(c);
  c->optim.lr = NAN; /* defaults by optimizer type, set in finish_run */
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

/* ---- names ------------------------------------------------------------- */

/* Names end up in file names, HDF5 groups and reports. */
static dl_status check_name(const yu_val *v, const char *what, const char *name, bool at_key) {
  for (const char *p = name; *p; p++) {
    bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.';
    if (ok) continue;
    const char *fmt = "%s name '%s' may hold only letters, digits, '_', '-' and '.'";
    return at_key ? yu_fail_key(v, DL_ERR_INVALID, fmt, what, name)
                  : yu_fail(v, DL_ERR_INVALID, fmt, what, name);
  }
  return DL_OK;
}

/* Keys that yu_apply already required; failing here again keeps every
 * path safe on its own. */
static dl_status find_key(const yu_val *map, const char *key, yu_val *v) {
  if (yu_map_find(map, key, v)) return DL_OK;
  return yu_fail(map, DL_ERR_FORMAT, "missing required key '%s'", key);
}

static dl_status read_name(const yu_val *map, const char *key, char *dst, size_t size,
                           const char *what, yu_val *v) {
  DL_TRY(find_key(map, key, v));
  DL_TRY(yu_str(v, dst, size, false));
  return what ? check_name(v, what, dst, false) : DL_OK;
}

/* The folder's own name: the last component of dir, resolved for "." and "..". */
static void folder_name(const char *dir, char *out, size_t size) {
  char resolved[PATH_MAX];
  const char *d = dir;
  size_t n = strlen(d);
  while (n > 1 && d[n - 1] == '/') n--;
  size_t start = n;
  while (start > 0 && d[start - 1] != '/') start--;
  if ((n - start == 1 && d[start] == '.') || (n - start == 2 && !strncmp(d + start, "..", 2))) {
    if (realpath(dir, resolved)) {
      folder_name(resolved, out, size);
      return;
    }
  }
  snprintf(out, size, "%.*s", (int)(n - start), d + start);
}

static dl_status read_header(loader *L, const char *dir) {
  dlc_scenario *s = &L->os->pub;
  yu_val v;
  DL_TRY(read_name(&L->root, "name", s->name, sizeof s->name, "scenario", &v));
  char folder[DLC_NAME_MAX + 8];
  folder_name(dir, folder, sizeof folder);
  if (strcmp(folder, s->name) != 0)
    return yu_fail(&v, DL_ERR_INVALID, "must equal the scenario's folder name '%s', got '%s'",
                   folder, s->name);
  yu_val d;
  DL_TRY(find_key(&L->root, "description", &d));
  return yu_text(&d, s->description, sizeof s->description);
}

/* ---- runs -------------------------------------------------------------- */

static dl_status read_runs(loader *L) {
  dlc_scenario *s = &L->os->pub;
  yu_val runs, item;
  DL_TRY(find_key(&L->root, "runs", &runs));
  DL_TRY(yu_expect_mapping(&runs));
  void *it = NULL;
  for (;;) {
    bool got;
    DL_TRY(yu_map_next(&runs, &it, &item, &got));
    if (!got) break;
    if (s->nruns == DLC_MAX_RUNS)
      return yu_fail_key(&item, DL_ERR_INVALID, "too many runs: at most %d", DLC_MAX_RUNS);
    DL_TRY(check_name(&item, "run", item.key, true));
    if (!yu_is_null(&item)) DL_TRY(yu_expect_mapping(&item));
    L->runs[s->nruns] = item;
    s->nruns++;
  }
  /* No runs is a scenario whose checks are all not_tested (an audit family
   * whose adapter piece is missing): need_run and read_pitfalls refuse any
   * check or pitfall that would need one. */
  for (int i = 0; i < s->nruns; i++) {
    yu_val where = L->runs[i]; /* path runs.NAME says which run */
    where.at = where.key_at;
    DL_TRY(build_run(L, i, NULL, &where, "", &s->runs[i]));
  }
  return DL_OK;
}

int dlc_scenario_find_run(const dlc_scenario *s, const char *name) {
  if (!s || !name) return -1;
  for (int i = 0; i < s->nruns; i++)
    if (!strcmp(s->runs[i].name, name)) return i;
  return -1;
}

static dl_status need_run(const loader *L, const yu_val *v, const char *name) {
  if (dlc_scenario_find_run(&L->os->pub, name) >= 0) return DL_OK;
  if (L->os->pub.nruns == 0)
    return yu_fail(v, DL_ERR_INVALID,
                   "unknown run '%s': the scenario has no runs; name at "
                   "least one under runs: (the first is the reference)",
                   name);
  char known[DLC_MAX_RUNS * (DLC_NAME_MAX + 2)] = "";
  for (int i = 0; i < L->os->pub.nruns; i++) {
    strcat(known, i ? ", " : "");
    strcat(known, L->os->pub.runs[i].name);
  }
  return yu_fail(v, DL_ERR_INVALID, "unknown run '%s'; the runs are: %s", name, known);
}

/* ---- checks ------------------------------------------------------------ */

static dl_status parse_quantities(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_check_spec *c = base;
  (void)ctx, (void)f;
  int count;
  DL_TRY(yu_seq_count(v, 1, DLC_MAX_QUANTITIES, &count));
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(v, i);
    DL_TRY(yu_str(&item, c->quantities[i], DLC_NAME_MAX, false));
  }
  c->nquantities = count;
  return DL_OK;
}

static dl_status parse_tolerance(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_check_spec *c = base;
  (void)ctx, (void)f;
  char text[128];
  DL_TRY(yu_str(v, text, sizeof text, false));
  if (dlc_tolerance_parse(text, &c->tol) != DL_OK)
    return yu_fail(v, DL_ERR_INVALID, "%s", dl_last_error());
  return DL_OK;
}

/* IDs of dlcheck's catalogue, each at most once. */
static dl_status parse_catalogue(void *ctx, const yu_val *v, const yu_field *f, void *base) {
  dlc_check_spec *c = base;
  (void)ctx, (void)f;
  int count;
  DL_TRY(yu_seq_count(v, 1, DLC_MAX_CATALOGUE, &count));
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(v, i);
    DL_TRY(yu_str(&item, c->catalogue[i], DLC_CATALOGUE_ID_MAX, false));
    if (!dlc_catalogue_find(c->catalogue[i]))
      return yu_fail(&item, DL_ERR_INVALID,
                     "'%s' is not a catalogue ID; `dlcheck list` "
                     "shows them (G1 ... E3)",
                     c->catalogue[i]);
    for (int j = 0; j < i; j++)
      if (!strcmp(c->catalogue[j], c->catalogue[i]))
        return yu_fail(&item, DL_ERR_INVALID, "catalogue ID '%s' is listed twice", c->catalogue[i]);
  }
  c->ncatalogue = count;
  return DL_OK;
}

#define CF(k, t, member) .key = k, .type = t, .offset = offsetof(dlc_check_spec, member)
#define CSTR(k, member, req) \
  { CF(k, YU_STR, member), .size = DLC_NAME_MAX, .required = req }
static const yu_field check_fields[] = {
    CSTR("name", name, true),
    CSTR("kind", kind, true),
    CSTR("a", a, false),
    CSTR("b", b, false),
    {.key = "quantities", .type = YU_CUSTOM, .parse = parse_quantities},
    {.key = "tolerance", .type = YU_CUSTOM, .parse = parse_tolerance},
    {CF("threshold", YU_F64, threshold)},
    {CF("expect_divergence", YU_BOOL, expect_divergence)},
    {.key = "catalogue", .type = YU_CUSTOM, .parse = parse_catalogue},
    {CF("reason", YU_STR, reason), .size = MSIZE(dlc_check_spec, reason)},
};

static dl_status unknown_kind(const yu_val *v, const char *kind) {
  char known[1024] = "";
  size_t used = 0;
  for (int i = 0; i < dlc_check_kind_count() && used < sizeof known; i++) {
    int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                     dlc_check_kind_at(i)->kind);
    if (w < 0) break;
    used += (size_t)w;
  }
  return yu_fail(v, DL_ERR_INVALID, "unknown check kind '%s'; expected one of: %s", kind, known);
}

/* Kind registered; a named exactly when the kind reads a run, b exactly
 * when it compares two; a reason exactly for not_tested. */
static dl_status check_refs(const loader *L, const yu_val *item, const dlc_check_spec *c) {
  yu_val v;
  DL_TRY(find_key(item, "kind", &v));
  const dlc_check_kind *k = dlc_check_kind_find(c->kind);
  if (!k) return unknown_kind(&v, c->kind);
  bool has_a = yu_map_find(item, "a", &v);
  if (k->runs == 0 && has_a)
    return yu_fail(&v, DL_ERR_INVALID, "check kind '%s' reads no run; remove a", c->kind);
  if (k->runs > 0 && !has_a)
    return yu_fail(item, DL_ERR_FORMAT, "check '%s' of kind '%s' reads a run; add a: RUN", c->name,
                   c->kind);
  if (has_a) DL_TRY(need_run(L, &v, c->a));
  bool has_b = yu_map_find(item, "b", &v);
  if (k->runs == 2 && !has_b)
    return yu_fail(item, DL_ERR_FORMAT, "check '%s' of kind '%s' compares two runs; add b: RUN",
                   c->name, c->kind);
  if (k->runs < 2 && has_b)
    return yu_fail(&v, DL_ERR_INVALID, "check kind '%s' reads %s; remove b", c->kind,
                   k->runs ? "one run (a)" : "no run");
  if (has_b) DL_TRY(need_run(L, &v, c->b));
  bool has_reason = yu_map_find(item, "reason", &v);
  if (!k->runs && !has_reason)
    return yu_fail(item, DL_ERR_FORMAT,
                   "check '%s' of kind '%s' says why it is not tested; "
                   "add reason: TEXT",
                   c->name, c->kind);
  if (k->runs && has_reason)
    return yu_fail(&v, DL_ERR_INVALID, "reason belongs to kind not_tested; remove it");
  return DL_OK;
}

static dl_status read_check(loader *L, const yu_val *item, int i) {
  dlc_scenario *s = &L->os->pub;
  dlc_check_spec *c = &s->checks[i];
  memset(c, 0, sizeof *c);
  c->tol = dlc_tolerance_default(DL_F32);
  DL_TRY(yu_apply(item, check_fields, COUNT(check_fields), c, L, true, NULL));
  yu_val v;
  DL_TRY(find_key(item, "name", &v));
  DL_TRY(check_name(&v, "check", c->name, false));
  for (int j = 0; j < i; j++)
    if (!strcmp(s->checks[j].name, c->name))
      return yu_fail(&v, DL_ERR_INVALID, "duplicate check name '%s' (also checks[%d])", c->name, j);
  return check_refs(L, item, c);
}

static dl_status read_checks(loader *L) {
  yu_val checks;
  DL_TRY(find_key(&L->root, "checks", &checks));
  int count;
  DL_TRY(yu_seq_count(&checks, 1, DLC_MAX_CHECKS, &count));
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(&checks, i);
    DL_TRY(read_check(L, &item, i));
    L->os->pub.nchecks = i + 1;
  }
  return DL_OK;
}

/* ---- pitfalls ---------------------------------------------------------- */

typedef struct pitfall_src {
  char id[16], name[DLC_NAME_MAX], caught_by[DLC_NAME_MAX], description[512];
} pitfall_src;

#define PF(k, t, member, req)                                     \
  {                                                               \
    .key = k, .type = t, .offset = offsetof(pitfall_src, member), \
    .size = MSIZE(pitfall_src, member), .required = req           \
  }
static const yu_field pitfall_fields[] = {
    PF("id", YU_STR, id, true),
    PF("name", YU_STR, name, false),
    PF("description", YU_TEXT, description, false),
    PF("caught_by", YU_STR, caught_by, true),
    {.key = "runs", .type = YU_SKIP},
    {.key = "overrides", .type = YU_SKIP, .required = true},
};

/* Catalogue IDs: a capital letter and digits ("G1", "D7"). */
static bool is_pitfall_id(const char *id) {
  if (!(id[0] >= 'A' && id[0] <= 'Z') || !id[1]) return false;
  for (const char *p = id + 1; *p; p++)
    if (!(*p >= '0' && *p <= '9')) return false;
  return true;
}

static int find_check(const dlc_scenario *s, const char *name) {
  for (int i = 0; i < s->nchecks; i++)
    if (!strcmp(s->checks[i].name, name)) return i;
  return -1;
}

static dl_status pitfall_runs(const loader *L, const yu_val *item, bool applies[DLC_MAX_RUNS]) {
  yu_val runs;
  int n = L->os->pub.nruns;
  for (int i = 0; i < n; i++) applies[i] = true;
  if (!yu_map_find(item, "runs", &runs)) return DL_OK;
  int count;
  DL_TRY(yu_seq_count(&runs, 1, DLC_MAX_RUNS, &count));
  for (int i = 0; i < n; i++) applies[i] = false;
  for (int j = 0; j < count; j++) {
    yu_val r = yu_seq_at(&runs, j);
    char name[DLC_NAME_MAX];
    DL_TRY(yu_str(&r, name, sizeof name, false));
    DL_TRY(need_run(L, &r, name));
    applies[dlc_scenario_find_run(&L->os->pub, name)] = true;
  }
  return DL_OK;
}

static dl_status check_pitfall(const loader *L, const yu_val *item, const pitfall_src *p, int i) {
  const dlc_scenario *s = &L->os->pub;
  yu_val v;
  DL_TRY(find_key(item, "id", &v));
  if (!is_pitfall_id(p->id))
    return yu_fail(&v, DL_ERR_INVALID,
                   "'%s' is not a catalogue ID (a capital letter and digits, "
                   "as G1 or D7; see docs/pitfalls.md)",
                   p->id);
  if (!yu_map_find(item, "name", &v)) DL_TRY(find_key(item, "id", &v));
  DL_TRY(check_name(&v, "pitfall", p->name, false));
  for (int j = 0; j < i; j++)
    if (!strcmp(s->variants[j].name, p->name))
      return yu_fail(&v, DL_ERR_INVALID,
                     "duplicate pitfall name '%s' (also pitfalls[%d]); give "
                     "each a distinct name",
                     p->name, j);
  DL_TRY(find_key(item, "caught_by", &v));
  if (find_check(s, p->caught_by) < 0)
    return yu_fail(&v, DL_ERR_INVALID, "no check is named '%s'", p->caught_by);
  return DL_OK;
}

static dl_status read_pitfall(loader *L, const yu_val *item, int i) {
  dlc_scenario *s = &L->os->pub;
  pitfall_src p;
  memset(&p, 0, sizeof p);
  DL_TRY(yu_apply(item, pitfall_fields, COUNT(pitfall_fields), &p, L, true, NULL));
  if (!p.name[0]) memcpy(p.name, p.id, sizeof p.id);
  DL_TRY(check_pitfall(L, item, &p, i));
  bool applies[DLC_MAX_RUNS];
  DL_TRY(pitfall_runs(L, item, applies));
  yu_val ov, first;
  DL_TRY(find_key(item, "overrides", &ov));
  DL_TRY(yu_expect_mapping(&ov));
  if (!yu_map_find(&ov, NULL, &first))
    return yu_fail(&ov, DL_ERR_INVALID, "is empty; a pitfall variant must change something");
  dlc_variant *var = &s->variants[i];
  snprintf(var->name, sizeof var->name, "%s", p.name);
  snprintf(var->pitfall, sizeof var->pitfall, "%s", p.id);
  snprintf(var->caught_by, sizeof var->caught_by, "%s", p.caught_by);
  snprintf(var->description, sizeof var->description, "%s", p.description);
  for (int r = 0; r < s->nruns; r++) {
    char who[2 * DLC_NAME_MAX];
    snprintf(who, sizeof who, "run '%.100s': ", L->runs[r].key);
    DL_TRY(build_run(L, r, applies[r] ? &ov : NULL, &ov, who, &var->runs[r]));
  }
  return DL_OK;
}

static dl_status read_pitfalls(loader *L) {
  dlc_scenario *s = &L->os->pub;
  yu_val pitfalls;
  if (!yu_map_find(&L->root, "pitfalls", &pitfalls)) return DL_OK;
  int count;
  DL_TRY(yu_seq_count(&pitfalls, 0, MAX_PITFALLS, &count));
  if (count == 0) return DL_OK;
  if (s->nruns == 0)
    return yu_fail(&pitfalls, DL_ERR_INVALID,
                   "pitfall variants re-run the scenario's runs, "
                   "and it has none");
  s->variants = calloc((size_t)count, sizeof *s->variants);
  if (!s->variants) return yu_fail(&pitfalls, DL_ERR_NOMEM, "out of memory for %d variants", count);
  for (int i = 0; i < count; i++) {
    yu_val item = yu_seq_at(&pitfalls, i);
    s->nvariants = i + 1;
    DL_TRY(read_pitfall(L, &item, i));
  }
  return DL_OK;
}

/* ---- loading ----------------------------------------------------------- */

static dl_status read_scenario(loader *L, const char *dir) {
  L->root = yu_doc_root(&L->doc);
  DL_TRY(yu_expect_mapping(&L->root));
  /* Validates every top-level key once, before anything refers to them. */
  dlc_run_config *scratch = malloc(sizeof *scratch);
  if (!scratch) return dl_fail(DL_ERR_NOMEM, "out of memory loading %s", L->doc.file);
  dlc_run_config_default(scratch);
  dl_status s = yu_apply(&L->root, top_fields, COUNT(top_fields), scratch, L, true, NULL);
  free(scratch);
  DL_TRY(s);
  DL_TRY(read_header(L, dir));
  DL_TRY(read_runs(L));
  DL_TRY(read_checks(L));
  DL_TRY(read_pitfalls(L));
  L->os->pub.hash = dlc_digest(L->doc.bytes, L->doc.len);
  return DL_OK;
}

static dl_status store_dir(dlc_scenario *s, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  if (n + sizeof "/scenario.yaml" > sizeof s->dir)
    return dl_fail(DL_ERR_INVALID,
                   "scenario folder path of %zu characters is too long (at most %zu)", n,
                   sizeof s->dir - sizeof "/scenario.yaml");
  memcpy(s->dir, dir, n);
  s->dir[n] = '\0';
  return DL_OK;
}

dl_status dlc_scenario_load(dlc_scenario **out, const char *dir) {
  if (!out || !dir || !dir[0])
    return dl_fail(DL_ERR_INVALID,
                   "dlc_scenario_load: give an output pointer and a scenario folder");
  *out = NULL;
  owned_scenario *os = calloc(1, sizeof *os);
  if (!os) return dl_fail(DL_ERR_NOMEM, "out of memory loading scenario %s", dir);
  loader *L = calloc(1, sizeof *L);
  dl_status s = L ? store_dir(&os->pub, dir)
                  : dl_fail(DL_ERR_NOMEM, "out of memory loading scenario %s", dir);
  if (s == DL_OK) {
    L->os = os;
    char path[DLC_PATH_MAX + 16];
    if (snprintf(path, sizeof path, "%s/scenario.yaml", os->pub.dir) >= (int)sizeof path)
      s = dl_fail(DL_ERR_INTERNAL, "scenario path %s too long", os->pub.dir);
    if (s == DL_OK) s = yu_doc_load(&L->doc, path, SCENARIO_MAX_BYTES);
    if (s == DL_OK) s = read_scenario(L, os->pub.dir);
    yu_doc_free(&L->doc);
  }
  free(L);
  if (s != DL_OK) {
    dlc_scenario_free(&os->pub);
    return s;
  }
  *out = &os->pub;
  return DL_OK;
}

void dlc_scenario_free(dlc_scenario *s) {
  if (!s) return;
  owned_scenario *os = (owned_scenario *)s;
  while (os->bodies) {
    body_block *next = os->bodies->next;
    free(os->bodies);
    os->bodies = next;
  }
  free(s->variants);
  free(os);
}
