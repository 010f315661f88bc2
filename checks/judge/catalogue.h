/* dlcheck's own catalogue of pitfalls, with stable IDs (G1..E3). Each entry
 * must end up with a scenario variant that injects it and a check that
 * catches it; `dlcheck list` and the pitfall-coverage test read this table. */
#ifndef DLC_CATALOGUE_H
#define DLC_CATALOGUE_H

#include <stdbool.h>

typedef struct dlc_pitfall_entry {
  const char *id;      /* "G1" */
  const char *mistake; /* what the pipeline does wrong */
  const char *effect;  /* what goes wrong because of it */
  const char *fix;     /* the PyTorch line that fixes it, for reports */
  const char *caught;  /* which scenario and check catch it */
  bool cpu;            /* reproducible on the CPU backend (not E1-E3, N4) */
} dlc_pitfall_entry;

int dlc_catalogue_count(void);
const dlc_pitfall_entry *dlc_catalogue_at(int i);
const dlc_pitfall_entry *dlc_catalogue_find(const char *id); /* NULL if none */

#endif
