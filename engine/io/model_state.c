/* A model's parameters and buffers as one state dict, under the names
 * PyTorch's state_dict() gives them (io/state_dict.h). */
#include "io/state_dict.h"

#include "nn/seq.h"

#include <stdlib.h>
#include <string.h>

/* Counts every entry in *n but stores only the first cap of them, so that a
 * disagreement with the model's own count shows up instead of truncating. */
static void walk_layer(dl_layer *l, dl_named_tensor *items, int *n, int cap) {
  for (int i = 0; i < l->nparams; i++, (*n)++)
    if (*n < cap) items[*n] = (dl_named_tensor){l->params[i].name, &l->params[i].value};
  for (int i = 0; i < l->nbuffers; i++, (*n)++)
    if (*n < cap) items[*n] = (dl_named_tensor){l->buffers[i].name, &l->buffers[i].value};
  if (l->body)
    for (int i = 0; i < l->body->n; i++) walk_layer(&l->body->layers[i], items, n, cap);
}

dl_status dl_model_state_items(dl_model *m, dl_named_tensor **items, int *n) {
  *items = NULL;
  *n = 0;
  if (!m) return dl_fail(DL_ERR_INVALID, "state dict: no model");
  int cap = dl_model_num_params(m) + dl_model_num_buffers(m);
  dl_named_tensor *list = calloc(cap ? (size_t)cap : 1, sizeof *list);
  if (!list) return dl_fail(DL_ERR_NOMEM, "out of memory listing the model's state dict");
  int count = 0;
  for (int i = 0; i < dl_model_num_layers(m); i++)
    walk_layer(dl_model_layer(m, i), list, &count, cap);
  if (count != cap) {
    free(list);
    return dl_fail(DL_ERR_INTERNAL,
                   "the model lists %d parameters and buffers but its layers hold %d", cap, count);
  }
  *items = list;
  *n = count;
  return DL_OK;
}

dl_status dl_model_save_state(dl_model *m, const char *path, const char *group) {
  dl_named_tensor *items;
  int n;
  DL_TRY(dl_model_state_items(m, &items, &n));
  dl_status s = dl_state_save(path, group, items, n);
  free(items);
  return s;
}

dl_status dl_model_load_state(dl_model *m, const char *path, const char *group, bool strict,
                              dl_load_report *report) {
  dl_named_tensor *items;
  int n;
  if (report) memset(report, 0, sizeof *report);
  DL_TRY(dl_model_state_items(m, &items, &n));
  dl_status s = dl_state_load(path, group, items, n, strict, report);
  free(items);
  return s;
}
