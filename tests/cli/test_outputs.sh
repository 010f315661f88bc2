#!/usr/bin/env bash
# What dlcheck writes and reads, under attack (issue 16): links in the
# output folder, a full disk and a file-size limit, signals, temporaries of
# killed runs, damaged goldens and stale reports, FIFOs where files are
# expected, and what `compare` covers.
# Usage: test_outputs.sh PATH/TO/dlcheck
set -u
DLCHECK=$1
source "$(dirname "$0")/lib.sh"
export TMPDIR="$WORK/tmp" # the scratch folders dlcheck makes land here
mkdir -p "$TMPDIR"
# No command may block: a hang is a failure after this many seconds.
T=30

# not_claiming_success NAME DIR: no report in DIR says every check passed.
not_claiming_success() {
  if grep -s -A8 '"summary"' "$2/report.json" | grep -q '"ok": true' ||
    grep -qs '<testsuites .*failures="0" errors="0"' "$2/junit.xml"
  then bad "$1" "$2/report.json"; else ok "$1"; fi
}
dead_pid() { (exit 0) & wait $!; echo $!; }

expect 0 "record the small golden" "$DLCHECK" record --golden-dir "$GOLDEN" "$WORK/small"
G=$GOLDEN/small/cpu.h5
cp "$G" "$WORK/golden.orig"

# ---- 1. links in the output folder never lead outside it -----------------
O=$WORK/links
expect 0 "run --out" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
mkdir -p "$WORK/victim"
cp "$G" "$WORK/victim/cpu.h5"
cp "$WORK/small/scenario.yaml" "$WORK/victim/scenario.yaml"
cp "$WORK/victim/cpu.h5" "$WORK/victim/cpu.orig"
cp "$WORK/victim/scenario.yaml" "$WORK/victim/scenario.orig"
rm "$O/traces/small/pipeline/big.h5"
ln -s "$WORK/victim/cpu.h5" "$O/traces/small/pipeline/big.h5"
expect 2 "a trace that is a link is refused" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
contains "saying it is a link" "big.h5: it is a symbolic link"
cmp -s "$WORK/victim/cpu.h5" "$WORK/victim/cpu.orig" && ok "the file it points to is intact" ||
  bad "the file it points to is intact"
not_claiming_success "no report claims success after the refusal" "$O"
rm "$O/traces/small/pipeline/big.h5"
for f in scenario.yaml golden.h5; do
  rm -f "$O/traces/small/$f"
  ln -s "$WORK/victim/$([ $f = golden.h5 ] && echo cpu.h5 || echo scenario.yaml)" "$O/traces/small/$f"
  expect 2 "$f as a link is refused" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
  rm "$O/traces/small/$f"
done
cmp -s "$WORK/victim/cpu.h5" "$WORK/victim/cpu.orig" &&
  cmp -s "$WORK/victim/scenario.yaml" "$WORK/victim/scenario.orig" &&
  ok "golden and scenario behind the links intact" || bad "golden and scenario behind the links intact"
rm -rf "$O/traces"
ln -s "$WORK/victim" "$O/traces"
expect 2 "traces/ as a link is refused" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
[ ! -e "$WORK/victim/small" ] && ok "nothing written where it points" || bad "nothing written where it points"
rm "$O/traces"
ln -sf "$WORK/victim/cpu.h5" "$O/report.json"
expect 0 "a report.json link is replaced, not followed" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
[ -f "$O/report.json" ] && [ ! -L "$O/report.json" ] && cmp -s "$WORK/victim/cpu.h5" "$WORK/victim/cpu.orig" &&
  ok "report.json is a new file, the linked file intact" || bad "report.json link"

