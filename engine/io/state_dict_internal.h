/* What state_dict.c (writing and reading) gives state_load.c (loading
 * into existing tensors with a diagnosis): a group's datasets listed
 * before any is read, and the checks both apply. Internal to engine/io/. */
#ifndef DL_STATE_DICT_INTERNAL_H
#define DL_STATE_DICT_INTERNAL_H

#include "io/state_dict.h"

/* A dataset of the file's group: name, stored dtype (-1 if none of ours),
 * shape. */
typedef struct dl_sd_stored {
  char *name;
  int dtype;
  char type_name[32];
  int ndim;
  int64_t shape[DL_MAX_DIMS];
  bool matched;
} dl_sd_stored;

typedef struct dl_sd_listing {
  dl_sd_stored *e;
  int n;
} dl_sd_listing;

/* items[0..n-1] valid to write or load: names, tensors, no name twice. */
dl_status dl_sd_check_items(const char *path, const dl_named_tensor *items, int n);
/* Opens group of file ('/' the root), saying which when it is missing. */
dl_status dl_sd_open_group(hid_t file, const char *path, const char *group, hid_t *g);
/* Every dataset of group g, in creation order, with its stored dtype and shape. */
dl_status dl_sd_list_group(hid_t g, const char *path, const char *group, dl_sd_listing *l);
void dl_sd_listing_free(dl_sd_listing *l);
/* DL_ERR_FORMAT unless e holds the engine dtype `expected` exactly. */
dl_status dl_sd_check_dtype(const char *path, const char *group, const dl_sd_stored *e,
                            int expected);
/* Reads dataset e of g into a new tensor t, once the file is seen to hold
 * the data its header promises (h5.h's dl_h5_check_stored). */
dl_status dl_sd_read_dataset(hid_t g, const char *path, const char *group, const dl_sd_stored *e,
                             dl_tensor *t);
/* "[2, 3]" into buf; returns buf. */
const char *dl_sd_describe_shape(int ndim, const int64_t *shape, char *buf, size_t len);
/* group, or "/" for NULL or "". */
const char *dl_sd_group_or_root(const char *group);

#endif
