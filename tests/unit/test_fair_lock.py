"""The per-conversation lock hands itself to waiters in the order they came, and a
waiter whose timeout passes leaves the queue without breaking it."""

from __future__ import annotations

import threading

from contextledger.application.storage.store import FairLock


def wait_for(predicate: object) -> None:
    done = threading.Event()
    while not predicate():  # type: ignore[operator]
        done.wait(0.001)


def test_waiters_get_the_lock_in_arrival_order() -> None:
    lock = FairLock()
    order: list[int] = []
    assert lock.acquire()
    threads = []
    for i in range(8):
        def take(i: int = i) -> None:
            with lock:
                order.append(i)
        thread = threading.Thread(target=take)
        thread.start()
        threads.append(thread)
        wait_for(lambda i=i: lock.waiting() == i + 1)  # queued before the next one starts
    lock.release()
    for thread in threads:
        thread.join()
    assert order == list(range(8))
    assert not lock.locked() and lock.waiting() == 0


def test_a_timed_out_waiter_leaves_the_queue_and_the_rest_still_get_the_lock() -> None:
    lock = FairLock()
    assert lock.acquire()
    got: list[bool] = []
    impatient = threading.Thread(target=lambda: got.append(lock.acquire(timeout=0.01)))
    impatient.start()
    impatient.join()
    assert got == [False] and lock.waiting() == 0
    patient = threading.Thread(target=lambda: got.append(lock.acquire(timeout=30)))
    patient.start()
    wait_for(lambda: lock.waiting() == 1)
    lock.release()
    patient.join()
    assert got == [False, True] and lock.locked()
    lock.release()
    assert not lock.locked()
