/* dlcheck's own catalogue of pitfalls, with stable IDs (G1 to X6, in the
 * groups of docs/pitfalls.md). Each entry must end up with a scenario
 * variant that injects it and a check that catches it; `dlcheck list` and
 * the pitfall-coverage test read this table. */
#ifndef DLC_CATALOGUE_H
#define DLC_CATALOGUE_H

/* Where a pitfall can be shown caught: a scenario variant on the CPU
 * backend (test_scenarios requires one for each), one that needs a GPU
 * (E1-E3, N4), or only in a team's own code through the audit, where the
 * engine has no counterpart to break (an exported model, say): those
 * need an example pair in examples/audit instead. */
typedef enum dlc_reach { DLC_REACH_CPU, DLC_REACH_GPU, DLC_REACH_AUDIT } dlc_reach;

typedef struct dlc_pitfall_entry {
  const char *id;      /* "G1" */
  const char *mistake; /* what the pipeline does wrong */
  const char *effect;  /* what goes wrong because of it */
  const char *fix;     /* the PyTorch line that fixes it, for reports */
  const char *caught;  /* which scenario and check catch it */
  dlc_reach reach;
} dlc_pitfall_entry;

int dlc_catalogue_count(void);
const dlc_pitfall_entry *dlc_catalogue_at(int i);
const dlc_pitfall_entry *dlc_catalogue_find(const char *id); /* NULL if none */

#endif
