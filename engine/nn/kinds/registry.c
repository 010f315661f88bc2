/* The registry (layer_kinds.h) as a dispatch table indexed by kind, and
 * dl_layer_init, which creates a layer through it. A residual's body is a
 * sequence whose layers are made here again: registry.c, residual.c and
 * seq.c call each other, the one loop between engine files (ci/check-stages.sh
 * allows it by name). */
#include "nn/kinds/kinds.h"

#include <string.h>

typedef struct kind_entry {
  const dl_layer_ops *ops;
  dl_status (*init)(dl_layer *l, uint64_t seed);
  dl_status (*check)(const char *label, const dl_layer_desc *d);
} kind_entry;

#define KIND_ENTRY(id, name, ops, init, check, keys) [id] = {&ops, init, check},
static const kind_entry kinds[] = {DL_LAYER_KINDS(KIND_ENTRY)};
#undef KIND_ENTRY
_Static_assert(sizeof kinds / sizeof kinds[0] == DL_LAYER_KIND_COUNT,
               "every layer kind has one registry entry");

dl_status dl_layer_init(dl_layer *l, const dl_layer_desc *d, const char *prefix, uint64_t rng_id,
                        uint64_t seed) {
  char label[DL_NAME_MAX + 32];
  memset(l, 0, sizeof *l);
  if (!prefix) prefix = "";
  dl_layer_label_of(prefix, d->kind, label, sizeof label);
  if (strlen(prefix) >= DL_NAME_MAX)
    return dl_fail(DL_ERR_INVALID, "%s: name prefix is longer than %d characters", label,
                   DL_NAME_MAX - 1);
  if ((unsigned)d->kind >= DL_LAYER_KIND_COUNT)
    return dl_fail(DL_ERR_INVALID, "%s: unknown layer kind %d", label, (int)d->kind);
  const kind_entry *k = &kinds[d->kind];
  DL_TRY(k->check(label, d));
  l->desc = *d;
  strcpy(l->prefix, prefix);
  l->rng_id = rng_id;
  l->training = true;
  l->ops = k->ops;
  dl_status s = k->init(l, seed);
  if (s != DL_OK) {
    dl_layer_destroy(l);
    return s;
  }
  return DL_OK;
}
