/* dlcheck run / record. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "io/atomic_file.h"
#include "run/backend_open.h"
#include "judge/envelope.h"
#include "run/execute.h"
#include "store/path.h"
#include "trace/trace.h"
#include "report/report.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static const char run_help[] =
    "usage: dlcheck run [options] SCENARIO_DIR...\n"
    "       (a directory of scenario directories, e.g. scenarios, runs each of them)\n"
    "       dlcheck record [options] SCENARIO_DIR...\n"
    "\n"
    "run: trains every run of each scenario, checks the invariants between them,\n"
    "compares the reference run with golden/<scenario>/<device>.h5 and prints\n"
    "a verdict per check. record: trains the reference (first) run only and writes\n"
    "its trace as that golden file instead (atomically). <device> is where the\n"
    "reference run computes: cpu or cuda, --backend's unless the scenario pins it.\n"
    "\n"
    "options:\n"
    "  --backend cpu|cuda   where runs that name no device compute (default cpu);\n"
    "                       cuda: GEMMs through cuBLAS and convolutions through cuDNN\n"
    "                       on GPU <rank> (fp32, deterministic algorithms unless the\n"
    "                       scenario's backend section asks for tf32 / fastest); exits\n"
    "                       3 where this build or machine has no CUDA device. Runs\n"
    "                       whose scenario names a device this machine lacks are\n"
    "                       reported as SKIP with the reason\n"
    "  --comm local|mpi     communication backend of data-parallel runs (default local:\n"
    "                       ranks are threads); mpi: run under mpirun -np W, each process\n"
    "                       is one rank, rank 0 prints and writes, all exit alike\n"
    "  --world N            ranks for every data-parallel run of the scenarios (each\n"
    "                       rank's batch is the run's global batch / N)\n"
    "  --pitfalls           also run each pitfall variant; it must be caught by its check\n"
    "  --out DIR            write report.json, junit.xml and report.html into DIR, and\n"
    "                       every trace under DIR/traces, with manifest.txt naming this\n"
    "                       run's scenarios (for `dlcheck report DIR`)\n"
    "  --golden-dir DIR     goldens under DIR/<scenario>/<device>.h5 (default ROOT/golden)\n"
    "  --repeat N           record: a calibrated golden from N >= 3 repeats of the\n"
    "                       reference run (CPU: the engine's order and N-1 perturbed\n"
    "                       summation orders; GPU: run-to-run and algorithm choice),\n"
    "                       then prints `dlcheck calibrate`'s table\n"
    "  --widen F            record --repeat: the gate's widening of the envelope (4)\n"
    "  (record --repeat-from A.h5 B.h5 C.h5 --out G.h5: see dlcheck record --repeat-from -h)\n"
    "  -v, --verbose        print every check's evidence, also when it passes\n"
    "  -h, --help           this text\n"
    "\n"
    "ROOT is $DLCHECK_ROOT or the source tree dlcheck was built from; fixture paths\n"
    "in scenarios are relative to it.\n";

typedef struct run_args {
  const char *backend, *comm, *out, *golden_dir;
  int world, repeat;
  double widen;
  bool pitfalls, verbose;
  bool marked; /* --out DIR holds the unfinished-run marker (report.h) */
  char **dirs;
  int ndirs;
} run_args;

