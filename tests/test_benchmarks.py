"""The benchmark scripts run and end with well-formed TARGET lines (their numbers are not asserted)."""

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

TARGET = re.compile(r"^TARGET \w+ measured=[-\d.]+ goal=(>=|<=)[\d.]+ (PASS|FAIL)$")


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, args, expected",
    [
        ("bench_sim.py", ["--quick", "--tasks", "arm-reach"], 2),
        ("bench_ppo.py", ["--quick"], 1),
    ],
)
def test_benchmark_prints_targets(script, args, expected):
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), *args], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr
    targets = [line for line in out.stdout.splitlines() if line.startswith("TARGET")]
    assert len(targets) == expected and all(TARGET.match(t) for t in targets), targets
