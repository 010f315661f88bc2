/* atomic_file.h: atomic, link-safe writes and regular-file reads. */
#define _GNU_SOURCE /* O_NOFOLLOW, O_CLOEXEC, O_DIRECTORY */

#include "io/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- this process's temporaries, for a signal handler ----------------- */

enum { MAX_REGISTERED = 256 };
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static char *registry[MAX_REGISTERED];
static bool closing; /* dl_atomic_remove_temporaries ran: no new ones */

/* Creates tmp (O_EXCL, no link followed) and registers it, both under the
 * lock, so that a cleanup between the two cannot miss it. */
static int create_registered(const char *tmp) {
  pthread_mutex_lock(&registry_lock);
  int fd = -1;
  if (closing) errno = ECANCELED;
  else fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  for (int i = 0; fd >= 0 && i < MAX_REGISTERED; i++)
    if (!registry[i]) {
      registry[i] = strdup(tmp); /* NULL (out of memory): not removed on a signal */
      break;
    }
  pthread_mutex_unlock(&registry_lock);
  return fd;
}

static void unregister(const char *tmp) {
  pthread_mutex_lock(&registry_lock);
  for (int i = 0; i < MAX_REGISTERED; i++)
    if (registry[i] && strcmp(registry[i], tmp) == 0) {
      free(registry[i]);
      registry[i] = NULL;
      break;
    }
  pthread_mutex_unlock(&registry_lock);
}

void dl_atomic_remove_temporaries(void) {
  pthread_mutex_lock(&registry_lock);
  closing = true;
  for (int i = 0; i < MAX_REGISTERED; i++)
    if (registry[i]) {
      unlink(registry[i]);
      free(registry[i]);
      registry[i] = NULL;
    }
  pthread_mutex_unlock(&registry_lock);
}

/* ---- stale temporaries ---------------------------------------------------- */

/* The folder and the last component of path (dir "." for a bare name). */
static dl_status split_path(const char *path, char **dir, const char **base) {
  const char *slash = strrchr(path, '/');
  size_t n = slash ? (size_t)(slash - path) : 1;
  if (slash == path) n = 1; /* "/name" */
  *dir = malloc(n + 1);
  if (!*dir) return dl_fail(DL_ERR_NOMEM, "%s: out of memory for a file name", path);
  memcpy(*dir, slash ? path : ".", n);
  (*dir)[n] = '\0';
  *base = slash ? slash + 1 : path;
  return DL_OK;
}

/* s is ".tmp.PID.N" to its end: the PID, else 0. */
static long suffix_pid(const char *s) {
  if (strncmp(s, ".tmp.", 5) != 0) return 0;
  char *end;
  const char *digits = s + 5;
  if (*digits < '1' || *digits > '9') return 0;
  long pid = strtol(digits, &end, 10);
  if (*end != '.' || end[1] < '0' || end[1] > '9') return 0;
  for (end++; *end; end++)
    if (*end < '0' || *end > '9') return 0;
  return pid;
}

/* name is BASE.tmp.PID.N: its PID, else 0. */
static long temp_pid(const char *name, const char *base) {
  size_t len = strlen(base);
  return strncmp(name, base, len) == 0 ? suffix_pid(name + len) : 0;
}

/* name is ANY.tmp.PID.N: its PID, else 0. Only the last ".tmp." can start
 * such a suffix (digits and dots follow it). */
static long any_temp_pid(const char *name) {
  const char *last = NULL;
  for (const char *at = strstr(name, ".tmp."); at; at = strstr(at + 1, ".tmp.")) last = at;
  return last && last > name ? suffix_pid(last) : 0;
}

