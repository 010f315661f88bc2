/* engine/io/atomic_file.c: atomic writes that never follow a link, stale
 * temporaries, the signal-time cleanup, and regular-file reads that never
 * block on a FIFO. */
#define _DEFAULT_SOURCE /* mkdtemp, mkfifo, symlink, usleep */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "io/atomic_file.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[512];

static const char *in_dir(const char *name) {
  static char path[2][1024];
  static int which;
  which ^= 1;
  snprintf(path[which], sizeof path[which], "%s/%s", dir, name);
  return path[which];
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

static void read_text(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* Entries of the folder whose name contains `part`. */
static int count_with(const char *part) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, part) != NULL;
  closedir(d);
  return n;
}

static void write_through(const char *path, const char *text, dl_status want) {
  dl_atomic_file f;
  dl_status s = dl_atomic_open(&f, path);
  if (s == DL_OK) {
    assert_int_equal(write(f.fd, text, strlen(text)), (ssize_t)strlen(text));
    s = dl_atomic_commit(&f);
  }
  assert_int_equal(s, want);
}

static void commit_replaces_and_leaves_no_temporary(void **state) {
  (void)state;
  const char *p = in_dir("a.txt");
  write_text(p, "old");
  write_through(p, "new", DL_OK);
  char buf[64];
  read_text(p, buf, sizeof buf);
  assert_string_equal(buf, "new");
  assert_int_equal(count_with("a.txt.tmp"), 0);
  /* through a stdio stream of its own */
  dl_atomic_file f;
  FILE *out;
  assert_int_equal(dl_atomic_open(&f, p), DL_OK);
  assert_int_equal(dl_atomic_fdopen(&f, &out), DL_OK);
  fputs("stdio", out);
  assert_int_equal(fclose(out), 0);
  assert_int_equal(dl_atomic_commit(&f), DL_OK);
  read_text(p, buf, sizeof buf);
  assert_string_equal(buf, "stdio");
}

static void abort_removes_the_temporary(void **state) {
  (void)state;
  dl_atomic_file f;
  assert_int_equal(dl_atomic_open(&f, in_dir("b.txt")), DL_OK);
  assert_int_equal(count_with("b.txt.tmp."), 1);
  dl_atomic_abort(&f);
  dl_atomic_abort(&f); /* safe twice */
  assert_int_equal(count_with("b.txt"), 0);
  /* no folder: refused, nothing made */
  assert_int_equal(dl_atomic_open(&f, in_dir("nope/b.txt")), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "nope/b.txt"));
}

/* The issue-16 data loss: a link in the output folder to a real file got
 * that file truncated. Now a link, a FIFO or a folder is refused and the
 * file it points to is untouched. */
static void a_target_that_is_not_a_regular_file_is_refused(void **state) {
  (void)state;
  const char *victim = in_dir("victim.txt");
  write_text(victim, "precious");
  const char *link = in_dir("link.txt");
  assert_int_equal(symlink(victim, link), 0);
  write_through(link, "overwritten", DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "symbolic link"));
  char buf[64];
  read_text(victim, buf, sizeof buf);
  assert_string_equal(buf, "precious");
  struct stat st;
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  /* a dangling link: nothing is created where it points */
  const char *dangling = in_dir("dangling.txt");
  assert_int_equal(symlink(in_dir("made_by_link.txt"), dangling), 0);
  write_through(dangling, "x", DL_ERR_IO);
  assert_int_equal(count_with("made_by_link"), 0);

  const char *fifo = in_dir("fifo.txt");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  write_through(fifo, "x", DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "FIFO"));
  assert_int_equal(mkdir(in_dir("folder.txt"), 0700), 0);
  write_through(in_dir("folder.txt"), "x", DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "folder"));
  assert_int_equal(count_with(".tmp."), 0);
}

/* A pid that is certainly gone: a child that has exited and been reaped. */
static pid_t dead_pid(void) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(0);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return pid;
}

static void stale_temporaries_of_dead_processes_are_removed(void **state) {
  (void)state;
  char name[128];
  snprintf(name, sizeof name, "c.h5.tmp.%ld.0", (long)dead_pid());
  write_text(in_dir(name), "left by a killed run");
  snprintf(name, sizeof name, "c.h5.tmp.%ld.7", (long)getpid()); /* alive: kept */
  write_text(in_dir(name), "ours");
  write_text(in_dir("c.h5.tmp.notapid"), "kept");
  write_text(in_dir("other.h5.tmp.1.0"), "another target's: kept");
  assert_int_equal(dl_atomic_remove_stale(in_dir("c.h5")), 1);
  assert_int_equal(count_with("c.h5.tmp."), 2);
  /* opening a writer of the same target removes them too */
  snprintf(name, sizeof name, "c.h5.tmp.%ld.1", (long)dead_pid());
  write_text(in_dir(name), "again");
  write_through(in_dir("c.h5"), "fresh", DL_OK);
  assert_int_equal(count_with(name), 0);
  assert_int_equal(count_with("other.h5.tmp.1.0"), 1);
}

static bool is_zombie(pid_t pid) {
  char path[64], stat[256] = {0};
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  bool zombie = f && fgets(stat, sizeof stat, f) && strstr(stat, ") Z ");
  if (f) fclose(f);
  return zombie;
}

