#!/usr/bin/env bash
# The audit's time per example against an earlier version of python/, on
# the same dlcheck binary, interleaved (old, new, old, new, ...) so that a
# busy machine slows both alike; prints each audit and the ratio new/old.
#
#   bench/audit_time.sh [OLD_COMMIT] [EXAMPLE...]
#
# OLD_COMMIT defaults to e7cea35 (python/ when issue 26 was filed);
# examples default to 8 fixed twins from examples/audit (names without .py).
# Needs DLCHECK_BIN (default build/release/cli/dlcheck) and Debian's
# /usr/bin/python3 with torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
old_ref=${1:-e7cea35}
shift || true
examples=("$@")
[ ${#examples[@]} -gt 0 ] || examples=(g2_loss_not_divided_fixed c1_optimizer_state_not_saved_fixed
  f1_backbone_frozen_fixed m1_eval_without_eval_mode_fixed a2_clip_before_unscale_fixed
  n3_augmentation_noise_per_worker_fixed d3_gradients_summed_fixed
  g4_token_mean_per_micro_batch_fixed)
export DLCHECK_BIN=${DLCHECK_BIN:-$root/build/release/cli/dlcheck}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git archive "$old_ref" python | tar x -C "$work"
declare -A total=([old]=0 [new]=0)
printf '%-44s %8s %8s\n' example "old (s)" "new (s)"
for ex in "${examples[@]}"; do
  line=$(printf '%-44s' "$ex")
  for side in old new; do
    tree=$root/python
    [ "$side" = old ] && tree=$work/python
    start=$(date +%s.%N)
    PYTHONPATH=$tree /usr/bin/python3 -m dlcheck audit "examples/audit/$ex.py" \
      --out "$work/out-$side" >/dev/null 2>&1 || true # a broken example exits 1
    t=$(echo "$(date +%s.%N) - $start" | bc)
    total[$side]=$(echo "${total[$side]} + $t" | bc)
    line+=$(printf ' %8.2f' "$t")
  done
  echo "$line"
done
printf 'total old %.1f s, new %.1f s, ratio new/old %.2f (load average %s)\n' "${total[old]}" \
  "${total[new]}" "$(echo "scale=4; ${total[new]} / ${total[old]}" | bc)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