/* Reads a small text file whole (NUL-terminated); false if it cannot. */
static bool read_small(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

/* Linux's /proc: the state letter of process pid and when it started
 * (seconds since the epoch, to the second of the boot time). */
static bool proc_start(long pid, char *state, double *started) {
  char path[64], stat[1024], sys[8192];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  if (!read_small(path, stat, sizeof stat) || !read_small("/proc/stat", sys, sizeof sys))
    return false;
  /* After the name in parentheses (which may hold spaces and ')'): the
   * state is field 3, the start in clock ticks after boot field 22. */
  const char *rest = strrchr(stat, ')'), *btime = strstr(sys, "\nbtime ");
  unsigned long long ticks, boot;
  long hz = sysconf(_SC_CLK_TCK);
  if (!rest || !btime || hz <= 0 || sscanf(btime, " btime %llu", &boot) != 1 ||
      sscanf(rest + 1,
             " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
             state, &ticks) != 2)
    return false;
  *started = (double)boot + (double)ticks / (double)hz;
  return true;
}

/* The boot time is whole seconds and the tick count rounds: a process is
 * younger than a file only when it started this much after its change. */
enum { START_SLACK_S = 2 };

bool dl_owner_gone(long pid, time_t changed) {
  if (pid <= 0 || (pid_t)pid == getpid()) return false;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return true;
  char state;
  double started;
  if (!proc_start(pid, &state, &started)) return false; /* no /proc: alive as far as we know */
  if (state == 'Z' || state == 'X') return true;
  return started > (double)changed + START_SLACK_S;
}

static bool stale_at(int dir, const char *name, long pid) {
  struct stat st;
  return pid > 0 && fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
         dl_owner_gone(pid, st.st_mtime);
}

int dl_atomic_remove_stale(const char *path) {
  char *dir = NULL;
  const char *base = NULL; /* set with dir; GCC -O2 cannot tell */
  if (!path || !*path || split_path(path, &dir, &base) != DL_OK) return 0;
  int removed = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (stale_at(dirfd(d), e->d_name, temp_pid(e->d_name, base)) &&
        unlinkat(dirfd(d), e->d_name, 0) == 0)
      removed++;
  if (d) closedir(d);
  free(dir);
  return removed;
}

/* Deeper than any folder dlcheck writes (DIR/traces/SCENARIO/VARIANT). */
enum { MAX_SWEEP_DEPTH = 6 };

/* Takes fd (a folder opened without following a link) and closes it. */
static int remove_stale_in(int fd, int depth) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return 0;
  }
  int removed = 0;
  for (struct dirent *e; (e = readdir(d));) {
    const char *name = e->d_name;
    if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
    if (stale_at(dirfd(d), name, any_temp_pid(name))) {
      removed += unlinkat(dirfd(d), name, 0) == 0;
      continue;
    }
    int sub = depth < MAX_SWEEP_DEPTH
                  ? openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                  : -1;
    if (sub >= 0) removed += remove_stale_in(sub, depth + 1);
  }
  closedir(d);
  return removed;
}

int dl_atomic_remove_stale_below(const char *dir) {
  int fd = dir && *dir ? open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
  return fd >= 0 ? remove_stale_in(fd, 0) : 0;
}

/* ---- writing ---------------------------------------------------------------- */

static void reset(dl_atomic_file *f) {
  free(f->path);
  free(f->tmp);
  f->path = f->tmp = NULL;
  f->fd = -1;
}

/* What path is, for a refusal: "a symbolic link", "a folder", ... */
static const char *file_kind(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

static dl_status check_target(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return DL_OK;
    return dl_fail(DL_ERR_IO, "cannot write %s: %s (does its folder exist?)", path,
                   strerror(errno));
  }
  if (S_ISREG(st.st_mode)) return DL_OK;
  return dl_fail(DL_ERR_IO,
                 "refusing to write %s: it is %s, and dlcheck replaces only "
                 "regular files (remove it, or write somewhere else)",
                 path, file_kind(st.st_mode));
}

