"""What encryption at rest costs the ledger: no cipher, one store key, per-subject keys.

    .venv/bin/python benchmarks/encryption.py \\
        [--runs 7] [--conversations 6] [--cold 40] [--contexts 200] [--stores sqlite,postgres]

Configurations, each on its own store (a SQLite file; a schema of its own in
PostgreSQL's database ``test``), all measured in one run:

- *none*: no encryption at all: no ``cipher_key`` and ``key_scope="store"`` (with the
  default ``key_scope="subject"`` a store without a cipher key still encrypts every
  event under an unwrapped per-subject data key: not a baseline);
- *store key*: ``cipher_key`` with ``key_scope="store"`` (every record under the one key,
  OpenSSL AES-GCM);
- *per-subject*: ``cipher_key`` with the default ``key_scope="subject"`` (a data key per
  conversation, wrapped in the store's key table);
- *pycryptodome*: eventsourcing's ``AESCipher`` as ``CIPHER_TOPIC`` under the one key
  (what stores were written with before the OpenSSL cipher).

Workload: tau-bench airline conversations (``../shared/corpora/tools``; a system prompt,
then user, assistant, tool-call and tool messages), each started and appended one
message per call. Each store first gets ``--cold`` conversations (not timed); then
``--runs`` rounds, in each of which every configuration, in an order rotated from round
to round, does in turn:

- *append*: ``--conversations`` more conversations, ``start`` and every ``append``
  timed, µs per message (the start counts as one: it makes the subject's key), and the
  starts alone, ms per conversation;
- *context()*: ``--contexts`` calls over the ledger's conversations, warm, µs per call;
- *cold load*: a new ``Ledger`` on the same store (empty caches: conversations, keys),
  then ``context()`` of ``--cold`` conversations, ms per conversation (the open is not
  counted);
- *rebuild*: all four read models in one pass (what ``contextledger rebuild`` runs),
  events of the log per second.

The table shows the medians over the rounds, and the ratios of per-subject keys to no
encryption and to the store key, whose targets are: append and ``context()`` at most 1.3x
the unencrypted path, cold load at most 1.1x. Writes its section of docs/benchmarks.md
(``encryption``) and prints it.

``--first`` measures a conversation's first write against its later ones instead: in each
round every configuration, in turn, starts ``--conversations`` conversations and appends
five messages to each; each call timed on its own (wall and CPU). With per-subject keys
the first write (``start``) makes the subject's key: its row is written with the
``Started`` record, in its transaction on SQLite and in its statement on PostgreSQL
(``infrastructure/keys/new_keys.py``, ``infrastructure/persistence/pgkeyrows.py``); the store
key's start, which makes no key, shows what a start costs beside an append anyway. It
writes its own section (``first-write``); target: first at most 1.3x a later append.

``--fence`` measures the write fence instead (``infrastructure/keys/key_fence.py``): per-subject
keys with the fence (each insert checks, and on PostgreSQL key-share-locks, the key rows its
records name) against the same configuration with the recorder's fence taken off, the
*append* step only, in rounds alternating which goes first; it writes its own section
(``write-fence``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encryption_measure import (
    CONFIGS,
    NONE,
    POSTGRES,
    STORE,
    SUBJECT,
    UNFENCED,
    Config,
    Contender,
    measure,
    measure_first,
)
from encryption_report import fence_report, first_report, report
from sections import write_section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--conversations", type=int, default=6, help="conversations appended per round")
    parser.add_argument("--cold", type=int, default=40, help="conversations loaded cold (and filled first)")
    parser.add_argument("--contexts", type=int, default=200, help="warm context() calls per round")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave the docs alone")
    parser.add_argument(
        "--fence", action="store_true", help="the write fence against none, on append (its own section)"
    )
    parser.add_argument(
        "--first",
        action="store_true",
        help="a conversation's first write against later appends (own section)",
    )
    args = parser.parse_args()
    configs = (SUBJECT, UNFENCED) if args.fence else (SUBJECT, STORE, NONE) if args.first else CONFIGS
    load_start, began = os.getloadavg(), time.perf_counter()
    results: dict[str, list[Contender]] = {}
    firsts: dict[str, dict[Config, dict[str, list[float]]]] = {}
    with tempfile.TemporaryDirectory() as work:
        for store in args.stores.split(","):
            print(store, file=sys.stderr)
            if store == "sqlite":
                urls = {c: f"sqlite:///{work}/{i}.db" for i, c in enumerate(configs)}
                if args.first:
                    firsts["SQLite file"] = measure_first(urls, args)
                else:
                    results["SQLite file"] = measure(store, urls, args)
                continue
            schemas = {c: f"bench_cipher_{uuid.uuid4().hex[:8]}" for c in configs}
            with psycopg.connect(POSTGRES, autocommit=True) as admin:
                for schema in schemas.values():
                    admin.execute(f'CREATE SCHEMA "{schema}"')
            try:
                urls = {c: f"{POSTGRES}?schema={s}" for c, s in schemas.items()}
                if args.first:
                    firsts["PostgreSQL"] = measure_first(urls, args)
                else:
                    results["PostgreSQL"] = measure(store, urls, args)
            finally:
                with psycopg.connect(POSTGRES, autocommit=True) as admin:
                    for schema in schemas.values():
                        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    command = ".venv/bin/python benchmarks/encryption.py "
    command += " ".join(sys.argv[1:])
    if args.first:
        lines = first_report(firsts, args, command.strip(), load_start, time.perf_counter() - began)
        title, section = "## A conversation's first write (benchmarks/encryption.py --first)", "first-write"
    elif args.fence:
        lines = fence_report(results, args, command.strip(), load_start, time.perf_counter() - began)
        title, section = "## The write fence of erasure (benchmarks/encryption.py --fence)", "write-fence"
    else:
        lines = report(results, args, command.strip(), load_start, time.perf_counter() - began)
        title, section = "## Encryption at rest: per-subject keys (benchmarks/encryption.py)", "encryption"
    print("\n".join(lines))
    if not args.no_write:
        write_section(section, [title, "", *lines])


if __name__ == "__main__":
    main()
