/* The fuzz targets' entry points, one per kind of input dlcheck reads:
 * the same functions run under libFuzzer (fuzz/fuzz_<kind>.c, built with
 * -DDLC_FUZZ=ON) and replay the committed regression inputs in the normal
 * build (tests/test_fuzz_regress.c, which compiles fuzz/targets.c in).
 *
 * Each writes the input to a file in a private temporary folder (the
 * loaders read paths, as dlcheck does) and loads it through the public
 * loader; every error is an ordinary dl_status: only a crash, a sanitizer
 * report, a leak or a hang is a finding. See fuzz/README.md. */
#ifndef DLC_FUZZ_TARGETS_H
#define DLC_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

/* Creates the temporary folder (under $DLC_FUZZ_TMPDIR, else /dev/shm when
 * it is writable, else $TMPDIR or /tmp); 0 on success. dlc_fuzz_cleanup
 * removes it (a crashed run leaves it, with the input that crashed). */
int dlc_fuzz_init(void);
void dlc_fuzz_cleanup(void);

/* A scenario.yaml, through dlc_scenario_load. The folder is named after
 * the file's first "name: NAME" line (when NAME is a plain name), so that
 * the loader gets past its name check and reads runs, checks and pitfalls. */
int dlc_fuzz_scenario(const uint8_t *data, size_t size);
/* A trace or golden: the input is what follows the 512-byte user block
 * (an input that starts with the seal header, as a golden file does, has
 * its first 512 bytes dropped); the harness writes a fresh, valid seal in
 * front so that HDF5's parser and dlcheck's reader get the bytes. Through
 * dlc_golden_load, envelope included. */
int dlc_fuzz_trace(const uint8_t *data, size_t size);
/* A state dict file: dl_state_read of /model, then a non-strict
 * dl_state_load of /model into a small MLP's tensors (shapes compared, the
 * report filled). */
int dlc_fuzz_state_dict(const uint8_t *data, size_t size);
/* A fixture: dl_dataset_load_h5 of /train. */
int dlc_fuzz_fixture(const uint8_t *data, size_t size);

/* The report writers (fuzz/target_report.c): a byte of choices, two bytes
 * (little-endian) giving the length L of the text that follows, L bytes of
 * text, then a trace as dlc_fuzz_trace takes it. The trace loaded (or none,
 * when it is refused) and the text (as names, evidence, waivers) make a
 * scenario result with a verdict of every kind, a pitfall, a golden and,
 * for a calibrated golden, its envelope, with numbers the choices pick
 * among NaN, the infinities, -0, subnormals and the extremes; rendered by
 * dlc_report_write_all (JSON, JUnit, HTML) and dlc_report_text. */
int dlc_fuzz_report(const uint8_t *data, size_t size);
/* The command line (fuzz/target_cli.c): the input split at NUL bytes into
 * at most 16 arguments after "dlcheck", run by cli_command (the program's
 * own dispatch, from cli/) with its standard output to /dev/null, in a folder of its
 * own (DLCHECK_ROOT, TMPDIR and the working folder) made afresh for each
 * input, holding a two-step scenario s/ and its golden, recorded by the CLI
 * at the first input. Inputs with an argument that could reach outside
 * that folder (a '/' or "..") or start MPI ("mpi") are skipped. */
int dlc_fuzz_cli(const uint8_t *data, size_t size);
void dlc_fuzz_cli_cleanup(void); /* removes the CLI target's folder */

/* Shared by the targets' files. A path in the temporary folder (NULL when
 * it cannot be made): every target uses its own names, so that the
 * regression test can replay them in any order. */
const char *dlc_fuzz_tmp_path(char *buf, size_t size, const char *name);
/* Aborts (a finding) when an HDF5 file or object is still open: a handle
 * left open is a leak LeakSanitizer cannot see. */
void dlc_fuzz_check_hdf5_closed(const char *what);
/* Writes a trace input sealed (as dlc_fuzz_trace does) to the temporary
 * file `name`, runs load(path, user), checks HDF5's handles, removes it. */
void dlc_fuzz_on_sealed_trace(const uint8_t *data, size_t size, const char *name,
                              void (*load)(const char *path, void *user), void *user);

typedef int (*dlc_fuzz_fn)(const uint8_t *data, size_t size);
/* The targets by name ("scenario", "trace", "state_dict", "fixture",
 * "report", "cli"), as
 * the folders of tests/fuzz/ are named; NULL for another name. */
dlc_fuzz_fn dlc_fuzz_target(const char *name);

#endif
