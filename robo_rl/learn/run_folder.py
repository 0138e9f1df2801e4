"""The run folder: find a run, create and lock it, write its resolved config and its provenance.

A run folder `<runner.log_dir>/<name>/` holds:

    config.yaml                  the resolved training config (rewritten when a resume changes runner fields)
    provenance.json              where the run came from: command line, commit, package versions, resumes
    git.diff                     the uncommitted changes of the code that started the run (`git diff HEAD`)
    git.resume-<iteration>.diff  the uncommitted changes of the code that resumed it at that iteration
    .lock                        the run lock, held by the one process that trains in the folder
    model_<iteration>.pt         checkpoints (`robo_rl.learn.checkpoint`), TensorBoard events, videos/

Every file is written atomically (`robo_rl.core.files.atomic_write`). Provenance is recorded for the
git checkout that holds the running `robo_rl` package; an installed wheel (no checkout) records that
there is no repository instead of failing. A resume keeps the first record as it is and appends one
entry to its `resumes` list (time, iteration, command, commit, package versions).

The run lock is an OS lock (`fcntl.flock`) on `<run>/.lock`. The kernel drops it when the holding
process ends, however it ends (SIGKILL included), so a lock can never go stale; the file itself only
carries the holder's pid for the error message. Imports no torch (play and export read provenance).
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from robo_rl.core.config import UserError
from robo_rl.core.files import atomic_write
from robo_rl.learn.train_config import TrainConfig

CONFIG_FILE = "config.yaml"
LOCK_FILE = ".lock"
PROVENANCE_FILE = "provenance.json"
DIFF_FILE = "git.diff"
PROVENANCE_VERSION = 1
PACKAGES = ("robo_rl", "torch", "mujoco", "mujoco-warp", "warp-lang", "numpy", "onnx", "onnxruntime", "gymnasium")
"""Distributions whose installed versions every run records (absent ones as null)."""
MAX_UNTRACKED = 100
"""Untracked file names listed in the record (their content is not saved)."""
PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""The `robo_rl` package folder whose checkout the provenance describes."""


class RunInUse(UserError):
    """Another process holds the run folder's lock."""


# ---------------------------------------------------------------------------------------------- find / create
def find_run_dir(run: str, log_dir: str | Path = "runs") -> Path:
    """The run folder of `--resume RUN`: a folder holding config.yaml, given as a path or a name under `log_dir`.

    Raises:
        UserError: one line when no such run folder exists.
    """
    candidates = (Path(run), Path(log_dir) / run)
    for d in candidates:
        if (d / CONFIG_FILE).is_file():
            return d
    for d in candidates:
        if d.is_dir():
            raise UserError(f"--resume {run}: {d} holds no {CONFIG_FILE}, so it is not a run folder")
    raise UserError(f"run {run!r} not found (expected a run folder holding {CONFIG_FILE})")


def check_new_run_dir(run_dir: Path) -> None:
    """UserError unless `run_dir` can become a new run: not an existing run, not a file."""
    if (run_dir / CONFIG_FILE).exists():
        raise UserError(f"run directory {run_dir} already exists; use --resume {run_dir} or another --run-name")
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"run directory {run_dir} is a file; choose another --run-name")


def write_config(run_dir: Path, cfg: TrainConfig) -> None:
    """Write `<run_dir>/config.yaml` atomically (a crash leaves the old file or the new one, never half)."""
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    atomic_write(Path(run_dir) / CONFIG_FILE, lambda tmp: Path(tmp).write_text(text))


def create_run_dir(run_dir: Path, cfg: TrainConfig, command: list[str]) -> RunLock:
    """Create and lock a new run folder, write its config and provenance; returns the held lock.

    Args:
        run_dir: the new run folder (checked by `check_new_run_dir`).
        cfg: the resolved training config.
        command: the command line that started the run, e.g. ["robo-rl", "train", "--task", "arm-reach"].

    Raises:
        UserError: the folder cannot be created, or another process started this run meanwhile.
            On failure nothing is left behind.
    """
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create run directory {run_dir}: {exc.strerror or type(exc).__name__} "
                        "(check runner.log_dir and --run-name)") from None
    lock = None
    try:
        lock = RunLock(run_dir)
        check_new_run_dir(run_dir)  # another process may have started this run meanwhile
        record, diff = collect_provenance(command)
        write_provenance(run_dir, record, {DIFF_FILE: diff})
        write_config(run_dir, cfg)  # last: config.yaml is what marks a complete run folder
    except BaseException:
        if lock is not None:
            lock.release()
            if created:  # ours alone: we made it and held its lock
                shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return lock


def record_resume(run_dir: Path, cfg: TrainConfig, iteration: int, command: list[str]) -> None:
    """Write a resumed run's config and append the resume to its provenance (the first record is kept).

    A run started before provenance was recorded gets a provenance.json holding only its resumes.
    The resume's uncommitted changes go to `git.resume-<iteration>.diff` (only when there are any).
    """
    record, diff = collect_provenance(command)
    record["iteration"] = int(iteration)
    diff_name = f"git.resume-{iteration:06d}.diff"
    if diff:
        record["git"]["diff_file"] = diff_name
    first = read_provenance(run_dir) or {"version": PROVENANCE_VERSION, "note": "started before robo_rl recorded "
                                         "provenance", "resumes": []}
    first.setdefault("resumes", []).append(record)
    write_provenance(run_dir, first, {diff_name: diff})
    write_config(run_dir, cfg)


