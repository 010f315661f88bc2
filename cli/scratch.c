/* The scratch folder of run/record and what SIGINT/SIGTERM leave behind.
 *
 * The scratch folder (checkpoints of resumed runs) is
 * $TMPDIR/dlcheck-PID-XXXXXX (TMPDIR unset or empty: /tmp). It holds files
 * only. A run killed outright (kill -9) cannot remove it: the next
 * command, whichever it is, removes every dlcheck-PID-* folder whose PID is
 * gone (cli_sweep_scratch).
 *
 * SIGINT, SIGTERM and SIGHUP are blocked in every thread and taken by one
 * thread of their own (sigwait), which may then do what a signal handler
 * cannot: remove the temporaries being written (atomic_file.h) and the
 * scratch folder, say so, and exit with 128 + the signal's number. */
#define _GNU_SOURCE /* mkdtemp, dirfd, fstatat */
#include "cli.h"

#include "io/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch[4096];

/* Removes the files of a flat folder, then the folder. */
static void remove_flat(const char *dir) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
  if (d) closedir(d);
  rmdir(dir);
}

static const char *tmp_base(void) {
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

/* dlcheck-PID-XXXXXX folders of ours whose process is gone (atomic_file.h:
 * dl_owner_gone, which also takes a killed run not yet waited for and a
 * PID reused since). */
static void remove_stale_scratch(const char *base) {
  DIR *d = opendir(base);
  for (struct dirent *e; d && (e = readdir(d));) {
    char *end;
    if (strncmp(e->d_name, "dlcheck-", 8) != 0) continue;
    long pid = strtol(e->d_name + 8, &end, 10);
    if (pid <= 0 || *end != '-' || strlen(end) != 7) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid() || !dl_owner_gone(pid, st.st_mtime))
      continue;
    char path[4096 + 256];
    snprintf(path, sizeof path, "%s/%s", base, e->d_name);
    remove_flat(path);
  }
  if (d) closedir(d);
}

void cli_sweep_scratch(void) { remove_stale_scratch(tmp_base()); }

int cli_scratch_make(char *out, size_t len) {
  const char *base = tmp_base();
  if ((size_t)snprintf(scratch, sizeof scratch, "%s/dlcheck-%ld-XXXXXX", base, (long)getpid()) >=
          sizeof scratch ||
      !mkdtemp(scratch)) {
    fprintf(stderr,
            "dlcheck: cannot create a scratch folder in %s: %s (set TMPDIR to a "
            "writable folder)\n",
            base, strerror(errno));
    scratch[0] = '\0';
    return EXIT_ENVIRONMENT;
  }
  snprintf(out, len, "%s", scratch);
  return -1;
}

void cli_scratch_remove(void) {
  if (scratch[0]) remove_flat(scratch);
  scratch[0] = '\0';
}

/* Those not ignored when dlcheck started (nohup, a background job of a
 * script: their ignoring is kept). */
static sigset_t stopping_signals(void) {
  static const int signals[] = {SIGINT, SIGTERM, SIGHUP};
  sigset_t set;
  sigemptyset(&set);
  for (size_t i = 0; i < sizeof signals / sizeof *signals; i++) {
    struct sigaction old;
    if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
      sigaddset(&set, signals[i]);
  }
  return set;
}

static sigset_t waited;

static void *wait_for_signal(void *arg) {
  (void)arg;
  sigset_t set = waited;
  int sig;
  while (sigwait(&set, &sig) != 0) {
  }
  dl_atomic_remove_temporaries();
  if (scratch[0]) remove_flat(scratch);
  const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
  char msg[256];
  int n = snprintf(msg, sizeof msg,
                   "\ndlcheck: stopped by %s: the files being written and the "
                   "scratch folder are removed; nothing was written half-way\n",
                   name);
  if (n > 0 && write(STDERR_FILENO, msg, (size_t)n) < 0) n = 0;
  _exit(128 + sig);
  return NULL;
}

static pthread_t waiter;
static bool waiting;

int cli_signals_start(void) {
  sigset_t set = waited = stopping_signals();
  /* Blocked here, before any other thread starts (ranks, MPI's), so that
   * all of them inherit the mask and only the waiting thread takes them. */
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0 ||
      pthread_create(&waiter, NULL, wait_for_signal, NULL) != 0) {
    fprintf(stderr, "dlcheck: cannot set up signal handling\n");
    return EXIT_ENVIRONMENT;
  }
  waiting = true;
  return -1;
}

/* sigwait is a cancellation point: the waiting thread ends there and is
 * joined, so that nothing of it outlives the command (valgrind counts a
 * detached thread's stack as possibly lost). The signals stay blocked. */
void cli_signals_stop(void) {
  if (!waiting) return;
  pthread_cancel(waiter);
  pthread_join(waiter, NULL);
  waiting = false;
}
