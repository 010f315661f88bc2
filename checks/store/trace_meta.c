/* The metadata a golden carries beside its trace (trace_io.h). */
#define _POSIX_C_SOURCE 200809L /* gmtime_r */

#include "store/trace_io.h"

#include "judge/tolerance.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

dl_status dlc_golden_meta_init(dlc_golden_meta *m) {
  memset(m, 0, sizeof *m);
  m->golden = true;
  dlc_env e;
  dlc_env_fingerprint(&e);
  DL_TRY(dlc_env_to_json(&e, m->env_json, sizeof m->env_json));
  time_t now = time(NULL);
  struct tm utc;
  if (now == (time_t)-1 || !gmtime_r(&now, &utc) ||
      !strftime(m->recorded_at, sizeof m->recorded_at, "%Y-%m-%dT%H:%M:%SZ", &utc))
    snprintf(m->recorded_at, sizeof m->recorded_at, "unknown");
  snprintf(m->version, sizeof m->version, "%s", dlc_version());
  snprintf(m->golden_kind, sizeof m->golden_kind, "single");
  return DL_OK;
}

dl_status dlc_golden_meta_set_tol(dlc_golden_meta *m, const char *quantity, const char *rule) {
  dlc_tolerance parsed;
  if (!*quantity || strlen(quantity) >= DLC_NAME_MAX)
    return dl_fail(DL_ERR_INVALID,
                   "golden tolerance: quantity name '%s' is empty or longer "
                   "than %d bytes",
                   quantity, DLC_NAME_MAX - 1);
  if (strlen(rule) >= DLC_TOL_TEXT_MAX)
    return dl_fail(DL_ERR_INVALID, "golden tolerance of %s: rule '%s' is longer than %d bytes",
                   quantity, rule, DLC_TOL_TEXT_MAX - 1);
  if (dlc_tolerance_parse(rule, &parsed) != DL_OK)
    return dl_fail_context(DL_ERR_INVALID, "golden tolerance of %s: ", quantity);
  int i = 0;
  while (i < m->ntols && strcmp(m->tols[i].quantity, quantity) != 0) i++;
  if (i == DLC_GOLDEN_TOLS_MAX)
    return dl_fail(DL_ERR_INVALID,
                   "golden tolerance of %s: the table holds at most %d "
                   "quantities",
                   quantity, DLC_GOLDEN_TOLS_MAX);
  snprintf(m->tols[i].quantity, sizeof m->tols[i].quantity, "%s", quantity);
  snprintf(m->tols[i].rule, sizeof m->tols[i].rule, "%s", rule);
  if (i == m->ntols) m->ntols++;
  return DL_OK;
}

dl_status dlc_golden_meta_recorded(dlc_golden_meta *m, const char *origin_env, bool bitwise) {
  DL_TRY(dlc_golden_meta_init(m));
  if (origin_env && origin_env[0]) snprintf(m->env_json, sizeof m->env_json, "%s", origin_env);
  static const char *const quantities[] = {"loss", "grad_norm", "params", "buffers"};
  for (size_t i = 0; i < sizeof quantities / sizeof *quantities; i++)
    DL_TRY(dlc_golden_meta_set_tol(m, quantities[i], bitwise ? "bitwise" : "close(1.3e-6, 1e-5)"));
  return DL_OK;
}

const char *dlc_golden_meta_tol(const dlc_golden_meta *m, const char *quantity) {
  for (int i = 0; i < m->ntols; i++)
    if (strcmp(m->tols[i].quantity, quantity) == 0) return m->tols[i].rule;
  return NULL;
}
