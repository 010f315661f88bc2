"""Where this package comes from: its version, which is the C tool's
(`project(dlcheck VERSION ...)` in the repository's CMakeLists.txt, read
by the wheel's build and by `dlcheck --version`), and the `dlcheck`
executable the wheel ships as one of its scripts (pip puts it in the
environment's bin/)."""
from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path
from typing import Optional

PACKAGE_DIR = Path(__file__).resolve().parent
CMAKE_VERSION = re.compile(r"project\(dlcheck VERSION ([0-9]+\.[0-9]+\.[0-9]+)")
UNKNOWN_VERSION = "0+unknown"


def distribution() -> Optional[metadata.Distribution]:
    """The installed distribution this very package was imported from;
    None when it runs from a source tree (PYTHONPATH=python), also when
    another copy of dlcheck is installed beside it."""
    try:
        dist = metadata.distribution("dlcheck")
    except metadata.PackageNotFoundError:
        return None
    here = Path(str(dist.locate_file("dlcheck"))).resolve()
    return dist if here == PACKAGE_DIR else None


def tree_version(root: Path = PACKAGE_DIR.parent.parent) -> Optional[str]:
    """The version in root/CMakeLists.txt, for a package run from the tree."""
    try:
        text = (root / "CMakeLists.txt").read_text(encoding="utf-8")
    except OSError:
        return None
    match = CMAKE_VERSION.search(text)
    return match.group(1) if match else None


def version() -> str:
    """The installed package's version, else the tree's, else 0+unknown."""
    dist = distribution()
    if dist is not None:
        return dist.version
    return tree_version() or UNKNOWN_VERSION


def bundled_binary() -> Optional[str]:
    """The dlcheck executable installed with this package (a script of its
    wheel, in the environment's bin/), or None."""
    dist = distribution()
    for entry in (dist.files or []) if dist is not None else []:
        if entry.name == "dlcheck" and entry.parent.name in ("bin", "scripts"):
            path = os.path.normpath(str(entry.locate()))
            if os.access(path, os.X_OK):
                return path
    return None
