#!/usr/bin/env bash
# End-to-end tests of the dlcheck command line: run, record, compare,
# report, env, list, exit codes, and what bad input does (exit 2, a clear
# message, nothing written). Usage: test_cli.sh PATH/TO/dlcheck
set -u
DLCHECK=$1
source "$(dirname "$0")/lib.sh"

expect 0 "help" "$DLCHECK" --help
contains "help lists run" "run SCENARIO_DIR"
expect 2 "no command" "$DLCHECK"
expect 2 "unknown command" "$DLCHECK" frobnicate
expect 0 "run --help" "$DLCHECK" run --help
expect 2 "unknown option" "$DLCHECK" run --frob "$WORK/small"
expect 2 "bad --world" "$DLCHECK" run --world 0 "$WORK/small"
expect 2 "unknown backend" "$DLCHECK" run --backend tpu "$WORK/small"
contains "names the choices" "expected cpu or cuda"
# Without a GPU (CI) --backend cuda is an environment failure, and says why;
# with one (ci/gpu-check.sh) the scenario runs on it.
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  expect 0 "cuda backend runs" "$DLCHECK" run --backend cuda --golden-dir "$GOLDEN" "$WORK/small"
else
  expect 3 "cuda backend unavailable" "$DLCHECK" run --backend cuda "$WORK/small"
  contains "says why" "cannot run here"
  # A scenario that itself asks for the GPU is skipped with the reason.
  cp -r "$WORK/small" "$WORK/needs_gpu"
  sed -i 's/^name: small/name: needs_gpu/' "$WORK/needs_gpu/scenario.yaml"
  printf 'backend: {device: cuda}\n' >>"$WORK/needs_gpu/scenario.yaml"
  expect 0 "a GPU scenario skips without a GPU" "$DLCHECK" run --golden-dir "$GOLDEN" "$WORK/needs_gpu"
  contains "skip says why" "scenario not run"
fi

# A scenario without a golden: checks run, the golden is skipped with advice.
expect 0 "run without golden" "$DLCHECK" run --golden-dir "$GOLDEN" "$WORK/small"
contains "says how to record" "dlcheck record"

expect 0 "record" "$DLCHECK" record --golden-dir "$GOLDEN" "$WORK/small"
[ -f "$GOLDEN/small/cpu.h5" ] && ok "golden written" || bad "golden written"
ls "$GOLDEN/small" | grep -v '^cpu.h5$' >"$WORK/out" && bad "no temporary files left" "$WORK/out" || ok "no temporary files left"

expect 0 "golden matches itself bitwise" "$DLCHECK" run --golden-dir "$GOLDEN" "$WORK/small"
contains "golden passes" "PASS      small/golden"
expect 0 "pitfalls caught" "$DLCHECK" run --pitfalls --golden-dir "$GOLDEN" --out "$WORK/report" "$WORK/small"
contains "G2 caught" "caught    G2"
for f in report.json junit.xml report.html; do
  [ -s "$WORK/report/$f" ] && ok "wrote $f" || bad "wrote $f"
done
grep -q '"backend_detail": *"cpu: dl_sgemm' "$WORK/report/report.json" &&
  ok "report.json says where each run computed" || bad "report.json backend_detail"
if command -v xmllint >/dev/null; then
  expect 0 "junit.xml validates against the JUnit schema" \
    xmllint --noout --schema "$ROOT/tests/data/junit.xsd" "$WORK/report/junit.xml"
else
  echo "skip JUnit schema check: no xmllint"
fi
if /usr/bin/python3 -c "import h5py" 2>/dev/null; then
  expect 0 "h5py reads a trace" /usr/bin/python3 "$ROOT/tests/h5py_read_trace.py" \
    "$WORK/report/traces/small/pipeline/big.h5"
fi
expect 0 "report from saved traces" "$DLCHECK" report "$WORK/report"
contains "report lists the pitfall" "G2"
expect 0 "compare a trace with the golden" \
  "$DLCHECK" compare "$WORK/report/traces/small/pipeline/big.h5" "$GOLDEN/small/cpu.h5"
