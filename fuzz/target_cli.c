/* The command line's fuzz target (targets.h: dlc_fuzz_cli): the input's
 * arguments run by cli_command, the dlcheck program's own dispatch, in a
 * folder of its own that holds a small scenario and its golden. */
#define _XOPEN_SOURCE 700 /* nftw, setenv */

#include "targets.h"

#include "cli.h"
#include "io/h5.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_ARGS = 16, MAX_ARG_BYTES = 256 };

/* Two steps of a two-tensor model on synthetic data, with a golden: a run
 * reaches every stage (training, checks, the golden comparison, reports)
 * in a few milliseconds. */
static const char scenario_yaml[] =
    "name: s\n"
    "description: the CLI fuzz target's scenario\n"
    "model:\n"
    "  - {type: linear, in: 4, out: 3}\n"
    "data: {source: blobs, n: 32, dim: 4, classes: 3, batch: 8}\n"
    "steps: 2\n"
    "runs:\n"
    "  reference:\n"
    "  again:\n"
    "checks:\n"
    "  - {name: same, kind: equivalence, a: reference, b: again, quantities: [loss, params],\n"
    "     tolerance: bitwise}\n";

static struct {
  char root[512]; /* DLCHECK_ROOT, TMPDIR and the working folder of each input */
  char *golden;   /* golden/s/cpu.h5 as recorded once; NULL: not yet */
  size_t golden_size;
  char cwd[4096];
} cli;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

static bool write_bytes(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok;
}

static char *read_bytes(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) &&
      fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *size = buf ? (size_t)n : 0;
  return buf;
}

/* root := a fresh folder holding s/scenario.yaml, tmp/ and, once recorded,
 * golden/s/cpu.h5 and a copy g.h5, whatever the last input left in it. */
static bool reset_root(void) {
  nftw(cli.root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  char path[700];
  if (mkdir(cli.root, 0700) != 0) return false;
  snprintf(path, sizeof path, "%s/tmp", cli.root);
  if (mkdir(path, 0700) != 0) return false;
  snprintf(path, sizeof path, "%s/s", cli.root);
  if (mkdir(path, 0700) != 0) return false;
  snprintf(path, sizeof path, "%s/s/scenario.yaml", cli.root);
  if (!write_bytes(path, scenario_yaml, sizeof scenario_yaml - 1)) return false;
  if (!cli.golden) return true;
  snprintf(path, sizeof path, "%s/g.h5", cli.root); /* for compare, env, calibrate */
  if (!write_bytes(path, cli.golden, cli.golden_size)) return false;
  snprintf(path, sizeof path, "%s/golden", cli.root);
  if (mkdir(path, 0700) != 0) return false;
  snprintf(path, sizeof path, "%s/golden/s", cli.root);
  if (mkdir(path, 0700) != 0) return false;
  snprintf(path, sizeof path, "%s/golden/s/cpu.h5", cli.root);
  return write_bytes(path, cli.golden, cli.golden_size);
}

/* Runs dlcheck argv[1...] in the root, its standard output to /dev/null
 * unless DLC_FUZZ_VERBOSE is set (standard error stays: the sanitizers
 * report there, and a report hidden is a finding lost); the command's exit
 * code, or -1. */
static int run_command(int argc, char **argv) {
  if (!reset_root() || chdir(cli.root) != 0) return -1;
  int saved = -1, null = getenv("DLC_FUZZ_VERBOSE") ? -1 : open("/dev/null", O_WRONLY);
  if (null >= 0) {
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    dup2(null, STDOUT_FILENO);
  }
  int code = cli_command(argc, argv);
  cli_signals_stop();
  if (null >= 0) {
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved), close(null);
  }
  if (chdir(cli.cwd) != 0) abort(); /* the other targets' paths are absolute, but the caller's */
  return code;
}

/* The root, and the golden recorded once by the CLI itself. */
static bool cli_init(void) {
  if (cli.root[0]) return true;
  if (!dlc_fuzz_tmp_path(cli.root, sizeof cli.root, "cli") || !getcwd(cli.cwd, sizeof cli.cwd))
    return false;
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s/tmp", cli.root);
  setenv("DLCHECK_ROOT", cli.root, 1);
  setenv("TMPDIR", tmp, 1);
  dl_h5_quiet_for_good();
  char *record[] = {"dlcheck", "record", "s", NULL};
  char golden[700];
  snprintf(golden, sizeof golden, "%s/golden/s/cpu.h5", cli.root);
  if (run_command(3, record) != 0 || !(cli.golden = read_bytes(golden, &cli.golden_size))) {
    fprintf(stderr, "dlc_fuzz cli: cannot record the target's golden in %s\n", cli.root);
    abort(); /* the target itself is broken: no input could test anything */
  }
  return true;
}

/* An argument that could reach outside the root (a path with '/' or "..")
 * or start MPI, which a process initialises once. */
static bool allowed(const char *arg) {
  return !strchr(arg, '/') && !strstr(arg, "..") && strcmp(arg, "mpi") != 0;
}

void dlc_fuzz_cli_cleanup(void) {
  if (cli.root[0]) nftw(cli.root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  free(cli.golden);
  memset(&cli, 0, sizeof cli);
}

int dlc_fuzz_cli(const uint8_t *data, size_t size) {
  if (size > MAX_ARGS * (MAX_ARG_BYTES + 1) || !cli_init()) return 0;
  char buf[MAX_ARGS * (MAX_ARG_BYTES + 1) + 1];
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *argv[MAX_ARGS + 2] = {"dlcheck"};
  int argc = 1;
  for (size_t at = 0; at < size;) { /* NUL-separated; a trailing NUL adds none */
    char *arg = buf + at;
    size_t n = strlen(arg);
    if (argc > MAX_ARGS || n > MAX_ARG_BYTES || !allowed(arg)) return 0;
    argv[argc++] = arg;
    at += n + 1;
  }
  argv[argc] = NULL;
  run_command(argc, argv);
  dlc_fuzz_check_hdf5_closed("the command");
  return 0;
}
