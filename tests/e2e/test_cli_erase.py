"""``contextledger erase`` (and the worker's retention) on a SQLite file: the dry runs
list what would go and erase nothing; usage errors exit 2; the real erasure goes
through ``Ledger.erase``."""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.keys.subject_mapper import subject_keys_of

POLICY = cl.ReductionPolicy(trigger_messages=1000, keep_messages=10)
#: The store's URL and its conversations by name.
Store = tuple[str, dict[str, UUID]]


def said_long_ago(cid: UUID) -> str:
    """What the store's old conversations say (each names itself)."""
    return f"said long ago in {cid}"


def last_said(ledger: cl.Ledger, cid: UUID) -> Any:
    return ledger.context(cid)[-1]["content"]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for key in [k for k in os.environ if k.startswith("CONTEXTLEDGER_")]:
        monkeypatch.delenv(key)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A store whose conversations were written 60 days ago, but for ``mixed_new`` and
    ``own_new`` (now); the master key in the environment, as an operator sets it."""
    key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", key)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    long_ago = datetime.now(UTC) - timedelta(days=60)
    c: dict[str, UUID] = {}
    settings = cl.Settings(database_url=url, run_policy=False, cipher_key=key)
    with cl.Ledger.open(url, settings=settings, clock=lambda: long_ago) as old:
        c["old_a"] = old.start(policy=POLICY, subject="user-old")
        c["old_b"] = old.start(policy=POLICY, subject="user-old")
        c["mixed_old"] = old.start(policy=POLICY, subject="user-mixed")
        c["own_old"] = old.start(policy=POLICY)
        for cid in c.values():
            old.append(cid, {"role": "user", "content": said_long_ago(cid)})
    with cl.Ledger.open(url, settings=settings) as new:
        c["mixed_new"] = new.start(policy=POLICY, subject="user-mixed")
        c["own_new"] = new.start(policy=POLICY)
        for name in ("mixed_new", "own_new"):
            new.append(c[name], {"role": "user", "content": "said today"})
    return url, c


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    assert main(list(args)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def subjects_erased(url: str, *subjects: str) -> list[bool]:
    with cl.Ledger.open(url, run_policy=False) as ledger:
        keys = subject_keys_of(ledger)
        assert keys is not None
        return [keys.is_erased(s) for s in subjects]


def test_the_idle_dry_run_lists_the_subjects_all_idle_and_erases_nothing(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    url, c = store
    plan = run_json(capsys, "erase", "--idle-days", "30", "--dry-run", "--json", "--database", url)
    assert plan["dry_run"] is True and plan["idle_days"] == 30
    assert plan["reason"] == "retention: idle 30 days"
    assert [(s["subject"], s["conversations"]) for s in plan["subjects"]] == [
        ("user-old", [str(c["old_a"]), str(c["old_b"])]),
        (str(c["own_old"]), [str(c["own_old"])]),
    ]
    last = datetime.fromisoformat(plan["subjects"][0]["last_event_at"])
    assert timedelta(days=59) < datetime.now(UTC) - last < timedelta(days=61)
    assert plan["conversations"] == 3
    # 90 days: nothing is that idle.
    assert (
        run_json(capsys, "erase", "--idle-days", "90", "--dry-run", "--json", "--database", url)["subjects"]
        == []
    )
    # As text.
    assert main(["erase", "--idle-days", "30", "--dry-run", "--database", url]) == 0
    out = capsys.readouterr().out
    assert "would erase subject user-old: 2 conversations, last event" in out
    assert f"  {c['old_a']}\n" in out and str(c["mixed_old"]) not in out
    assert out.endswith("dry run: 2 subjects, 3 conversations; nothing erased\n")
    assert subjects_erased(url, "user-old", str(c["own_old"])) == [False, False]
    with cl.Ledger.open(url, run_policy=False) as ledger:
        assert last_said(ledger, c["old_a"]) == said_long_ago(c["old_a"])


def test_the_subject_and_conversation_dry_runs_list_the_subjects_conversations(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    url, c = store
    plan = run_json(capsys, "erase", "--subject", "user-mixed", "--dry-run", "--json", "--database", url)
    assert plan["subjects"] == [
        {"subject": "user-mixed", "conversations": [str(c["mixed_old"]), str(c["mixed_new"])]}
    ]
    assert "refused" not in plan
    plan = run_json(
        capsys,
        "erase",
        "--conversation",
        str(c["mixed_old"]),
        "--reason",
        "asked",
        "--dry-run",
        "--json",
        "--database",
        url,
    )
    assert plan["reason"] == "asked" and plan["conversations"] == 2
    assert "one of 2 conversations of subject 'user-mixed'" in plan["refused"]
    plan = run_json(
        capsys, "erase", "--conversation", str(c["own_new"]), "--dry-run", "--json", "--database", url
    )
    assert plan["subjects"] == [{"subject": str(c["own_new"]), "conversations": [str(c["own_new"])]}]
    assert "refused" not in plan
    assert main(["erase", "--subject", "nobody", "--dry-run", "--database", url]) == 0
    assert "would erase subject nobody: 0 conversations" in capsys.readouterr().out
    assert subjects_erased(url, "user-mixed", str(c["own_new"])) == [False, False]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["erase"], "one of the arguments --subject --conversation --idle-days --export-journal --reapply is required"),
        (["erase", "--subject", "user-old"], "--reason TEXT is required"),
        (["erase", "--subject", "user-old", "--reason", "  "], "--reason TEXT is required"),
        (["erase", "--subject", "a", "--idle-days", "3", "--reason", "x"], "not allowed with argument"),
        (["erase", "--idle-days", "30", "--reason", "x"], "give no --reason"),
        (["erase", "--idle-days", "0", "--dry-run"], "must be 1 or more"),
        (["erase", "--subject", "", "--dry-run"], "subject must be a non-empty string"),
        (["erase", "--subject", "x" * 201, "--dry-run"], "at most 200 characters"),
    ],
)
def test_usage_errors_exit_2_and_erase_nothing(
    store: Store, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    url, _ = store
    assert main([*args, "--database", url]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert subjects_erased(url, "user-old") == [False]


def test_an_unknown_conversation_is_a_usage_error(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = store
    missing = "00000000-0000-4000-8000-000000000000"
    assert main(["erase", "--conversation", missing, "--dry-run", "--database", url]) == 2
    assert f"no conversation {missing}" in capsys.readouterr().err


def test_the_erase_command_is_listed_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "erase a data subject's conversations" in capsys.readouterr().out


def test_erase_subject_and_conversation_erase_through_the_ledger(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    url, c = store
    report = run_json(
        capsys,
        "erase",
        "--subject",
        "user-mixed",
        "--reason",
        "asked by the user",
        "--json",
        "--database",
        url,
    )
    assert report["subject"] == "user-mixed" and report["reason"] == "asked by the user"
    assert sorted(report["conversations"]) == sorted([str(c["mixed_old"]), str(c["mixed_new"])])
    assert report["already_erased"] is False
    again = run_json(
        capsys, "erase", "--subject", "user-mixed", "--reason", "again", "--json", "--database", url
    )
    assert again["already_erased"] is True
    assert (
        main(["erase", "--conversation", str(c["own_new"]), "--reason", "closed account", "--database", url])
        == 0
    )
    assert f"subject {c['own_new']} erased at" in capsys.readouterr().out
    assert subjects_erased(url, "user-mixed", str(c["own_new"]), "user-old") == [True, True, False]
    with cl.Ledger.open(url, run_policy=False) as ledger:
        with pytest.raises(cl.ConversationErasedError) as caught:
            ledger.context(c["mixed_new"])
        assert caught.value.reason == "asked by the user"
        assert last_said(ledger, c["old_a"]) == said_long_ago(c["old_a"])


def test_erase_idle_days_erases_what_the_dry_run_listed(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    url, c = store
    plan = run_json(capsys, "erase", "--idle-days", "30", "--dry-run", "--json", "--database", url)
    reports = run_json(capsys, "erase", "--idle-days", "30", "--json", "--database", url)
    assert [r["subject"] for r in reports] == [s["subject"] for s in plan["subjects"]]
    assert all(r["reason"] == "retention: idle 30 days" for r in reports)
    assert subjects_erased(url, "user-old", str(c["own_old"]), "user-mixed") == [True, True, False]
    assert run_json(capsys, "erase", "--idle-days", "30", "--json", "--database", url) == []


def test_the_worker_enforces_retention(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, c = store
    monkeypatch.setenv("CONTEXTLEDGER_RETENTION_IDLE_DAYS", "30")
    assert main(["worker", "--once", "--database", url]) == 0
    assert "retention 30 days" in capsys.readouterr().err
    assert subjects_erased(url, "user-old", str(c["own_old"]), "user-mixed", str(c["own_new"])) == [
        True,
        True,
        False,
        False,
    ]


def test_the_worker_without_retention_erases_nothing(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    url, c = store
    assert main(["worker", "--once", "--database", url]) == 0
    assert "retention" not in capsys.readouterr().err
    assert subjects_erased(url, "user-old", str(c["own_old"])) == [False, False]


def test_keys_rotate_rewraps_the_data_keys_under_the_new_master_key(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, c = store
    old = os.environ["CONTEXTLEDGER_CIPHER_KEY"]
    new = base64.b64encode(os.urandom(32)).decode()
    result = run_json(capsys, "keys", "rotate", "--new-key", new, "--json", "--database", url)
    assert result == {"rewrapped": 4, "per_store": [4]}  # user-old, user-mixed, own_old, own_new
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", new)
    with cl.Ledger.open(url, run_policy=False) as ledger:
        assert ledger.context(c["mixed_new"])[-1]["content"] == "said today"
        assert last_said(ledger, c["old_a"]) == said_long_ago(c["old_a"])
    # Under the old master key the data keys no longer open.
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", old)
    with (
        cl.Ledger.open(url, run_policy=False) as ledger,
        pytest.raises(cl.StoreError, match="another master key"),
    ):
        ledger.context(c["mixed_new"])
    # Rotating again to the key in use, or to a key that is not one, changes nothing.
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", new)
    assert main(["keys", "rotate", "--new-key", new, "--database", url]) == 2
    assert "the master key in use" in capsys.readouterr().err
    assert main(["keys", "rotate", "--new-key", "not base64!", "--database", url]) == 2
    assert "not base64" in capsys.readouterr().err
    assert main(["keys", "rotate", "--database", url]) == 2
    assert "--new-key" in capsys.readouterr().err


def test_a_subject_no_conversation_names_is_refused_unless_forced(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = store
    assert main(["erase", "--subject", "user-0ld", "--reason", "a typo", "--database", url]) == 2
    err = capsys.readouterr().err
    assert "no conversation names data subject 'user-0ld'" in err and "--force" in err
    plan = run_json(capsys, "erase", "--subject", "user-0ld", "--dry-run", "--json", "--database", url)
    assert plan["conversations"] == 0 and "--force" in plan["refused"]
    assert subjects_erased(url, "user-0ld", "user-old") == [False, False]
    forced = ["erase", "--subject", "user-77", "--force", "--reason", "pre-empted", "--json"]
    report = run_json(capsys, *forced, "--database", url)
    assert report["subject"] == "user-77" and report["conversations"] == []
    assert subjects_erased(url, "user-77", "user-old") == [True, False]
    known = run_json(capsys, "erase", "--subject", "user-old", "--dry-run", "--json", "--database", url)
    assert "refused" not in known


def test_erase_with_another_master_key_is_refused_and_erases_nothing(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = store
    right = os.environ["CONTEXTLEDGER_CIPHER_KEY"]
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", base64.b64encode(os.urandom(32)).decode())
    assert main(["erase", "--subject", "user-old", "--reason", "wrong key", "--database", url]) == 2
    err = capsys.readouterr().err
    assert "not the current master key of the store sqlite:///" in err and err.count("\n") == 1
    monkeypatch.setenv("CONTEXTLEDGER_CIPHER_KEY", right)
    assert subjects_erased(url, "user-old") == [False]
