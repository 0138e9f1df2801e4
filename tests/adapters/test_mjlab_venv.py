"""The adapter tests on mjlab's CPU device, in mjlab's own venv (mjlab pins mujoco 3.11; ours is mujoco 4).

`scripts/setup_mjlab.sh` builds the venv the first time (~1 min, ~2.5 GB) in
~/.cache/robo_rl/venvs/mjlab-<hash of constraints-mjlab.txt> (tests/side_venvs.py; ROBO_RL_MJLAB_VENV
overrides the path) and reuses it after, from any clone; tests/adapters/test_isaaclab_adapter.py then
runs there with this checkout first on the path, and every mjlab test in it must pass (none skipped).
Warp's compiled kernels are cached in ~/.cache/robo_rl/warp/mjlab (tests.conftest sets ROBO_RL_WARP_CACHE).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.side_venvs import wait_for
from tests.test_benchmarks import TARGET

REPO = Path(__file__).resolve().parents[2]

# building the venv the first time on a machine takes about a minute (in the background, tests/side_venvs.py)
pytestmark = [pytest.mark.slow, pytest.mark.side_venv("mjlab")]


@pytest.fixture(scope="module")
def mjlab_venv() -> tuple[Path, dict[str, str]]:
    """(venv, environment to run its Python in), built by scripts/setup_mjlab.sh if needed."""
    side = wait_for("mjlab")
    venv, env = side.path, dict(side.env)
    setup = subprocess.run(list(side.command), cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert setup.returncode == 0, f"scripts/setup_mjlab.sh failed:\n{setup.stdout}\n{setup.stderr}"
    env["PYTHONPATH"] = str(REPO)  # this checkout, even when the venv's editable install is another worktree's
    return venv, env


def test_the_adapter_tests_pass_with_mjlab_on_the_cpu(mjlab_venv):
    venv, env = mjlab_venv
    run = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "tests/adapters/test_isaaclab_adapter.py",
                          "-q", "-rs",
                          "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert "mjlab is not installed" not in out, out[-3000:]  # mjlab was importable: none of its tests skipped
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) >= 9, out[-3000:]


def test_bench_adapter_prints_its_target(mjlab_venv):
    """scripts/bench_adapter.py (our adapter vs mjlab's rsl_rl wrapper) runs and ends with its TARGET line."""
    venv, env = mjlab_venv
    run = subprocess.run([str(venv / "bin" / "python"), str(REPO / "scripts" / "bench_adapter.py"), "--smoke"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    targets = [line for line in run.stdout.splitlines() if line.startswith("TARGET")]
    assert len(targets) == 1 and TARGET.match(targets[0]), run.stdout[-2000:]
