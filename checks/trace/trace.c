#define _POSIX_C_SOURCE 200809L /* strdup */

#include "trace/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

const char *const dlc_stat_names[DLC_STAT_COUNT] = {"mean", "std",       "min",
                                                    "max",  "frac_zero", "nonfinite"};

static void copy_name(char dst[DLC_NAME_MAX], const char *src) {
  strncpy(dst, src, DLC_NAME_MAX - 1);
  dst[DLC_NAME_MAX - 1] = '\0';
}

/* Grows *arr (of *n elements of size sz) by one zeroed element. */
static void *grow(void *arr, int *n, size_t sz, const char *what) {
  void *p = realloc(arr, (size_t)(*n + 1) * sz);
  if (!p) {
    dl_fail(DL_ERR_NOMEM, "out of memory growing trace %s", what);
    return NULL;
  }
  memset((char *)p + (size_t)*n * sz, 0, sz);
  (*n)++;
  return p;
}

void dlc_trace_init(dlc_trace *t, const char *scenario, const char *run) {
  memset(t, 0, sizeof *t);
  copy_name(t->scenario, scenario ? scenario : "");
  copy_name(t->run, run ? run : "");
  strcpy(t->backend, "cpu");
}

void dlc_trace_free(dlc_trace *t) {
  for (int i = 0; i < t->nseries; i++) dlc_spill_free(t->series[i].v, &t->series[i].spill);
  free(t->series);
  free(t->digest_names);
  dlc_spill_free(t->digests, &t->digest_spill);
  for (int i = 0; i < t->nstats; i++) {
    free(t->stats[i].layer);
    free(t->stats[i].stat);
  }
  free(t->stats);
  for (int i = 0; i < t->nfinals; i++) dl_tensor_free(&t->finals[i].t);
  free(t->finals);
  free(t->metrics);
  for (int i = 0; i < t->nnotes; i++) free(t->notes[i].text);
  free(t->notes);
  free(t->origin_env);
  memset(t, 0, sizeof *t);
}

const dlc_series *dlc_trace_series(const dlc_trace *t, const char *name) {
  for (int i = 0; i < t->nseries; i++)
    if (strcmp(t->series[i].name, name) == 0) return &t->series[i];
  return NULL;
}

dl_status dlc_trace_push(dlc_trace *t, const char *name, double v) {
  dlc_series *s = (dlc_series *)dlc_trace_series(t, name);
  if (!s) {
    dlc_series *arr = grow(t->series, &t->nseries, sizeof *arr, name);
    if (!arr) return DL_ERR_NOMEM;
    t->series = arr;
    s = &arr[t->nseries - 1];
    copy_name(s->name, name);
  }
  size_t end = (size_t)(s->n + 1) * sizeof *s->v;
  void *values = s->v;
  char what[DLC_NAME_MAX + 8];
  if (end > s->spill.cap) snprintf(what, sizeof what, "series %s", s->name);
  DL_TRY(dlc_spill_grow(&values, &s->spill, end, what));
  s->v = values;
  s->v[s->n++] = v;
  dlc_spill_written(s->v, &s->spill, end);
  return DL_OK;
}

dl_status dlc_trace_set_metric(dlc_trace *t, const char *name, double v) {
  for (int i = 0; i < t->nmetrics; i++)
    if (strcmp(t->metrics[i].name, name) == 0) {
      t->metrics[i].value = v;
      return DL_OK;
    }
  dlc_metric *arr = grow(t->metrics, &t->nmetrics, sizeof *arr, name);
  if (!arr) return DL_ERR_NOMEM;
  t->metrics = arr;
  copy_name(arr[t->nmetrics - 1].name, name);
  arr[t->nmetrics - 1].value = v;
  return DL_OK;
}

bool dlc_trace_metric(const dlc_trace *t, const char *name, double *v) {
  for (int i = 0; i < t->nmetrics; i++)
    if (strcmp(t->metrics[i].name, name) == 0) {
      if (v) *v = t->metrics[i].value;
      return true;
    }
  return false;
}

