#!/bin/bash
# Times the scenario loader on generated scenario files with N top-level
# keys (all unknown but the name, so the loader must read the whole
# document and then report the first one), to show that loading is linear
# in the file's size. Usage: fuzz/bench_yaml.sh DLCHECK [N...]
# (default N: 5000 10000 20000 50000 100000; 100000 keys is ~0.9 MiB,
# under the loader's 1 MiB limit). Prints "N keys: SECONDS s".
set -euo pipefail
dlcheck=${1:?usage: fuzz/bench_yaml.sh path/to/dlcheck [N...]}
shift
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(5000 10000 20000 50000 100000)
work=$(mktemp -d "${TMPDIR:-/tmp}/dlc_bench_yaml.XXXXXX")
trap 'rm -rf "$work"' EXIT
for n in "${sizes[@]}"; do
  dir="$work/k$n"
  mkdir -p "$dir"
  {
    echo "name: k$n"
    for ((i = 0; i < n; i++)); do echo "k$i: 1"; done
  } > "$dir/scenario.yaml"
  start=$(date +%s.%N)
  "$dlcheck" run "$dir" > "$work/out" 2>&1 || true
  end=$(date +%s.%N)
  grep -q "unknown key 'k0'" "$work/out" || { echo "k$n: unexpected output:"; head -3 "$work/out"; exit 1; }
  printf '%6d keys (%7d bytes): %.2f s\n' "$n" "$(stat -c %s "$dir/scenario.yaml")" "$(echo "$end - $start" | bc)"
done