class RunLock:
    """Exclusive lock on a run folder for as long as this object is open (use as a context manager).

    Args:
        run_dir: the run folder (must exist).

    Raises:
        RunInUse: another live process holds the lock.
    """

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunInUse(f"run {str(run_dir)!r} is in use by another process (pid {holder}); "
                           "wait for it to finish or stop it first") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# ---------------------------------------------------------------------------------------------- provenance
def _git(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30)


def git_state(folder: Path = PACKAGE_DIR) -> tuple[dict[str, Any], str]:
    """The git state of the checkout whose tracked files include `folder`: (record, `git diff HEAD` text).

    The record is `{"repository": top-level folder, "commit", "branch", "dirty", "untracked"}`, or
    `{"repository": None, "reason": ...}` when `folder` is not tracked by a git checkout (an installed
    wheel, a copied tree, no git program); the diff is then "".
    """
    try:
        top = _git(folder, "rev-parse", "--show-toplevel")
        if top.returncode != 0:  # not a checkout, or one git refuses to read (e.g. "dubious ownership")
            why = (top.stderr.strip().splitlines() or [""])[0]
            reason = f"{folder} is not in a git checkout" if not why or "not a git repository" in why else f"git: {why}"
            return {"repository": None, "reason": reason}, ""
        # a wheel installed in a venv inside some project's checkout is in its folder but not tracked by it
        if _git(folder, "ls-files", "--error-unmatch", "--", ".").returncode != 0:
            return {"repository": None, "reason": f"{folder} is not tracked by the git checkout around it"}, ""
        commit = _git(folder, "rev-parse", "HEAD")
        branch = _git(folder, "rev-parse", "--abbrev-ref", "HEAD")
        diff = _git(folder, "diff", "HEAD", "--no-color", "--no-ext-diff") if commit.returncode == 0 else None
        untracked = _git(folder, "ls-files", "--others", "--exclude-standard", "--full-name", "--", ":/")
    except FileNotFoundError:
        return {"repository": None, "reason": "the git program is not installed"}, ""
    except subprocess.TimeoutExpired:
        return {"repository": None, "reason": "git did not answer within 30 s"}, ""
    text = diff.stdout if diff is not None and diff.returncode == 0 else ""
    names = untracked.stdout.splitlines()
    record = {
        "repository": top.stdout.strip(),
        "commit": commit.stdout.strip() if commit.returncode == 0 else None,
        "branch": branch.stdout.strip() if branch.returncode == 0 else None,
        "dirty": bool(text),
        "untracked": names[:MAX_UNTRACKED] + ([f"... and {len(names) - MAX_UNTRACKED} more"]
                                              if len(names) > MAX_UNTRACKED else []),
    }
    if text:
        record["diff_file"] = DIFF_FILE
    return record, text


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions of `names` (None for those not installed) plus the Python version."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def collect_provenance(command: list[str], folder: Path = PACKAGE_DIR) -> tuple[dict[str, Any], str]:
    """(record, diff text) of this process: time, command line, working folder, git state, versions.

    Args:
        command: the command line, e.g. ["robo-rl", "train", "--task", "arm-reach"].
        folder: a folder of the code whose checkout is recorded (default: the `robo_rl` package).
    """
    git, diff = git_state(folder)
    record = {
        "version": PROVENANCE_VERSION,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": shlex.join(command),
        "cwd": os.getcwd(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "git": git,
        "packages": package_versions(),
    }
    return record, diff


def write_provenance(run_dir: Path, record: dict[str, Any], diffs: dict[str, str]) -> None:
    """Write the diffs that are not empty, then `provenance.json`, each atomically."""
    for name, text in diffs.items():
        if text:
            atomic_write(Path(run_dir) / name, lambda tmp, text=text: Path(tmp).write_text(text))
    payload = json.dumps(record, indent=2) + "\n"
    atomic_write(Path(run_dir) / PROVENANCE_FILE, lambda tmp: Path(tmp).write_text(payload))


def read_provenance(run_dir: Path) -> dict[str, Any] | None:
    """The run's provenance record, or None when it has none (older runs) or it cannot be read."""
    try:
        record = json.loads((Path(run_dir) / PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _commit_text(git: dict[str, Any] | None) -> str:
    """`commit abc1234 (+diff)`, or why there is none."""
    if not isinstance(git, dict):
        return "an unknown commit"
    if git.get("repository") is None:
        return f"no git commit ({git.get('reason', 'no repository')})"
    commit = git.get("commit") or "(no commit yet)"
    return f"commit {commit[:7]}" + (" (+diff)" if git.get("dirty") else "")


def provenance_line(run_dir: Path) -> str:
    """One line for play and export: `run trained at commit abc1234 (+diff)` (and its last resume's commit)."""
    record = read_provenance(run_dir)
    if record is None:
        return f"run provenance unknown ({Path(run_dir) / PROVENANCE_FILE} missing or unreadable)"
    line = f"run trained at {_commit_text(record.get('git'))}" if "git" in record else "run started before " \
        "provenance was recorded"
    resumes = record.get("resumes") or []
    if resumes:
        last = resumes[-1]
        line += f"; resumed {len(resumes)}x, last at iteration {last.get('iteration')} with " \
                f"{_commit_text(last.get('git'))}"
    return line
