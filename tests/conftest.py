import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def dds_domain(monkeypatch) -> int:
    """Loopback-only Cyclone DDS (CYCLONEDDS_URI) for this test and its subprocesses; a fresh random domain id."""
    from tests.dds_support import LOOPBACK_URI, random_domain

    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK_URI)
    return random_domain()
