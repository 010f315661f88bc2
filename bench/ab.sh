#!/usr/bin/env bash
# Two builds of bench_scaling's one-shot `train` command (it prints
# "train ... STEPS WALL CPU LOSS DIGEST") against each other, interleaved so
# that the machine's load hits both alike: the median wall and CPU seconds
# of each over ROUNDS alternating runs, their ratios, and both final digests
# (which must be equal for a change meant to keep the bits). At 2 threads
# compare wall time: CPU time counts the pool's polling as work.
#
#   bench/ab.sh A_BINARY B_BINARY ROUNDS COMMAND...
#   bench/ab.sh /tmp/old/bench_scaling build/bench/bench/bench_scaling 5 \
#       train gpt 64,2,4,32,256,32 1 5 100
set -euo pipefail

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
case ${1:-} in -h | --help) usage; exit 0 ;; esac
if [ $# -lt 4 ]; then
  usage >&2
  exit 2
fi
a=$1 b=$2 rounds=$3
shift 3
case $rounds in '' | *[!0-9]*) echo "ab.sh: ROUNDS '$rounds' is not a number" >&2; exit 2 ;; esac
for bin in "$a" "$b"; do
  [ -x "$bin" ] || { echo "ab.sh: $bin is not an executable" >&2; exit 2; }
done

run() { "$1" "${@:2}" | tail -n 1; }
wall_a=() wall_b=() cpu_a=() cpu_b=()
for ((i = 0; i < rounds; i++)); do
  la=$(run "$a" "$@") lb=$(run "$b" "$@")
  wall_a+=("$(awk '{print $(NF-3)}' <<<"$la")") cpu_a+=("$(awk '{print $(NF-2)}' <<<"$la")")
  wall_b+=("$(awk '{print $(NF-3)}' <<<"$lb")") cpu_b+=("$(awk '{print $(NF-2)}' <<<"$lb")")
  echo "round $((i + 1)): A ${wall_a[-1]} s wall ${cpu_a[-1]} s cpu  B ${wall_b[-1]} s wall ${cpu_b[-1]} s cpu"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
report() { awk -v w="$1" -v a="$2" -v b="$3" 'BEGIN {printf "median %s s: A %.3f  B %.3f  A/B %.3fx\n", w, a, b, a / b}'; }
report wall "$(median "${wall_a[@]}")" "$(median "${wall_b[@]}")"
report cpu "$(median "${cpu_a[@]}")" "$(median "${cpu_b[@]}")"
da=$(awk '{print $NF}' <<<"$la") db=$(awk '{print $NF}' <<<"$lb")
echo "digest: A $da  B $db"
[ "$da" = "$db" ] || { echo "ab.sh: the digests differ" >&2; exit 1; }
