"""The suite runs in pytest-xdist workers, one per core (the README's test command: `-n auto --dist loadfile`); what
the workers of one run share.

- **Real-time tests run alone.** A test marked `realtime` asserts wall-clock behaviour (a control loop's tick count,
  processes talking over DDS at 50-200 Hz); a learning check on the other core would make it late. It takes
  `RunLock.exclusive`: it waits until the test each other worker is running ends, and they start nothing until it
  ends; every other test takes `RunLock.shared`. A waiting real-time test has priority over the shared ones (a gate
  lock), so it never starves. tests/conftest.py moves the real-time files to the front of the run.
- **A session fixture made once per run** (`made_once`): the first worker makes it under a lock, the others wait and
  read it (the 50 recorded demos the BC and flow-BC checks train from).
- **Resources kept apart** (`worker_slot`): the DDS tests draw their domain ids from disjoint sets.

Without xdist (`-n 0`, `-p no:xdist`) every helper works for the one process.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def worker_slot() -> tuple[int, int]:
    """(this worker's index, number of workers) of the xdist run; (0, 1) without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw")), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def run_folder(tmp_path_factory) -> Path:
    """A folder of this run that all its workers see: the parent of a worker's basetemp (xdist gives each worker
    `<run's basetemp>/gwN`); the basetemp itself without xdist. pytest removes old ones (it keeps the last 3)."""
    base = Path(tmp_path_factory.getbasetemp())
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


@contextmanager
def file_lock(path: Path, mode: int = fcntl.LOCK_EX) -> Iterator[None]:
    """flock(2) `path` (created if missing) in `mode` for the block; shared by processes and by threads alike."""
    with open(path, "a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def made_once(folder: Path, name: str, make: Callable[[Path], None]) -> Path:
    """`folder/name` (folder: the `run_folder`), made by `make(path)` in the first worker that asks; the others wait
    for it. A make that fails leaves no mark, so the next worker that asks makes it again (and fails the same way)."""
    path, done = folder / name, folder / f"{name}.made"
    with file_lock(folder / f"{name}.lock", fcntl.LOCK_EX):
        if not done.exists():
            make(path)
            done.touch()
    return path


class RunLock:
    """Shared by the tests of all workers, exclusive for a real-time test; a waiting exclusive taker goes first.

    Two flock(2) files in the run folder: `gate`, which an exclusive taker holds while it waits and runs, and `run`.
    A shared taker passes the gate (shared, released at once) before it takes `run` shared, so once an exclusive
    taker holds the gate no new shared holder starts; the running ones end their test and it gets `run`.
    """

    def __init__(self, folder: Path):
        self.gate, self.run = folder / "realtime.gate", folder / "realtime.run"

    @contextmanager
    def shared(self) -> Iterator[None]:
        with file_lock(self.gate, fcntl.LOCK_SH):
            run = open(self.run, "a")
            fcntl.flock(run, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(run, fcntl.LOCK_UN)
            run.close()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with file_lock(self.gate, fcntl.LOCK_EX), file_lock(self.run, fcntl.LOCK_EX):
            yield