contains "agreement names A first" "pipeline/big.h5 and $GOLDEN/small/cpu.h5 agree"
expect 1 "compare two different runs" \
  "$DLCHECK" compare "$WORK/report/traces/small/G2/accumulated.h5" "$GOLDEN/small/cpu.h5"
contains "compare names the first step" "first differs at step"
# A is the first file, B the reference: every value and name in that order.
A="$WORK/report/traces/small/G2/accumulated.h5" B="$GOLDEN/small/cpu.h5"
contains "compare gives A's value first" "($A) vs"
contains "compare names tensors' files A first" "differs ($A vs $B)"
contains "compare's environment A first" "environment ($A -> $B)"
grep -qF ".h5//" "$WORK/out" && bad "no two paths joined by //" "$WORK/out" || ok "no two paths joined by //"
# Goldens keep layer statistics at every one of the first 1000 steps, then
# on the run's own schedule (here the default: the last step), so a long
# run's golden stays small.
mkdir -p "$WORK/long"
cat >"$WORK/long/scenario.yaml" <<'YAML'
name: long
description: A long, tiny run for the golden's statistics bound.
model: [{type: linear, in: 4, out: 2}]
data: {source: blobs, n: 64, dim: 4, classes: 2, batch: 8}
steps: 1003
runs: {reference: {}}
checks: [{name: finite, kind: nonfinite, a: reference}]
YAML
expect 0 "record a 1003-step golden" "$DLCHECK" record --golden-dir "$GOLDEN" "$WORK/long"
if /usr/bin/python3 -c "import h5py" 2>/dev/null; then
  expect 0 "its statistics: steps 0-999 and the last" /usr/bin/python3 -c "
import h5py, sys
with h5py.File(sys.argv[1]) as f:
    steps = sorted(int(g.attrs['step']) for g in f['stats'].values())
assert steps == list(range(1000)) + [1002], (len(steps), steps[-3:])" "$GOLDEN/long/cpu.h5"
fi

# Two paths longer than a run name that share their start are still two
# runs (once they were cut to the same name and compared with themselves).
LONG="$WORK/$(printf 'd%.0s' $(seq 1 140))"
mkdir -p "$LONG/a" "$LONG/b"
cp "$A" "$LONG/a/t.h5" && cp "$B" "$LONG/b/t.h5"
expect 1 "long paths that share their start stay apart" "$DLCHECK" compare "$LONG/a/t.h5" "$LONG/b/t.h5"
contains "each named by its end" "(A: ..."
# Runs given as recorded traces (trace: FILE) stand in for training: the
# golden recorded above, read as a run, equals the engine's run bitwise; its
# other settings are ignored (lr 0.5 would change every step).
mkdir -p "$WORK/traced/traced"
sed -e 's/^name: small/name: traced/' -e '/^runs:/,$d' "$WORK/small/scenario.yaml" \
  >"$WORK/traced/traced/scenario.yaml"
cat >>"$WORK/traced/traced/scenario.yaml" <<EOF
runs:
  big: {}
  recorded: {trace: $GOLDEN/small/cpu.h5, optimizer: {lr: 0.5}}
checks:
  - {name: same_run, kind: equivalence, a: big, b: recorded, quantities: [loss, params, buffers], tolerance: bitwise}
pitfalls:
  - {id: G2, caught_by: same_run, runs: [recorded], overrides: {trace: $WORK/report/traces/small/G2/accumulated.h5}}
EOF
expect 0 "a trace run equals the engine's run" "$DLCHECK" run --pitfalls --golden-dir "$WORK/none" \
  --out "$WORK/traced/out" "$WORK/traced/traced"
contains "the trace run passes bitwise" "PASS      traced/same_run"
contains "a variant's trace is caught" "caught    G2"
grep -q "\"backend_detail\": *\"trace: $GOLDEN/small/cpu.h5" "$WORK/traced/out/report.json" &&
  ok "report.json says the run is a trace" || bad "report.json backend_detail of a trace run"
