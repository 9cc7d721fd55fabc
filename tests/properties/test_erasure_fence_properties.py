"""The write fence holds for any interleaving: two ledgers share one SQLite file (two
processes, each with its own caches); one writes (appends, extends, edits, forks) to
conversations of a few subjects, the other erases subjects between those writes. For
every plan: a write to a subject after its erasure is refused and stores nothing,
every other write lands, no record of an erased subject stands in the log after its
``ContentErased``, and the log verifies."""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.following.notifications import read_notifications
from contextledger.domain.erasure import ContentErased, ErasedEvent

SUBJECTS = ("s0", "s1", "s2")
STEP = st.one_of(
    st.tuples(st.just("erase"), st.sampled_from(SUBJECTS)),
    st.tuples(st.sampled_from(("append", "extend", "edit", "fork")), st.sampled_from(SUBJECTS)),
)


def _write(ledger: cl.Ledger, kind: str, cid: Any, n: int) -> None:
    if kind == "append":
        ledger.append(cid, {"role": "user", "content": f"m{n}"})
    elif kind == "extend":
        ledger.extend(cid, [{"role": "user", "content": f"m{n}a"}, {"role": "user", "content": f"m{n}b"}])
    elif kind == "edit":
        ledger.edit(cid, 0, {"role": "user", "content": f"edited {n}"})
    else:
        ledger.fork(cid)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=1, max_size=12))
def test_no_write_lands_after_its_subjects_erasure(steps: list[tuple[str, str]]) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    with tempfile.TemporaryDirectory() as folder:
        options = cl.Settings(
            database_url=f"sqlite:///{Path(folder) / 'ledger.db'}", cipher_key=key, run_policy=False
        )
        with cl.Ledger(options) as writer, cl.Ledger(options) as eraser:
            cids = {s: writer.start("s", subject=s) for s in SUBJECTS}
            for s, cid in cids.items():
                writer.append(cid, {"role": "user", "content": f"first of {s}"})
                writer.context(cid)  # the writer caches every key
            erased: set[str] = set()
            for n, (kind, subject) in enumerate(steps):
                if kind == "erase":
                    eraser.erase(subject, "property")
                    erased.add(subject)
                    continue
                try:
                    _write(writer, kind, cids[subject], n)
                except cl.ConversationErasedError as exc:
                    assert subject in erased and exc.subject == subject
                else:
                    assert subject not in erased, f"{kind} to erased {subject} acknowledged"
            erased_at: dict[str, int] = {}
            decode = eraser.mapper.to_domain_event
            for page in read_notifications(eraser.notification_log, committed=True):
                for notification in page:
                    event = decode(notification)
                    if isinstance(event, ContentErased):
                        erased_at[event.subject] = notification.id
                    elif isinstance(event, ErasedEvent):
                        late = [s for s in (event.subject, *event.subjects) if s in erased_at]
                        assert late == [], (notification.id, notification.topic, late)
            assert set(erased_at) == erased
            assert eraser.verify().ok
            for s in set(SUBJECTS) - erased:
                assert eraser.context(cids[s]) == writer.context(cids[s])