dl_status dl_atomic_open(dl_atomic_file *f, const char *path) {
  static atomic_uint counter;
  f->path = f->tmp = NULL;
  f->fd = -1;
  if (!path || !*path) return dl_fail(DL_ERR_INVALID, "no file name to write");
  DL_TRY(check_target(path));
  dl_atomic_remove_stale(path);
  size_t len = strlen(path) + 48;
  f->path = strdup(path);
  f->tmp = malloc(len);
  if (!f->path || !f->tmp) {
    reset(f);
    return dl_fail(DL_ERR_NOMEM, "%s: out of memory for a file name", path);
  }
  for (int tries = 0; tries < 100; tries++) {
    snprintf(f->tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
    f->fd = create_registered(f->tmp);
    if (f->fd >= 0) return DL_OK;
    if (errno != EEXIST) break;
  }
  int e = errno;
  reset(f);
  if (e == ECANCELED)
    return dl_fail(DL_ERR_IO, "cannot write %s: dlcheck is stopping (signal)", path);
  return dl_fail(DL_ERR_IO,
                 "cannot create a temporary file beside %s (%s): check that the "
                 "folder exists and is writable",
                 path, strerror(e));
}

dl_status dl_atomic_fdopen(dl_atomic_file *f, FILE **out) {
  *out = NULL;
  int fd = f->fd >= 0 ? dup(f->fd) : -1;
  if (fd >= 0) *out = fdopen(fd, "w");
  if (*out) return DL_OK;
  int e = errno;
  if (fd >= 0) close(fd);
  return dl_fail(DL_ERR_IO, "cannot write %s: %s", f->tmp ? f->tmp : "(closed)", strerror(e));
}

static void fsync_folder(const char *path) {
  char *dir;
  const char *base;
  if (split_path(path, &dir, &base) != DL_OK) return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) { /* best effort: some file systems refuse fsync on folders */
    fsync(fd);
    close(fd);
  }
  free(dir);
}

dl_status dl_atomic_commit(dl_atomic_file *f) {
  if (!f->tmp) return dl_fail(DL_ERR_INVALID, "commit of a file that is not open");
  dl_status s = DL_OK;
  if (fsync(f->fd) != 0)
    s = dl_fail(DL_ERR_IO, "cannot write %s to disk: %s (disk full?)", f->tmp, strerror(errno));
  if (close(f->fd) != 0 && s == DL_OK)
    s = dl_fail(DL_ERR_IO, "cannot finish writing %s: %s (disk full?)", f->tmp, strerror(errno));
  f->fd = -1;
  /* Checked again: a link put there while we wrote is refused too (rename
   * would replace the link itself, never its target, but say so). */
  if (s == DL_OK) s = check_target(f->path);
  if (s == DL_OK && rename(f->tmp, f->path) != 0)
    s = dl_fail(DL_ERR_IO, "cannot rename %s to %s: %s", f->tmp, f->path, strerror(errno));
  if (s != DL_OK) unlink(f->tmp);
  else fsync_folder(f->path);
  unregister(f->tmp);
  reset(f);
  return s;
}

void dl_atomic_abort(dl_atomic_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  if (f->tmp) {
    unlink(f->tmp);
    unregister(f->tmp);
  }
  reset(f);
}

/* ---- reading ---------------------------------------------------------------- */

dl_status dl_open_regular(const char *path, const char *what, int *fd) {
  *fd = -1;
  const char *sp = what && *what ? " " : "";
  what = what ? what : "";
  if (!path || !*path) return dl_fail(DL_ERR_INVALID, "no file name given%s%s", sp, what);
  /* O_NONBLOCK: opening a FIFO with no writer returns at once. */
  int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f < 0) return dl_fail(DL_ERR_IO, "%s: cannot open%s%s: %s", path, sp, what, strerror(errno));
  struct stat st;
  if (fstat(f, &st) != 0) {
    int e = errno;
    close(f);
    return dl_fail(DL_ERR_IO, "%s: cannot read%s%s: %s", path, sp, what, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(f);
    if (S_ISDIR(st.st_mode))
      return dl_fail(DL_ERR_IO, "%s: cannot read%s%s: %s", path, sp, what, strerror(EISDIR));
    return dl_fail(DL_ERR_IO,
                   "%s: cannot read%s%s: it is %s, not a regular file (give a "
                   "file; dlcheck does not read pipes or devices, which could block it)",
                   path, sp, what, file_kind(st.st_mode));
  }
  int flags = fcntl(f, F_GETFL);
  if (flags >= 0) fcntl(f, F_SETFL, flags & ~O_NONBLOCK);
  *fd = f;
  return DL_OK;
}

dl_status dl_fopen_regular(const char *path, const char *what, FILE **out) {
  int fd;
  *out = NULL;
  DL_TRY(dl_open_regular(path, what, &fd));
  *out = fdopen(fd, "rb");
  if (*out) return DL_OK;
  int e = errno;
  close(fd);
  return dl_fail(DL_ERR_IO, "%s: cannot open: %s", path, strerror(e));
}

dl_status dl_check_regular(const char *path, const char *what) {
  int fd;
  DL_TRY(dl_open_regular(path, what, &fd));
  close(fd);
  return DL_OK;
}
