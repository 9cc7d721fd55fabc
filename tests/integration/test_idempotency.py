"""Client message ids work as idempotency keys: a retry with the same message returns
the original position and writes nothing; the id reused for a different message is an
``IdempotencyConflictError`` and writes nothing, on every store, whichever process
appended the original."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from uuid import UUID

import pytest

import contextledger as cl

CALL = {"id": "call_1", "type": "function", "function": {"name": "pay", "arguments": "{}"}}


def top(ledger: cl.Ledger) -> int:
    """The newest committed notification id: anything written moves it."""
    recorder = ledger.recorder
    return getattr(recorder, "max_committed_notification_id", recorder.max_notification_id)() or 0


def conflict(call: object) -> cl.IdempotencyConflictError:
    with pytest.raises(cl.IdempotencyConflictError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_a_retry_returns_the_position_and_another_message_is_a_conflict(store_url: str) -> None:
    with cl.Ledger.open(store_url, run_policy=False) as ledger:
        cid = ledger.start("You take payments.")
        assert ledger.append(cid, {"role": "user", "content": "pay 10"}, client_message_id="req-7") == 0
        ledger.append(cid, {"role": "assistant", "content": "paid"})
        before = top(ledger)
        assert ledger.append(cid, {"role": "user", "content": "pay 10"}, client_message_id="req-7") == 0
        assert top(ledger) == before

        error = conflict(lambda: ledger.append(cid, {"role": "user", "content": "pay 99"},
                                               client_message_id="req-7"))
        assert isinstance(error, cl.UsageError)
        assert (error.conversation_id, error.client_message_id, error.position) == (cid, "req-7", 0)
        assert "req-7" in str(error)
        assert top(ledger) == before
        assert [e.message["content"] for e in ledger.transcript(cid)] == ["pay 10", "paid"]
        # Another role with the same text is another message too.
        conflict(lambda: ledger.append(cid, {"role": "assistant", "content": "pay 10"},
                                       client_message_id="req-7"))
        assert top(ledger) == before


def test_extend_takes_one_id_per_message(store_url: str) -> None:
    with cl.Ledger.open(store_url, run_policy=False) as ledger:
        cid = ledger.start("s")
        batch = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        assert ledger.extend(cid, batch, client_message_ids=["u-1", None]) == [0, 1]
        before = top(ledger)
        assert ledger.extend(cid, batch, client_message_ids=["u-1", None]) == [0, 1]
        changed = [batch[0], {"role": "assistant", "content": "c"}]
        error = conflict(lambda: ledger.extend(cid, changed, client_message_ids=["u-1", None]))
        assert (error.client_message_id, error.position) == ("u-1", 0)
        # The same id for a single append of only part of the batch is another call.
        conflict(lambda: ledger.extend(cid, batch, client_message_ids=["u-1", "u-2"]))
        conflict(lambda: ledger.append(cid, batch[1], client_message_id="u-1"))
        assert top(ledger) == before
        with pytest.raises(cl.InvalidArgumentError):
            ledger.extend(cid, batch, client_message_ids=["x", "x"])
        with pytest.raises(cl.InvalidArgumentError):
            ledger.extend(cid, batch, client_message_ids=["x"])
        assert top(ledger) == before
        assert len(ledger.transcript(cid)) == 2


def test_the_original_is_read_from_the_log_far_back_in_a_long_conversation() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s", policy=cl.ReductionPolicy(trigger_messages=10, keep_messages=2))
        for n in range(120):
            ledger.append(cid, {"role": "user", "content": f"m{n}"}, client_message_id=f"id-{n}")
            if n % 3 == 0:
                ledger.record_usage(cid, prompt_tokens=10 + n, completion_tokens=1)
        before = top(ledger)
        for n in (0, 1, 57, 118, 119):
            assert ledger.append(cid, {"role": "user", "content": f"m{n}"}, client_message_id=f"id-{n}") == n
            error = conflict(lambda n=n: ledger.append(cid, {"role": "user", "content": "other"},
                                                       client_message_id=f"id-{n}"))
            assert error.position == n
        assert top(ledger) == before


def test_a_retried_tool_result_whose_call_is_answered_returns_its_position(store_url: str) -> None:
    with cl.Ledger.open(store_url, run_policy=False) as ledger:
        cid = ledger.start("s")
        ledger.append(cid, {"role": "assistant", "content": None, "tool_calls": [CALL]})
        result = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
        assert ledger.append(cid, result, client_message_id="t-1") == 1
        ledger.append(cid, {"role": "assistant", "content": "done"})
        before = top(ledger)
        assert ledger.append(cid, result, client_message_id="t-1") == 1
        conflict(lambda: ledger.append(cid, {**result, "content": "failed"}, client_message_id="t-1"))
        assert top(ledger) == before


def test_an_original_appended_by_another_process(shared_url: str) -> None:
    script = textwrap.dedent(f"""
        import contextledger as cl
        with cl.Ledger.open({shared_url!r}, run_policy=False) as ledger:
            cid = ledger.start("s", key="payments")
            ledger.append(cid, {{"role": "user", "content": "pay 10"}}, client_message_id="req-1")
            ledger.extend(cid, [{{"role": "user", "content": "a"}}, {{"role": "user", "content": "b"}}],
                          client_message_ids=["req-2", "req-3"])
            print(cid)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    cid = UUID(done.stdout.strip())
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        before = top(ledger)
        assert ledger.append("payments", {"role": "user", "content": "pay 10"}, client_message_id="req-1") == 0
        assert ledger.extend(cid, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
                             client_message_ids=["req-2", "req-3"]) == [1, 2]
        error = conflict(lambda: ledger.append(cid, {"role": "user", "content": "pay 11"},
                                               client_message_id="req-1"))
        assert (error.conversation_id, error.client_message_id, error.position) == (cid, "req-1", 0)
        conflict(lambda: ledger.extend(cid, [{"role": "user", "content": "a"}, {"role": "user", "content": "c"}],
                                       client_message_ids=["req-2", "req-3"]))
        assert top(ledger) == before


def test_the_async_twin(store_url: str) -> None:
    async def main() -> None:
        async with cl.AsyncLedger.open(store_url, run_policy=False) as ledger:
            cid = await ledger.start("s")
            assert await ledger.append(cid, {"role": "user", "content": "a"}, client_message_id="m") == 0
            assert await ledger.append(cid, {"role": "user", "content": "a"}, client_message_id="m") == 0
            with pytest.raises(cl.IdempotencyConflictError):
                await ledger.append(cid, {"role": "user", "content": "b"}, client_message_id="m")
            batch = [{"role": "assistant", "content": "x"}]
            assert await ledger.extend(cid, batch, client_message_ids=["n"]) == [1]
            assert await ledger.extend(cid, batch, client_message_ids=["n"]) == [1]
            with pytest.raises(cl.IdempotencyConflictError):
                await ledger.extend(cid, [{"role": "assistant", "content": "y"}], client_message_ids=["n"])
            assert len(await ledger.transcript(cid)) == 2

    asyncio.run(main())
