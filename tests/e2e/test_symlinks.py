"""A clone without symbolic links builds the same package.

``src/contextledger/{domain,application,infrastructure}`` are symbolic links to the
top-level folders. A clone made with ``core.symlinks=false`` (the default of Git for
Windows without developer mode) has small text files in their place; ``setup.py``
then maps the layers to their folders itself. Both clones must build a wheel with the
very same files.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "application", "infrastructure")


def _clone(dest: Path, *, symlinks: bool) -> Path:
    subprocess.run(
        [
            "git",
            "-c",
            f"core.symlinks={'true' if symlinks else 'false'}",
            "clone",
            "-q",
            "--no-hardlinks",
            str(REPO),
            str(dest),
        ],
        check=True,
    )
    # The working tree's own files, committed or not, so the test checks this tree.
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "setup.py", "pyproject.toml", "src", *LAYERS],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in tracked:
        source, target = REPO / name, dest / name
        if source.is_symlink() or not source.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    return dest


def _wheel_files(source: Path, out: Path) -> list[str]:
    # The build backend that pyproject.toml names, called as a build front end (pip
    # wheel) calls it, in a process of its own in the clone, without build isolation:
    # the setuptools and wheel of this environment (the dev extra installs them), so
    # no package index is needed; without pip's own start-up around the same hook.
    backend = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))["build-system"][
        "build-backend"
    ]
    out.mkdir(parents=True, exist_ok=True)
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib, sys; importlib.import_module(sys.argv[1]).build_wheel(sys.argv[2])",
            backend,
            str(out),
        ],
        cwd=source,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, (
        f"building the wheel ({backend}) failed; it builds with this environment's setuptools>=68 "
        f"and wheel (pip install -e '.[dev]' installs them):\n{built.stderr[-3000:]}"
    )
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return sorted(n for n in zf.namelist() if n.startswith("contextledger/"))


def test_a_clone_without_symlinks_builds_the_same_wheel(tmp_path: Path) -> None:
    plain = _clone(tmp_path / "plain", symlinks=False)
    for layer in LAYERS:  # what such a clone holds in place of each link
        stand_in = plain / "src" / "contextledger" / layer
        assert stand_in.is_file() and not stand_in.is_symlink()
        assert stand_in.read_text().strip() == f"../../{layer}"
    linked = _clone(tmp_path / "linked", symlinks=True)
    assert (linked / "src" / "contextledger" / "domain").is_symlink()

    without = _wheel_files(plain, tmp_path / "dist-plain")
    with_links = _wheel_files(linked, tmp_path / "dist-linked")
    assert without == with_links
    for expected in (
        "contextledger/domain/events.py",
        "contextledger/application/facade/ledger.py",
        "contextledger/application/projections/runner.py",
        "contextledger/infrastructure/counting/bpe/o200k_base.tiktoken",
        "contextledger/infrastructure/web/templates/base.html",
    ):
        assert expected in without
