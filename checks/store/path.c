#include "store/path.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

dl_status dlc_path(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= len)
    return dl_fail(DL_ERR_INVALID, "path too long (over %zu bytes): %.200s...", len - 1, buf);
  return DL_OK;
}

dl_status dlc_path_under(char *buf, size_t len, const char *root, const char *path) {
  if (path[0] == '/') return dlc_path(buf, len, "%s", path);
  return dlc_path(buf, len, "%s/%s", root, path);
}

dl_status dlc_make_parent_dirs(const char *path) {
  char buf[4096];
  DL_TRY(dlc_path(buf, sizeof buf, "%s", path));
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return dl_fail(DL_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    *p = '/';
  }
  return DL_OK;
}