static int parse_args(int argc, char **argv, run_args *a) {
  *a = (run_args){.backend = "cpu", .comm = "local", .widen = DLC_ENVELOPE_WIDEN_DEFAULT};
  a->dirs = argv + 1;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
      fputs(run_help, stdout);
      return EXIT_PASS;
    } else if (!strcmp(s, "--pitfalls")) a->pitfalls = true;
    else if (!strcmp(s, "-v") || !strcmp(s, "--verbose")) a->verbose = true;
    else if (!strcmp(s, "--backend") && has_value) a->backend = argv[++i];
    else if (!strcmp(s, "--comm") && has_value) a->comm = argv[++i];
    else if (!strcmp(s, "--out") && has_value) a->out = argv[++i];
    else if (!strcmp(s, "--golden-dir") && has_value) a->golden_dir = argv[++i];
    else if (!strcmp(s, "--repeat") && has_value) {
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || n < DLC_ENVELOPE_MIN_REPEATS || n > 1000) {
        fprintf(stderr, "dlcheck: --repeat must be an integer in %d..1000, got '%s'\n",
                DLC_ENVELOPE_MIN_REPEATS, argv[i]);
        return EXIT_USAGE;
      }
      a->repeat = (int)n;
    } else if (!strcmp(s, "--widen") && has_value) {
      char *end;
      a->widen = strtod(argv[++i], &end);
      if (*end || !(a->widen >= 1.0) || a->widen > 1e6) {
        fprintf(stderr, "dlcheck: --widen must be a number in 1..1e6, got '%s'\n", argv[i]);
        return EXIT_USAGE;
      }
    } else if (!strcmp(s, "--world") && has_value) {
      char *end;
      long w = strtol(argv[++i], &end, 10);
      if (*end || w < 1 || w > 64) {
        fprintf(stderr, "dlcheck: --world must be an integer in 1..64, got '%s'\n", argv[i]);
        return EXIT_USAGE;
      }
      a->world = (int)w;
    } else if (s[0] == '-') {
      fprintf(stderr, "dlcheck: unknown option or missing value: %s\n%s", s, run_help);
      return EXIT_USAGE;
    } else a->dirs[a->ndirs++] = argv[i];
  }
  if (a->ndirs == 0) {
    fprintf(stderr, "dlcheck: name at least one scenario directory\n%s", run_help);
    return EXIT_USAGE;
  }
  struct stat gd;
  if (a->golden_dir && stat(a->golden_dir, &gd) == 0 && !S_ISDIR(gd.st_mode)) {
    fprintf(stderr,
            "dlcheck: --golden-dir %s is not a folder: give the folder that holds "
            "<scenario>/<device>.h5\n",
            a->golden_dir);
    return EXIT_USAGE;
  }
  dlc_device device;
  if (dlc_device_parse(a->backend, &device) != DL_OK) {
    fprintf(stderr, "dlcheck: --backend: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  char why[512];
  if (!dlc_device_available(device, why, sizeof why)) {
    fprintf(stderr, "dlcheck: --backend %s cannot run here: %s\n", a->backend, why);
    return EXIT_ENVIRONMENT;
  }
  bool mpi_built = false;
#ifdef DL_HAVE_COMM_MPI
  mpi_built = true;
#endif
  if (strcmp(a->comm, "local") != 0 && !(mpi_built && strcmp(a->comm, "mpi") == 0)) {
    fprintf(stderr,
            "dlcheck: communication backend '%s' is not available in this build "
            "(this build runs --comm local%s)\n",
            a->comm, mpi_built ? " or mpi" : "");
    return strcmp(a->comm, "mpi") == 0 || strcmp(a->comm, "nccl") == 0 ? EXIT_ENVIRONMENT
                                                                       : EXIT_USAGE;
  }
  return -1;
}

/* --world N: every data-parallel run of the scenario gets N ranks, each
 * with global batch / N samples, so that the global batch, and with it the
 * comparison against one process, stays what the scenario says. */
static dl_status set_world(dlc_run_config *c, int world) {
  /* Checked before multiplying: a huge batch times the world overflows. */
  if (c->data.batch < 1 || c->parallel.world < 1 || c->data.batch > INT64_MAX / c->parallel.world)
    return dl_fail(DL_ERR_INVALID, "run %s: a batch of %lld on each of %d ranks is out of range",
                   c->name, (long long)c->data.batch, c->parallel.world);
  int64_t global = c->data.batch * c->parallel.world;
  if (global % world)
    return dl_fail(DL_ERR_INVALID, "run %s: its global batch of %lld does not split into %d ranks",
                   c->name, (long long)global, world);
  c->data.batch = global / world;
  c->parallel.world = world;
  return DL_OK;
}

static dl_status apply_world(dlc_scenario *s, int world) {
  if (world <= 0) return DL_OK;
  for (int i = 0; i < s->nruns; i++)
    if (s->runs[i].parallel.world > 1) DL_TRY(set_world(&s->runs[i], world));
  for (int v = 0; v < s->nvariants; v++)
    for (int i = 0; i < s->nruns; i++)
      if (s->variants[v].runs[i].parallel.world > 1)
        DL_TRY(set_world(&s->variants[v].runs[i], world));
  return DL_OK;
}

/* --comm mpi: this process is one rank of every data-parallel run; the
 * world is mpirun's process count. Only rank 0 prints. */
static int start_mpi(run_args *a, dlc_exec_options *o) {
#ifdef DL_HAVE_COMM_MPI
  if (dl_comm_mpi_create(&o->comm)) {
    fprintf(stderr, "dlcheck: --comm mpi: %s\n", dl_last_error());
    return EXIT_ENVIRONMENT;
  }
  a->world = dl_comm_world(o->comm);
  if (dl_comm_rank(o->comm) != 0) {
    o->progress = NULL;
    if (!freopen("/dev/null", "w", stdout)) return EXIT_ENVIRONMENT;
  }
  if (dl_comm_check_consistent(o->comm, dlc_digest(DLCHECK_VERSION, strlen(DLCHECK_VERSION)),
                               "dlcheck version")) {
    fprintf(stderr, "dlcheck: %s\n", dl_last_error());
    return EXIT_USAGE;
  }
  return -1;
#else
  (void)a;
  (void)o;
  return EXIT_ENVIRONMENT;
#endif
}

/* Every rank exits with rank 0's code (or its own failure's, if the
 * collective cannot run any more). */
static int finish_mpi(dlc_exec_options *o, int code) {
#ifdef DL_HAVE_COMM_MPI
  int32_t shared = code;
  if (dl_comm_broadcast(o->comm, &shared, sizeof shared, 0) == DL_OK) code = shared;
  dl_comm_destroy(o->comm);
  o->comm = NULL;
  if (dl_comm_mpi_finalize() && code == EXIT_PASS) code = EXIT_ENVIRONMENT;
#else
  (void)o;
#endif
  return code;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool has_scenario(const char *dir) {
  char path[4096];
  if (dlc_path(path, sizeof path, "%s/scenario.yaml", dir)) return false;
  return access(path, F_OK) == 0;
}

/* A directory of scenario directories (`dlcheck run scenarios`) stands for
 * each of them, in name order. */
static int expand_dirs(run_args *a, char ***owned, int *nowned) {
  char **list = NULL;
  int n = 0;
  for (int i = 0; i < a->ndirs; i++) {
    DIR *d = has_scenario(a->dirs[i]) ? NULL : opendir(a->dirs[i]);
    int first = n;
    for (struct dirent *e; d && (e = readdir(d));) {
      char sub[4096];
      if (e->d_name[0] == '.' || dlc_path(sub, sizeof sub, "%s/%s", a->dirs[i], e->d_name) ||
          !has_scenario(sub))
        continue;
      char **grown = realloc(list, (size_t)(n + 1) * sizeof *list);
      if (!grown || !(grown[n] = strdup(sub))) {
        free(grown ? grown : list);
        closedir(d);
        fprintf(stderr, "dlcheck: out of memory\n");
        return EXIT_USAGE;
      }
      list = grown;
      n++;
    }
    if (d) closedir(d);
    if (n > first) {
      qsort(list + first, (size_t)(n - first), sizeof *list, by_name);
      continue;
    }
    char **grown = realloc(list, (size_t)(n + 1) * sizeof *list);
    if (!grown || !(grown[n] = strdup(a->dirs[i]))) {
      free(grown ? grown : list);
      fprintf(stderr, "dlcheck: out of memory\n");
      return EXIT_USAGE;
    }
    list = grown;
    n++;
  }
  a->dirs = list;
  a->ndirs = n;
  *owned = list;
  *nowned = n;
  return -1;
}

static int record_one(dlc_scenario *s, const dlc_exec_options *o, const run_args *a) {
  char path[1024];
  /* A reference that is a recording (torch_conformance's PyTorch runs)
   * repeats itself exactly: there is nothing to calibrate, so `record
   * --repeat` over a folder records it once instead of stopping there. */
  bool recording = s->nruns > 0 && s->runs[0].trace[0];
  int repeat = recording ? 0 : a->repeat;
  if (a->repeat && recording)
    fprintf(stderr,
            "dlcheck: %s: the reference run is a recorded trace (%s): recorded once, not "
            "calibrated; to calibrate, record it several times and use `dlcheck record "
            "--repeat-from`\n",
            s->name, s->runs[0].trace);
  dl_status st = repeat ? dlc_scenario_record_repeat(s, o, repeat, a->widen, path, sizeof path)
                        : dlc_scenario_record(s, o, path, sizeof path);
  cli_progress_done();
  if (st) {
    fprintf(stderr, "dlcheck: %s: %s\n", s->dir, dl_last_error());
    return EXIT_USAGE;
  }
  printf("recorded %s%s\n", path, repeat ? " (calibrated)" : "");
  bool rank0 = !o->comm || dl_comm_rank(o->comm) == 0;
  return repeat && rank0 ? cli_print_calibration(path) : EXIT_PASS;
}

/* A scenario that stops with an error is an ERROR in the results (never a
 * pass or a skip) and the others still run, so the reports list every
 * scenario; under MPI the ranks stop together instead (a failed collective
 * leaves nothing to run the next scenario with). */
/* --out DIR is marked unfinished before this run writes anything there
 * (report.h); once is enough. EXIT_USAGE with a message, else -1. */
static int mark_out(run_args *a) {
  if (a->marked) return -1;
  if (dlc_report_mark_incomplete(a->out)) {
    fprintf(stderr, "dlcheck: --out %s: %s\n", a->out, dl_last_error());
    return EXIT_USAGE;
  }
  a->marked = true;
  return -1;
}

/* The reports and the manifest naming this run's scenarios (an earlier
 * run's folders may be beside them), then the marker's removal: the last
 * thing the run writes.
 * A run that ended in an error (code 2) keeps the marker: the traces of
 * the scenario that failed may be partial or an earlier run's, which
 * `report DIR` would evaluate again as if they were this run's. */
static int finish_out(const run_args *a, const dlc_scenario_result *results, int n, int code) {
  dl_status st = dlc_report_write_all(a->out, results, n, cli_env_json());
  if (!st) st = dlc_report_write_manifest(a->out, results, n);
  if (!st && code != EXIT_USAGE) st = dlc_report_mark_complete(a->out);
  if (!st) return -1;
  fprintf(stderr, "dlcheck: writing reports to %s: %s\n", a->out, dl_last_error());
  return EXIT_USAGE;
}

static int run_scenarios(run_args *a, bool record, dlc_exec_options *o) {
  dlc_scenario_result *results = calloc((size_t)a->ndirs, sizeof *results);
  if (!results) return EXIT_USAGE;
  int code = EXIT_PASS, nresults = 0, nexecuted = 0;
  bool rank0 = !o->comm || dl_comm_rank(o->comm) == 0;
  for (int i = 0; i < a->ndirs && !(code == EXIT_USAGE && (o->comm || record)); i++) {
    dlc_scenario *s;
    dl_status st = dlc_scenario_load(&s, a->dirs[i]);
    if (st) {
      fprintf(stderr, "dlcheck: %s\n", dl_last_error());
      if (!record) dlc_result_set_error(&results[nresults++], a->dirs[i], dl_last_error());
      code = EXIT_USAGE;
      continue;
    }
    st = apply_world(s, a->world);
    if (st) dl_fail_context(st, "--world %d: ", a->world);
    if (!st && o->comm && (st = dl_comm_check_consistent(o->comm, s->hash, "scenario file")))
      dl_fail_context(st, "--comm mpi: ");
    if (st) {
      fprintf(stderr, "dlcheck: %s: %s\n", a->dirs[i], dl_last_error());
      if (!record) dlc_result_set_error(&results[nresults++], s->name, dl_last_error());
      dlc_scenario_free(s);
      code = EXIT_USAGE;
      continue;
    }
    if (record) {
      int c = record_one(s, o, a);
      dlc_scenario_free(s);
      if (c) code = c;
      if (c) break;
      continue;
    }
    if (a->out && rank0 && mark_out(a) >= 0) {
      dlc_scenario_free(s);
      code = EXIT_USAGE;
      break;
    }
    st = dlc_scenario_execute(s, o, &results[nresults++]);
    nexecuted++;
    cli_progress_done();
    dlc_scenario_free(s);
    if (st) {
      fprintf(stderr, "dlcheck: %s: %s\n", a->dirs[i], dl_last_error());
      code = EXIT_USAGE;
    } else if (!dlc_result_ok(&results[nresults - 1]) && code == EXIT_PASS) {
      code = EXIT_CHECK_FAILED;
    }
  }
  /* Bad input alone (no scenario could be loaded) writes nothing. */
  if (!record && nexecuted && rank0) {
    dlc_report_text(stdout, results, nresults, cli_stdout_is_tty(), a->verbose);
    /* Last, once every trace it names is written. */
    if (a->out && finish_out(a, results, nresults, code) >= 0) code = EXIT_USAGE;
  }
  for (int i = 0; i < nresults; i++) dlc_result_free(&results[i]);
  free(results);
  return code;
}

/* Temporaries killed runs left where this one writes, also of targets it
 * will not write again: run --out's folder, record's golden folder. */
static void sweep_output(const run_args *a, bool record) {
  char goldens[4096];
  if (!record && a->out) dl_atomic_remove_stale_below(a->out);
  else if (record && a->golden_dir) dl_atomic_remove_stale_below(a->golden_dir);
  else if (record && !dlc_path(goldens, sizeof goldens, "%s/golden", cli_root()))
    dl_atomic_remove_stale_below(goldens);
}

int cmd_run(int argc, char **argv, bool record) {
  run_args a;
  int code = parse_args(argc, argv, &a);
  if (code >= 0) return code;
  char **owned = NULL;
  int nowned = 0;
  code = expand_dirs(&a, &owned, &nowned);
  if (code >= 0) return code;
  char workdir[4096], traces[4096];
  if (a.out && dlc_path(traces, sizeof traces, "%s/traces", a.out)) {
    fprintf(stderr, "dlcheck: %s\n", dl_last_error());
    code = EXIT_USAGE;
  }
  if (code < 0) code = cli_signals_start();
  if (code < 0) code = cli_scratch_make(workdir, sizeof workdir);
  if (code < 0) sweep_output(&a, record);
  if (code >= 0) {
    for (int i = 0; i < nowned; i++) free(owned[i]);
    free(owned);
    return code;
  }
  dlc_exec_options o = {.root = cli_root(),
                        .golden_dir = a.golden_dir,
                        .backend = a.backend,
                        .workdir = workdir,
                        .pitfalls = a.pitfalls,
                        .progress = cli_progress,
                        .trace_dir = a.out ? traces : NULL};
  if (!strcmp(a.comm, "mpi")) code = start_mpi(&a, &o);
  bool rank0 = !o.comm || dl_comm_rank(o.comm) == 0;
  /* An earlier run's reports go first: a run that fails before writing
   * its own leaves none that claims success. A folder that exists is
   * marked unfinished before that (its traces stay), a new one only when a
   * scenario is about to run: bad input alone creates nothing. */
  struct stat out_st;
  if (code < 0 && a.out && !record && rank0 && stat(a.out, &out_st) == 0) code = mark_out(&a);
  if (code < 0 && a.out && !record && rank0 &&
      (dlc_report_remove_all(a.out) || dlc_report_remove_manifest(a.out))) {
    fprintf(stderr, "dlcheck: --out %s: %s\n", a.out, dl_last_error());
    code = EXIT_USAGE;
  }
  if (code < 0) code = run_scenarios(&a, record, &o);
  if (o.comm) code = finish_mpi(&o, code);
  cli_scratch_remove();
  for (int i = 0; i < nowned; i++) free(owned[i]);
  free(owned);
  return code;
}
