#!/usr/bin/env bash
# Determinism rule 2 across toolchains: the engine must train to the same
# bits with gcc and clang, at -O2 and -O3, on 1 and 2 threads, whichever
# GEMM kernels the CPU has. Builds bench_train four times
# (build/det-<compiler>-<level>, Release with CMAKE_C_FLAGS_RELEASE set to
# the level), runs `bench_train --digest-only` in each (MLP and CNN, 1 and 2
# threads: a fixed number of training steps, then an FNV-1a digest of the
# parameters) once per GEMM ISA this CPU can run (DL_GEMM_ISA=portable,
# avx2, avx512: the kernels other x86-64 machines would pick), prints the
# digests as a table and exits 1 unless every digest of a model is the same.
#
#   ci/determinism.sh            both compilers (a missing one is skipped
#                                with a note; at least two builds must run)
#   DET_COMPILERS="gcc" ci/determinism.sh
set -euo pipefail
cd "$(dirname "$0")/.."

compilers=${DET_COMPILERS:-gcc clang}
levels="O2 O3"
jobs=$(nproc)
results=$(mktemp)
trap 'rm -f "$results"' EXIT

configs=0
for cc in $compilers; do
  if ! command -v "$cc" >/dev/null; then
    echo "note: $cc not found; its builds are skipped"
    continue
  fi
  for level in $levels; do
    dir=build/det-$cc-$level
    echo "== $cc -$level: building bench_train in $dir"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" \
          -DCMAKE_C_FLAGS_RELEASE="-$level -DNDEBUG" -DBUILD_TESTING=OFF >/dev/null
    cmake --build "$dir" -j"$jobs" --target bench_train >/dev/null
    for isa in portable avx2 avx512; do
      # Exit status 3: this CPU cannot run the ISA; anything else non-zero
      # (a failure, or 1- and 2-thread digests differing) fails the script.
      rc=0
      out=$(DL_GEMM_ISA=$isa "$dir/bench/bench_train" --digest-only --threads 1,2) || rc=$?
      if [ "$rc" -eq 3 ]; then
        echo "note: this CPU cannot run the $isa GEMM kernels; skipped"
        continue
      fi
      [ "$rc" -eq 0 ] || { echo "determinism: bench_train failed in $dir ($isa)" >&2; exit 1; }
      # Lines: digest <model> isa=<isa> threads=<t> steps=<n> <hex>
      awk -v cfg="$cc -$level" '$1 == "digest" { print cfg "\t" $2 "\t" $3 "\t" $4 "\t" $5 "\t" $6 }' \
        <<<"$out" >>"$results"
    done
    configs=$((configs + 1))
  done
done

if [ "$configs" -lt 2 ]; then
  echo "determinism: only $configs build(s) ran; nothing to compare" >&2
  exit 1
fi

echo
echo "== parameter digests after training (bench_train --digest-only)"
awk -F'\t' '
  { printf "  %-10s %-5s %-13s %-10s %-10s %s\n", $1, $2, $3, $4, $5, $6
    if (!($2 in ref)) { ref[$2] = $6; refcfg[$2] = $1 " " $3 " " $4 }
    else if (ref[$2] != $6) {
      bad++
      msg = msg sprintf("  %s: %s %s %s gives %s, %s gave %s\n", $2, $1, $3, $4, $6,
                        refcfg[$2], ref[$2])
    }
    n++ }
  END {
    if (n == 0) { print "determinism: bench_train printed no digests"; exit 1 }
    if (bad) { printf "determinism: FAILED, %d digest(s) differ:\n%s", bad, msg; exit 1 }
    printf "determinism: all %d digests equal per model (bitwise across compilers, -O levels, GEMM ISAs, threads)\n", n
  }' "$results"
