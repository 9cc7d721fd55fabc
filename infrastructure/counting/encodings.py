"""The tiktoken encodings the library counts with, shipped with the package.

tiktoken downloads an encoding's BPE ranks on first use. contextledger ships the two it
uses (``o200k_base``, ``cl100k_base``) in ``contextledger/infrastructure/counting/bpe/``: the
files OpenAI publishes, byte for byte, checked at load against the SHA-256 tiktoken
itself expects of them. They are built into a ``tiktoken.Encoding`` with the pattern and
special tokens of tiktoken's own constructors, so counts are those of
``tiktoken.get_encoding``; nothing is downloaded.

Where an encoding comes from, first match wins:

1. ``TIKTOKEN_CACHE_DIR``, when it is set and holds the file under tiktoken's own cache
   name (the SHA-1 of its download address);
2. the file shipped with the package;
3. for an encoding not shipped: ``tiktoken.get_encoding`` (its cache, else a download).

A file whose contents do not match, or one that cannot be read, is a
``ConfigurationError`` naming ``TIKTOKEN_CACHE_DIR``; nothing is guessed.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import tiktoken

from contextledger.domain.values.errors import ConfigurationError

__all__ = [
    "SHIPPED",
    "SHIPPED_DIR",
    "ShippedEncoding",
    "cache_file_name",
    "check_encoding_files",
    "load_encoding",
]

#: The folder of the shipped BPE files (package data).
SHIPPED_DIR = Path(__file__).resolve().parent / "bpe"

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/"


@dataclass(frozen=True)
class ShippedEncoding:
    """One shipped encoding: where tiktoken downloads it, its checksum, how it splits."""

    name: str
    url: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]

    @property
    def file_name(self) -> str:
        """The shipped file's name in ``SHIPPED_DIR``."""
        return f"{self.name}.tiktoken"


#: As ``tiktoken_ext.openai_public`` defines them (tiktoken 0.7 to 0.14 agree), with the
#: ``expected_hash`` tiktoken checks a downloaded file against.
SHIPPED: dict[str, ShippedEncoding] = {
    "o200k_base": ShippedEncoding(
        name="o200k_base",
        url=_BLOB + "o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    "cl100k_base": ShippedEncoding(
        name="cl100k_base",
        url=_BLOB + "cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}

_HINT = (
    "set TIKTOKEN_CACHE_DIR to a folder holding tiktoken's cached encoding files "
    "(named as tiktoken names them), or reinstall contextledger"
)


def cache_file_name(url: str) -> str:
    """The name tiktoken gives a downloaded file in its cache folder."""
    return hashlib.sha1(url.encode()).hexdigest()


def load_encoding(name: str, directory: str | os.PathLike[str] | None = None) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, with no download for a shipped one.

    ``directory``: a folder laid out as ``SHIPPED_DIR`` (``<name>.tiktoken``) to load
    from instead of the usual places (tests, vendored copies)."""
    shipped = SHIPPED.get(name)
    if shipped is None:
        return _from_tiktoken(name)
    path = _source(shipped, directory)
    data = _checked(shipped, path)
    return tiktoken.Encoding(
        name=shipped.name,
        pat_str=shipped.pat_str,
        mergeable_ranks=_ranks(data, path),
        special_tokens=dict(shipped.special_tokens),
    )


def check_encoding_files() -> list[Path]:
    """Read and checksum the file each shipped encoding would be loaded from (a quick
    start-up check: no ranks are parsed); a ``ConfigurationError`` if one is unusable."""
    checked = []
    for shipped in SHIPPED.values():
        path = _source(shipped, None)
        _checked(shipped, path)
        checked.append(path)
    return checked


def _source(shipped: ShippedEncoding, directory: str | os.PathLike[str] | None) -> Path:
    if directory is not None:
        return Path(directory) / shipped.file_name
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if cache_dir:
        cached = Path(cache_dir) / cache_file_name(shipped.url)
        if cached.exists():
            return cached
    return SHIPPED_DIR / shipped.file_name


def _checked(shipped: ShippedEncoding, path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the tiktoken encoding {shipped.name!r} from {path}: {exc}; {_HINT}",
            encoding=shipped.name,
        ) from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != shipped.sha256:
        raise ConfigurationError(
            f"the tiktoken encoding file {path} is corrupt: its SHA-256 is {actual}, not "
            f"{shipped.sha256} as published for {shipped.name!r}; {_HINT}",
            encoding=shipped.name,
        )
    return data


def _ranks(data: bytes, path: Path) -> dict[bytes, int]:
    """The mergeable ranks of a ``.tiktoken`` file, parsed as ``tiktoken.load.load_tiktoken_bpe``
    parses one (one ``base64-token rank`` pair a line)."""
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as exc:
            raise ConfigurationError(
                f"cannot parse line {line[:60]!r} of {path}; {_HINT}", encoding=path.stem
            ) from exc
    return ranks


def _from_tiktoken(name: str) -> tiktoken.Encoding:
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # network, cache and hash errors all mean "cannot load"
        raise ConfigurationError(
            f"cannot load the tiktoken encoding {name!r} (not shipped with contextledger, and "
            f"tiktoken could not download it): set TIKTOKEN_CACHE_DIR to a folder holding "
            f"tiktoken's cached encoding files: {type(exc).__name__}: {exc}",
            encoding=name,
        ) from exc
