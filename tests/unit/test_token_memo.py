"""A counter remembers the counts of the texts it encoded, within a bound."""

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
    assert "x" * (tokens.MEMO_MAX_TEXT + 1) not in counter._memo  # too long to remember


def test_the_memo_forgets_the_oldest_texts_past_its_bound(monkeypatch) -> None:
    monkeypatch.setattr(tokens, "MEMO_MAX_CHARS", 100)
    counter = TiktokenCounter("gpt-4o-mini")
    texts = [f"text number {i:04d} " * 2 for i in range(40)]
    counts = [counter.count_text(t) for t in texts]
    assert counter._memo_chars == sum(map(len, counter._memo)) <= 100
    assert texts[-1] in counter._memo and texts[0] not in counter._memo
    assert [counter.count_text(t) for t in texts] == counts


def test_threads_counting_at_once_keep_the_bound(monkeypatch) -> None:
    monkeypatch.setattr(tokens, "MEMO_MAX_CHARS", 500)
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
    assert counter._memo_chars == sum(map(len, counter._memo)) <= 500
