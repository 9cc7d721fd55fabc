"""The first run on a machine with no network and nothing prepared: no
TIKTOKEN_CACHE_DIR, an empty home and temporary folder, every download refused at once
(a proxy on a closed local port). Token counting works from the encodings shipped with
the package; when an encoding truly cannot be loaded, the demo and the test suite stop
at once, in one line saying what to set."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from contextledger.infrastructure.counting.encodings import SHIPPED, SHIPPED_DIR, cache_file_name

REPO = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a machine that cannot download and has nothing prepared."""
    dropped = ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR", "OPENAI_API_KEY", "NO_PROXY", "no_proxy",
               "XDG_CACHE_HOME")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("CONTEXTLEDGER_")}
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    proxy = f"http://127.0.0.1:{closed_port()}"
    env.update(HOME=str(home), TMPDIR=str(tmp), HTTPS_PROXY=proxy, HTTP_PROXY=proxy,
               https_proxy=proxy, http_proxy=proxy, **extra)
    return env


def corrupt_tiktoken_cache(folder: Path) -> Path:
    """A tiktoken cache folder whose o200k_base file is damaged (one bit flipped)."""
    folder.mkdir()
    shipped = SHIPPED["o200k_base"]
    data = bytearray((SHIPPED_DIR / shipped.file_name).read_bytes())
    data[100] ^= 0x01
    (folder / cache_file_name(shipped.url)).write_bytes(bytes(data))
    return folder


def test_the_network_is_really_unreachable_here(tmp_path: Path) -> None:
    """The environment above refuses downloads: an encoding that is not shipped cannot
    be had, and says what to set."""
    code = ("from contextledger.infrastructure.counting.encodings import load_encoding\n"
            "from contextledger.domain.values.errors import ConfigurationError\n"
            "try:\n    load_encoding('p50k_base')\n"
            "except ConfigurationError as e:\n    print('ERR', e)\n")
    done = subprocess.run([sys.executable, "-c", code], env=offline_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("ERR") and "TIKTOKEN_CACHE_DIR" in done.stdout, done.stdout + done.stderr


def test_tokens_are_counted_with_no_network_and_nothing_prepared(tmp_path: Path) -> None:
    code = ("import contextledger as cl\n"
            "print(cl.TiktokenCounter('gpt-4o').count_text('hello world'),"
            " cl.TiktokenCounter('gpt-4').count_text('hello world'))\n")
    done = subprocess.run([sys.executable, "-c", code], env=offline_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "2"]
    assert list((tmp_path / "home").iterdir()) == [] and list((tmp_path / "tmp").iterdir()) == []


def test_the_demo_runs_with_no_network_and_nothing_prepared(tmp_path: Path) -> None:
    env = offline_env(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "contextledger.infrastructure.cli", "demo", "--database", "sqlite:///d.db",
         "--messages", "30", "--json", "--chart", "-"],
        cwd=run, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verify"] == "OK" and report["messages"] >= 30
    assert list((tmp_path / "tmp").iterdir()) == []  # no tiktoken download cache either


def test_the_demo_stops_in_one_line_before_writing_when_an_encoding_is_unusable(tmp_path: Path) -> None:
    cache = corrupt_tiktoken_cache(tmp_path / "cache")
    run = tmp_path / "run"
    run.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "contextledger.infrastructure.cli", "demo", "--messages", "30"],
        cwd=run, env=offline_env(tmp_path, TIKTOKEN_CACHE_DIR=str(cache)),
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "TIKTOKEN_CACHE_DIR" in lines[0] and "corrupt" in lines[0], done.stderr
    assert list(run.iterdir()) == []  # nothing half-written


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_test_suite_stops_at_once_in_one_line_when_an_encoding_is_unusable(
    tmp_path: Path, workers: list[str]
) -> None:
    cache = corrupt_tiktoken_cache(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, "tests/unit/test_errors.py"],
        cwd=REPO, env=offline_env(tmp_path, TIKTOKEN_CACHE_DIR=str(cache)),
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    for stream in (done.stdout, done.stderr):
        lines = stream.strip().splitlines()
        assert len(lines) == 1 and "TIKTOKEN_CACHE_DIR" in lines[0], stream
    assert "passed" not in done.stdout and "INTERNALERROR" not in done.stdout + done.stderr
