/* A scenario: runs to make, checks between them, and pitfall variants.
 *
 * Loaded from scenarios/NAME/scenario.yaml (schema in scenarios/README.md).
 * Each run is the scenario's base settings with the run's overrides
 * applied; each pitfall variant re-runs the scenario with its overrides
 * applied to the runs it names, and must make the check it names fail. */
#ifndef DLC_SCENARIO_H
#define DLC_SCENARIO_H

#include "judge/check.h"
#include "scenario/config.h"
#include "judge/tolerance.h"
#include "judge/verdict.h"

enum { DLC_MAX_RUNS = 8, DLC_MAX_CHECKS = 16, DLC_MAX_VARIANTS = 16 };

typedef struct dlc_variant {
  char name[DLC_NAME_MAX];      /* "G1" or "G1-no-zero-grad" */
  char pitfall[16];             /* catalogue ID */
  char caught_by[DLC_NAME_MAX]; /* name of the check that must fail */
  char description[512];
  dlc_run_config runs[DLC_MAX_RUNS]; /* the scenario's runs with overrides */
} dlc_variant;

typedef struct dlc_scenario {
  char name[DLC_NAME_MAX];
  char dir[DLC_PATH_MAX];
  char description[1024];
  uint64_t hash;                     /* xxhash64 of scenario.yaml's bytes */
  dlc_run_config runs[DLC_MAX_RUNS]; /* runs[0] is the reference */
  int nruns;
  dlc_check_spec checks[DLC_MAX_CHECKS];
  int nchecks;
  dlc_variant *variants; /* heap: nvariants of them */
  int nvariants;
} dlc_scenario;

/* Loads and validates dir/scenario.yaml. Errors are DL_ERR_IO (cannot read)
 * or DL_ERR_FORMAT/DL_ERR_INVALID with "file:line:col: what, expected what". */
dl_status dlc_scenario_load(dlc_scenario **out, const char *dir);
void dlc_scenario_free(dlc_scenario *s);
int dlc_scenario_find_run(const dlc_scenario *s, const char *name); /* -1 if none */

#endif
