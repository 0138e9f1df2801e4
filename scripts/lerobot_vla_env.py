"""Build the virtualenv in which LeRobot's SmolVLA runs behind the VLA interface (robo_rl.learn.networks.lerobot_vla):

    python3 scripts/lerobot_vla_env.py --ensure-venv PATH      # prints PATH/bin/python once it is built
    PATH/bin/python -m pytest -p no:cacheprovider -q tests/learn/test_lerobot_vla.py

The install steps and their pinned versions are `install_steps` below, the one place they are written; the build
itself is scripts/lerobot_check.py's `ensure_venv` (into a temporary folder, renamed when complete).

LeRobot 0.4.4 is the newest release for Python 3.11 (0.5 and later need Python 3.12). It declares torch < 2.11 and
torchvision < 0.26, so it is installed with --no-deps beside the torch this machine has on disk, and the
dependencies that its SmolVLA policy imports are pinned here by hand (its other ones, robots, datasets' video
decoding, wandb, are not installed). Its π0 (`lerobot.policies.pi0`) is not usable from PyPI: it refuses to build
without a patched transformers that is not published there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lerobot_check import TORCH, ensure_venv  # noqa: E402  (the dataset-check venv's torch and builder)

REPO = Path(__file__).resolve().parents[1]
LEROBOT = "lerobot==0.4.4"
DEPENDENCIES = [
    "transformers==4.57.6", "num2words==0.5.14", "draccus==0.10.0", "huggingface-hub==0.35.3", "packaging==25.0",
    "datasets==4.1.1", "pyarrow==26.0.1", "pandas==3.1.1", "fsspec==2025.9.0", "accelerate==1.16.0",
    "diffusers==0.35.2", "imageio==2.38.2", "av==15.1.0", "deepdiff==8.6.2", "einops==0.8.2", "pyserial==3.5",
]
"""What `lerobot.policies.smolvla` imports, within LeRobot 0.4.4's declared ranges (transformers < 5,
huggingface-hub < 0.36, diffusers < 0.36, ...): its modules import lerobot.datasets, lerobot.optim and
lerobot.processor, which import these."""
ROBO_RL = ["mujoco==4.0.0", "pytest==9.2.0"]
"""What importing robo_rl.learn needs beyond torch, numpy and pyyaml (the algorithms import the simulator), and
the test runner."""


def install_steps(venv: Path) -> list[list[str]]:
    """The commands that build the policy venv at `venv`, in order. TORCH is repeated in each install so that pip
    keeps the torch it has (and never resolves another: that would download a CUDA build of several GB)."""
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check"]
    return [[sys.executable, "-m", "venv", str(venv)], [*pip, *TORCH], [*pip, "--no-deps", LEROBOT],
            [*pip, *DEPENDENCIES, *ROBO_RL, *TORCH], [*pip, "--no-deps", "-e", str(REPO)]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ensure-venv", metavar="VENV", required=True, help="build the venv at VENV if missing")
    p.add_argument("--print-steps", action="store_true", help="print the install commands and exit")
    a = p.parse_args()
    if a.print_steps:
        for cmd in install_steps(Path(a.ensure_venv).absolute()):
            print(" ".join(cmd))
        return
    python, reason = ensure_venv(a.ensure_venv, steps=install_steps)
    if python is None:
        print(" ".join(reason.split())[:500], file=sys.stderr)
        sys.exit(2)
    print(python)


if __name__ == "__main__":
    main()
