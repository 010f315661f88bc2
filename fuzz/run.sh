#!/bin/bash
# Builds the libFuzzer targets and runs each for a fixed time, one after the
# other, from a seed corpus taken from the repository (plus the regression
# inputs of tests/fuzz/ and what earlier runs in the same build folder
# found). Prints per target the executions per second, the total
# executions, the corpus size and the findings.
#
#   fuzz/run.sh [SECONDS_PER_TARGET]     default 30: about 3 minutes for the
#                                        six targets, plus the first build
#
# Environment: CC (default clang), DLC_FUZZ_BUILD (build folder, default
# build/fuzz), DLC_FUZZ_JOBS (build jobs, default 2), DLC_FUZZ_TARGETS
# (default "scenario trace state_dict fixture report cli"), DLC_FUZZ_ARGS (more
# libFuzzer flags, e.g. -fork=4 for four children at once).
#
# Findings (crash-*, leak-*, timeout-*, oom-*) are kept under
# BUILD/fuzz-findings/TARGET/ and triaged by fuzz/triage.sh: dlcheck's or a
# library's (or undecided: a timeout or memory exhaustion inside a library).
# Exit status: 1 for a finding in dlcheck's code that
# tests/fuzz/pending/known.txt does not list, 2 if configure or build
# failed, else 0 (the others are listed). fuzz/README.md: what to do.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-30}
[[ $secs =~ ^[0-9]+$ ]] || { echo "usage: fuzz/run.sh [SECONDS_PER_TARGET]" >&2; exit 2; }
build=${DLC_FUZZ_BUILD:-$root/build/fuzz}
targets=${DLC_FUZZ_TARGETS:-scenario trace state_dict fixture report cli}

CC=${CC:-clang} cmake -S "$root" -B "$build" -DDLC_FUZZ=ON -DBUILD_TESTING=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDL_WERROR=ON -DCMAKE_CUDA_COMPILER=OFF \
  > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 2; }
cmake --build "$build" -j"${DLC_FUZZ_JOBS:-2}" --target fuzz_all > "$build.build.log" 2>&1 ||
  { tail -40 "$build.build.log"; exit 2; }

# Seeds: flat copies (libFuzzer reads every file of a folder as an input).
seeds=$build/fuzz-seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{scenario,trace,state_dict,fixture,report,cli}
for f in "$root"/scenarios/*/scenario.yaml "$root"/tests/data/scenarios/*/scenario.yaml; do
  cp "$f" "$seeds/scenario/$(basename "$(dirname "$f")").yaml"
done
# The report target's input: a choice byte, the text's length (2 bytes,
# little-endian, under 256 here), the text, a trace (fuzz/targets.h).
report_text='<a href="x">&amp;"</a> ]]> --> \001 \303\050 \342\202 {"x": [1,'
report_len=$(printf '%b' "$report_text" | wc -c)
for f in "$root"/golden/*/*.h5; do
  cp "$f" "$seeds/trace/$(basename "$(dirname "$f")")-$(basename "$f")"
  { printf "\\305\\$(printf %o "$report_len")\\000"; printf '%b' "$report_text"; cat "$f"; } \
    > "$seeds/report/$(basename "$(dirname "$f")")-$(basename "$f")"
done
for f in "$root"/fixtures/torch/*.h5; do # traces, and state dicts (*.init.h5)
  case $f in
    *.init.h5) cp "$f" "$seeds/state_dict/" ;;
    *) cp "$f" "$seeds/trace/torch-$(basename "$f")" ;;
  esac
done
cp "$root"/fixtures/digits.h5 "$seeds/fixture/" # fashion_mnist.h5: 3.3 MB, too slow to mutate
for f in "$root"/tests/fuzz/{scenario,trace,state_dict,fixture,report,cli}/*; do # regression inputs
  case $f in */README.md) ;; *) cp "$f" "$seeds/$(basename "$(dirname "$f")")/" ;; esac
done

