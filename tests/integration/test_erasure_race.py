"""Erasure raced by other processes, on a SQLite file and on PostgreSQL.

Three appender processes append, extend, edit, retract and fork conversations of
three data subjects (``victim``, ``s1``, ``s2``; a fork of a victim's conversation
given subject ``s1`` among them), a worker process keeps the read models and makes
summaries (the policy), and an eraser process erases ``victim`` while they run. Each
write records when it was called, when it returned and how. Afterwards:

- no write to the victim returned after ``erase`` did, and every one called after it
  was refused (``ConversationErasedError``); some were acknowledged before it and
  some refused after it, so the race happened;
- no record of the victim stands in the log after its ``ContentErased``: the worker's
  summaries included;
- the read models hold no row of the victim's conversations and no victim text;
- every acknowledged write of the other subjects is in their transcripts, once, and
  every other conversation verifies (the fork whose source was erased included).

Each store runs the race twice: with the key table in the store, and in a key store of
its own (``Settings.key_store``: another SQLite file, another PostgreSQL database),
whose write fence works otherwise (``infrastructure/keys/key_store.py``).

The processes are forked from one (``_racers``) that comes from the forkserver, which
imported the package and loaded the token encodings once (tests/support/processes.py):
every writer and the worker counts tokens, and loading the encoding in each took more
CPU than its part of the race. Each is still a process of
its own, with its own ledger.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import select

import contextledger as cl
from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.application.following.notifications import read_notifications
from contextledger.domain.erasure import ContentErased, ErasedEvent
from contextledger.infrastructure.readmodels import SQLReadModels
from tests.support.processes import process_context, run_all

APPENDERS = 3
VICTIM = "victim"
MARK = "qx-victim-text-77f1"
POLICY = ReductionPolicy(trigger_messages=8, keep_messages=3, max_summary_tokens=200)
#: Rounds (once over all of its conversations) the appenders complete before the
#: erasure starts: that many per appender on average, at least one each (every
#: appender is in the race before it). By then the fastest appender has made every
#: kind of write on every conversation (an edit in round 2, a retraction in 3, a fork
#: in 4, an extension in 5: ``_kind``) and the conversations are past the policy's
#: trigger (18 rounds together: about 15 messages each, the trigger is 8), so the
#: worker is summarizing while the erasure runs. It was 10: the rounds past the sixth
#: made no other kind of write, only a longer log to race on and check.
#:
#: After the erasure returned, each appender completes a round (it meets the erased
#: conversations), and among them the appenders make each kind of write once more
#: (``_after_every_kind``): it was 9 rounds each on average, so that the fastest made
#: every kind in its nine or more; the kinds counted reach the same writes in fewer
#: rounds. Counted, not timed: the race is the same on a busy machine.
ROUNDS_BEFORE = 6
#: The kind of write of every round number, in the order they first come.
KINDS = ("append", "edit", "retract", "fork", "extend")
#: The longest wait for the appenders to get that far (a hung run fails).
ROUNDS_WITHIN = 180.0


#: Where a race keeps its keys: the store (``None``), or a key store of its own.
Stores = tuple[str, str | None]


def _settings(stores: Stores, key: str, **more: Any) -> Settings:
    url, key_store = stores
    return Settings(
        database_url=url, cipher_key=key, key_store=key_store, write_deadline=60, poll_interval=0.05, **more
    )


def _text(subject: str, tag: str) -> str:
    return f"{MARK} {tag}" if subject == VICTIM else f"{subject} {tag}"


def _kind(i: int) -> str:
    """The kind of write of an appender's round ``i`` (the same on every conversation:
    an edit and a retraction follow an append)."""
    if i % 9 == 4:
        return "fork"
    if i % 6 == 5:
        return "extend"
    return "edit" if i % 5 == 2 else "retract" if i % 7 == 3 else "append"


def _after_every_kind(rounds: list[int], done: list[int]) -> bool:
    """Whether the appenders have completed, among them, a round of each kind from
    their round ``done[n]`` on."""
    made = {_kind(i) for d, r in zip(done, rounds, strict=True) for i in range(d, r)}
    return made >= set(KINDS)


def _wait_for_rounds(
    rounds: Any,
    each: list[int],
    total: int = 0,
    *,
    kinds_from: list[int] | None = None,
    failed: Any = None,
) -> None:
    """Wait until appender ``n`` has completed ``each[n]`` rounds, for every ``n``, all
    of them ``total`` rounds together, and (``kinds_from``) a round of each kind among
    them from their round ``kinds_from[n]`` on; fail at once should a racer fail (the
    event ``failed``)."""

    def short() -> bool:
        done = rounds[:]
        return (
            sum(done) < total
            or any(d < wanted for d, wanted in zip(done, each, strict=True))
            or (kinds_from is not None and not _after_every_kind(done, kinds_from))
        )

    deadline = time.monotonic() + ROUNDS_WITHIN
    while short():
        assert failed is None or not failed.is_set(), f"a racer failed (rounds {rounds[:]}): see its stderr"
        assert time.monotonic() < deadline, (
            f"the appenders stalled: rounds {rounds[:]}, wanted {each}, {total}"
        )
        time.sleep(0.01)


def _appender(
    stores: Stores,
    key: str,
    targets: list[tuple[str, str]],
    n: int,
    barrier: Any,
    stop: Any,
    rounds: Any,
    out: str,
) -> None:
    name = f"p{n}"
    ops: list[dict[str, Any]] = []
    with Ledger.open(settings=_settings(stores, key, run_policy=False)) as ledger:
        for _, cid in targets:  # every key in this process's cache before the race
            ledger.context(UUID(cid))
        warm = ledger.start("warm-up", subject=f"warm-{name}")  # the token counter loaded
        ledger.append(warm, {"role": "user", "content": "warm-up"})
        barrier.wait(120)
        i = 0
        while not stop.is_set():
            for subject, raw in targets:
                cid = UUID(raw)
                tag = f"{name}-{i}-{raw[:8]}"
                planned = _kind(i)
                kind = planned if planned in ("fork", "extend") else "append"
                started = time.monotonic()
                texts: list[str] = []
                try:
                    if kind == "fork":
                        fork = ledger.fork(cid, subject="s2", key=f"fork-{tag}")
                        texts = [f"fork {fork}"]
                    elif kind == "extend":
                        texts = [_text(subject, f"{tag}-a"), _text(subject, f"{tag}-b")]
                        ledger.extend(cid, [{"role": "user", "content": t} for t in texts])
                    else:
                        texts = [_text(subject, tag)]
                        position = ledger.append(cid, {"role": "user", "content": texts[0]})
                        if planned == "edit":
                            kind, texts = "edit", [*texts, _text(subject, f"{tag}-edited")]
                            ledger.edit(cid, position, {"role": "user", "content": texts[1]})
                        elif planned == "retract":
                            kind = "retract"
                            ledger.retract(cid, position, reason=_text(subject, f"{tag}-why"))
                    outcome, why = "ok", ""
                except cl.ConversationErasedError as exc:
                    outcome, why = "erased", str(exc)
                ops.append(
                    {
                        "subject": subject,
                        "cid": raw,
                        "kind": kind,
                        "texts": texts,
                        "started": started,
                        "returned": time.monotonic(),
                        "outcome": outcome,
                        "why": why,
                    }
                )
            i += 1
            rounds[n] = i
    Path(out).write_text(json.dumps(ops))


def _worker(stores: Stores, key: str, barrier: Any, stop: Any) -> None:
    with Ledger.open(settings=_settings(stores, key, run_policy=True)) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger, close_with_runner=False))
        barrier.wait(120)
        stop.wait(300)
        ledger.wait_idle(120)
        models.close()


def _eraser(stores: Stores, key: str, barrier: Any, rounds: Any, out: str, ended: Any, failed: Any) -> None:
    try:
        with Ledger.open(settings=_settings(stores, key, run_policy=False)) as ledger:
            barrier.wait(120)
            _wait_for_rounds(rounds, [1] * APPENDERS, APPENDERS * ROUNDS_BEFORE, failed=failed)
            called = time.monotonic()
            report = ledger.erase(VICTIM, "race")
            returned = time.monotonic()
        Path(out).write_text(
            json.dumps(
                {
                    "called": called,
                    "returned": returned,
                    "conversations": [str(c) for c in report.conversations],
                }
            )
        )
    finally:
        ended.set()


def _racer(target: Callable[..., None], args: tuple[Any, ...], failed: Any) -> None:
    """Run ``target``; set the event ``failed`` should it raise (the others' waits end)."""
    try:
        target(*args)
    except BaseException:
        failed.set()
        raise


def _racers(racers: list[tuple[Callable[..., None], tuple[Any, ...]]], failed: Any, out: str) -> None:
    """Fork each racer (a target and its arguments) from this process, which the
    forkserver forked with the token encodings loaded (the racers share them: none
    loads them again); wait for them and write their exit codes to ``out``. This
    process has started no thread, so forking it is safe."""
    fork: Any = multiprocessing.get_context("fork")  # typeshed's BaseContext names no Process
    procs = [fork.Process(target=_racer, args=(target, args, failed)) for target, args in racers]
    codes: list[int | None] = [None] * len(procs)
    try:
        codes = run_all(procs, 600)
    finally:
        Path(out).write_text(json.dumps(codes))


def _setup(stores: Stores, key: str) -> tuple[dict[str, list[UUID]], UUID]:
    with Ledger.open(settings=_settings(stores, key, run_policy=False)) as ledger:
        by_subject = {
            subject: [
                ledger.start(f"assistant of {_text(subject, 'system')}", subject=subject, policy=POLICY)
                for _ in range(2)
            ]
            for subject in (VICTIM, "s1", "s2")
        }
        for subject, cids in by_subject.items():
            for cid in cids:
                ledger.append(cid, {"role": "user", "content": _text(subject, "first")})
        # Another subject's fork of a victim's conversation: it outlives the erasure.
        fork = ledger.fork(by_subject[VICTIM][0], subject="s1", key="the-s1-fork")
        ledger.append(fork, {"role": "user", "content": _text("s1", "the fork's own")})
    return by_subject, fork


def _race(stores: Stores, tmp: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    by_subject, fork = _setup(stores, key)
    targets = [(s, str(c)) for s, cids in by_subject.items() for c in cids] + [("s1", str(fork))]
    ctx: Any = process_context()  # typeshed's BaseContext names no Process
    barrier, stop, erased, failed = ctx.Barrier(APPENDERS + 3), ctx.Event(), ctx.Event(), ctx.Event()
    rounds = ctx.Array("i", APPENDERS)  # rounds completed, per appender
    outs = [str(tmp / f"appender-{n}.json") for n in range(APPENDERS)]
    erased_out = str(tmp / "eraser.json")
    exits_out = str(tmp / "exits.json")
    # Each appender goes round the conversations from another one (fewer conflicts).
    racers: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
        (_appender, (stores, key, targets[2 * n :] + targets[: 2 * n], n, barrier, stop, rounds, outs[n]))
        for n in range(APPENDERS)
    ]
    racers.append((_worker, (stores, key, barrier, stop)))
    racers.append((_eraser, (stores, key, barrier, rounds, erased_out, erased, failed)))
    launcher = ctx.Process(target=_racers, args=(racers, failed, exits_out))
    try:
        launcher.start()
        barrier.wait(120)
        erased.wait(120)
        # A round under way when the erasure returned may have started before it: the
        # rounds after it are counted from the next one.
        done = [n + 1 for n in rounds[:]]
        _wait_for_rounds(rounds, [n + 1 for n in done], kinds_from=done, failed=failed)
        stop.set()
        launcher.join(300)
    finally:
        stop.set()
        if launcher.is_alive():
            launcher.kill()
            launcher.join()
    assert launcher.exitcode == 0
    assert json.loads(Path(exits_out).read_text()) == [0] * len(racers)
    erasure = json.loads(Path(erased_out).read_text())
    ops = [op for out in outs for op in json.loads(Path(out).read_text())]
    victim = [op for op in ops if op["subject"] == VICTIM]
    print(
        f"rounds {rounds[:]}; writes {len(ops)}, to the erased subject {len(victim)}: "
        f"{sum(op['outcome'] == 'ok' for op in victim)} acknowledged, "
        f"{sum(op['outcome'] == 'erased' for op in victim)} refused"
    )
    check(stores, key, by_subject, fork, erasure, ops)


def check(
    stores: Stores,
    key: str,
    by_subject: dict[str, list[UUID]],
    fork: UUID,
    erasure: dict[str, Any],
    ops: list[dict[str, Any]],
) -> None:
    returned = erasure["returned"]
    victim_ops = [op for op in ops if op["subject"] == VICTIM]
    late = [op for op in victim_ops if op["outcome"] == "ok" and op["returned"] > returned]
    assert late == [], f"{len(late)} writes to the erased subject acknowledged after erase returned"
    # The race happened: writes to the victim acknowledged before the erasure, refused after.
    assert any(op["outcome"] == "ok" for op in victim_ops)
    assert any(op["outcome"] == "erased" for op in victim_ops)
    assert all(op["outcome"] == "erased" for op in victim_ops if op["started"] > returned)
    erased = {UUID(c) for c in erasure["conversations"]}
    assert set(by_subject[VICTIM]) <= erased

    with Ledger.open(settings=_settings(stores, key, run_policy=False)) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger, close_with_runner=False))
        assert ledger.wait_idle(120)
        # No record of the victim after its ContentErased.
        decode = ledger.mapper.to_domain_event
        erased_at: int | None = None
        after: list[Any] = []
        for page in read_notifications(ledger.notification_log, committed=True):
            for notification in page:
                event = decode(notification)
                if isinstance(event, ContentErased) and event.subject == VICTIM:
                    erased_at = notification.id
                elif (
                    erased_at is not None
                    and isinstance(event, ErasedEvent)
                    and VICTIM in (event.subject, *event.subjects)
                ):
                    after.append((notification.id, notification.topic, event.originator_id))
        assert erased_at is not None
        assert after == [], f"records of the erased subject after its erasure: {after}"
        # The read models hold nothing of the victim's conversations.
        with models.read() as conn:
            for table in models.tables.values():
                if "conversation_id" in table.c:
                    rows = conn.execute(select(table).where(table.c.conversation_id.in_(list(erased))))
                    assert rows.fetchall() == [], table.name
        listed = {r.conversation_id for r in models.conversations.conversations()}
        assert not listed & erased
        for cid in listed:
            assert MARK not in repr(models.transcript.transcript(cid)), cid
            assert MARK not in repr(models.summaries.summaries(cid)), cid
        # Nothing of the other subjects was lost or written twice.
        others = [op for op in ops if op["subject"] != VICTIM and op["outcome"] == "ok"]
        refused = [op for op in ops if op["subject"] != VICTIM and op["outcome"] != "ok"]
        # Only forking the fork whose inherited part went with the erasure is refused.
        assert others and all(op["kind"] == "fork" and op["cid"] == str(fork) for op in refused), refused
        transcripts: dict[str, list[str]] = {}
        for op in others:
            if op["kind"] == "fork":
                continue
            if op["cid"] not in transcripts:
                transcripts[op["cid"]] = [
                    str(e.message.get("content")) for e in ledger.transcript(UUID(op["cid"]))
                ]
            for text in op["texts"]:
                assert transcripts[op["cid"]].count(text) == 1, (op, text)
        # The worker summarized the other subjects' conversations meanwhile.
        assert any(ledger.summaries(c) for c in [*by_subject["s1"], *by_subject["s2"]])
        # Every other conversation verifies, forks of the erased subject's included.
        report = ledger.verify()
        assert report.ok, report
        live = [c for c in ledger.conversation_ids() if c not in erased]
        assert fork in live and len(live) >= 5
        # Forks made in the race of a conversation holding the victim's content (its own,
        # or the s1 fork) have nothing of their own: erased whole with their inherited part.
        victim_forks = {
            UUID(op["texts"][0].split()[1])
            for op in ops
            if op["kind"] == "fork"
            and op["outcome"] == "ok"
            and (op["subject"] == VICTIM or op["cid"] == str(fork))
        }
        for cid in live:
            assert ledger.verify(cid).ok, cid
            try:
                context = ledger.context(cid)
            except cl.ConversationErasedError:
                assert cid in victim_forks, cid
                continue
            assert MARK not in repr(context)
        for cid in erased:
            with pytest.raises(cl.ConversationErasedError):
                ledger.context(cid)
        models.close()


@pytest.mark.parametrize("apart", [False, True], ids=["keys-in-store", "key-store"])
def test_an_erasure_raced_by_writers_and_a_worker_on_a_sqlite_file(tmp_path: Path, apart: bool) -> None:
    key_store = f"sqlite:///{tmp_path / 'keys.db'}" if apart else None
    _race((f"sqlite:///{tmp_path / 'ledger.db'}", key_store), tmp_path)


@pytest.mark.postgres
@pytest.mark.parametrize("apart", [False, True], ids=["keys-in-store", "key-store"])
def test_an_erasure_raced_by_writers_and_a_worker_on_postgres(
    postgres_url: str,
    tmp_path: Path,
    apart: bool,
    request: pytest.FixtureRequest,
) -> None:
    key_store = str(request.getfixturevalue("postgres_key_store_url")) if apart else None
    _race((postgres_url, key_store), tmp_path)
