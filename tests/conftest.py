import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.workers import RunLock, made_once, run_folder

REPO = Path(__file__).resolve().parents[1]
USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "robo_rl"
"""What the tests build once per machine and reuse from any clone: side venvs, Warp's compiled kernels."""

# Warp's kernels (cached by a hash of their source and Warp's version) outlive the clone as well: a rerun on this
# machine loads them in seconds instead of compiling for minutes (robo_rl.sim.mjmodel.configure_warp reads this;
# the tests' subprocesses inherit it).
os.environ.setdefault("ROBO_RL_WARP_CACHE", str(USER_CACHE / "warp"))
# A test worker (tests/workers.py) has a core of its own: torch computes on one thread in it and in the processes its
# tests start. Measured on 2 cores, the flow-BC check: 81 s on two spinning threads (the other core idle), 98 s on one
# thread; sleeping threads (OMP_WAIT_POLICY=PASSIVE) make it 143 s.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def cached_venv(name: str, pins: bytes, env_var: str) -> Path:
    """$env_var, else `USER_CACHE/venvs/<name>-<sha256 of pins, 12 hex>` (~/.cache/robo_rl/venvs/...).

    Outside the clone, so a rerun on the same machine (another clone, a worktree, the next CI run) reuses a side
    venv instead of building it again; keyed by the pinned versions it is built from, so a change of pins builds a
    new one. The builders (scripts/setup_mjlab.sh, scripts/lerobot_check.py) build into a temporary folder and
    rename it when complete, so a killed build is never taken for a venv.
    """
    if os.environ.get(env_var):
        return Path(os.environ[env_var])
    return USER_CACHE / "venvs" / f"{name}-{hashlib.sha256(pins).hexdigest()[:12]}"


def load_script(name: str):
    """The module of `scripts/<name>.py`, imported from its file (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hardware_variant(tmp_path: Path, robot: str, old: str, new: str) -> str:
    """A copy of hardware/<robot>.yaml in tmp_path with the text `old` (which must be there) replaced by `new`."""
    text = (REPO / "hardware" / f"{robot}.yaml").read_text()
    assert old in text, old
    path = tmp_path / f"{robot}.yaml"
    path.write_text(text.replace(old, new))
    return str(path)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m robo_rl.cli ARGS` in a subprocess (what a user's `robo-rl ARGS` does)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "robo_rl.cli", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sigkill_then_resume(cli, tmp_path: Path, train_args: list[str], *, iterations: int = 6,
                        killed_max_iterations: int = 1000) -> subprocess.CompletedProcess:
    """Train run `full` for `iterations`; start run `killed`, SIGKILL it after its checkpoint of iteration 2, and
    resume it to `iterations`. Returns the resume's result; both runs are under tmp_path."""
    log_dir = ["--set", f"runner.log_dir={tmp_path}"]
    full = cli(*train_args, *log_dir, "--run-name", "full", "--max-iterations", str(iterations))
    assert full.returncode == 0, full.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "robo_rl.cli", *train_args, *log_dir, "--run-name", "killed", "--max-iterations",
         str(killed_max_iterations)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while not (tmp_path / "killed" / "model_000002.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before its first checkpoint"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    resumed = cli("train", "--resume", str(tmp_path / "killed"), "--max-iterations", str(iterations))
    assert resumed.returncode == 0, resumed.stderr
    return resumed


@pytest.fixture(scope="session")
def reach_demos_50(tmp_path_factory) -> Path:
    """50 scripted-expert arm-reach episodes recorded with action noise 0.2 by `robo-rl record` (25 worlds, seed 0):
    one LeRobot v3 dataset, recorded once per run by whichever test worker asks first, that the BC and flow-BC
    learning checks train from (read only)."""

    def record(root: Path) -> None:
        rec = run_cli("record", "--task", "arm-reach", "--expert", "--episodes", "50", "--noise", "0.2", "--num-envs",
                      "25", "--out", str(root))
        assert rec.returncode == 0, rec.stderr
        assert "50 episodes" in rec.stdout, rec.stdout

    return made_once(run_folder(tmp_path_factory), "reach50", record)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """The CLI's commands run in-process install SIGINT/SIGTERM handlers for good (robo_rl.cli.robot.stop_on_signals,
    as a process should); put the ones this test started with back, so no test sees another's handlers."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        if handler is not None:
            signal.signal(sig, handler)


@pytest.fixture
def dds_domain(monkeypatch) -> Iterator[int]:
    """Loopback-only Cyclone DDS (CYCLONEDDS_URI) for this test and its subprocesses; a fresh random domain id.

    At the end, no DDS participant of this process may be left: one that nothing closed is deleted (if ever) by
    the garbage collector, at any time and on any thread, or never (tests/dds_support.py, dds_threads)."""
    from tests.dds_support import LOOPBACK_URI, dds_threads, random_domain, wait_until

    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK_URI)
    before = dds_threads()
    yield random_domain()
    wait_until(lambda: dds_threads() <= before, 5.0, "this test's DDS participants to be closed (their threads to end)")


RUN_LOCK = pytest.StashKey[RunLock]()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; a venv without xdist (mjlab's) runs these tests too
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (the README's test command): one worker per core, at most 4 (a learning check's worker holds
    1-2 GiB; more workers would not shorten a run its longest file bounds)."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


def pytest_configure(config):
    config.addinivalue_line("markers", "side_venv(name): runs in the side virtualenv `name` (tests/side_venvs.py)")
    if hasattr(config, "workerinput"):  # an xdist worker; its basetemp is <the run's basetemp>/gwN
        config.stash[RUN_LOCK] = RunLock(Path(config.option.basetemp).parent)
    else:  # not a worker, though maybe started by a test that runs in one (the mjlab venv's pytest)
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            os.environ.pop(name, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, a `realtime` test runs (set-up to tear-down) while the other workers run nothing; the others
    share the cores (tests/workers.py)."""
    lock = item.config.stash.get(RUN_LOCK, None)
    if lock is None:
        return (yield)
    with lock.exclusive() if item.get_closest_marker("realtime") else lock.shared():
        return (yield)


def _file_key(item) -> str:
    return item.nodeid.split("::")[0]


def pytest_collection_modifyitems(config, items):
    """The run's order, file by file (under `--dist loadfile` a worker takes a whole file):
    1. the files that hold a `realtime` test: those tests run alone, and at the start the other workers wait for short
       tests, not for a learning check that ends minutes later (tests/workers.py);
    2. the files that hold a `slow` test (the learning checks, 0.5-1.5 min each), so that no worker is left running
       one alone at the end;
    3. the rest;
    4. the files that run in a side venv not built yet: its build starts in the background now and overlaps the rest
       of the suite (tests/side_venvs.py).
    Every worker orders its collection the same way (xdist requires it)."""
    from tests.side_venvs import start_builds

    venvs = {m.args[0] for item in items if (m := item.get_closest_marker("side_venv"))}
    building = set(start_builds(sorted(venvs))) if venvs else set()
    if building:
        print(f"\nbuilding the side venvs {', '.join(sorted(building))} in the background (once per machine)")
    realtime = {_file_key(item) for item in items if item.get_closest_marker("realtime")}
    slow = {_file_key(item) for item in items if item.get_closest_marker("slow")}

    def part(item) -> int:
        venv = item.get_closest_marker("side_venv")
        if venv is not None and venv.args[0] in building:
            return 3
        key = _file_key(item)
        return 0 if key in realtime else 1 if key in slow else 2

    items.sort(key=part)  # stable: the order within each part is kept


def pytest_sessionfinish(session, exitstatus):
    from tests.side_venvs import stop_builds

    stop_builds()
