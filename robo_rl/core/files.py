"""Files replaced atomically (temp file, fsync, rename): a failure or kill leaves the old file or the new one.

Numpy- and torch-free, so the robot side (robo_rl.demos, robo_rl.deploy) writes its files the way
training writes checkpoints.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_with_companion(path: str | Path, data: bytes, companion: str | Path, companion_data: bytes) -> None:
    """Write `companion` (e.g. a contract JSON or a tokenizer beside a graph), then `path`, each atomically; if writing
    `path` fails the companion is removed too, so neither exists without the other."""
    companion = Path(companion)
    atomic_write(companion, lambda tmp: Path(tmp).write_bytes(companion_data))
    try:
        atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
    except BaseException:
        companion.unlink(missing_ok=True)
        raise
