#define _POSIX_C_SOURCE 200809L /* strdup */
/* dlcheck list: the scenarios and the catalogue pitfalls each covers. */
#include "cli.h"

#include "judge/catalogue.h"
#include "scenario/scenario.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int cmd_list(int argc, char **argv) {
  if (argc > 1) {
    bool help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
    fputs("usage: dlcheck list\n\nPrints each scenario under ROOT/scenarios with the "
          "catalogue IDs its pitfall\nvariants inject, then the catalogue with the scenario "
          "that covers each ID.\n",
          help ? stdout : stderr);
    return help ? EXIT_PASS : EXIT_USAGE;
  }
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/scenarios", cli_root());
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "dlcheck: cannot open %s\n", dir);
    return EXIT_USAGE;
  }
  char *names[256];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) && n < 256;)
    if (e->d_name[0] != '.' && strcmp(e->d_name, "README.md") != 0) names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  const char *covered_by[64] = {0};
  printf("%-16s %s\n", "scenario", "pitfalls");
  for (int i = 0; i < n; i++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    dlc_scenario *s;
    if (dlc_scenario_load(&s, path)) {
      printf("%-16s (cannot load: %s)\n", names[i], dl_last_error());
      continue;
    }
    printf("%-16s", s->name);
    for (int v = 0; v < s->nvariants; v++) {
      printf(" %s", s->variants[v].pitfall);
      for (int k = 0; k < dlc_catalogue_count(); k++)
        if (!strcmp(dlc_catalogue_at(k)->id, s->variants[v].pitfall) && !covered_by[k])
          covered_by[k] = names[i];
    }
    printf("\n");
    dlc_scenario_free(s);
  }
  printf("\n%-4s %-16s %s\n", "ID", "scenario", "mistake");
  for (int k = 0; k < dlc_catalogue_count(); k++) {
    const dlc_pitfall_entry *p = dlc_catalogue_at(k);
    const char *where = covered_by[k]                 ? covered_by[k]
                        : p->reach == DLC_REACH_AUDIT ? "(audit only)"
                                                      : "-";
    printf("%-4s %-16s %s\n%-21s fix: %s\n", p->id, where, p->mistake, "", p->fix);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  return EXIT_PASS;
}
