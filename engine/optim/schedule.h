/* Learning-rate schedules: the lr of optimizer step `step` (0-based, the
 * number of optimizer steps taken before it), computed from the step alone,
 * so a resumed run gets the same lr without saving scheduler state.
 *
 *   constant: lr.
 *   step:     lr * gamma^floor(step / step_size)   (torch StepLR).
 *   cosine:   warmup then cosine decay to min_lr (W = warmup_steps,
 *             S = total_steps):
 *               step <  W:  lr * (step + 1) / W          (linear; the last
 *                                                        warmup step has lr)
 *               W <= step < S:
 *                 progress = (step - W) / (S - W)        (in [0, 1))
 *                 min_lr + 0.5 (lr - min_lr) (1 + cos(pi progress))
 *               step >= S:  min_lr.
 *
 * Everything is computed in double and rounded to float32 once, except the
 * cosine, which is the engine's dl_cosf (fmath.h) of pi * progress rounded
 * to float32; gamma^k is computed by squaring. Same bits everywhere. */
#ifndef DL_SCHEDULE_H
#define DL_SCHEDULE_H

#include "core/status.h"

#include <stdint.h>

typedef enum dl_schedule_kind {
  DL_SCHEDULE_CONSTANT = 0,
  DL_SCHEDULE_STEP,
  DL_SCHEDULE_COSINE,
  DL_SCHEDULE_KINDS /* the count */
} dl_schedule_kind;

/* The kinds' names, indexed by kind, NULL after the last: "constant",
 * "step", "cosine" (a scenario's schedule.type reads them). */
extern const char *const dl_schedule_kind_names[DL_SCHEDULE_KINDS + 1];
const char *dl_schedule_kind_name(dl_schedule_kind k);
/* Parses one of those names; DL_ERR_INVALID naming the text otherwise. */
dl_status dl_schedule_kind_parse(const char *name, dl_schedule_kind *out);

typedef struct dl_schedule {
  dl_schedule_kind kind;
  double lr;            /* base learning rate, >= 0 */
  int64_t step_size;    /* step: > 0 */
  double gamma;         /* step: > 0 (torch's default 0.1) */
  int64_t warmup_steps; /* cosine: >= 0 (0: no warmup) */
  int64_t total_steps;  /* cosine: > warmup_steps */
  double min_lr;        /* cosine: in [0, lr] */
} dl_schedule;

/* A constant schedule at `lr` with step_size 1, gamma 0.1 and no warmup. */
dl_schedule dl_schedule_constant(double lr);

/* Checks the fields the kind uses; DL_ERR_INVALID names the bad one. */
dl_status dl_schedule_check(const dl_schedule *s);

/* The learning rate of step `step` (a negative step counts as 0). The
 * schedule must have passed dl_schedule_check. */
float dl_lr_at(const dl_schedule *s, int64_t step);

#endif
