"""Commands killed outright (SIGKILL), for test_reliability.sh.

Usage: killed.py DLCHECK WORK. WORK holds the scenarios slow (about a
second of recording) and small; $TMPDIR is where dlcheck makes its scratch
folders. Kills each command without waiting for it, as a CI harness does
(the killed process stays a zombie until waited for), runs the next
command and prints one "ok   NAME" or "FAIL NAME" line per check, with what
was left below a FAIL. KILL_SEED chooses the random kill points (25).
"""

import glob
import os
import random
import subprocess
import sys
import time

dlcheck, work = sys.argv[1], sys.argv[2]
tmp, golden, out = os.environ["TMPDIR"], work + "/kg", work + "/ko"
quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def left(pid, *dirs):
    """The scratch folder and the temporaries below dirs of process pid."""
    found = glob.glob(f"{tmp}/dlcheck-{pid}-*")
    for d in dirs:
        found += glob.glob(f"{d}/**/*.tmp.{pid}.*", recursive=True)
    return found


def report(name, found):
    print(("ok   " if not found else "FAIL ") + name + "".join("\n     " + f for f in found))


def start(args, failpoint=None):
    env = dict(os.environ)
    if failpoint:
        env["DLCHECK_FAILPOINT"] = failpoint
    return subprocess.Popen([dlcheck] + args, env=env, **quiet)


def until(pattern):
    """Waits (30 s at most) for the temporary a failpoint holds open."""
    for _ in range(600):
        if glob.glob(pattern, recursive=True):
            return
        time.sleep(0.05)


random.seed(int(os.environ.get("KILL_SEED", "25")))
points = [0.05, 0.15, 0.3] + [round(random.uniform(0.02, 0.6), 3) for _ in range(2)]
killed = []
# A record killed at some point; then a command that writes nothing, then
# one that writes into the same golden folder.
for t in points:
    p = start(["record", "--golden-dir", golden, work + "/slow"])
    time.sleep(t)
    p.kill()
    killed.append(p)
    subprocess.run([dlcheck, "list"], **quiet)
    report(f"record killed after {t} s: `list` removes its scratch folder", left(p.pid))
    subprocess.run([dlcheck, "record", "--golden-dir", golden, work + "/small"], **quiet)
    report(f"record killed after {t} s: the next record removes its temporaries",
           left(p.pid, golden))
# Killed while its temporary exists; the next command writes other targets
# into the same folder.
for what, args, where in [("record", ["record", "--golden-dir", golden], golden),
                          ("run --out", ["run", "--golden-dir", golden, "--out", out], out)]:
    p = start(args + [work + "/slow"], "sleep_before_rename")
    until(f"{where}/**/*.tmp.{p.pid}.*")
    before = len(left(p.pid, where))
    p.kill()
    killed.append(p)
    subprocess.run([dlcheck] + args + [work + "/small"], **quiet)
    report(f"{what} killed at its rename ({before} files left): the next {what} removes them",
           left(p.pid, where))
for p in killed:
    p.wait()
