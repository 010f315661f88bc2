/* What a run with --out keeps: each run's trace with its fingerprint, and
 * scenario.yaml and the golden beside them, for reload. */
#include "run/exec_internal.h"

#include "store/path.h"
#include "store/trace_io.h"

#include "io/atomic_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool dlc_exec_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* A copy of a regular file, written atomically (never through a link at
 * `to`). */
static dl_status copy_file(const char *from, const char *to) {
  FILE *in, *out = NULL;
  DL_TRY(dl_fopen_regular(from, NULL, &in));
  dl_atomic_file f;
  dl_status st = dl_atomic_open(&f, to);
  if (!st) st = dl_atomic_fdopen(&f, &out);
  char buf[65536];
  size_t n;
  bool ok = true;
  while (!st && (n = fread(buf, 1, sizeof buf, in)) > 0) ok &= fwrite(buf, 1, n, out) == n;
  ok &= !ferror(in);
  fclose(in);
  if (out) ok &= fclose(out) == 0;
  if (!st && !ok) st = dl_fail(DL_ERR_IO, "copying %s to %s failed: %s", from, to, strerror(errno));
  if (!st) return dl_atomic_commit(&f);
  dl_atomic_abort(&f);
  return st;
}

dl_status dlc_exec_trace_file(const dlc_trace_source *src, int variant, const char *run, char *buf,
                              size_t len) {
  return dlc_path(buf, len, "%s/%s/%s.h5", src->dir,
                  variant < 0 ? "pipeline" : src->s->variants[variant].name, run);
}

/* mkdir -p of path's folder below the folder that holds TRACE_DIR (the
 * --out folder), never through a link (path.h). */
static dl_status make_trace_dirs(const dlc_exec_options *o, const char *path) {
  char base[2 * DLC_PATH_MAX];
  DL_TRY(dlc_path(base, sizeof base, "%s", o->trace_dir));
  char *slash = strrchr(base, '/');
  if (slash && slash != base) *slash = '\0';
  else snprintf(base, sizeof base, "%s", slash ? "/" : ".");
  if (!slash) {
    char rel[3 * DLC_PATH_MAX];
    DL_TRY(dlc_path(rel, sizeof rel, "./%s", path));
    return dlc_make_dirs_below(".", rel);
  }
  return dlc_make_dirs_below(base, path);
}

bool dlc_exec_writes_files(const dlc_exec_options *o) {
  return !o->comm || dl_comm_rank(o->comm) == 0;
}

/* Saved traces carry the fingerprint of where they computed, so that
 * `dlcheck compare` of two of them says what changed: this machine's
 * (m[0], taken once) for an engine run, the file's for a recorded one. */
dl_status dlc_exec_save_traces(dlc_trace_source *src, int variant, const dlc_trace *t) {
  if (!src->dir || !dlc_exec_writes_files(src->o)) return DL_OK;
  const dlc_run_config *runs = variant < 0 ? src->s->runs : src->s->variants[variant].runs;
  dlc_golden_meta *m = calloc(2, sizeof *m);
  if (!m) return dl_fail(DL_ERR_NOMEM, "out of memory saving the traces of %s", src->s->name);
  dl_status st = dlc_exec_env_here(m[0].env_json, sizeof m[0].env_json);
  for (int i = 0; !st && i < src->s->nruns; i++) {
    char path[3 * DLC_PATH_MAX];
    bool recorded = runs[i].trace[0] != '\0';
    st = dlc_exec_trace_file(src, variant, t[i].run, path, sizeof path);
    if (recorded) /* a golden given as a run is saved as a plain trace */
      snprintf(m[1].env_json, sizeof m[1].env_json, "%s", t[i].origin_env ? t[i].origin_env : "");
    if (!st) st = make_trace_dirs(src->o, path);
    if (!st) st = dlc_trace_save(path, &t[i], &m[recorded]);
  }
  free(m);
  return st;
}

/* Keeps scenario.yaml and the golden beside the traces, for reload. */
dl_status dlc_exec_keep_inputs(const dlc_scenario *s, const dlc_exec_options *o, const char *dir,
                               const char *golden) {
  char from[2 * DLC_PATH_MAX], to[2 * DLC_PATH_MAX];
  DL_TRY(dlc_path(from, sizeof from, "%s/scenario.yaml", s->dir));
  DL_TRY(dlc_path(to, sizeof to, "%s/scenario.yaml", dir));
  DL_TRY(make_trace_dirs(o, to));
  DL_TRY(copy_file(from, to));
  DL_TRY(dlc_path(to, sizeof to, "%s/golden.h5", dir));
  if (dlc_exec_exists(golden)) return copy_file(golden, to);
  /* no golden: reload says so too, not an earlier run's copy */
  if (unlink(to) != 0 && errno != ENOENT)
    return dl_fail(DL_ERR_IO, "cannot remove the earlier run's %s: %s", to, strerror(errno));
  return DL_OK;
}
