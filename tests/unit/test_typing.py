"""The three layers and the testing package type-check under mypy --strict (run on the
installed names)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# mypy's cache is kept between runs in .mypy_cache/test_typing (gitignored): the
# dependencies' types are analysed once; the package is checked again where it changed.


def test_the_package_is_mypy_strict_clean(tmp_path: Path) -> None:
    if shutil.which("mypy") is None and subprocess.run(
        [sys.executable, "-m", "mypy", "--version"], capture_output=True
    ).returncode != 0:
        pytest.fail("mypy is part of the dev extra and must be installed")
    # The folders are installed as contextledger.<layer>: mirror that layout.
    package = tmp_path / "contextledger"
    package.mkdir()
    for layer in ("domain", "application", "infrastructure"):
        (package / layer).symlink_to(REPO / layer)
    (package / "testing").symlink_to(REPO / "src" / "contextledger" / "testing")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(REPO / "pyproject.toml"),
         "--explicit-package-bases", "--cache-dir", str(REPO / ".mypy_cache" / "test_typing"),
         "-p", "contextledger.domain", "-p", "contextledger.application", "-p", "contextledger.infrastructure",
         "-p", "contextledger.testing"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
