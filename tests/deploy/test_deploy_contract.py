"""The robot side refuses to start when the policy's contract and the robot disagree."""

import dataclasses
import json

import pytest
import yaml

from robo_rl.core.contract import DeployContract
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.policy import validate_contract
from robo_rl.tasks.task_registry import make_env
from tests.conftest import REPO


@pytest.fixture(scope="module")
def go2():
    env = make_env("quadruped-walk-flat", 1)
    contract = env.contract
    env.close()
    return contract, load_hardware(REPO / "hardware" / "go2.yaml")


def test_matching_contract_passes(go2):
    contract, hw = go2
    validate_contract(contract, hw)
    env = make_env("arm-reach", 1)
    validate_contract(env.contract, load_hardware(REPO / "hardware" / "panda.yaml"))
    env.close()


def renamed(contract, names):
    """The joint names changed both in the joint list and in the (one) action term that drives them."""
    term = dataclasses.replace(contract.action.terms[0], joints=names)
    return {"joint_names": names, "action": dataclasses.replace(contract.action, terms=(term,))}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: renamed(c, c.joint_names[:-1] + ("RR_foot_joint",)), "not on robot 'go2'"),
        (lambda c: renamed(c, c.joint_names[:-1] + (c.joint_names[0],)), "more than once"),
        (lambda c: {"quaternion_order": "xyzw"}, "quaternion_order"),
        (lambda c: {"policy_dt": 0.01}, "policy runs at 100 Hz but hardware control_rate_hz is 50 Hz"),
        (lambda c: {"robot": "go1"}, "trained for robot 'go1'"),
        (lambda c: {"torque_limits": (100.0,) * 12}, "torque limits above the robot's"),
        (lambda c: {"kp": c.kp[:3]}, "kp has 3 entries for 12 joints"),
    ],
)
def test_mismatches_are_refused(go2, change, message):
    contract, hw = go2
    bad = dataclasses.replace(contract, **change(contract))
    with pytest.raises(ValueError, match=message):
        validate_contract(bad, hw)


def test_unknown_contract_version_is_refused(go2):
    contract, _ = go2
    raw = json.loads(contract.to_json())
    raw["version"] = 99
    with pytest.raises(ValueError, match="version 99 is not supported"):
        DeployContract.from_json(json.dumps(raw))
    with pytest.raises(ValueError, match="not valid JSON"):
        DeployContract.from_json("{truncated")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: r.update(joint_names=r["joint_names"][:-1] + [r["joint_names"][0]]), "more than once"),
        (lambda r: r.update(quaternion_order="zyxw"), "quaternion_order = 'zyxw'"),
        (lambda r: r.update(kp=r["kp"][:5]), "kp must be a list of 12 numbers"),
        (lambda r: r.update(speed=3), "unknown key"),
        (lambda r: r["safety"].update(max_tilt_rad=-1), "safety.max_tilt_rad = -1"),
        (lambda r: r.update(control_rate_hz="fast"), "control_rate_hz = 'fast'"),
    ],
)
def test_bad_hardware_files(tmp_path, edit, message):
    raw = yaml.safe_load((REPO / "hardware" / "go2.yaml").read_text())
    edit(raw)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=message):
        load_hardware(path)


def test_deploy_core_imports_without_torch_or_mujoco():
    import subprocess
    import sys

    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in ('torch', 'mujoco'):\n"
        "        raise ImportError('blocked ' + name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "import robo_rl.deploy.policy, robo_rl.deploy.controller, robo_rl.deploy.safety\n"
        "import robo_rl.deploy.observations, robo_rl.deploy.session, robo_rl.deploy.hardware\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