# Only traces: no model needed, and a device the runs never use is no reason to skip.
mkdir -p "$WORK/traced/only_traces"
cat >"$WORK/traced/only_traces/scenario.yaml" <<EOF
name: only_traces
description: Two recorded runs.
backend: {device: cuda}
runs:
  golden: {trace: $GOLDEN/small/cpu.h5}
  again: {trace: $WORK/traced/out/traces/traced/pipeline/big.h5}
checks:
  - {name: same_run, kind: equivalence, a: golden, b: again, quantities: [loss, params], tolerance: bitwise}
EOF
expect 0 "a scenario of traces only needs no model" "$DLCHECK" run --golden-dir "$WORK/none" \
  "$WORK/traced/only_traces"
contains "traces only are not skipped" "PASS      only_traces/same_run"
expect 0 "record a golden from a trace run" "$DLCHECK" record --golden-dir "$WORK/tgolden" \
  "$WORK/traced/only_traces"
expect 0 "the trace run matches its golden" "$DLCHECK" run --golden-dir "$WORK/tgolden" \
  "$WORK/traced/only_traces"
contains "trace golden passes" "PASS      only_traces/golden"
# A reference that is itself a recording repeats exactly: record --repeat
# records it once and says so, rather than stopping a folder's recording.
expect 0 "record --repeat of a recorded reference" "$DLCHECK" record --repeat 5 \
  --golden-dir "$WORK/tgolden" "$WORK/traced/only_traces"
contains "says it recorded once" "recorded once, not calibrated"
expect 2 "its golden is a single trace" "$DLCHECK" calibrate "$WORK/tgolden/only_traces/cpu.h5"
sed -i "s|recorded: {trace: [^,]*,|recorded: {trace: $WORK/nope.h5,|" "$WORK/traced/traced/scenario.yaml"
expect 2 "a missing trace file" "$DLCHECK" run --golden-dir "$WORK/none" "$WORK/traced/traced"
contains "names the scenario, run and file" "scenario traced, run recorded (trace: $WORK/nope.h5)"
contains "says why" "nope.h5: cannot open"

# loss: {reduction: sum}: K micro-batch sums add up to the big batch's sum
# (dividing each by K, or summing micro-batch means, would not), and
# label_smoothing reaches the loss.
mkdir -p "$WORK/loss/loss_sum"
cat >"$WORK/loss/loss_sum/scenario.yaml" <<EOF
name: loss_sum
description: Reduction sum with gradient accumulation.
seed: 3
model: [{type: linear, in: 4, out: 3}]
data: {source: blobs, n: 64, dim: 4, classes: 3, batch: 16, eval_split: ""}
optimizer: {type: sgd, lr: 0.01}
steps: 4
loss: {reduction: sum}
runs:
  big: {}
  accumulated: {accumulation: 4, data: {batch: 4}}
  smoothed: {loss: {label_smoothing: 0.2}}
checks:
  - {name: sum_over_micro_batches, kind: equivalence, a: big, b: accumulated, quantities: [loss, params], tolerance: "close(1e-5, 1e-6)"}
EOF
expect 0 "loss sum: K micro-batches equal the big batch" "$DLCHECK" run --golden-dir "$WORK/none" \
  --out "$WORK/loss/out" "$WORK/loss/loss_sum"
contains "the sum check passes" "PASS      loss_sum/sum_over_micro_batches"
expect 1 "label smoothing changes the run" "$DLCHECK" compare \
  "$WORK/loss/out/traces/loss_sum/pipeline/smoothed.h5" "$WORK/loss/out/traces/loss_sum/pipeline/big.h5"

expect 0 "env" "$DLCHECK" env
expect 0 "env --json" "$DLCHECK" env --json
expect 0 "env against a golden" "$DLCHECK" env "$GOLDEN/small/cpu.h5"
contains "env diff" "differences from the machine"
# Traces of `run --out` carry the fingerprint of the machine that ran them.
expect 0 "env against a plain trace" "$DLCHECK" env "$WORK/report/traces/small/pipeline/big.h5"
contains "a plain trace carries the fingerprint" "differences from the machine that recorded"
expect 1 "compare two plain traces" "$DLCHECK" compare \
  "$WORK/report/traces/small/G2/accumulated.h5" "$WORK/report/traces/small/pipeline/big.h5"