# The loaders' temporary files, in memory when /dev/shm exists.
tmp=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/dlc_fuzz_run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export DLC_FUZZ_TMPDIR=$tmp
# The sanitizers' defaults are in fuzz/targets.c (full unwinding at malloc,
# the suppressions of HDF5's own leaks). A huge allocation returns NULL
# (the loaders must say "out of memory") unless it is over libFuzzer's
# -malloc_limit_mb, which makes it a finding.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
summary=$build/fuzz-summary.txt
: > "$summary"
printf '%-11s %7s %11s %7s %5s  %s\n' target exec/s executions corpus secs findings
for kind in $targets; do
  corpus=$build/fuzz-corpus/$kind
  findings=$build/fuzz-findings/$kind
  rm -rf "$findings"
  mkdir -p "$corpus" "$findings"
  log=$build/fuzz-$kind.log
  dict=$root/fuzz/$kind.dict # the input's vocabulary, where there is one
  [ -f "$dict" ] || dict=
  start=$(date +%s)
  # -fork=1 with -ignore_*: one child process at a time, restarted after a
  # finding, so that a bug in HDF5 does not end the run; every finding is
  # kept and triaged below. -timeout: one input may take 10 s (HDF5 on a
  # hostile file is slow); -rss_limit_mb / -malloc_limit_mb: a file that
  # claims a huge dataset is a finding, not a dead machine. -max_len: the
  # largest seed (goldens are up to 550 kB) stays whole.
  # shellcheck disable=SC2086
  "$build/fuzz/fuzz_$kind" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -max_len=600000 -artifact_prefix="$findings/" ${dict:+-dict="$dict"} ${DLC_FUZZ_ARGS:-} \
    "$corpus" "$seeds/$kind" > "$log" 2>&1 || true
  took=$(( $(date +%s) - start ))
  # The last status line: "#EXECS: cov: ... exec/s N ... time: Ts ...".
  last=$(grep -E '^#[0-9]+:? ' "$log" | tail -1 || true)
  execs=$(printf '%s' "$last" | sed -nE 's/^#([0-9]+).*/\1/p')
  rate=$(( took > 0 && ${execs:-0} > 0 ? ${execs:-0} / took : 0 ))
  ncorpus=$(find "$corpus" -type f | wc -l)
  mapfile -t found < <(find "$findings" -type f | sort)
  if [ ${#found[@]} -eq 0 ]; then
    verdict=none
  else
    new=0 pending=0 undecided=0
    while read -r line; do
      owner=$(printf '%s' "$line" | cut -d' ' -f3)
      if [ "$owner" = dlcheck ]; then
        known=no
        while read -r t pattern; do
          [ "$t" = "$kind" ] && [[ $line == *"$pattern"* ]] && known=yes
        done < <(grep -vE '^(#|$)' "$root/tests/fuzz/pending/known.txt")
        if [ $known = yes ]; then
          line="$line (known, tests/fuzz/pending/known.txt)"
          pending=$((pending + 1))
        else
          new=$((new + 1))
        fi
      fi
      [ "$owner" = undecided ] && undecided=$((undecided + 1))
      echo "$kind $line" >> "$summary"
    done < <("$root/fuzz/triage.sh" "$build/fuzz/fuzz_$kind" "${found[@]}" || true)
    verdict="${#found[@]}: $new new and $pending known of dlcheck's, $undecided undecided"
    [ "$new" -eq 0 ] || status=1
  fi
  printf '%-11s %7s %11s %7s %5s  %s\n' "$kind" "$rate" "${execs:-?}" "$ncorpus" "$took" "$verdict"
done
if [ -s "$summary" ]; then
  # One line per kind of finding (target, kind, owner, library frame,
  # innermost dlcheck frame without its line), with how many there were.
  echo
  echo "findings by kind (every one, with its file: $summary):"
  awk '{ split($6, f, "<"); sub(/:[0-9]+\)$/, ")", f[1]);
         n[$1 " " $3 " " $4 " " $5 " " f[1] ($7 == "" ? "" : " (known)")]++ }
       END { for (k in n) printf "%5d  %s\n", n[k], k }' "$summary" | sort -k2
fi
exit $status