const char *dlc_trace_note(const dlc_trace *t, const char *name) {
  for (int i = 0; i < t->nnotes; i++)
    if (strcmp(t->notes[i].name, name) == 0) return t->notes[i].text;
  return NULL;
}

dl_status dlc_trace_set_note(dlc_trace *t, const char *name, const char *text) {
  char *copy = strdup(text);
  if (!copy) return dl_fail(DL_ERR_NOMEM, "out of memory for note %s", name);
  for (int i = 0; i < t->nnotes; i++)
    if (strcmp(t->notes[i].name, name) == 0) {
      free(t->notes[i].text);
      t->notes[i].text = copy;
      return DL_OK;
    }
  dlc_note *arr = grow(t->notes, &t->nnotes, sizeof *arr, name);
  if (!arr) {
    free(copy);
    return DL_ERR_NOMEM;
  }
  t->notes = arr;
  copy_name(arr[t->nnotes - 1].name, name);
  arr[t->nnotes - 1].text = copy;
  return DL_OK;
}

const dl_tensor *dlc_trace_final(const dlc_trace *t, const char *name) {
  for (int i = 0; i < t->nfinals; i++)
    if (strcmp(t->finals[i].name, name) == 0) return &t->finals[i].t;
  return NULL;
}

dl_status dlc_trace_add_final(dlc_trace *t, const char *name, const dl_tensor *src) {
  dl_tensor copy = {0};
  DL_TRY(dl_tensor_clone(&copy, src, name));
  for (int i = 0; i < t->nfinals; i++)
    if (strcmp(t->finals[i].name, name) == 0) {
      dl_tensor_free(&t->finals[i].t);
      t->finals[i].t = copy;
      return DL_OK;
    }
  dlc_named_tensor *arr = grow(t->finals, &t->nfinals, sizeof *arr, name);
  if (!arr) {
    dl_tensor_free(&copy);
    return DL_ERR_NOMEM;
  }
  t->finals = arr;
  copy_name(arr[t->nfinals - 1].name, name);
  arr[t->nfinals - 1].t = copy;
  return DL_OK;
}

uint64_t dlc_digest(const void *data, size_t bytes) { return (uint64_t)XXH64(data, bytes, 0); }

static dl_status fix_digest_names(dlc_trace *t, int n, const char *const *names) {
  if (t->digest_steps == 0 && t->ndigest == 0) {
    t->digest_names = calloc((size_t)(n ? n : 1), sizeof *t->digest_names);
    if (!t->digest_names) return dl_fail(DL_ERR_NOMEM, "out of memory for digest names");
    for (int j = 0; j < n; j++) copy_name(t->digest_names[j], names[j]);
    t->ndigest = n;
    return DL_OK;
  }
  if (n != t->ndigest)
    return dl_fail(DL_ERR_INTERNAL, "digest step %lld has %d tensors, earlier steps %d",
                   (long long)t->digest_steps, n, t->ndigest);
  for (int j = 0; j < n; j++)
    if (strncmp(t->digest_names[j], names[j], DLC_NAME_MAX - 1) != 0)
      return dl_fail(DL_ERR_INTERNAL, "digest %d is %s, earlier steps had %s", j, names[j],
                     t->digest_names[j]);
  return DL_OK;
}

dl_status dlc_trace_push_digests(dlc_trace *t, int n, const char *const *names,
                                 const dl_tensor *const *tensors) {
  DL_TRY(fix_digest_names(t, n, names));
  size_t end = (size_t)((t->digest_steps + 1) * n) * sizeof *t->digests;
  void *d = t->digests;
  DL_TRY(dlc_spill_grow(&d, &t->digest_spill, end + sizeof *t->digests, "digests"));
  t->digests = d;
  for (int j = 0; j < n; j++)
    t->digests[t->digest_steps * n + j] = dlc_digest(tensors[j]->data, dl_tensor_bytes(tensors[j]));
  t->digest_steps++;
  dlc_spill_written(t->digests, &t->digest_spill, end);
  return DL_OK;
}