contains "their environments are compared" "the same"
expect 0 "list" "$DLCHECK" list
contains "list shows the catalogue" "G1"
contains "list shows each fix" "fix: (loss / accumulation_steps).backward()"

# A check that names catalogue IDs: when it fails, every report names them
# with what they mean and the line that fixes them.
cp -r "$WORK/small" "$WORK/findings"
sed -i -e 's/^name: small/name: findings/' \
       -e 's/tolerance: "close(1e-4, 1e-6)"}/tolerance: "close(1e-4, 1e-6)", catalogue: [G2]}/' \
       -e 's/accumulated: {accumulation: 2, data: {batch: 16}}/accumulated: {accumulation: 2, data: {batch: 16}, bugs: {loss_not_divided: true}}/' \
       -e '/^pitfalls:/,$d' "$WORK/findings/scenario.yaml"
expect 1 "a finding fails the run" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$WORK/findings_report" "$WORK/findings"
contains "the finding is named" "G2:"
grep -qF "G2: the loss of each micro-batch is not divided by the accumulation count K. Fix: (loss / accumulation_steps).backward() for each micro-batch." "$WORK/findings_report/report.json" &&
  ok "with what it means and its fix" || bad "with what it means and its fix" "$WORK/findings_report/report.json"
grep -q '"catalogue": \[' "$WORK/findings_report/report.json" && grep -A2 '"catalogue": \[' "$WORK/findings_report/report.json" | grep -q '"G2"' &&
  ok "report.json lists the check's catalogue IDs" || bad "report.json catalogue IDs" "$WORK/findings_report/report.json"
grep -q '"G2": {' "$WORK/findings_report/report.json" && grep -q '"fix": "(loss / accumulation_steps)' "$WORK/findings_report/report.json" &&
  ok "report.json carries the catalogue entries its checks name" || bad "report.json catalogue entries" "$WORK/findings_report/report.json"
# What could not be tested is said, with its reason, and never passes.
printf '  - {name: no_ddp, kind: not_tested, catalogue: [D1], reason: no DDP wrapper was given}\n' >>"$WORK/findings/scenario.yaml"
sed -i 's/, bugs: {loss_not_divided: true}}/}/' "$WORK/findings/scenario.yaml"
expect 0 "a not-tested check does not fail the run" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$WORK/skip_report" "$WORK/findings"
contains "it is shown as skipped" "SKIP      findings/no_ddp  not tested: no DDP wrapper was given"
contains "and counted so" "1 passed, 0 failed, 2 skipped"
grep -q '"verdict": "not_tested"' "$WORK/skip_report/report.json" &&
  grep -q '<skipped message="not tested: no DDP wrapper was given"' "$WORK/skip_report/junit.xml" &&
  ok "JSON and JUnit say not tested" || bad "JSON and JUnit say not tested" "$WORK/skip_report/junit.xml"
# A scenario of nothing but not_tested checks needs no run (an audit family
# that could not run at all), and has no golden to record.
mkdir -p "$WORK/norun"
printf 'name: norun\ndescription: nothing could run\nruns: {}\nchecks:\n  - {name: ddp, kind: not_tested, reason: no DDP wrapper}\n' >"$WORK/norun/scenario.yaml"
expect 0 "a scenario without runs reports its not-tested checks" "$DLCHECK" run --golden-dir "$GOLDEN" "$WORK/norun"
contains "its golden is skipped, saying why" "norun has no run, so nothing to compare with a golden"
expect 2 "and has no golden to record" "$DLCHECK" record --golden-dir "$GOLDEN" "$WORK/norun"
contains "record says why" "the scenario has no run to record a golden of"
grep -q "Fix: (loss / accumulation_steps)" "$WORK/findings_report/junit.xml" &&
  grep -q "Fix: (loss / accumulation_steps)" "$WORK/findings_report/report.html" &&
  ok "JUnit and HTML carry the fix" || bad "JUnit and HTML carry the fix"
