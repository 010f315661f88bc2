/* report.h: every file report into one folder. */
#include "report/report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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

dl_status dlc_report_write_all(const char *dir, const dlc_scenario_result *results, int n,
                               const char *env_json) {
  if (!dir || !dir[0]) return dl_fail(DL_ERR_INVALID, "reports: no output folder given");
  DL_TRY(make_dir(dir));
  static const char *const names[] = {"report.json", "junit.xml", "report.html"};
  char paths[3][DLC_PATH_MAX];
  for (int i = 0; i < 3; i++)
    if (snprintf(paths[i], sizeof paths[i], "%s/%s", dir, names[i]) >= (int)sizeof paths[i])
      return dl_fail(DL_ERR_INVALID, "report folder %.60s...: %s/%s is longer than %d bytes",
                     dir, dir, names[i], DLC_PATH_MAX - 1);
  DL_TRY(dlc_report_json(paths[0], results, n, env_json));
  DL_TRY(dlc_report_junit(paths[1], results, n));
  return dlc_report_html(paths[2], results, n, env_json);
}
