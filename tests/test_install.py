"""The package works installed from its wheel, outside the checkout, finding its data folders."""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from robo_rl.core import assets
from tests.conftest import REPO

INSTALLS = ("venv", "user", "target")
"""How a user installs the wheel: a plain venv, `pip install --user` (a robot's ROS 2 computer), `--target DIR`."""
DATA_FILES = sorted(p.relative_to(REPO / "robo_rl").as_posix()
                    for p in (REPO / "robo_rl" / "data").rglob("*") if p.is_file())
"""The data files the package ships, as wheel paths under robo_rl/ (e.g. data/envs/go2.xml)."""


def _copy_source(dest: Path) -> Path:
    """Copy what a clean checkout of this tree holds (tracked and untracked-but-not-ignored files,
    symbolic links as links) to `dest`; returns `dest`."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True)
    for f in out.stdout.splitlines():
        src, target = REPO / f, dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        elif src.is_file():
            target.write_bytes(src.read_bytes())
    return dest


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


def _bare_venv(path: Path, *, system_site_packages: bool = False) -> Path:
    """A venv without pip whose dependencies (torch, mujoco, ...) are this interpreter's; returns its python.

    They are made visible through a .pth line to this interpreter's site-packages, so nothing is
    downloaded. A .pth line adds a folder to sys.path without running the .pth files inside it, so
    the dev checkout's editable install stays invisible there.
    """
    flags = ["--system-site-packages"] if system_site_packages else []
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *flags, str(path)], check=True)
    py = path / "bin" / "python"
    purelib = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "deps_from_dev_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py


@pytest.fixture(scope="session")
def source(tmp_path_factory) -> Path:
    """A copy of this checkout (builds and editable installs write into their source folder)."""
    return _copy_source(tmp_path_factory.mktemp("source") / "robo_rl")


@pytest.fixture(scope="session")
def wheel(source, tmp_path_factory) -> Path:
    """The wheel of this checkout, built once per session (`pip wheel`, as a user or CI would)."""
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)], check=True,
                   capture_output=True)
    (whl,) = out.glob("robo_rl-*.whl")
    return whl


@dataclass(frozen=True)
class Installed:
    """An installation of the wheel: its `robo-rl` command and the environment to run it in."""

    robo_rl: Path
    python: Path
    env: dict[str, str]


def _install(kind: str, wheel: Path, root: Path) -> Installed:
    """Install `wheel` (only robo_rl: `--no-deps`) the way `kind` names, in a fresh environment under `root`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUSERBASE", assets.DATA_ENV_VAR)}
    if kind == "venv":
        py = _bare_venv(root / "venv")
        subprocess.run([*PIP, "--python", str(py), "install", "--no-deps", str(wheel)], check=True,
                       capture_output=True)
        return Installed(py.parent / "robo-rl", py, env)
    if kind == "user":  # pip refuses --user in a venv that hides the system's site-packages (and so the user's)
        py = _bare_venv(root / "venv", system_site_packages=True)
        env["PYTHONUSERBASE"] = str(root / "userbase")
        subprocess.run([*PIP, "--python", str(py), "install", "--user", "--no-deps", str(wheel)], check=True,
                       capture_output=True, env=env)
        return Installed(root / "userbase" / "bin" / "robo-rl", py, env)
    py = _bare_venv(root / "venv")  # --target: a folder the user puts on PYTHONPATH
    target = root / "target"
    subprocess.run([*PIP, "--python", str(py), "install", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    env["PYTHONPATH"] = str(target)
    return Installed(target / "bin" / "robo-rl", py, env)


def _run(installed: Installed, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(installed.robo_rl), *args], cwd=cwd, env=installed.env, capture_output=True,
                          text=True, timeout=timeout)


def test_wheel_carries_the_data_as_real_files(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for f in DATA_FILES:
            assert f"robo_rl/{f}" in names, f
            assert z.read(f"robo_rl/{f}") == (REPO / "robo_rl" / f).read_bytes(), f  # the file, not a link
    assert not [n for n in names if not n.startswith(("robo_rl/", "robo_rl-"))]  # nothing installs outside


def test_checkout_folders_link_to_the_package_data():
    for folder in assets.DATA_FOLDERS:
        link = REPO / folder
        assert link.is_symlink() and link.resolve() == REPO / "robo_rl" / "data" / folder, folder
    assert assets.package_data_root() == REPO / "robo_rl" / "data"


@pytest.mark.parametrize("kind", INSTALLS)
def test_wheel_installs_and_runs_outside_the_checkout(kind, wheel, tmp_path):
    installed = _install(kind, wheel, tmp_path / "install")
    work = tmp_path / "work"  # an unrelated folder: no envs/, hardware/ or policies/ here
    work.mkdir()
    code = ("import robo_rl, robo_rl.core.assets as a; print(robo_rl.__file__); print(a.checkout_root()); "
            "print(a.find_asset('envs/go2.xml'))")
    where = subprocess.run([str(installed.python), "-c", code], cwd=work, env=installed.env, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    folder = {"venv": "venv", "user": "userbase", "target": "target"}[kind]
    assert str(REPO) not in where[0] and str(tmp_path / "install" / folder) in where[0]  # the wheel's copy
    assert where[1] == "None"
    assert where[2] == str(Path(where[0]).parent / "data" / "envs" / "go2.xml")

    tasks = _run(installed, work, "tasks")
    assert tasks.returncode == 0, tasks.stderr
    assert "arm-reach" in tasks.stdout and "quadruped-walk-flat" in tasks.stdout

    train = _run(installed, work, "train", "--task", "arm-reach", "--num-envs", "4", "--max-iterations", "2",
                 "--run-name", "wheel", "--set", "runner.eval_episodes=0", "--set", "algo.num_steps_per_env=8")
    assert train.returncode == 0, train.stderr
    assert "it 2/2" in train.stdout
    run = work / "runs" / "wheel"
    assert (run / "model_000002.pt").is_file()
    provenance = json.loads((run / "provenance.json").read_text())
    assert provenance["git"]["repository"] is None and "not in a git checkout" in provenance["git"]["reason"]
    assert provenance["packages"]["robo_rl"] == "0.1.0" and not (run / "git.diff").exists()

    deploy = _run(installed, work, "deploy", "--policy", "policies/panda_reach.onnx", "--robot",
                  "hardware/panda.yaml", "--transport", "sim", "--duration", "2")
    assert deploy.returncode == 0, deploy.stderr
    assert "stopped in DAMP" in deploy.stdout


def test_editable_install_finds_the_data(source, tmp_path):
    py = _bare_venv(tmp_path / "venv")
    subprocess.run([*PIP, "--python", str(py), "install", "--no-deps", "--no-build-isolation", "-e", str(source)],
                   check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", assets.DATA_ENV_VAR)}
    out = subprocess.run([str(py), "-c", "import robo_rl.core.assets as a; print(a.checkout_root()); "
                          "print(a.package_data_root()); print(a.find_asset('hardware/go2.yaml'))"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:3] == [str(source), str(source / "robo_rl" / "data"), str(source / "hardware" / "go2.yaml")]


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