# A waived check: its failure is accepted with the reason, WAIVED in every
# report with the failure's evidence, and does not fail the run; a waived
# check that passes says that its waiver is unused.
cp -r "$WORK/small" "$WORK/waived"
sed -i -e 's/^name: small/name: waived/' \
       -e 's/tolerance: "close(1e-4, 1e-6)"}/tolerance: "close(1e-4, 1e-6)", catalogue: [G2], waived: "summed on purpose, see #412"}/' \
       -e 's/accumulated: {accumulation: 2, data: {batch: 16}}/accumulated: {accumulation: 2, data: {batch: 16}, bugs: {loss_not_divided: true}}/' \
       -e '/^pitfalls:/,$d' "$WORK/waived/scenario.yaml"
expect 0 "a waived failure does not fail the run" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$WORK/waived_report" "$WORK/waived"
contains "it is shown as waived" "WAIVED    waived/same_update"
contains "with the failure's evidence" "G2:"
contains "and counted so" "1 passed (1 waived), 0 failed"
grep -q '"verdict": "waived"' "$WORK/waived_report/report.json" &&
  grep -q '"waiver": "summed on purpose, see #412"' "$WORK/waived_report/report.json" &&
  grep -qF 'Fix: (loss / accumulation_steps).backward() for each micro-batch. waived: summed on purpose, see #412.' "$WORK/waived_report/report.json" &&
  ok "report.json: verdict waived, the waiver and the evidence" || bad "report.json waived" "$WORK/waived_report/report.json"
grep -q 'status="waived"' "$WORK/waived_report/junit.xml" && ! grep -q '<failure' "$WORK/waived_report/junit.xml" &&
  grep -q 'waived: summed on purpose, see #412.' "$WORK/waived_report/junit.xml" &&
  ok "junit.xml: a passing testcase with the reason" || bad "junit.xml waived" "$WORK/waived_report/junit.xml"
grep -q 'class="waived">WAIVED' "$WORK/waived_report/report.html" &&
  ok "report.html: a row marked waived" || bad "report.html waived"
if command -v xmllint >/dev/null; then
  expect 0 "the waived junit.xml validates" \
    xmllint --noout --schema "$ROOT/tests/data/junit.xsd" "$WORK/waived_report/junit.xml"
fi
sed -i 's/, bugs: {loss_not_divided: true}}/}/' "$WORK/waived/scenario.yaml"
expect 0 "a waived check that passes" "$DLCHECK" run --golden-dir "$GOLDEN" "$WORK/waived"
contains "is a pass" "PASS      waived/same_update"
contains "that says its waiver is unused" "The waiver is unused"

# A golden recorded with a perturbed schedule (the learning rate halves from
# step 3 on) is reported with the right step and tensor.
mkdir -p "$WORK/perturbed/small" "$WORK/pgolden"
sed 's/^steps: 6/steps: 6\nschedule: {type: step, step_size: 3, gamma: 0.5}/' \
  "$WORK/small/scenario.yaml" >"$WORK/perturbed/small/scenario.yaml"
expect 0 "record a perturbed golden" "$DLCHECK" record --golden-dir "$WORK/pgolden" "$WORK/perturbed/small"
expect 1 "perturbed golden fails" "$DLCHECK" run --golden-dir "$WORK/pgolden" "$WORK/small"
contains "names the step" "Bits first differ after step 3"
contains "names the tensor" "param/1.weight differs"
contains "names the loss step" "loss first differs at step 4"

# A run that starts from a PyTorch state dict (exported with the script
# users get) has exactly those weights before its first step.
if /usr/bin/python3 -c "import torch, h5py" 2>/dev/null; then
  mkdir -p "$WORK/fromtorch/small"
  init="$WORK/init.h5"
  /usr/bin/python3 - "$init" "$ROOT" <<'PY' >"$WORK/out" 2>&1 || bad "export a torch state dict" "$WORK/out"
