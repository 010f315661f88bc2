/* report.h: the manifest of a `run --out DIR`, the scenarios its run wrote. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "report/report.h"

#include "report/format.h"

#include "io/atomic_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char header[] = "# dlcheck run manifest 1: the scenarios of the run that wrote "
                             "this folder, one per line\n";

/* More than a run could name: a longer file is damaged, not read on. */
enum { MANIFEST_MAX_SCENARIOS = 1 << 20 };

/* A folder name under traces/ as the scenario loader allows it (letters,
 * digits, '_', '-', '.'), never "." or "..": nothing outside traces/. */
static bool folder_name(const char *s) {
  if (!s[0] || strlen(s) >= DLC_NAME_MAX || !strcmp(s, ".") || !strcmp(s, "..")) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-' || *p == '.'))
      return false;
  return true;
}

dl_status dlc_report_write_manifest(const char *dir, const dlc_scenario_result *results, int n) {
  char path[DLC_PATH_MAX];
  DL_TRY(dlc_report_folder_file(dir, DLC_REPORT_MANIFEST, path));
  dl_atomic_file f;
  DL_TRY(dl_atomic_open(&f, path));
  FILE *out = NULL;
  dl_status s = dl_atomic_fdopen(&f, &out);
  bool ok = s == DL_OK && fputs(header, out) >= 0;
  /* A scenario that could not be loaded is named by its path and has no
   * folder; its run ended in an error, so the marker stays anyway. */
  for (int i = 0; ok && i < n; i++)
    if (folder_name(results[i].scenario)) ok = fprintf(out, "%s\n", results[i].scenario) > 0;
  int e = errno;
  if (out && fclose(out) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (s == DL_OK && !ok) s = dl_fail(DL_ERR_IO, "cannot write %s: %s", path, strerror(e));
  if (s == DL_OK) return dl_atomic_commit(&f);
  dl_atomic_abort(&f);
  return s;
}

dl_status dlc_report_remove_manifest(const char *dir) {
  char path[DLC_PATH_MAX];
  DL_TRY(dlc_report_folder_file(dir, DLC_REPORT_MANIFEST, path));
  if (unlink(path) == 0 || errno == ENOENT || errno == ENOTDIR) return DL_OK;
  return dl_fail(DL_ERR_IO, "cannot remove the earlier run's %s: %s", path, strerror(errno));
}

void dlc_report_names_free(char **names, int n) {
  for (int i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

static dl_status add_name(char ***names, int *n, const char *name, const char *path, int line) {
  if (!folder_name(name))
    return dl_fail(DL_ERR_FORMAT,
                   "%s:%d: '%.60s' is not a scenario folder name: the manifest is damaged", path,
                   line, name);
  if (*n >= MANIFEST_MAX_SCENARIOS)
    return dl_fail(DL_ERR_FORMAT, "%s: more than %d scenarios: the manifest is damaged", path,
                   MANIFEST_MAX_SCENARIOS);
  char **grown = realloc(*names, (size_t)(*n + 1) * sizeof **names);
  if (!grown) return dl_fail(DL_ERR_NOMEM, "%s: out of memory", path);
  *names = grown;
  if (!(grown[*n] = strdup(name))) return dl_fail(DL_ERR_NOMEM, "%s: out of memory", path);
  ++*n;
  return DL_OK;
}

/* One line into buf (its newline dropped): 1, 0 at the end, -1 when it
 * does not fit. */
static int read_line(FILE *in, char *buf, size_t size) {
  if (!fgets(buf, (int)size, in)) return 0;
  size_t len = strlen(buf);
  if (len == 0 || buf[len - 1] != '\n') return -1; /* too long, or no final newline */
  buf[len - 1] = '\0';
  return 1;
}

static dl_status read_names(FILE *in, const char *path, char ***names, int *n) {
  char line[sizeof header + 1];
  int got = read_line(in, line, sizeof line), at = 1;
  if (got != 1 || strncmp(line, header, sizeof header - 2) != 0)
    return dl_fail(DL_ERR_FORMAT, "%s: not a manifest dlcheck wrote (its first line is not '%.*s')",
                   path, (int)sizeof header - 2, header);
  while ((got = read_line(in, line, sizeof line)) == 1)
    DL_TRY(add_name(names, n, line, path, ++at));
  if (got < 0)
    return dl_fail(DL_ERR_FORMAT, "%s:%d: a line too long or unterminated: the manifest is damaged",
                   path, at + 1);
  if (ferror(in)) return dl_fail(DL_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  return DL_OK;
}

dl_status dlc_report_read_manifest(const char *dir, char ***names, int *n) {
  *names = NULL;
  *n = -1;
  char path[DLC_PATH_MAX];
  DL_TRY(dlc_report_folder_file(dir, DLC_REPORT_MANIFEST, path));
  struct stat st;
  if (lstat(path, &st) != 0 && errno == ENOENT) return DL_OK;
  FILE *in;
  DL_TRY(dl_fopen_regular(path, "manifest", &in));
  *n = 0;
  dl_status s = read_names(in, path, names, n);
  fclose(in);
  if (s == DL_OK) return DL_OK;
  dlc_report_names_free(*names, *n);
  *names = NULL;
  *n = -1;
  return s;
}
