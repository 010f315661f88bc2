#define _POSIX_C_SOURCE 200809L /* lstat */
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

dl_status dlc_make_dirs_below(const char *base, const char *path) {
  char buf[4096];
  size_t n = strlen(base);
  DL_TRY(dlc_path(buf, sizeof buf, "%s", path));
  if (n == 0 || strncmp(buf, base, n) != 0 || buf[n] != '/')
    return dl_fail(DL_ERR_INTERNAL, "%s is not below %s", path, base);
  buf[n + 1] = '\0';
  DL_TRY(dlc_make_parent_dirs(buf)); /* the folder given, links allowed */
  DL_TRY(dlc_path(buf, sizeof buf, "%s", path));
  /* Below it, one level at a time: mkdir never follows a link, and a
   * level is entered only once it is known to be a real folder. */
  for (char *p = buf + n + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return dl_fail(DL_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    struct stat st;
    if (lstat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
      return dl_fail(DL_ERR_IO,
                     "refusing to write into %s: it is a symbolic link or not a "
                     "folder, and dlcheck writes only below the folder it was given (%s); "
                     "remove it",
                     buf, base);
    *p = '/';
  }
  return DL_OK;
}
