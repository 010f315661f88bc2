"""dlcheck.installation: one version with the C tool (the root
CMakeLists.txt's, or the installed distribution's), and the executable
the wheel installs, found through the distribution's file list. An
installed distribution is faked with a dist-info folder whose package
links back to this tree's."""
from __future__ import annotations

from pathlib import Path

import pytest

import dlcheck
from dlcheck import installation
from dlcheck.audit.harness import find_binary

ROOT = Path(__file__).resolve().parents[2]


def test_from_the_tree_the_version_is_the_cmake_projects() -> None:
    assert installation.distribution() is None and installation.bundled_binary() is None
    assert dlcheck.__version__ == installation.tree_version(ROOT) == installation.version()
    assert f'project(dlcheck VERSION {dlcheck.__version__} ' in (ROOT / "CMakeLists.txt").read_text()


def test_tree_version_without_a_project_line(tmp_path: Path) -> None:
    assert installation.tree_version(tmp_path) is None
    (tmp_path / "CMakeLists.txt").write_text("project(other VERSION 1.0.0)\n")
    assert installation.tree_version(tmp_path) is None


def fake_install(tmp_path: Path, package: Path, version: str = "9.8.7") -> Path:
    """site/dlcheck -> package, site/dlcheck-VERSION.dist-info listing bin/dlcheck."""
    site, bin_dir = tmp_path / "lib" / "site", tmp_path / "bin"
    info = site / f"dlcheck-{version}.dist-info"
    info.mkdir(parents=True)
    bin_dir.mkdir()
    (site / "dlcheck").symlink_to(package)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: dlcheck\nVersion: {version}\n")
    (info / "RECORD").write_text("dlcheck/__init__.py,,\n../../bin/dlcheck,,\n")
    exe = bin_dir / "dlcheck"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return site


def test_an_installed_package_reads_its_distribution(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(fake_install(tmp_path, installation.PACKAGE_DIR)))
    monkeypatch.delenv("DLCHECK_BIN", raising=False)
    assert installation.version() == "9.8.7"
    assert installation.bundled_binary() == str(tmp_path / "bin" / "dlcheck")
    assert find_binary() == str(tmp_path / "bin" / "dlcheck")
    monkeypatch.setenv("DLCHECK_BIN", "/bin/true")  # still overrides
    assert find_binary() == "/bin/true"
    (tmp_path / "bin" / "dlcheck").chmod(0o644)
    assert installation.bundled_binary() is None


def test_another_installed_copy_is_not_this_package(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.syspath_prepend(str(fake_install(tmp_path, other)))
    assert installation.distribution() is None
    assert installation.version() == dlcheck.__version__
