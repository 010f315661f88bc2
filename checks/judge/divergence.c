/* divergence.h: where two traces part, from digests and layer statistics. */
#include "judge/divergence.h"

#include "judge/checks_impl.h"

#include <stdio.h>
#include <string.h>

int64_t dlc_first_digest_step(const dlc_trace *a, const dlc_trace *b, int *tensor) {
  if (a->ndigest != b->ndigest) return -1;
  for (int j = 0; j < a->ndigest; j++)
    if (strcmp(a->digest_names[j], b->digest_names[j]) != 0) return -1;
  int64_t steps = a->digest_steps < b->digest_steps ? a->digest_steps : b->digest_steps;
  for (int64_t s = 0; s < steps; s++)
    for (int j = 0; j < a->ndigest; j++)
      if (a->digests[s * a->ndigest + j] != b->digests[s * b->ndigest + j]) {
        if (tensor) *tensor = j;
        return s;
      }
  return -1;
}

const dlc_layer_stats *dlc_layer_stats_at(const dlc_trace *t, int64_t step) {
  for (int i = 0; i < t->nstats; i++)
    if (t->stats[i].step == step) return &t->stats[i];
  return NULL;
}

static const double *layer_row(const dlc_layer_stats *s, const char *name) {
  for (int l = 0; l < s->nlayers; l++)
    if (strcmp(s->layer[l], name) == 0) return s->stat[l];
  return NULL;
}

/* Layers in a's recording order (forward, then backward as it ran);
 * names b lacks count as divergent. */
static bool first_in(const dlc_tolerance *tol, const dlc_layer_stats *sa, const dlc_layer_stats *sb,
                     const char *ra, const char *rb, dlc_verdict *v) {
  for (int l = 0; l < sa->nlayers; l++) {
    const double *row = layer_row(sb, sa->layer[l]);
    dlc_diff d = {.first_bad = 0};
    if (row) d = dlc_compare_f64(row, sa->stat[l], DLC_STAT_COUNT, tol);
    if (row && d.ok) continue;
    bool backward = strncmp(sa->layer[l], "grad ", 5) == 0;
    const char *name = sa->layer[l] + (backward ? 5 : 0);
    snprintf(v->layer, sizeof v->layer, "%s", name);
    if (!row)
      dlc_evidence(v, "First divergent layer: %s (%s) at step %lld: recorded in %s only. ", name,
                   backward ? "backward" : "forward", (long long)sa->step, ra);
    else
      dlc_evidence(v, "First divergent layer: %s (%s) at step %lld: %s %.9g (%s) vs %.9g (%s). ",
                   name, backward ? "backward" : "forward", (long long)sa->step,
                   dlc_stat_names[d.first_bad], d.a_at_first, rb, d.b_at_first, ra);
    return true;
  }
  return false;
}

bool dlc_first_divergent_layer(const dlc_tolerance *tol, const dlc_trace *a, const dlc_trace *b,
                               int64_t step, dlc_verdict *v) {
  int64_t seen[2];
  int nseen = 0;
  for (int64_t s = step; s <= step + 1; s++) {
    const dlc_layer_stats *sa = dlc_layer_stats_at(a, s), *sb = dlc_layer_stats_at(b, s);
    if (!sa || !sb) continue;
    if (first_in(tol, sa, sb, a->run, b->run, v)) {
      if (s > step)
        dlc_evidence(v,
                     "(No layer output differed at step %lld: the parameters changed "
                     "outside the layers, in the optimizer step or an edit.) ",
                     (long long)step);
      return true;
    }
    seen[nseen++] = s;
  }
  /* Only the steps both recorded were compared: say which. */
  if (nseen == 2)
    dlc_evidence(v, "No layer's statistics differ at steps %lld-%lld under the rule. ",
                 (long long)seen[0], (long long)seen[1]);
  else if (nseen == 1)
    dlc_evidence(v,
                 "No layer's statistics differ at step %lld under the rule (the only one of "
                 "%lld-%lld both recorded). ",
                 (long long)seen[0], (long long)step, (long long)step + 1);
  return false;
}
