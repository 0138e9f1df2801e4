"""Checkpoints: atomic writes (temp file, fsync, rename) and pickle-free loads (`weights_only=True`)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from robo_rl.config import ConfigError

_NAME = re.compile(r"^model_(\d+)\.pt$")


def atomic_write(path: str | Path, write: Any) -> None:
    """Call write(tmp_path) then rename onto `path`; a failure or kill leaves no partial file at `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual permissions
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
