"""The test workers' shared helpers (tests/workers.py): the real-time lock, data made once per run, worker slots."""

from __future__ import annotations

import fcntl
import threading
import time

from tests.workers import RunLock, made_once, worker_slot


def _gate_taken(lock: RunLock) -> bool:
    """Whether an exclusive taker holds (or waits behind) the gate: a shared probe of it would block."""
    with open(lock.gate, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_realtime_test_waits_for_the_running_test_and_the_next_test_waits_for_it(tmp_path):
    """Worker A runs a test; B asks to run a real-time one, then A's next test asks: B runs once A's test ends and
    alone; A's next test runs after B (it does not overtake the waiting real-time test)."""
    lock = RunLock(tmp_path)  # each thread opens its own descriptors: flock(2) locks them apart as it does processes
    events: list[str] = []
    running, finish = threading.Event(), threading.Event()

    def test_a():
        with lock.shared():
            events.append("A")
            running.set()
            finish.wait(10)
            events.append("A ends")

    def realtime_b():
        with lock.exclusive():
            events.append("B")
            time.sleep(0.05)
            events.append("B ends")

    def next_c():
        with lock.shared():
            events.append("C")

    threads = [threading.Thread(target=test_a)]
    threads[0].start()
    running.wait(10)
    threads.append(threading.Thread(target=realtime_b))
    threads[1].start()
    _wait(lambda: _gate_taken(lock), "the real-time test to take the gate")
    threads.append(threading.Thread(target=next_c))
    threads[2].start()
    time.sleep(0.1)
    assert events == ["A"]  # B waits for A's test, C waits behind B
    finish.set()
    for t in threads:
        t.join(10)
    assert events == ["A", "A ends", "B", "B ends", "C"]


def test_shared_tests_run_together(tmp_path):
    lock = RunLock(tmp_path)
    with lock.shared():
        done = threading.Event()

        def another_test():
            with lock.shared():
                done.set()

        other = threading.Thread(target=another_test)
        other.start()
        assert done.wait(5), "a second shared taker waited for the first"
        other.join()


def test_made_once_makes_once_for_all_workers(tmp_path):
    made: list[int] = []

    def make(path):
        made.append(1)
        time.sleep(0.1)  # the other workers ask meanwhile
        path.mkdir()
        (path / "data").write_text("x")

    paths: list = []
    threads = [threading.Thread(target=lambda: paths.append(made_once(tmp_path, "demos", make))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(made) == 1 and paths == [tmp_path / "demos"] * 3 and (tmp_path / "demos" / "data").read_text() == "x"


def test_a_failed_make_leaves_nothing_taken_for_made(tmp_path):
    def fail(path):
        raise RuntimeError("recording failed")

    try:
        made_once(tmp_path, "demos", fail)
    except RuntimeError:
        pass
    assert made_once(tmp_path, "demos", lambda path: path.mkdir()) == tmp_path / "demos"


def test_worker_slot(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert worker_slot() == (1, 2)
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert worker_slot() == (0, 1)
