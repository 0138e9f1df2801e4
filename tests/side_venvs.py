"""The side virtualenvs some tests run in (mjlab pins mujoco 3.11; LeRobot's loader needs its own torch), built in
the background while the rest of the suite runs.

Each is cached outside the clone, keyed by its pins (tests.conftest.cached_venv), so only the first run on a machine
builds it, and a build is mostly downloading and unpacking wheels (~1.5 and ~3 min here), which overlaps well with
the suite's CPU-bound tests. tests/conftest.py moves the tests marked `side_venv(name)` to the end of the run and,
when one of those venvs is not built yet, starts `start_builds` as the session begins; those tests' fixtures call
`wait_for` before they use the venv. Without that head start (a test run on its own) `wait_for` builds it itself.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO, USER_CACHE, cached_venv, load_script
from tests.workers import file_lock


@dataclass(frozen=True)
class SideVenv:
    """A side venv: where it is, how it is built, how a complete one is recognised."""

    name: str
    path: Path
    command: tuple[str, ...]
    """Builds `path` (into a temporary folder, renamed when complete); safe to run again."""
    env: dict[str, str]

    def ready(self) -> bool:
        if self.name == "mjlab":  # scripts/setup_mjlab.sh stamps a complete venv with its constraints' sha256
            stamp = hashlib.sha256((REPO / "constraints-mjlab.txt").read_bytes()).hexdigest()
            marker = self.path / ".complete"
            return marker.is_file() and marker.read_text().strip() == stamp
        return load_script("lerobot_check").venv_ready(self.path)


def side_venv(name: str) -> SideVenv:
    """The side venv `name` ("mjlab" or "lerobot")."""
    if name == "mjlab":
        path = cached_venv("mjlab", (REPO / "constraints-mjlab.txt").read_bytes(), "ROBO_RL_MJLAB_VENV")
        env = {**os.environ, "ROBO_RL_MJLAB_VENV": str(path), "PYTHON": sys.executable}
        return SideVenv(name, path, ("bash", str(REPO / "scripts" / "setup_mjlab.sh")), env)
    if name == "lerobot":
        path = cached_venv("lerobot", load_script("lerobot_check").venv_pins(), "ROBO_RL_LEROBOT_VENV")
        command = (sys.executable, str(REPO / "scripts" / "lerobot_check.py"), "--ensure-venv", str(path))
        return SideVenv(name, path, command, dict(os.environ))
    raise ValueError(f"side venv {name!r}: choose mjlab or lerobot")


IDLE_PRIORITY = ("nice", "-n", "19", *(("ionice", "-c", "3") if shutil.which("ionice") else ()))
"""A build takes only the CPU and disk time the tests leave: the real-time tests (control loops, DDS between
processes) must not see it."""


class _Builds:
    """The background builds of this session: one thread runs them one after the other (two pip installs at once
    would only fight over the second core with the tests)."""

    def __init__(self):
        self.done: dict[str, threading.Event] = {}
        self.results: dict[str, subprocess.CompletedProcess | None] = {}
        self.current: subprocess.Popen | None = None
        self.stopping = False

    def run(self, venvs: list[SideVenv]) -> None:
        for venv in venvs:
            if not self.stopping:
                with build_lock(venv.name):  # another test worker's build of it runs to its end first
                    if not venv.ready():
                        self._build(venv)
            self.done[venv.name].set()

    def _build(self, venv: SideVenv) -> None:
        log = USER_CACHE / "venvs" / f"{venv.name}-build.log"
        with open(log, "w") as out:
            self.current = subprocess.Popen([*IDLE_PRIORITY, *venv.command], cwd=REPO, env=venv.env, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
            code = self.current.wait()
        self.results[venv.name] = subprocess.CompletedProcess(venv.command, code, log.read_text(), "")


_BUILDS = _Builds()


def build_lock(name: str):
    """Held while a process builds the side venv `name`: the suite's test workers (tests/workers.py) each start the
    builds they need, and the second waits for the first instead of building the same venv beside it."""
    folder = USER_CACHE / "venvs"
    folder.mkdir(parents=True, exist_ok=True)
    return file_lock(folder / f"{name}.lock")


def start_builds(names: list[str]) -> list[str]:
    """Start building, in the background, those of the side venvs `names` that are not built; returns their names."""
    missing = [v for v in map(side_venv, names) if not v.ready()]
    for venv in missing:
        _BUILDS.done[venv.name] = threading.Event()
    if missing:
        threading.Thread(target=_BUILDS.run, args=(missing,), daemon=True, name="side-venv-builds").start()
    return [v.name for v in missing]


def stop_builds() -> None:
    """End a build still running when the session ends (its temporary folder is never taken for a venv)."""
    _BUILDS.stopping = True
    proc = _BUILDS.current
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)


def wait_for(name: str, timeout: float = 1800) -> SideVenv:
    """The side venv `name` once its background build (if this session started one) has ended; the fixture then
    runs the venv's own builder, which returns at once for a complete venv and builds one otherwise."""
    event = _BUILDS.done.get(name)
    if event is not None and not event.wait(timeout):
        raise TimeoutError(f"the {name} venv's background build still runs after {timeout:g} s")
    with build_lock(name):  # a build in another test worker has ended
        return side_venv(name)