import sys
import torch
sys.path.insert(0, sys.argv[2] + "/fixtures/pytorch")
from export_state_dict import export
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(),
                        torch.nn.Linear(16, 10))
with torch.no_grad():
    m[1].weight.fill_(0.125)
export(m.state_dict(), sys.argv[1])
PY
  sed "s|^seed: 1|seed: 1\ninit_weights: $init|" \
    "$WORK/small/scenario.yaml" >"$WORK/fromtorch/small/scenario.yaml"
  expect 0 "run from a PyTorch state dict" "$DLCHECK" run --out "$WORK/fromtorch/out" \
    --golden-dir "$WORK/none" "$WORK/fromtorch/small"
  /usr/bin/python3 -c "
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    w = f['finals/init%2F1.weight'][()]
sys.exit(0 if np.all(w == 0.125) else 1)" "$WORK/fromtorch/out/traces/small/pipeline/big.h5" \
    && ok "the run started from the exported weights" || bad "the run started from the exported weights"
fi

# Bad input: exit 2, a clear message, nothing written.
mkdir -p "$WORK/bad/broken"
printf 'name: broken\ndescription: x\nmodel: [ {type: linear, in: 4\n' >"$WORK/bad/broken/scenario.yaml"
expect 2 "malformed YAML" "$DLCHECK" run --out "$WORK/bad/out" "$WORK/bad/broken"
contains "YAML error has file:line" "broken/scenario.yaml:"
[ ! -e "$WORK/bad/out" ] && ok "malformed YAML writes nothing" || bad "malformed YAML writes nothing"
expect 2 "missing scenario" "$DLCHECK" run "$WORK/does-not-exist"
contains "missing scenario is named" "does-not-exist"
expect 2 "missing trace" "$DLCHECK" compare "$WORK/none.h5" "$GOLDEN/small/cpu.h5"
head -c 3000 "$GOLDEN/small/cpu.h5" >"$WORK/truncated.h5"
expect 2 "truncated trace" "$DLCHECK" compare "$WORK/truncated.h5" "$GOLDEN/small/cpu.h5"
contains "truncated trace is named" "truncated.h5"
echo "not hdf5 at all" >"$WORK/text.h5"
expect 2 "not an HDF5 file" "$DLCHECK" compare "$WORK/text.h5" "$GOLDEN/small/cpu.h5"
mkdir -p "$WORK/corrupt/small"
head -c 3000 "$GOLDEN/small/cpu.h5" >"$WORK/corrupt/small/cpu.h5"
expect 2 "corrupt golden" "$DLCHECK" run --golden-dir "$WORK/corrupt" "$WORK/small"

# A record killed before its rename leaves the previous golden intact.
before=$(md5sum <"$GOLDEN/small/cpu.h5")
DLCHECK_FAILPOINT=before_rename "$DLCHECK" record --golden-dir "$GOLDEN" "$WORK/small" >"$WORK/out" 2>&1
killed=$?
after=$(md5sum <"$GOLDEN/small/cpu.h5")
[ "$killed" -eq 137 ] && ok "record killed (SIGKILL) before rename" || bad "record killed (exit $killed)" "$WORK/out"
[ "$before" = "$after" ] && ok "previous golden intact after a killed record" || bad "previous golden intact"

# Calibrated goldens (docs/calibrated-goldens.md): 5 repeats of the
# reference, the CPU ones with perturbed summation orders; the run is gated
# by their envelope; calibrate prints the rules the repeats support.
expect 2 "record --repeat below 3" "$DLCHECK" record --repeat 2 --golden-dir "$WORK/cal" "$WORK/small"
expect 0 "record --repeat 5" "$DLCHECK" record --repeat 5 --golden-dir "$WORK/cal" "$WORK/small"
contains "says it is calibrated" "(calibrated)"
contains "prints the margin of the current rule" "margin of the current rule"
expect 0 "a run within the envelope passes" "$DLCHECK" run -v --golden-dir "$WORK/cal" "$WORK/small"
contains "gated by the envelope" "the envelope of 5 repeats"
expect 0 "calibrate a calibrated golden" "$DLCHECK" calibrate "$WORK/cal/small/cpu.h5"
contains "lists the loss" "loss "
expect 2 "calibrate a single golden" "$DLCHECK" calibrate "$GOLDEN/small/cpu.h5"
contains "says how to calibrate" "record --repeat N"
expect 2 "repeat-from needs 3 traces" "$DLCHECK" record --repeat-from "$GOLDEN/small/cpu.h5" \
  "$GOLDEN/small/cpu.h5" --out "$WORK/from.h5"
