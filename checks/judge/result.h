/* What running one scenario produced: the verdicts of its checks on the
 * correct pipeline, of each pitfall variant, and of the golden comparison,
 * with the traces that back them (for plots). Reports render a list of
 * these. */
#ifndef DLC_RESULT_H
#define DLC_RESULT_H

#include "judge/envelope.h"
#include "judge/verdict.h"

typedef struct dlc_pitfall_outcome {
  char variant[DLC_NAME_MAX];
  char pitfall[16]; /* catalogue ID */
  char description[512];
  bool caught;         /* the check it names failed, as it must */
  dlc_verdict verdict; /* that check's verdict on the variant */
  dlc_verdict *others; /* the variant's other checks, for context */
  int nothers;
} dlc_pitfall_outcome;

typedef struct dlc_scenario_result {
  char scenario[DLC_NAME_MAX];
  char description[1024];
  char backend[32];
  dlc_verdict *checks; /* the correct pipeline's checks */
  int nchecks;
  dlc_verdict golden;  /* comparison with golden/<scenario>/<device>.h5 */
  bool golden_present; /* false: no golden file (golden.kind = DLC_ERROR,
                                evidence says how to record one) */
  dlc_pitfall_outcome *pitfalls;
  int npitfalls;
  dlc_trace *traces; /* the correct pipeline's runs, in scenario order */
  int ntraces;
  dlc_trace *golden_trace; /* NULL without a golden */
  dlc_envelope *envelope;  /* a calibrated golden's envelope (for band
                                plots), else NULL */
  double seconds;
  char skipped[512]; /* non-empty: nothing ran, and why (a run needs a
                                device this machine lacks) */
} dlc_scenario_result;

/* Overall: every check passes (or diverges as expected), the golden
 * matches, and with pitfalls every variant is caught; or the scenario was
 * skipped (a SKIP, like a missing golden, is not a failure). */
bool dlc_result_ok(const dlc_scenario_result *r);
void dlc_result_free(dlc_scenario_result *r);

#endif
