"""Every value a golden stores is compared, or documented as not compared.

Usage: golden_flips.py DLCHECK WORK GOLDEN.h5...

For each golden, changes one value of a dataset or attribute (the top byte
of a number's last element, the last character of a string), re-seals the
file (docs/trace-format.md section 3) and runs `dlcheck compare CHANGED
GOLDEN`, which must exit 1 or 2, never 0. Prints one "ok   ..." or "FAIL
..." line per golden and a last line "N changes, M silent".

Each dataset of each kind (every series, every final tensor, every
/stats/<k>, ...) is changed with FLIP_ALL=1; by default one of each kind,
chosen with FLIP_SEED (25), and no golden is started after FLIP_BUDGET_S
seconds (50; 0: no limit), which keeps the test near a minute: a dlcheck
start costs about 0.2 s here (the CUDA libraries it links), 1 s under
ASan. Goldens are taken in the order given (the test names first those of
issue 25: gpt_ckpt, gpt_accum, gpt_amp).

What is documented as not compared (docs/trace-format.md section 9, "What
is compared, and what is not") is left alone: NOT_COMPARED below.
"""

import os
import random
import re
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from dlcheck import tracefile  # noqa: E402  (the seal, as the recorder writes it)

# Attributes (and values) that compare lists as not compared, with the
# reason in docs/trace-format.md section 9.
NOT_COMPARED = {
    "@run", "@scenario", "@backend",  # labels: two machines, two names
    "@env_fingerprint",  # shown as what changed, never a difference
    "@recorded_at", "@dlcheck_version",  # when and by what, not what
    "@scenario_hash_hex",  # written for people, not read (scenario_hash is)
    "@golden_kind",  # read to find /envelope
    "notes/texts",  # free text for people (the command line, where it ran)
}
COLUMNS = re.compile(r"^stats/\d+/values@columns$")  # written, not read
MEMORY = re.compile(r"peak|bytes")  # metric values: how the run executed


def kind_of(path):
    """The class a dataset or attribute belongs to: series/*, finals/*, ..."""
    return re.sub(r"^(series|finals|stats|envelope/series)/[^/@]+", r"\1/*", path)


def targets(f):
    """(path, is_attribute) of every dataset and attribute, minus
    NOT_COMPARED."""
    out = [("@" + a, True) for a in f.attrs]

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out.append((name, False))
        out.extend((name + "@" + a, True) for a in obj.attrs)

    f.visititems(visit)
    return [(p, a) for p, a in out if p not in NOT_COMPARED and not COLUMNS.match(p)]


def changed_string(s):
    text = s.decode() if isinstance(s, bytes) else str(s)
    text = text[:-1] + chr(ord(text[-1]) ^ 1) if text else "x"
    return text.encode() if isinstance(s, bytes) else text


def which_element(f, path, flat):
    """The last element, but for metric values the last one compare
    compares (memory metrics' values are documented as not compared)."""
    if path != "metrics/values":
        return flat.size - 1
    listed = [n.decode() if isinstance(n, bytes) else n for n in f["metrics/names"][()]]
    usable = [i for i, n in enumerate(listed) if not MEMORY.search(n)]
    return usable[-1] if usable else None


def change(value, f, path):
    """value with one element changed, or None if it has none to change."""
    a = np.array(value)
    flat = a.reshape(-1).copy()
    if flat.size == 0:
        return None
    i = which_element(f, path, flat)
    if i is None:
        return None
    if flat.dtype.kind in "SOU":
        flat[i] = changed_string(flat[i])
    else:
        flat.view(np.uint8)[i * flat.itemsize + flat.itemsize - 1] ^= 0x40
    return flat.reshape(a.shape) if a.shape else flat[0]


def write_attribute(obj, name, new):
    """Rewrites attribute name with new, in its own type and shape."""
    aid = h5py.h5a.open(obj.id, name.encode())
    tid, space = aid.get_type(), aid.get_space()
    del aid
    h5py.h5a.delete(obj.id, name.encode())
    created = h5py.h5a.create(obj.id, name.encode(), tid, space)
    if isinstance(tid, h5py.h5t.TypeStringID) and tid.is_variable_str():
        data = np.array(new, dtype=h5py.string_dtype())
    else:
        data = np.array(new, dtype=tid.dtype)
    created.write(np.ascontiguousarray(data))


def apply(path, attribute, f):
    """Changes one value at path in the open file; False if none."""
    if attribute:
        where, name = path.rsplit("@", 1)
        obj = f[where] if where else f
        new = change(obj.attrs[name], f, path)
        if new is None:
            return False
        write_attribute(obj, name, new)
        return True
    ds = f[path]
    new = change(ds[()], f, path)
    if new is None:
        return False
    ds[...] = new
    return True


def main():
    dlcheck, work, goldens = sys.argv[1], sys.argv[2], sys.argv[3:]
    every = os.environ.get("FLIP_ALL") == "1"
    rng = random.Random(int(os.environ.get("FLIP_SEED", "25")))
    budget = float(os.environ.get("FLIP_BUDGET_S", "0" if every else "50"))
    start = time.monotonic()
    total = silent = 0
    for n, golden in enumerate(goldens):
        if budget and time.monotonic() - start > budget:
            print(f"(stopped after {n} of {len(goldens)} goldens: FLIP_BUDGET_S={budget:g})")
            break
        with h5py.File(golden, "r") as f:
            found = targets(f)
        if not every:  # one of each kind
            kinds = {}
            for t in found:
                kinds.setdefault(kind_of(t[0]), []).append(t)
            found = [rng.choice(group) for group in kinds.values()]
        quiet, tried = [], 0
        for path, attribute in found:
            copy = os.path.join(work, "changed.h5")
            shutil.copyfile(golden, copy)
            with h5py.File(copy, "r+") as f:
                if not apply(path, attribute, f):
                    continue
            tracefile.seal(copy)
            r = subprocess.run([dlcheck, "compare", copy, golden], capture_output=True, text=True)
            tried += 1
            if r.returncode not in (1, 2):
                quiet.append(f"{path} (exit {r.returncode})")
        total += tried
        silent += len(quiet)
        print(("FAIL " if quiet else "ok   ") + f"{golden}: {tried} changes, {len(quiet)} silent" +
              "".join("\n     " + q for q in quiet))
    print(f"{total} changes, {silent} silent")


main()
