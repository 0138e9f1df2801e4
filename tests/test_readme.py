"""Every command in the README is valid, names files that exist, and the cheap ones run.

What each command does is tested where it belongs (test_cli, test_resume, test_export, test_learning
for the quick start, test_benchmarks, the deploy tests); here the README itself is checked, so it
cannot drift from the code.
"""

import importlib.util
import re
import shlex

import pytest

from robo_rl.cli.main import _parser, main
from tests.conftest import REPO, run_cli

README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
LINES = [line.split("  #")[0].strip() for block in BLOCKS for line in block.splitlines() if line.strip()]
ROBO_RL = [shlex.split(line.split("&&")[-1])[1:] for line in LINES if "bin/robo-rl " in line]
PATH_FLAGS = ("--policy", "--robot", "--config")


def test_readme_has_its_commands():
    assert LINES[:2] == ["bash scripts/setup.sh && .venv/bin/robo-rl train --task arm-reach --video",
                         "bash scripts/setup.sh && .venv/bin/python -m pytest -n auto --dist loadfile"]
    assert (REPO / ".ci" / "run").read_text().splitlines()[-1] == LINES[1].split(" && ")[1]  # CI runs that command
    assert {args[0] for args in ROBO_RL} == {"train", "tasks", "play", "export", "deploy", "twin", "record", "replay",
                                             "dataset"}


@pytest.mark.parametrize("args", ROBO_RL, ids=[" ".join(a)[:60] for a in ROBO_RL])
def test_readme_command_parses_and_its_files_exist(args):
    parsed = _parser().parse_args(args)  # argparse exits (a test failure) on an unknown flag
    for flag in PATH_FLAGS:
        value = getattr(parsed, flag.lstrip("-"), None)
        if value is not None:
            assert (REPO / value).is_file(), f"{flag} {value} does not exist"


def test_readme_scripts_exist():
    scripts = [shlex.split(line)[1] for line in LINES if line.startswith(".venv/bin/python scripts/")]
    assert scripts and all((REPO / s).is_file() for s in scripts)


def test_readme_tasks_command_runs(capsys):
    assert main(["tasks"]) == 0
    assert "arm-reach" in capsys.readouterr().out


ROS_SIDE = ("ros2 ", "colcon ", "cd ros_ws", "./run_tests.sh")
"""Commands run in a sourced ROS 2 shell (no ROS here: checked against the package, see below)."""


def test_readme_commands_are_runnable_or_ros_side():
    for line in LINES:
        runnable = (".venv/bin/", ".venv-mjlab/bin/", "bash scripts/setup.sh", "bash scripts/setup_mjlab.sh")
        assert line.startswith(runnable + ROS_SIDE), f"unclassified command: {line}"


def test_readme_ros_commands_name_what_the_package_has():
    from robo_rl.deploy import ros_interface as names

    ros = [line for line in LINES if line.startswith(ROS_SIDE)]
    assert any("colcon build" in line for line in ros)
    assert any(line.startswith("./run_tests.sh") for line in ros)  # after `cd ros_ws`: colcon build + test
    assert "colcon test" in (REPO / "ros_ws" / "run_tests.sh").read_text()
    services = {s.removeprefix("~/") for s in (names.START_SERVICE, names.STOP_SERVICE, names.RESET_ESTOP_SERVICE,
                                                names.RESET_SERVICE)}
    for line in ros:
        words = shlex.split(line.split("&&")[-1])
        if words[:2] == ["ros2", "launch"]:
            launch_file = REPO / "ros_ws/src/robo_rl_ros/launch" / words[3]
            assert words[2] == names.PACKAGE and launch_file.is_file(), line
            declared = set(re.findall(r'DeclareLaunchArgument\(\s*"(\w+)"', launch_file.read_text()))
            for arg in words[4:]:
                key, value = arg.split(":=")
                assert key in declared, line
                assert key not in ("robot", "policy") or (REPO / value).is_file(), line
        elif words[:3] == ["ros2", "service", "call"]:
            node, service = words[3].rsplit("/", 1)
            assert node == f"/{names.POLICY_NODE}" and service in services and words[4] == "std_srvs/srv/Trigger"
        elif words[:3] == ["ros2", "topic", "pub"]:
            args = [w for i, w in enumerate(words[3:]) if not w.startswith("-") and (i == 0 or words[2 + i] != "-r")]
            assert args[0] == "/" + names.ESTOP.name and args[1] == names.ESTOP.ros_type, line  # --once, -r RATE
        elif words[:2] == ["ros2", "lifecycle"]:
            assert words[3] == f"/{names.POLICY_NODE}" and words[4] in ("configure", "activate"), line


@pytest.mark.parametrize("args", [a for a in ROBO_RL if a[0] == "deploy" and "dds" not in a], ids=lambda a: a[2])
def test_readme_deploy_command_runs(args, tmp_path):
    """The sim deploy commands as written, on the real-time twin, cut to 2 s (the DDS ones need a robot or a
    twin on the other side: tests/deploy/test_dds_transport.py runs them); a recording goes to a fresh folder."""
    cut = [a for i, a in enumerate(args) if a != "--duration" and (i == 0 or args[i - 1] != "--duration")]
    cut = [str(tmp_path / "rec") if i and cut[i - 1] == "--record" else a for i, a in enumerate(cut)]
    result = run_cli(*cut, "--duration", "2", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "stopped in DAMP" in result.stdout


TRAIN = [args for args in ROBO_RL if args[0] == "train"]


@pytest.mark.parametrize("args", TRAIN, ids=[" ".join(a)[:60] for a in TRAIN])
def test_readme_train_command_resolves_its_config(args, tmp_path):
    """Every README training command's config (preset, flags, --set overrides) builds and validates."""
    from robo_rl.cli.main import _train_config

    parsed = _parser().parse_args([*args, "--set", f"runner.log_dir={tmp_path}"])
    if parsed.resume:
        return
    start = _train_config(parsed)
    import dataclasses

    import torch

    from robo_rl.learn.builders import build_env

    cfg = start.cfg
    framework = cfg.task.split(":")[0]
    if framework in ("mjlab", "isaaclab") and importlib.util.find_spec(framework) is None:
        return  # built by tests/adapters/test_isaaclab_adapter.py in the framework's venv
    if cfg.sim.device != "cpu" and not torch.cuda.is_available():  # a GPU command: build it on Warp's CPU device
        cfg = dataclasses.replace(cfg, sim=dataclasses.replace(cfg.sim, device="cpu"))
    env = build_env(cfg, num_envs=1)  # task-level checks too (observation term names, pushes)
    assert env.num_envs == 1
    env.close()


TORCHRUN = [shlex.split(line) for line in LINES if line.startswith(".venv/bin/torchrun ")]


def test_readme_torchrun_commands_parse():
    """torchrun's own flags parse with torchrun's parser, ours with ours, and every rank is told --distributed."""
    from torch.distributed.run import get_args_parser

    assert TORCHRUN
    for words in TORCHRUN:
        launcher = get_args_parser().parse_args(words[1:])
        assert launcher.module and launcher.training_script == "robo_rl.cli", words
        ours = _parser().parse_args(launcher.training_script_args)
        assert ours.command == "train" and ours.distributed and ours.num_envs % int(launcher.nproc_per_node) == 0, words
