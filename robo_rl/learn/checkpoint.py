"""Checkpoints: atomic saves, pickle-free loads (`weights_only=True`), their names and the latest of a run.

The run folder around them (config, provenance, lock) is `robo_rl.learn.run_folder`.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from robo_rl.core.config import ConfigError
from robo_rl.core.files import atomic_write

CHECKPOINT_KEYS = ("iteration", "train_time", "config", "config_hash", "algo", "env", "episode_return")
"""Top-level keys of a training checkpoint (see `Runner.save`; off-policy runs add `replay`)."""

_NAME = re.compile(r"^model_(\d+)\.pt$")


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint without unpickling arbitrary objects; ValueError if unreadable."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"checkpoint {str(p)!r} does not exist")
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt, truncated, or not a checkpoint
        raise ConfigError(f"checkpoint {str(p)!r} cannot be read: {type(exc).__name__}") from None


def load_run_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a training checkpoint: `load_checkpoint` plus a check that it holds what training writes."""
    state = load_checkpoint(path)
    if not isinstance(state, dict):
        raise ConfigError(f"{str(path)!r} is not a robo_rl training checkpoint (it holds a {type(state).__name__})")
    missing = [k for k in CHECKPOINT_KEYS if k not in state]
    if not missing and not (isinstance(state["algo"], dict) and "policy" in state["algo"]):
        missing = ["algo.policy"]
    if not missing and not isinstance(state["config"], dict):
        missing = ["config"]
    if missing:
        raise ConfigError(f"{str(path)!r} is not a robo_rl training checkpoint (it lacks {', '.join(missing)})")
    return state


def check_output_file(path: str | Path, what: str) -> None:
    """ConfigError unless a file can be written at `path`: not a directory, its folder writable or creatable.

    Probes the nearest existing folder with an anonymous temporary file (nothing is left behind),
    so the answer holds for root and read-only file systems alike.
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} {str(p)!r} is a directory; expected a file name")
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(f"{what} {str(p)!r} cannot be written: {str(folder)!r} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(f"{what} {str(p)!r} cannot be written: {exc.strerror or type(exc).__name__} "
                          f"in {str(folder)!r}") from None


def checkpoint_name(iteration: int) -> str:
    return f"model_{iteration:06d}.pt"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint with the highest iteration in a run directory, or None."""
    found = [(int(m.group(1)), p) for p in Path(run_dir).glob("model_*.pt") if (m := _NAME.match(p.name))]
    return max(found)[1] if found else None


def resolve_checkpoint(run_or_checkpoint: str | Path, log_dir: str | Path = "runs") -> Path:
    """A checkpoint file, a run directory (its latest checkpoint), or a run name under `log_dir`."""
    p = Path(run_or_checkpoint)
    if p.is_file():
        return p
    for d in (p, Path(log_dir) / p):
        if d.is_dir():
            ckpt = latest_checkpoint(d)
            if ckpt is None:
                raise ConfigError(f"run directory {str(d)!r} holds no checkpoint (model_*.pt)")
            return ckpt
    raise ConfigError(f"{str(run_or_checkpoint)!r} is neither a checkpoint file nor a run directory")
