/* A private temporary directory for a test file: created by the group
 * setup, emptied and removed by the group teardown. Header-only; include
 * after cmocka.h. Needs _POSIX_C_SOURCE >= 200809L (mkdtemp). */
#ifndef DL_TEST_TMPDIR_H
#define DL_TEST_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

/* TMPDIR/name; four results stay valid at once. */
static inline const char *path_in_tmp(const char *name) {
  static char buf[4][sizeof tmpdir + 256];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%.255s", tmpdir, name);
  return p;
}

/* mkdtemp of /tmp/PREFIX_XXXXXX; 0 on success (a cmocka setup's result). */
static inline int tmpdir_make(const char *prefix) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/%.40s_XXXXXX", prefix);
  return mkdtemp(tmpdir) ? 0 : -1;
}

static inline int remove_tmpdir(void **state) {
  (void)state;
  DIR *d = opendir(tmpdir);
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') unlink(path_in_tmp(e->d_name));
  closedir(d);
  rmdir(tmpdir);
  return 0;
}

/* Files in the directory whose name contains `part`. */
static inline int count_files_with(const char *part) {
  DIR *d = opendir(tmpdir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, part)) n++;
  if (d) closedir(d);
  return n;
}

#endif
