/* Loading a state dict into existing tensors (io/state_dict.h): every key
 * compared first, the differences reported the way PyTorch's
 * load_state_dict does, then all or nothing copied. */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include "io/state_dict.h"

#include "io/h5.h"
#include "io/state_dict_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dl_load_report_free(dl_load_report *r) {
  if (!r) return;
  for (int i = 0; i < r->nmissing; i++) free(r->missing[i]);
  for (int i = 0; i < r->nunexpected; i++) free(r->unexpected[i]);
  for (int i = 0; i < r->nmismatched; i++) free(r->mismatched[i].name);
  free(r->missing);
  free(r->unexpected);
  free(r->mismatched);
  memset(r, 0, sizeof *r);
}

static const char *const module_prefix_fix =
    "strip the 'module.' prefix: load model.module.state_dict() / "
    "consume_prefix_in_state_dict_if_present";

enum { FIRST_NAMES = 4 };

static size_t append(char *buf, size_t len, size_t at, const char *fmt, const char *a,
                     const char *b, const char *c) {
  if (at >= len) return at;
  int k = snprintf(buf + at, len - at, fmt, a, b, c);
  return k < 0 ? at : at + (size_t)k;
}

static size_t append_names(char *buf, size_t len, size_t at, const char *what, char *const *names,
                           int n) {
  char count[32];
  snprintf(count, sizeof count, "%d", n);
  at = append(buf, len, at, "%s%s %s", at ? "; " : "", count, what);
  for (int i = 0; i < n && i < FIRST_NAMES; i++)
    at = append(buf, len, at, "%s%s%s", i ? ", " : ": ", names[i], "");
  if (n > FIRST_NAMES) {
    snprintf(count, sizeof count, "%d", n - FIRST_NAMES);
    at = append(buf, len, at, ", ... (%s more)%s%s", count, "", "");
  }
  return at;
}

const char *dl_load_report_describe(const dl_load_report *r, char *buf, size_t len) {
  if (!len) return buf;
  buf[0] = '\0';
  size_t at = 0;
  if (r->nmissing) at = append_names(buf, len, at, "missing keys", r->missing, r->nmissing);
  if (r->nunexpected)
    at = append_names(buf, len, at, "unexpected keys", r->unexpected, r->nunexpected);
  if (r->nmismatched) {
    char count[32];
    snprintf(count, sizeof count, "%d", r->nmismatched);
    at = append(buf, len, at, "%s%s shape mismatches%s", at ? "; " : "", count, "");
    for (int i = 0; i < r->nmismatched && i < FIRST_NAMES; i++) {
      const dl_shape_mismatch *m = &r->mismatched[i];
      char e[96], f[96];
      at = append(buf, len, at, "%s%s (expected %s", i ? ", " : ": ", m->name,
                  dl_sd_describe_shape(m->expected_ndim, m->expected, e, sizeof e));
      at = append(buf, len, at, ", found %s)%s%s",
                  dl_sd_describe_shape(m->found_ndim, m->found, f, sizeof f), "", "");
    }
    if (r->nmismatched > FIRST_NAMES) at = append(buf, len, at, ", ...%s%s%s", "", "", "");
  }
  if (r->module_prefix)
    at = append(buf, len, at,
                "%sthe unexpected keys are the missing ones with DistributedDataParallel's "
                "'module.' prefix: %s%s",
                at ? ". " : "", module_prefix_fix, "");
  if (!at) snprintf(buf, len, "all %d keys matched", r->nloaded);
  return buf;
}

static dl_status push_name(char ***list, int *n, const char *name) {
  char **grown = realloc(*list, (size_t)(*n + 1) * sizeof **list);
  if (!grown) return dl_fail(DL_ERR_NOMEM, "out of memory for a load report");
  *list = grown;
  grown[*n] = strdup(name);
  if (!grown[*n]) return dl_fail(DL_ERR_NOMEM, "out of memory for a load report");
  (*n)++;
  return DL_OK;
}

static dl_status push_mismatch(dl_load_report *r, const dl_tensor *want, const dl_sd_stored *e) {
  dl_shape_mismatch *grown = realloc(r->mismatched, (size_t)(r->nmismatched + 1) * sizeof *grown);
  if (!grown) return dl_fail(DL_ERR_NOMEM, "out of memory for a load report");
  r->mismatched = grown;
  dl_shape_mismatch *m = &grown[r->nmismatched];
  memset(m, 0, sizeof *m);
  m->name = strdup(e->name);
  if (!m->name) return dl_fail(DL_ERR_NOMEM, "out of memory for a load report");
  m->expected_ndim = want->ndim;
  m->found_ndim = e->ndim;
  memcpy(m->expected, want->shape, sizeof m->expected);
  memcpy(m->found, e->shape, sizeof m->found);
  r->nmismatched++;
  return DL_OK;
}

static bool same_shape(const dl_tensor *t, const dl_sd_stored *e) {
  if (t->ndim != e->ndim) return false;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] != e->shape[i]) return false;
  return true;
}

static bool in_list(char *const *names, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return true;
  return false;
}

