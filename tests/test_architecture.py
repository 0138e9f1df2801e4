"""The architecture of DESIGN.md holds: import-linter's contracts (pyproject.toml) pass, so the robot side needs
no torch or mujoco, every package imports only the layers below it, and no package has an import cycle."""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_import_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    exe = str(exe) if exe.exists() else shutil.which("lint-imports")
    assert exe, "lint-imports is not installed (the dev extra of pyproject.toml has import-linter)"
    out = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in out.stdout