/* A killed run not yet waited for (a zombie) is gone; so is the owner of
 * a file whose PID a younger process has taken since. A live process that
 * started before the file changed (it may have made it) is not. */
static void owners_gone_zombie_or_reused(void **state) {
  (void)state;
  pid_t zombie = fork();
  assert_true(zombie >= 0);
  if (zombie == 0) _exit(0);
  for (int i = 0; i < 1000 && !is_zombie(zombie); i++) usleep(1000);
  assert_true(dl_owner_gone(zombie, time(NULL)));
  int status;
  assert_int_equal(waitpid(zombie, &status, 0), zombie);
  assert_true(dl_owner_gone(zombie, time(NULL)));     /* reaped: no such process */
  assert_false(dl_owner_gone(getppid(), time(NULL))); /* started before: may own it */
  assert_true(dl_owner_gone(getppid(), 1000));        /* started after 1970: reused */
  assert_false(dl_owner_gone(getpid(), 1000));        /* never this process */
  assert_false(dl_owner_gone(0, 1000));
}

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* What a killed run was writing, whatever the target, in the folder and
 * below; never through a link, never a live process's. */
static void stale_temporaries_below_a_folder(void **state) {
  (void)state;
  long dead = (long)dead_pid();
  char name[4][128];
  assert_int_equal(mkdir(in_dir("out"), 0755), 0);
  assert_int_equal(mkdir(in_dir("out/traces"), 0755), 0);
  assert_int_equal(mkdir(in_dir("elsewhere"), 0755), 0);
  assert_int_equal(symlink(in_dir("elsewhere"), in_dir("out/link")), 0);
  snprintf(name[0], sizeof name[0], "out/report.json.tmp.%ld.2", dead);
  snprintf(name[1], sizeof name[1], "out/traces/big.h5.tmp.%ld.0", dead);
  snprintf(name[2], sizeof name[2], "out/traces/big.h5.tmp.%ld.1", (long)getpid());
  snprintf(name[3], sizeof name[3], "elsewhere/x.h5.tmp.%ld.0", dead);
  for (int i = 0; i < 4; i++) write_text(in_dir(name[i]), "partial");
  write_text(in_dir("out/traces/a.tmp.5"), "not a temporary's name");
  assert_int_equal(dl_atomic_remove_stale_below(in_dir("out")), 2);
  assert_false(exists(in_dir(name[0])));
  assert_false(exists(in_dir(name[1])));
  assert_true(exists(in_dir(name[2])));
  assert_true(exists(in_dir(name[3])));
  assert_true(exists(in_dir("out/traces/a.tmp.5")));
  assert_int_equal(dl_atomic_remove_stale_below(in_dir("missing")), 0);
}

/* What a signal-handling thread calls before _exit: in a child, as it
 * stops every later write of the process. */
static void temporaries_are_removed_at_a_signal(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dl_atomic_file f, g;
    if (dl_atomic_open(&f, in_dir("d1.h5")) || dl_atomic_open(&g, in_dir("d2.h5"))) _exit(1);
    dl_atomic_remove_temporaries();
    _exit(dl_atomic_open(&f, in_dir("d3.h5")) == DL_ERR_IO ? 0 : 2);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_equal(count_with("d1.h5"), 0);
  assert_int_equal(count_with("d2.h5"), 0);
  assert_int_equal(count_with("d3.h5"), 0);
}

/* Inputs: a FIFO is refused at once (it used to block forever), as are a
 * folder and a device; a regular file opens. */
static void only_regular_files_are_read(void **state) {
  (void)state;
  const char *fifo = in_dir("input.fifo");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int fd;
  FILE *f;
  alarm(10); /* a regression blocks here: fail rather than hang */
  assert_int_equal(dl_open_regular(fifo, "scenario file", &fd), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "input.fifo: cannot read scenario file: it is a FIFO"));
  assert_int_equal(dl_fopen_regular(fifo, NULL, &f), DL_ERR_IO);
  assert_null(f);
  assert_int_equal(dl_check_regular(fifo, NULL), DL_ERR_IO);
  assert_int_equal(dl_check_regular("/dev/null", NULL), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "a device"));
  alarm(0);
  assert_int_equal(dl_check_regular(dir, NULL), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "cannot read: Is a directory"));
  assert_int_equal(dl_check_regular(in_dir("missing"), "dataset file"), DL_ERR_IO);
  assert_non_null(strstr(dl_last_error(), "missing: cannot open dataset file: No such file"));
  write_text(in_dir("plain"), "text");
  assert_int_equal(dl_fopen_regular(in_dir("plain"), NULL, &f), DL_OK);
  char buf[16] = {0};
  assert_int_equal(fread(buf, 1, sizeof buf - 1, f), 4);
  assert_string_equal(buf, "text");
  fclose(f);
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/dl_atomic_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(commit_replaces_and_leaves_no_temporary),
      cmocka_unit_test(abort_removes_the_temporary),
      cmocka_unit_test(a_target_that_is_not_a_regular_file_is_refused),
      cmocka_unit_test(stale_temporaries_of_dead_processes_are_removed),
      cmocka_unit_test(owners_gone_zombie_or_reused),
      cmocka_unit_test(stale_temporaries_below_a_folder),
      cmocka_unit_test(temporaries_are_removed_at_a_signal),
      cmocka_unit_test(only_regular_files_are_read),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[sizeof dir + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return failed;
}
