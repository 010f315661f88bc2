/* Temporary files of the C tests, under $TMPDIR (else /tmp), as mktemp(1),
 * Python's tempfile and tests/cli/lib.sh do: tmp_path_make for a path
 * there, make_tmp_dir for a folder of one's own; or a private directory for a whole test file,
 * created by the group setup (tmpdir_make), emptied and removed by the
 * group teardown (remove_tmpdir). Header-only; include after cmocka.h.
 * Needs _POSIX_C_SOURCE >= 200809L (mkdtemp). */
#ifndef DL_TEST_TMPDIR_H
#define DL_TEST_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The longest temporary folder name the tests take (the tests' own paths
 * below it are sized for this); a longer $TMPDIR fails their setup. */
enum { DL_TMP_PATH_MAX = 160 };

/* $TMPDIR where set and not empty, else /tmp. */
static inline const char *tmp_base(void) {
  const char *t = getenv("TMPDIR");
  return t && t[0] ? t : "/tmp";
}

/* buf[size] := tmp_base()/NAME; buf, or NULL with a message on stderr.
 * Some tests put these paths into shell commands unquoted, so a $TMPDIR
 * with other characters than letters, digits and /._+-~ (a space, a
 * quote) is refused rather than split. */
static inline char *tmp_path_make(char *buf, size_t size, const char *name) {
  const char *base = tmp_base();
  if (base[strspn(base, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._+-~")]) {
    fprintf(stderr, "TMPDIR %s: the tests take only letters, digits and /._+-~ there\n", base);
    return NULL;
  }
  int n = snprintf(buf, size, "%s/%s", base, name);
  if (n < 0 || (size_t)n >= size) {
    fprintf(stderr, "TMPDIR %s: longer than the tests allow (%zu)\n", base, size);
    return NULL;
  }
  return buf;
}

/* mkdtemp of tmp_path_make's path (NAME ends in XXXXXX): buf, or NULL. */
static inline char *make_tmp_dir(char *buf, size_t size, const char *name) {
  if (!tmp_path_make(buf, size, name)) return NULL;
  if (!mkdtemp(buf)) {
    perror(buf);
    return NULL;
  }
  return buf;
}

/* The test file's directory (tmpdir_make); unused where a test only wants
 * make_tmp_dir. */
static char tmpdir[DL_TMP_PATH_MAX] __attribute__((unused));

/* tmpdir/name; four results stay valid at once. */
static inline const char *path_in_tmp(const char *name) {
  static char buf[4][sizeof tmpdir + 256];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%.255s", tmpdir, name);
  return p;
}

/* tmpdir := mkdtemp of tmp_base()/PREFIX_XXXXXX; 0 on success (a cmocka
 * setup's result). */
static inline int tmpdir_make(const char *prefix) {
  char name[64];
  snprintf(name, sizeof name, "%.40s_XXXXXX", prefix);
  return make_tmp_dir(tmpdir, sizeof tmpdir, name) ? 0 : -1;
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
