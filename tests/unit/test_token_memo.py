"""A counter remembers the counts of the texts it encoded, within a bound, by a keyed
digest of each text, never the text itself."""

from __future__ import annotations

import threading

from contextledger.infrastructure.counting import tokens
from contextledger.infrastructure.counting.tokens import TiktokenCounter


def test_a_remembered_count_is_the_encoded_one() -> None:
    counter = TiktokenCounter("gpt-4o-mini")
    texts = ["hello there", "Lisbon 42 ok", "", "naïve café ☕", "a\ud800b", "x" * (tokens.MEMO_MAX_TEXT + 1)]
    first = [counter.count_text(t) for t in texts]
    assert first == [counter._encoded_length(t) for t in texts]
    assert [counter.count_text(t) for t in texts] == first
    assert len(counter._memo) == len(texts) - 1  # the last is too long to remember
    assert counter._digest("x" * (tokens.MEMO_MAX_TEXT + 1)) not in counter._memo


def test_the_memo_keeps_no_text() -> None:
    counter, other = TiktokenCounter("gpt-4o-mini"), TiktokenCounter("gpt-4o-mini")
    secret = "my card number is 4111 1111 1111 1111"
    counter.count_text(secret)
    kept = b"".join(counter._memo)
    assert all(isinstance(k, bytes) and len(k) == 16 for k in counter._memo)
    assert secret.encode() not in kept and b"4111" not in kept
    assert counter._digest(secret) != other._digest(secret)  # keyed per counter


def test_the_memo_forgets_the_oldest_texts_past_its_bound(monkeypatch) -> None:
    monkeypatch.setattr(tokens, "MEMO_MAX_ENTRIES", 10)
    counter = TiktokenCounter("gpt-4o-mini")
    texts = [f"text number {i:04d} " * 2 for i in range(40)]
    counts = [counter.count_text(t) for t in texts]
    assert len(counter._memo) == 10
    assert counter._digest(texts[-1]) in counter._memo and counter._digest(texts[0]) not in counter._memo
    assert [counter.count_text(t) for t in texts] == counts


def test_threads_counting_at_once_keep_the_bound(monkeypatch) -> None:
    monkeypatch.setattr(tokens, "MEMO_MAX_ENTRIES", 50)
    counter = TiktokenCounter("gpt-4o-mini")
    texts = [f"message {i} " + "words " * (i % 7) for i in range(300)]
    expected = [counter._encoded_length(t) for t in texts]
    wrong: list[int] = []

    def work(offset: int) -> None:
        for i in range(len(texts)):
            j = (i + offset) % len(texts)
            if counter.count_text(texts[j]) != expected[j]:
                wrong.append(j)

    threads = [threading.Thread(target=work, args=(n * 37,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert len(counter._memo) <= 50
