"""Goldens whose object headers are damaged and re-sealed.

Usage: damaged_headers.py GOLDEN.h5 OUT_DIR

For each of a few objects of the golden (a group, a series, the digests,
a stats group), writes OUT_DIR/<object>.h5: a copy with one byte flipped
inside that object's header, re-sealed (docs/trace-format.md section 3),
so that the seal passes and HDF5 meets a header whose own checksum fails.
HDF5 1.10.8 loses memory there (its metadata cache, H5C_protect) and its
exit handler then prints "infinite loop closing library": dlcheck must
refuse such a file with exit 2 and its own message only. Prints the paths
written, one per line.
"""

import os
import sys

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from dlcheck import tracefile  # noqa: E402  (the seal, as the recorder writes it)

OBJECTS = ["series", "series/loss", "digests/values", "stats/0"]
USER_BLOCK = 512  # HDF5 addresses count from the superblock, after it


def main():
    golden, out = sys.argv[1], sys.argv[2]
    with h5py.File(golden, "r") as f:
        where = {name: h5py.h5o.get_info(f[name].id).addr for name in OBJECTS}
    original = open(golden, "rb").read()
    for name, addr in where.items():
        data = bytearray(original)
        at = USER_BLOCK + addr
        if data[at:at + 4] != b"OHDR":  # a version 2 object header
            sys.exit(f"{golden}:/{name}: no object header at {at}")
        data[at + 6] ^= 0x10  # inside the header, past its signature and version
        path = os.path.join(out, name.replace("/", "_") + ".h5")
        with open(path, "wb") as f:
            f.write(data)
        tracefile.seal(path)
        print(path)


main()