[ ! -f "$WORK/from.h5" ] && ok "nothing written" || bad "nothing written"
expect 0 "record --repeat-from traces" "$DLCHECK" record --repeat-from "$GOLDEN/small/cpu.h5" \
  "$WORK/cal/small/cpu.h5" "$GOLDEN/small/cpu.h5" --out "$WORK/from.h5"
contains "calibrated from traces" "calibrated from 3 traces"

# A failed golden comparison names the first divergent layer: the run is
# trained again up to the step where it parts from the golden and compared
# with the statistics the golden keeps at every step. lr changed by 0.1%:
# step 0 is the same, the optimizer step differs, layer 1 reads it first.
mkdir -p "$WORK/drift" && cp -r "$WORK/small" "$WORK/drift/small"
sed -i 's/lr: 0.1,/lr: 0.1001,/' "$WORK/drift/small/scenario.yaml"
layer_named() { # $1 what, $2 report folder
  if grep -qF 'First divergent layer: 1 (linear) (forward) at step 1' "$2/report.json" &&
    grep -qF '"layer": "1 (linear)"' "$2/report.json"; then ok "$1"; else bad "$1" "$2/report.json"; fi
}
expect 1 "a changed lr fails the single golden" "$DLCHECK" run --golden-dir "$GOLDEN" \
  --out "$WORK/drift_single" "$WORK/drift/small"
layer_named "names the layer (single golden)" "$WORK/drift_single"
expect 1 "a changed lr fails the calibrated golden" "$DLCHECK" run --golden-dir "$WORK/cal" \
  --out "$WORK/drift_cal" "$WORK/drift/small"
layer_named "names the layer (calibrated golden)" "$WORK/drift_cal"
grep -q '"outside": true' "$WORK/drift_cal/report.json" &&
  ok "report.json marks the quantities outside the envelope" || bad "report.json outside" "$WORK/drift_cal/report.json"
grep -q 'class="outside"' "$WORK/drift_cal/report.html" &&
  ok "report.html rings the steps outside the band" || bad "report.html outside" "$WORK/drift_cal/report.html"

# compare --envelope: a trace gated by a calibrated golden's envelope, as
# run gates a scenario (a PyTorch run against repeats recorded with
# --repeat-from); a single golden has no envelope to gate by.
expect 0 "compare --envelope: the reference run lies in its envelope" "$DLCHECK" compare \
  --envelope "$WORK/report/traces/small/pipeline/big.h5" "$WORK/cal/small/cpu.h5"
contains "says what it gated by" "the envelope of 5 repeats"
contains "says what it did not compare" "not compared: layer statistics"
expect 1 "compare --envelope: the changed lr lies outside" "$DLCHECK" compare \
  --envelope "$WORK/drift_cal/traces/small/pipeline/big.h5" "$WORK/cal/small/cpu.h5"
contains "names where it left the band" "outside"
expect 2 "compare --envelope needs a calibrated golden" "$DLCHECK" compare \
  --envelope "$WORK/report/traces/small/pipeline/big.h5" "$GOLDEN/small/cpu.h5"
contains "says how to make one" "record --repeat-from"
expect 2 "compare --envelope takes no --tolerance" "$DLCHECK" compare --envelope \
  --tolerance "ulp(4)" "$WORK/report/traces/small/pipeline/big.h5" "$WORK/cal/small/cpu.h5"

finish
