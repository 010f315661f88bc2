/* State dicts in HDF5: named tensors as the datasets of one group, with
 * PyTorch's key names ("0.weight", "1.running_mean") as dataset names, so
 * that h5py reads a saved model as {key: array} and a state dict exported
 * from PyTorch with h5py loads here.
 *
 * Layout: /<group>/<key> datasets, flat (a dot is an ordinary character in
 * an HDF5 name), float32 / int64 / int32 / IEEE float16 / bfloat16 (a 2-byte
 * HDF5 float with 8 exponent bits), rank 0..4 (0-D as an HDF5 scalar, as
 * PyTorch's num_batches_tracked). Groups track creation order, so keys read
 * back in state-dict order; no timestamps are stored, so the same tensors
 * give the same bytes.
 *
 * Files are replaced atomically: written to a temporary file in the same
 * directory, fsync'd, renamed over the target, directory fsync'd. A killed
 * run leaves the old file or the new one, never half of one.
 *
 * Loading follows torch.nn.Module.load_state_dict: strict mode fails on
 * missing or unexpected keys; a shape mismatch fails in both modes (as in
 * PyTorch). Unlike PyTorch, a failed load changes nothing (no partial load).
 * The report lists what did not match in both modes: ignoring it after a
 * strict=False load is pitfall C5. */
#ifndef DL_STATE_DICT_H
#define DL_STATE_DICT_H

#include "io/h5.h"
#include "nn/model.h"
#include "core/tensor.h"

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>

/* One state-dict entry that lives elsewhere (a model, an optimizer). */
typedef struct dl_named_tensor {
  const char *name;
  dl_tensor *tensor;
} dl_named_tensor;

/* A state dict read from a file: owns its names and tensors. */
typedef struct dl_state_dict {
  int n;
  char **names;
  dl_tensor *tensors;
} dl_state_dict;

typedef struct dl_shape_mismatch {
  char *name;
  int expected_ndim, found_ndim;
  int64_t expected[DL_MAX_DIMS], found[DL_MAX_DIMS];
} dl_shape_mismatch;

/* What a load found; filled on success and on DL_ERR_INVALID alike. */
typedef struct dl_load_report {
  char **missing; /* expected, absent from the file */
  int nmissing;
  char **unexpected; /* in the file, not expected */
  int nunexpected;
  dl_shape_mismatch *mismatched;
  int nmismatched;
  /* Every unexpected key starts with "module." (DDP's wrapper) and
   * stripping it gives a missing key: the file holds a DDP model's
   * state_dict(). */
  bool module_prefix;
  int nloaded; /* entries copied into the destination */
} dl_load_report;

/* ---- whole files ---------------------------------------------------- */

/* Writes items as the datasets of `group` ("model", "/model", "opt/state";
 * "/" is the root group) of a new file that atomically replaces `path`. */
dl_status dl_state_save(const char *path, const char *group, const dl_named_tensor *items, int n);

/* Copies the datasets of `group` into items (which give the expected
 * shapes and dtypes). strict: missing/unexpected keys fail with
 * DL_ERR_INVALID. report may be NULL; if not, it is filled (free it with
 * dl_load_report_free) whenever the file could be read. Missing or
 * unreadable file: DL_ERR_IO; not HDF5, no such group, wrong dtype or
 * rank: DL_ERR_FORMAT, naming the file and key. */
dl_status dl_state_load(const char *path, const char *group, const dl_named_tensor *items, int n,
                        bool strict, dl_load_report *report);

/* Reads every dataset of `group` into a new state dict, in file order. */
dl_status dl_state_read(const char *path, const char *group, dl_state_dict *out);
void dl_state_dict_free(dl_state_dict *sd); /* leaves sd empty; safe on empty */
/* The tensor named `name`, or NULL. */
const dl_tensor *dl_state_dict_find(const dl_state_dict *sd, const char *name);

/* ---- models ---------------------------------------------------------- */

/* The model's parameters and buffers in PyTorch's state_dict() order (per
 * layer: weight, bias, then buffers; residual bodies in place). *items is
 * malloc'd: free() it; the names and tensors belong to the model. */
dl_status dl_model_state_items(dl_model *m, dl_named_tensor **items, int *n);
dl_status dl_model_save_state(dl_model *m, const char *path, const char *group);
dl_status dl_model_load_state(dl_model *m, const char *path, const char *group, bool strict,
                              dl_load_report *report);

/* ---- reports --------------------------------------------------------- */

void dl_load_report_free(dl_load_report *r); /* leaves r empty; safe on empty */
/* One paragraph: counts, the first few names of each list, and the fix
 * for a "module." prefix. Returns buf. */
const char *dl_load_report_describe(const dl_load_report *r, char *buf, size_t len);

/* ---- building blocks for files holding several groups (checkpoints) -- */

/* Files holding several groups open with io/h5.h's dl_h5_atomic_create
 * (writing) and dl_h5_open_read. */

/* The same operations on an open file; `path` only names it in messages. */
dl_status dl_state_write_group(hid_t file, const char *path, const char *group,
                               const dl_named_tensor *items, int n);
dl_status dl_state_load_group(hid_t file, const char *path, const char *group,
                              const dl_named_tensor *items, int n, bool strict,
                              dl_load_report *report);
dl_status dl_state_read_group(hid_t file, const char *path, const char *group, dl_state_dict *out);

#endif