/* DDP's wrapper: every unexpected key is "module." + a missing key. */
static bool has_module_prefix(const dl_load_report *r) {
  static const char prefix[] = "module.";
  if (r->nunexpected == 0) return false;
  for (int i = 0; i < r->nunexpected; i++) {
    const char *k = r->unexpected[i];
    if (strncmp(k, prefix, sizeof prefix - 1) != 0) return false;
    if (!in_list(r->missing, r->nmissing, k + sizeof prefix - 1)) return false;
  }
  return true;
}

/* Fills the report; match[i] = index in the listing of items[i], or -1. */
static dl_status diagnose(const char *path, const char *group, const dl_named_tensor *items, int n,
                          dl_sd_listing *l, int *match, dl_load_report *r) {
  for (int i = 0; i < n; i++) {
    match[i] = -1;
    for (int j = 0; j < l->n && match[i] < 0; j++)
      if (strcmp(l->e[j].name, items[i].name) == 0) match[i] = j;
    if (match[i] < 0) {
      DL_TRY(push_name(&r->missing, &r->nmissing, items[i].name));
      continue;
    }
    dl_sd_stored *e = &l->e[match[i]];
    e->matched = true;
    DL_TRY(dl_sd_check_dtype(path, group, e, (int)items[i].tensor->dtype));
    if (!same_shape(items[i].tensor, e)) {
      DL_TRY(push_mismatch(r, items[i].tensor, e));
      match[i] = -1;
    }
  }
  for (int j = 0; j < l->n; j++)
    if (!l->e[j].matched) DL_TRY(push_name(&r->unexpected, &r->nunexpected, l->e[j].name));
  r->module_prefix = has_module_prefix(r);
  return DL_OK;
}

/* All matched entries are read before any is copied: a damaged file
 * leaves the destination as it was. */
static dl_status read_and_copy(hid_t g, const char *path, const char *group,
                               const dl_named_tensor *items, int n, const dl_sd_listing *l,
                               const int *match, dl_load_report *r) {
  dl_tensor *tmp = calloc(n ? (size_t)n : 1, sizeof *tmp);
  if (!tmp) return dl_fail(DL_ERR_NOMEM, "%s: out of memory loading %s", path, group);
  dl_status s = DL_OK;
  for (int i = 0; i < n && s == DL_OK; i++)
    if (match[i] >= 0) s = dl_sd_read_dataset(g, path, group, &l->e[match[i]], &tmp[i]);
  for (int i = 0; i < n; i++) {
    if (s == DL_OK && match[i] >= 0) {
      if (tmp[i].numel) memcpy(items[i].tensor->data, tmp[i].data, dl_tensor_bytes(&tmp[i]));
      r->nloaded++;
    }
    dl_tensor_free(&tmp[i]);
  }
  free(tmp);
  return s;
}

static dl_status refuse(const char *path, const char *group, bool strict, const dl_load_report *r) {
  bool keys = r->nmissing || r->nunexpected;
  if (!r->nmismatched && !(strict && keys)) return DL_OK;
  char text[1600];
  dl_load_report_describe(r, text, sizeof text);
  return dl_fail(DL_ERR_INVALID,
                 "error(s) loading state dict from %s group %s (%s; nothing was "
                 "loaded): %s",
                 path, group, r->nmismatched ? "shapes differ" : "strict", text);
}

static dl_status load_from(hid_t g, const char *path, const char *group,
                           const dl_named_tensor *items, int n, bool strict, dl_load_report *r) {
  dl_sd_listing l;
  DL_TRY(dl_sd_list_group(g, path, group, &l));
  int *match = calloc(n ? (size_t)n : 1, sizeof *match);
  dl_status s = match ? DL_OK : dl_fail(DL_ERR_NOMEM, "%s: out of memory", path);
  if (s == DL_OK) s = diagnose(path, group, items, n, &l, match, r);
  if (s == DL_OK) s = refuse(path, group, strict, r);
  if (s == DL_OK) s = read_and_copy(g, path, group, items, n, &l, match, r);
  free(match);
  dl_sd_listing_free(&l);
  return s;
}

dl_status dl_state_load_group(hid_t file, const char *path, const char *group,
                              const dl_named_tensor *items, int n, bool strict,
                              dl_load_report *report) {
  dl_load_report local = {0};
  dl_load_report *r = report ? report : &local;
  memset(r, 0, sizeof *r);
  group = dl_sd_group_or_root(group);
  DL_TRY(dl_sd_check_items(path, items, n));
  dl_h5_quiet q = dl_h5_quiet_begin();
  hid_t g;
  dl_status s = dl_sd_open_group(file, path, group, &g);
  if (s == DL_OK) s = load_from(g, path, group, items, n, strict, r);
  if (g >= 0) H5Gclose(g);
  dl_h5_quiet_end(q);
  /* A report is only worth keeping if the keys were compared. */
  if (s != DL_OK && s != DL_ERR_INVALID) dl_load_report_free(r);
  dl_load_report_free(&local);
  return s;
}

dl_status dl_state_load(const char *path, const char *group, const dl_named_tensor *items, int n,
                        bool strict, dl_load_report *report) {
  hid_t file;
  if (report) memset(report, 0, sizeof *report);
  DL_TRY(dl_h5_open_read(path, &file));
  dl_status s = dl_state_load_group(file, path, group, items, n, strict, report);
  H5Fclose(file);
  return s;
}
