/* What the scenario loader's two files share (internal to checks/scenario):
 * scenario.c reads the file's structure (name, runs, checks, pitfalls),
 * run_schema.c the run settings (model, data, optimizer, ...) and builds
 * each run from them. */
#ifndef DLC_SCENARIO_LOADER_H
#define DLC_SCENARIO_LOADER_H

#include "scenario/scenario.h"
#include "scenario/yaml_util.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MSIZE(type, member) sizeof(((type *)0)->member)

enum { MAX_BODY_DEPTH = 8 };

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

/* The top level's run settings (and the structure keys, skipped) applied
 * to c: validates every top-level key. */
dl_status dlc_apply_top_level(loader *L, dlc_run_config *c);

/* Run `run` of the file: defaults, the top level, the run's overrides, then
 * `extra` (a pitfall's overrides) when given; `where` and `who` ("" or
 * "run 'x': ") locate it in messages. */
dl_status dlc_build_run(loader *L, int run, const yu_val *extra, const yu_val *where,
                        const char *who, dlc_run_config *c);

#endif
