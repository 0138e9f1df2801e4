"""The package works installed from its wheel, outside the checkout, finding its data folders."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from robo_rl.core import assets
from tests.conftest import REPO


def _source_files() -> list[str]:
    """Tracked and untracked-but-not-ignored files: what a clean checkout of this tree holds."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if (REPO / f).is_file()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed non-editable; returns its bin folder.

    Only robo_rl comes from the wheel (`--no-deps`); its dependencies (torch, mujoco, ...) are made
    visible through a .pth line to this interpreter's site-packages, so no multi-GB download.
    A .pth line adds a folder to sys.path without running the .pth files inside it, so this
    checkout's editable install stays invisible there.
    """
    root = tmp_path_factory.mktemp("install")
    src = root / "src"
    for f in _source_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_bytes((REPO / f).read_bytes())
    wheels = root / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)], check=True,
                   capture_output=True)
    (wheel,) = wheels.glob("robo_rl-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "deps_from_dev_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([*pip, "--python", str(py), "install", "--no-deps", str(wheel)], check=True, capture_output=True)
    return venv / "bin"


def _run(bin_dir: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", assets.DATA_ENV_VAR)}
    return subprocess.run([str(bin_dir / "robo-rl"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_wheel_installs_and_runs_outside_the_checkout(installed, tmp_path):
    py = installed / "python"
    where = subprocess.run([str(py), "-c", "import robo_rl, robo_rl.core.assets as a; print(robo_rl.__file__); "
                            "print(a.checkout_root()); print(a.find_asset('envs/go2.xml'))"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split("\n")
    assert str(REPO) not in where[0]  # the wheel's copy, not this checkout
    assert where[1] == "None"
    assert "share/robo_rl/envs/go2.xml" in where[2]

    tasks = _run(installed, tmp_path, "tasks")
    assert tasks.returncode == 0, tasks.stderr
    assert "arm-reach" in tasks.stdout and "quadruped-walk-flat" in tasks.stdout

    train = _run(installed, tmp_path, "train", "--task", "arm-reach", "--num-envs", "8", "--max-iterations", "2",
                 "--run-name", "wheel", "--set", "runner.eval_episodes=0")
    assert train.returncode == 0, train.stderr
    assert "it 2/2" in train.stdout
    assert (tmp_path / "runs" / "wheel" / "model_000002.pt").is_file()

    deploy = _run(installed, tmp_path, "deploy", "--policy", "policies/panda_reach.onnx", "--robot",
                  "hardware/panda.yaml", "--transport", "sim", "--duration", "2")
    assert deploy.returncode == 0, deploy.stderr
    assert "stopped in DAMP" in deploy.stdout


def test_data_search_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(assets.DATA_ENV_VAR, raising=False)
    # the checkout is found when nothing else has the file
    assert assets.find_asset("envs/panda.xml") == REPO / "envs" / "panda.xml"
    # an explicit existing path wins over everything
    (tmp_path / "envs").mkdir()
    local = tmp_path / "envs" / "panda.xml"
    local.write_text("<mujoco/>")
    assert assets.find_asset("envs/panda.xml") == Path("envs/panda.xml")
    # the environment variable comes before the checkout
    other = tmp_path / "data"
    (other / "hardware").mkdir(parents=True)
    (other / "hardware" / "go2.yaml").write_text("robot: go2\n")
    monkeypatch.setenv(assets.DATA_ENV_VAR, str(other))
    assert assets.find_asset("hardware/go2.yaml") == other / "hardware" / "go2.yaml"
    assert assets.find_data_file("hardware", "go2.yaml") == other / "hardware" / "go2.yaml"
    with pytest.raises(ValueError, match="MJCF file 'envs/nope.xml' not found.*ROBO_RL_DATA"):
        assets.find_asset("envs/nope.xml", what="MJCF file")


def test_import_robo_rl_deploy_leaves_the_environment_unchanged():
    code = (
        "import os; before = dict(os.environ); "
        "import robo_rl, robo_rl.deploy, robo_rl.deploy.session, robo_rl.deploy.policy, robo_rl.deploy.safety; "
        "print(dict(os.environ) == before)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_training_entry_point_sets_its_openmp_default():
    code = ("import os; from robo_rl.cli.main import main; main(['tasks']); print(os.environ.get('OMP_WAIT_POLICY')); "
            "from robo_rl.sim import set_training_process_defaults as s; s(); print(os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-2:] == ["None", "PASSIVE"]  # `tasks` does not train: nothing set
