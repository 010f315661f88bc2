/* Files written atomically and safely, and files opened for reading only
 * when they are regular files: the one place every writer of the engine
 * and the harness (state dicts and checkpoints, traces and goldens,
 * reports, copies) and every reader of a named input goes through.
 *
 * Writing: the new content goes to PATH.tmp.PID.N beside PATH, created
 * with O_CREAT | O_EXCL | O_NOFOLLOW (never through a link someone left
 * there), and is renamed over PATH once complete and on disk. A PATH that
 * exists and is not a regular file (a symbolic link, a FIFO, a folder) is
 * refused with a message, so a link in an output folder can never make
 * dlcheck truncate or replace the file it points to. A reader never sees
 * half a file; a killed writer leaves at most its temporary, which the
 * next writer of the same PATH, or a sweep of its folder, removes once its
 * PID names a process that is gone (dl_owner_gone). Temporaries of this process are registered so that a signal
 * handler can remove them (dl_atomic_remove_temporaries).
 *
 * Reading: FIFOs, devices and folders given where a file is expected would
 * block forever or be read as garbage; dl_open_regular refuses them
 * without blocking (opened O_NONBLOCK, then fstat). */
#ifndef DL_ATOMIC_FILE_H
#define DL_ATOMIC_FILE_H

#include "core/status.h"

#include <stdbool.h>
#include <stdio.h>
#include <time.h>

typedef struct dl_atomic_file {
  char *path; /* the final name */
  char *tmp;  /* the temporary beside it */
  int fd;     /* open read-write on tmp; -1 when closed */
} dl_atomic_file;

/* Creates the temporary for path (its folder must exist). Refuses a path
 * that exists and is not a regular file. Removes stale temporaries of path
 * left by processes that are gone. */
dl_status dl_atomic_open(dl_atomic_file *f, const char *path);
/* Flushes the temporary to disk, closes it and renames it over the final
 * name (the folder is synced too). On failure the temporary is removed and
 * the final name is untouched. f is empty afterwards either way. */
dl_status dl_atomic_commit(dl_atomic_file *f);
/* Removes the temporary; safe on an empty f and twice. */
void dl_atomic_abort(dl_atomic_file *f);
/* A stdio stream writing to the temporary (on its own descriptor): fclose
 * it before dl_atomic_commit, and check fclose's result. */
dl_status dl_atomic_fdopen(dl_atomic_file *f, FILE **out);

/* Removes every temporary of `path` (PATH.tmp.PID.N) whose PID names no
 * running process; returns how many were removed. Best effort: a folder
 * that cannot be listed removes nothing. */
int dl_atomic_remove_stale(const char *path);
/* The same for every PATH.tmp.PID.N in folder dir and the folders below it
 * (a few levels; links are not followed): for a command that is about to
 * write there, whatever targets a killed run was writing. */
int dl_atomic_remove_stale_below(const char *dir);

/* Whether the process that made a file or folder named for pid, last
 * changed at `changed`, is gone: no process has the pid (kill: ESRCH); or
 * it is a zombie (killed, not yet waited for: a CI harness that sends
 * SIGKILL and starts the next command at once); or its pid was reused by
 * a process that started after the file last changed, so cannot have made
 * it. The start time, not the file's age, decides reuse: a live run keeps
 * its scratch folder for hours, and any age limit would remove it from
 * under it; the start time (Linux /proc) tells exactly. Without /proc
 * only the first test is made. This process is never gone. */
bool dl_owner_gone(long pid, time_t changed);

/* Removes the temporaries this process has open now and makes later
 * dl_atomic_open fail: for a signal-handling thread that is about to
 * _exit (not async-signal-safe: call it from a thread, e.g. after sigwait). */
void dl_atomic_remove_temporaries(void);

/* Opens path read-only if it is a regular file; a FIFO, device, socket or
 * folder is refused (DL_ERR_IO) without blocking. Messages: "PATH: cannot
 * open[ WHAT]: <strerror>", "PATH: cannot read[ WHAT]: Is a directory" or
 * "...: it is a FIFO, not a regular file (...)"; what ("dataset file") may
 * be NULL or "". */
dl_status dl_open_regular(const char *path, const char *what, int *fd);
/* The same as a stdio stream ("rb"). */
dl_status dl_fopen_regular(const char *path, const char *what, FILE **out);
/* Only the check, for libraries that open by name (HDF5): path is a
 * regular file now. */
dl_status dl_check_regular(const char *path, const char *what);

#endif