# ---- 2. a failure is never reported as success -----------------------------
flip() { # FILE OFFSET: one bit of the byte at OFFSET inverted
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "\\$(printf %03o $((b ^ 1)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
cp "$WORK/golden.orig" "$WORK/flipped.h5"
flip "$WORK/flipped.h5" 2000
mkdir -p "$WORK/gflip/small"
cp "$WORK/flipped.h5" "$WORK/gflip/small/cpu.h5"
O=$WORK/flip
expect 2 "a flipped golden byte: exit 2" "$DLCHECK" run --pitfalls --golden-dir "$WORK/gflip" --out "$O" "$WORK/small"
contains "checksum mismatch on the golden line" "ERROR     small/golden  golden of small:"
contains "the scenario is not ok" "FAILED  small"
grep -q '"ok": false' "$O/report.json" && grep -q 'errors="1"' "$O/junit.xml" &&
  ok "report.json and junit.xml say it failed" || bad "reports say it failed" "$O/junit.xml"
contains "the pitfall is still assessed" "caught    G2"

# a stale report of an earlier, passing run goes first
O=$WORK/stale
expect 0 "a passing run" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
mkdir -p "$WORK/bad/broken"
printf 'name: broken\nmodel: [\n' >"$WORK/bad/broken/scenario.yaml"
expect 2 "then bad input into the same folder" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/bad/broken"
[ ! -e "$O/report.json" ] && [ ! -e "$O/junit.xml" ] && [ ! -e "$O/report.html" ] &&
  ok "the earlier run's reports are removed" || bad "the earlier run's reports are removed"
# one of several scenarios cannot load: it is an ERROR, the others still run
cp -r "$WORK/small" "$WORK/bad/small"
expect 2 "a broken scenario among others" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/bad"
grep -c '<testsuite ' "$O/junit.xml" | grep -qx 2 && not_claiming_success "both listed, none passing" "$O"
# report DIR never drops a scenario it cannot reload
mkdir -p "$WORK/two/small2"
cp -r "$WORK/small" "$WORK/two/small"
sed 's/^name: small/name: small2/' "$WORK/small/scenario.yaml" >"$WORK/two/small2/scenario.yaml"
expect 0 "report DIR" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/two"
printf 'garbage: [\n' >"$O/traces/small/scenario.yaml"
expect 2 "report DIR with one scenario damaged" "$DLCHECK" report "$O"
grep -c '<testsuite ' "$O/junit.xml" | grep -qx 2 && grep -q '"ok": false' "$O/report.json" &&
  ok "report DIR lists the damaged scenario as an error" || bad "report DIR keeps every scenario" "$O/report.json"

# ---- 3. full disk and file-size limit: exit 2, no crash, nothing claims success
O=$WORK/efbig
(trap '' XFSZ; ulimit -f 16; exec "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small") >"$WORK/out" 2>&1
code=$?
[ "$code" -eq 2 ] && ok "ulimit -f (EFBIG) while writing traces: exit 2" || bad "EFBIG traces (exit $code)" "$WORK/out"
not_claiming_success "EFBIG: no report claims success" "$O"
no_temporaries "EFBIG: no temporaries left" "$O"
expect 0 "run --out for report DIR" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
(trap '' XFSZ; ulimit -f 10; exec "$DLCHECK" report "$O") >"$WORK/out" 2>&1
code=$?
[ "$code" -eq 2 ] && [ ! -e "$O/report.json" ] && [ ! -e "$O/report.html" ] &&
  ok "EFBIG on report.html: exit 2, all three reports or none" || bad "EFBIG reports (exit $code)" "$WORK/out"
if mkdir -p "$WORK/full" && mount -t tmpfs -o size=64k tmpfs "$WORK/full" 2>/dev/null; then
  (trap 'umount "$WORK/full"' EXIT
   expect 2 "a full disk (64 KiB tmpfs): exit 2, no crash" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$WORK/full/o" "$WORK/small"
   contains "says the disk is full" "No space left on device"
   not_claiming_success "full disk: no report claims success" "$WORK/full/o"
   no_temporaries "full disk: no temporaries left" "$WORK/full"
   expect 2 "record onto a full disk: exit 2, no crash" "$DLCHECK" record --golden-dir "$WORK/full/g" "$WORK/small"
   # a read-only traces/ folder (root ignores chmod: a read-only bind mount)
   O=$WORK/rotraces
   "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small" >/dev/null 2>&1
   if mount --bind "$O/traces" "$O/traces" 2>/dev/null; then
     mount -o remount,ro,bind "$O/traces" 2>/dev/null
     expect 2 "a read-only traces/ folder: exit 2" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
     not_claiming_success "a read-only traces/ folder: no report claims success" "$O"
     umount "$O/traces"
   fi
   echo "$passed $failed" >"$WORK/counts")
  read -r passed failed <"$WORK/counts"
else
  echo "skip full disk (ENOSPC): cannot mount a tmpfs here (not root); EFBIG covers the write errors"
fi

# --world times a huge batch: refused before multiplying (UBSan: signed overflow)
mkdir -p "$WORK/huge/small"
sed -e 's/batch: 32/batch: 4611686018427387904/' -e 's/  big: {}/  big: {parallel: {world: 2}}/' \
  "$WORK/small/scenario.yaml" >"$WORK/huge/small/scenario.yaml"
expect 2 "--world with a batch that would overflow" "$DLCHECK" run --world 3 "$WORK/huge/small"
contains "says it is out of range" "is out of range"

# ---- 6. signals and killed runs leave nothing behind -----------------------
for sig in INT TERM; do
  set -m # a background job of a script ignores SIGINT without job control
  DLCHECK_FAILPOINT=sleep_before_rename "$DLCHECK" record --golden-dir "$WORK/sig" "$WORK/small" >"$WORK/out" 2>&1 &
  pid=$!
  set +m
  for _ in $(seq 100); do compgen -G "$WORK/sig/small/cpu.h5.tmp.*" >/dev/null && break; sleep 0.05; done
  compgen -G "$WORK/sig/small/cpu.h5.tmp.*" >/dev/null && ok "SIG$sig: record is writing its temporary" ||
    bad "SIG$sig: no temporary to clean up"
  kill -$sig $pid
  wait $pid
  code=$?
  want=$((128 + $([ $sig = INT ] && echo 2 || echo 15)))
  [ "$code" -eq "$want" ] && ok "SIG$sig: exit $want" || bad "SIG$sig: exit $code, expected $want" "$WORK/out"
  contains "SIG$sig: says so" "stopped by SIG$sig"
  no_temporaries "SIG$sig: the temporary is removed" "$WORK/sig"
  [ -z "$(ls -A "$TMPDIR")" ] && ok "SIG$sig: the scratch folder is removed" || bad "SIG$sig: scratch left: $(ls "$TMPDIR")"
done
# kill -9 leaves them; the next run on the same target removes them
dead=$(dead_pid)
mkdir -p "$TMPDIR/dlcheck-$dead-AbCdEf"
touch "$TMPDIR/dlcheck-$dead-AbCdEf/run-model.h5" "$GOLDEN/small/cpu.h5.tmp.$dead.0"
O=$WORK/links
touch "$O/traces/small/pipeline/big.h5.tmp.$dead.3" "$O/traces/small/pipeline/big.h5.tmp.$$.3"
expect 0 "record after a killed one" "$DLCHECK" record --golden-dir "$GOLDEN" "$WORK/small"
expect 0 "run --out after a killed one" "$DLCHECK" run --golden-dir "$GOLDEN" --out "$O" "$WORK/small"
[ ! -e "$GOLDEN/small/cpu.h5.tmp.$dead.0" ] && [ ! -e "$O/traces/small/pipeline/big.h5.tmp.$dead.3" ] &&
  ok "stale temporaries of a dead PID removed" || bad "stale temporaries of a dead PID removed"
[ -e "$O/traces/small/pipeline/big.h5.tmp.$$.3" ] && ok "a live process's temporary is kept" ||
  bad "a live process's temporary is kept"
[ ! -e "$TMPDIR/dlcheck-$dead-AbCdEf" ] && ok "a dead run's scratch folder removed" ||
  bad "a dead run's scratch folder removed"

# ---- 4. FIFOs where files are expected: refused at once -----------------
mkfifo "$WORK/fifo.h5"
mkdir -p "$WORK/fifo_scenario/small" "$WORK/fifo_data/small" "$WORK/fifo_init/small"
mkfifo "$WORK/fifo_scenario/small/scenario.yaml"
sed "s|path: fixtures/digits.h5|path: $WORK/fifo.h5|" "$WORK/small/scenario.yaml" >"$WORK/fifo_data/small/scenario.yaml"
sed "s|  big: {}|  big: {init_weights: $WORK/fifo.h5}|" "$WORK/small/scenario.yaml" >"$WORK/fifo_init/small/scenario.yaml"
for what in "scenario.yaml:run $WORK/fifo_scenario/small" "data.path:run $WORK/fifo_data/small" \
    "init_weights:run $WORK/fifo_init/small" "compare A:compare $WORK/fifo.h5 $G" \
    "compare B:compare $G $WORK/fifo.h5" "env:env $WORK/fifo.h5" "golden:run --golden-dir $WORK/fg $WORK/small"; do
  name=${what%%:*}
  if [ "$name" = golden ]; then mkdir -p "$WORK/fg/small" && mkfifo "$WORK/fg/small/cpu.h5"; fi
  # shellcheck disable=SC2086
  expect 2 "a FIFO as $name is refused, not read" timeout $T "$DLCHECK" ${what#*:}
  contains "$name: says it is a FIFO" "it is a FIFO"
done

# ---- 5. what should be refused, and compare -----------------------------------
expect 2 "--golden-dir /dev/null is refused" "$DLCHECK" run --golden-dir /dev/null "$WORK/small"
contains "says it is not a folder" "is not a folder"
cp "$WORK/golden.orig" "$WORK/header.h5"
flip "$WORK/header.h5" 200
expect 2 "a flipped byte in the unused header is refused" "$DLCHECK" compare "$WORK/header.h5" "$G"
contains "naming the byte" "byte 200 of the 512-byte header is not zero"
P=$WORK/links/traces/small/pipeline
expect 0 "compare A B" "$DLCHECK" compare "$P/big.h5" "$G"
contains "names A first, then B" "pass: $P/big.h5 and $G agree"
contains "says what else it compared" "also compared: "
contains "and what it did not" "not compared: "
# a trace whose initial weights alone differ (h5py edit, resealed)
if /usr/bin/python3 -c "import h5py, xxhash" 2>/dev/null; then
  cp "$G" "$WORK/init.h5"
  PYTHONPATH=$ROOT/python /usr/bin/python3 - "$WORK/init.h5" <<'EOF'
import sys, h5py
from dlcheck import tracefile
p = sys.argv[1]
with h5py.File(p, "r+") as f:
    name = next(k for k in f["finals"] if k.startswith("init"))
    f["finals"][name][(0,) * f["finals"][name].ndim] += 1.0
tracefile.seal(p)
EOF
  expect 1 "initial weights that differ fail compare" "$DLCHECK" compare "$WORK/init.h5" "$G"
  contains "naming the initial tensor" "init/"
fi

finish
