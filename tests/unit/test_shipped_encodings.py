"""The tiktoken encodings shipped with the package: tiktoken's own encodings, byte for
byte and token for token, checked at load; a damaged file is a typed error that names
TIKTOKEN_CACHE_DIR, never a guess."""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.domain.values.errors import ConfigurationError
from contextledger.infrastructure.counting.encodings import (
    SHIPPED,
    SHIPPED_DIR,
    cache_file_name,
    check_encoding_files,
    load_encoding,
)
from tests.conftest import CORPORA

REPO = Path(__file__).resolve().parents[2]
NAMES = sorted(SHIPPED)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[tiktoken.Encoding, tiktoken.Encoding]]]:
    """Each shipped encoding loaded from the package's files, next to the one
    ``tiktoken.get_encoding`` builds from the same files laid out as its cache (tiktoken
    checks each against its own published SHA-256 and uses its own constructors)."""
    cache = tmp_path_factory.mktemp("tiktoken-cache")
    for shipped in SHIPPED.values():
        shutil.copyfile(SHIPPED_DIR / shipped.file_name, cache / cache_file_name(shipped.url))
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        yield {name: (load_encoding(name, SHIPPED_DIR), tiktoken.get_encoding(name)) for name in NAMES}
    finally:
        if before is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = before


def corpus_texts(limit: int = 400) -> list[str]:
    """Message texts and tool arguments of the shared corpora, when they are here."""
    texts: list[str] = []
    for path in sorted(CORPORA.glob("*/*.jsonl")):
        with path.open(encoding="utf-8") as lines:
            for n, line in enumerate(lines):
                if n >= limit // 4:
                    break
                for message in json.loads(line).get("messages", []):
                    if isinstance(message.get("content"), str):
                        texts.append(message["content"])
                    for call in message.get("tool_calls") or []:
                        texts.append(call["function"]["arguments"])
    return texts


FIXED = [
    "", "hello world", "<|endoftext|> is plain text here", "a <|im_start|> b", "é" * 40,
    "日本語のテキストと emoji 🎉🎉", "def f(x):\n\treturn x ** 2  # code\r\n", " " * 17 + "\n\n\n",
    "1234567890" * 5, "It's they're we've I'M YOU'LL", "ÀÉÎÕÜ ß ﬁ ﬀ", "\u200b\u200d zero width",
]


@pytest.mark.parametrize("name", NAMES)
def test_the_shipped_encoding_is_tiktokens_own(
    name: str, pairs: dict[str, tuple[tiktoken.Encoding, tiktoken.Encoding]]
) -> None:
    ours, theirs = pairs[name]
    assert ours.name == theirs.name == name
    assert ours._pat_str == theirs._pat_str
    assert ours._special_tokens == theirs._special_tokens
    assert ours._mergeable_ranks == theirs._mergeable_ranks
    assert ours.n_vocab == theirs.n_vocab


@pytest.mark.parametrize("name", NAMES)
def test_corpus_text_encodes_as_tiktoken_encodes_it(
    name: str, pairs: dict[str, tuple[tiktoken.Encoding, tiktoken.Encoding]]
) -> None:
    ours, theirs = pairs[name]
    texts = FIXED + corpus_texts()
    mismatched = [t for t in texts if ours.encode(t, disallowed_special=()) != theirs.encode(t, disallowed_special=())]
    assert mismatched == []
    assert ours.encode_ordinary("hello world") == {"o200k_base": [24912, 2375], "cl100k_base": [15339, 1917]}[name]


@settings(max_examples=200, deadline=None)
@given(text=st.text() | st.text(alphabet=st.characters(codec="utf-8"), min_size=50, max_size=400))
def test_any_text_encodes_as_tiktoken_encodes_it(
    text: str, pairs: dict[str, tuple[tiktoken.Encoding, tiktoken.Encoding]]
) -> None:
    for ours, theirs in pairs.values():
        assert ours.encode(text, disallowed_special=()) == theirs.encode(text, disallowed_special=())


def _copy_of_the_shipped_files(tmp_path: Path) -> Path:
    folder = tmp_path / "bpe"
    shutil.copytree(SHIPPED_DIR, folder)
    return folder


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", NAMES)
def test_a_corrupted_shipped_file_is_a_configuration_error_naming_tiktoken_cache_dir(
    name: str, tmp_path: Path
) -> None:
    folder = _copy_of_the_shipped_files(tmp_path)
    assert load_encoding(name, folder).encode_ordinary("hello") != []  # the copy itself loads
    _corrupt(folder / SHIPPED[name].file_name)
    with pytest.raises(ConfigurationError) as caught:
        load_encoding(name, folder)
    message = str(caught.value)
    assert "TIKTOKEN_CACHE_DIR" in message and "corrupt" in message and SHIPPED[name].sha256 in message
    assert caught.value.context["encoding"] == name


def test_a_missing_shipped_file_is_a_configuration_error_naming_tiktoken_cache_dir(tmp_path: Path) -> None:
    folder = _copy_of_the_shipped_files(tmp_path)
    (folder / SHIPPED["o200k_base"].file_name).unlink()
    with pytest.raises(ConfigurationError, match="TIKTOKEN_CACHE_DIR"):
        load_encoding("o200k_base", folder)
    assert load_encoding("cl100k_base", folder).name == "cl100k_base"


def test_tiktoken_cache_dir_wins_when_it_holds_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = SHIPPED["o200k_base"]
    cached = tmp_path / cache_file_name(shipped.url)
    shutil.copyfile(SHIPPED_DIR / shipped.file_name, cached)
    _corrupt(cached)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(ConfigurationError, match="TIKTOKEN_CACHE_DIR") as caught:
        check_encoding_files()
    assert str(cached) in str(caught.value)  # the folder asked for is read, not the shipped file
    cached.unlink()  # a folder without the file: the shipped one, nothing downloaded
    assert check_encoding_files() == [SHIPPED_DIR / s.file_name for s in SHIPPED.values()]


def test_the_shipped_files_are_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["contextledger.infrastructure.counting"]
    for shipped in SHIPPED.values():
        relative = f"{SHIPPED_DIR.name}/{shipped.file_name}"
        assert (REPO / "infrastructure" / "counting" / relative).is_file()
        assert any(fnmatch(relative, pattern) for pattern in patterns), relative
