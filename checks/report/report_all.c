/* report.h: every file report into one folder. */
#define _POSIX_C_SOURCE 200809L /* unlink */
#include "report/report.h"

#include "io/atomic_file.h"
#include "report/format.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p */
static dl_status make_dir(const char *dir) {
  char buf[DLC_PATH_MAX];
  if (strlen(dir) >= sizeof buf)
    return dl_fail(DL_ERR_INVALID, "report folder %.60s... is longer than %d bytes", dir,
                   DLC_PATH_MAX - 1);
  strcpy(buf, dir);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(buf, 0777); /* an existing parent is fine; the last mkdir reports */
      *p = '/';
    }
  int e = mkdir(buf, 0777) == 0 ? 0 : errno;
  struct stat st;
  if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
    return dl_fail(DL_ERR_IO, "cannot create report folder %s: %s", dir,
                   strerror(e && e != EEXIST ? e : ENOTDIR));
  return DL_OK;
}

static const char *const report_names[] = {"report.json", "junit.xml", "report.html"};
enum { NREPORTS = 3 };

static dl_status report_paths(const char *dir, char paths[NREPORTS][DLC_PATH_MAX]) {
  if (!dir || !dir[0]) return dl_fail(DL_ERR_INVALID, "reports: no output folder given");
  for (int i = 0; i < NREPORTS; i++)
    if (snprintf(paths[i], DLC_PATH_MAX, "%s/%s", dir, report_names[i]) >= DLC_PATH_MAX)
      return dl_fail(DL_ERR_INVALID, "report folder %.60s...: %s/%s is longer than %d bytes", dir,
                     dir, report_names[i], DLC_PATH_MAX - 1);
  return DL_OK;
}

dl_status dlc_report_remove_all(const char *dir) {
  char paths[NREPORTS][DLC_PATH_MAX];
  DL_TRY(report_paths(dir, paths));
  for (int i = 0; i < NREPORTS; i++)
    if (unlink(paths[i]) != 0 && errno != ENOENT && errno != ENOTDIR)
      return dl_fail(DL_ERR_IO,
                     "cannot remove the earlier report %s: %s (a report left there "
                     "would describe another run)",
                     paths[i], strerror(errno));
  return DL_OK;
}

/* All three or none: when one fails, every one is removed (those just
 * written and an earlier run's copy of the one that failed), so that the
 * folder never holds a report of a run that failed to finish its reports. */
dl_status dlc_report_write_all(const char *dir, const dlc_scenario_result *results, int n,
                               const char *env_json) {
  char paths[NREPORTS][DLC_PATH_MAX];
  DL_TRY(report_paths(dir, paths));
  DL_TRY(make_dir(dir));
  dl_status s = dlc_report_json(paths[0], results, n, env_json);
  if (s == DL_OK) s = dlc_report_junit(paths[1], results, n);
  if (s == DL_OK) s = dlc_report_html(paths[2], results, n, env_json);
  for (int i = 0; s != DL_OK && i < NREPORTS; i++) unlink(paths[i]);
  return s;
}

/* ---- a run that has not finished ------------------------------------------ */

dl_status dlc_report_folder_file(const char *dir, const char *name, char path[DLC_PATH_MAX]) {
  if (!dir || !dir[0]) return dl_fail(DL_ERR_INVALID, "reports: no output folder given");
  if (snprintf(path, DLC_PATH_MAX, "%s/%s", dir, name) >= DLC_PATH_MAX)
    return dl_fail(DL_ERR_INVALID, "report folder %.60s... is longer than %d bytes", dir,
                   DLC_PATH_MAX - 1);
  return DL_OK;
}

dl_status dlc_report_mark_incomplete(const char *dir) {
  char path[DLC_PATH_MAX];
  DL_TRY(dlc_report_folder_file(dir, DLC_REPORT_INCOMPLETE, path));
  DL_TRY(make_dir(dir));
  static const char text[] =
      "A dlcheck run is writing this folder, or it stopped before its end (a signal,\n"
      "kill -9, a crash) or ended in an error (exit 2). Its traces may be partial or an\n"
      "earlier run's: `dlcheck report` refuses the folder until a `dlcheck run --out`\n"
      "into it finishes without an error.\n";
  dl_atomic_file f;
  DL_TRY(dl_atomic_open(&f, path));
  if (write(f.fd, text, sizeof text - 1) != (ssize_t)(sizeof text - 1)) {
    int e = errno;
    dl_atomic_abort(&f);
    return dl_fail(DL_ERR_IO, "cannot write %s: %s (disk full?)", path, strerror(e));
  }
  return dl_atomic_commit(&f);
}

dl_status dlc_report_mark_complete(const char *dir) {
  char path[DLC_PATH_MAX];
  DL_TRY(dlc_report_folder_file(dir, DLC_REPORT_INCOMPLETE, path));
  if (unlink(path) == 0 || errno == ENOENT) return DL_OK;
  return dl_fail(DL_ERR_IO,
                 "cannot remove %s: %s (the reports are written, but `dlcheck report %s` will "
                 "take the run as unfinished until it is removed)",
                 path, strerror(errno), dir);
}

dl_status dlc_report_check_complete(const char *dir) {
  char path[DLC_PATH_MAX];
  DL_TRY(dlc_report_folder_file(dir, DLC_REPORT_INCOMPLETE, path));
  struct stat st;
  if (lstat(path, &st) != 0) return DL_OK;
  return dl_fail(DL_ERR_INVALID,
                 "%s: the run that wrote this folder did not finish (%s is there: it was "
                 "stopped by a signal or killed, or ended in an error, which its report.json "
                 "names if it got that far), so its traces may be partial or an earlier run's; "
                 "run `dlcheck run --out %s ...` again",
                 dir, DLC_REPORT_INCOMPLETE, dir);
}