dl_status dlc_trace_push_stats(dlc_trace *t, int64_t step, int nlayers,
                               const char *const *layer_names,
                               const double (*stat)[DLC_STAT_COUNT]) {
  dlc_layer_stats *arr = grow(t->stats, &t->nstats, sizeof *arr, "layer statistics");
  if (!arr) return DL_ERR_NOMEM;
  t->stats = arr;
  dlc_layer_stats *s = &arr[t->nstats - 1];
  s->step = step;
  s->layer = calloc((size_t)(nlayers ? nlayers : 1), sizeof *s->layer);
  s->stat = calloc((size_t)(nlayers ? nlayers : 1), sizeof *s->stat);
  if (!s->layer || !s->stat) {
    free(s->layer);
    free(s->stat);
    t->nstats--;
    return dl_fail(DL_ERR_NOMEM, "out of memory for layer statistics");
  }
  s->nlayers = nlayers;
  for (int i = 0; i < nlayers; i++) {
    copy_name(s->layer[i], layer_names[i]);
    memcpy(s->stat[i], stat[i], sizeof s->stat[i]);
  }
  return DL_OK;
}

dl_status dlc_trace_copy(dlc_trace *dst, const dlc_trace *src) {
  memcpy(dst->run, src->run, sizeof dst->run);
  memcpy(dst->scenario, src->scenario, sizeof dst->scenario);
  memcpy(dst->backend, src->backend, sizeof dst->backend);
  dst->seed = src->seed;
  dst->scenario_hash = src->scenario_hash;
  for (int i = 0; i < src->nseries; i++)
    for (int64_t j = 0; j < src->series[i].n; j++)
      DL_TRY(dlc_trace_push(dst, src->series[i].name, src->series[i].v[j]));
  if (src->ndigest) {
    const char **names = malloc((size_t)src->ndigest * sizeof *names);
    dl_status s = names ? DL_OK : dl_fail(DL_ERR_NOMEM, "out of memory copying a trace");
    for (int j = 0; !s && j < src->ndigest; j++) names[j] = src->digest_names[j];
    if (!s) s = fix_digest_names(dst, src->ndigest, names);
    free(names);
    DL_TRY(s);
    size_t bytes = (size_t)(src->digest_steps * src->ndigest) * sizeof *src->digests;
    void *d = NULL;
    DL_TRY(dlc_spill_copy(&d, &dst->digest_spill, src->digests, bytes, "digests"));
    dst->digests = d;
    dst->digest_steps = src->digest_steps;
  }
  for (int i = 0; i < src->nstats; i++) {
    const dlc_layer_stats *st = &src->stats[i];
    const char **names = malloc((size_t)(st->nlayers + 1) * sizeof *names);
    if (!names) return dl_fail(DL_ERR_NOMEM, "out of memory copying a trace");
    for (int l = 0; l < st->nlayers; l++) names[l] = st->layer[l];
    dl_status s = dlc_trace_push_stats(dst, st->step, st->nlayers, names,
                                       (const double(*)[DLC_STAT_COUNT])st->stat);
    free(names);
    DL_TRY(s);
  }
  for (int i = 0; i < src->nfinals; i++)
    DL_TRY(dlc_trace_add_final(dst, src->finals[i].name, &src->finals[i].t));
  for (int i = 0; i < src->nmetrics; i++)
    DL_TRY(dlc_trace_set_metric(dst, src->metrics[i].name, src->metrics[i].value));
  for (int i = 0; i < src->nnotes; i++)
    DL_TRY(dlc_trace_set_note(dst, src->notes[i].name, src->notes[i].text));
  if (src->origin_env && !(dst->origin_env = strdup(src->origin_env)))
    return dl_fail(DL_ERR_NOMEM, "out of memory copying a trace's fingerprint");
  return DL_OK;
}
