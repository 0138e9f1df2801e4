"""Deploy hardening: unsafe policies, operator inputs and hardware files are refused or clamped before RAMP,
with one line naming the field; the MuJoCo twin (wrapped in a recording RobotInterface) never receives
an unsafe command; the deploy command exits non-zero with the reason when it stops on a fault."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

from robo_rl.cli.main import main
from robo_rl.core.contract import DeployContract
from robo_rl.deploy import session as session_mod
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.operator_commands import check_command
from robo_rl.deploy.policy import CONTRACT_KEY, OnnxPolicy, validate_contract
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.safety import upright_problem
from robo_rl.deploy.session import open_session
from robo_rl.deploy.state_machine import Mode
from robo_rl.terms.command_ranges import command_ranges
from tests.conftest import REPO
from tests.deploy.test_deploy_properties import assert_guarantees

GO2_POLICY = REPO / "policies" / "go2_walk.onnx"
PANDA_POLICY = REPO / "policies" / "panda_reach.onnx"
GO2_HW = REPO / "hardware" / "go2.yaml"
PANDA_HW = REPO / "hardware" / "panda.yaml"


class RecordingRobot:
    """RobotInterface around a real transport (here the MuJoCo twin) that records every command it is sent.

    With `other_quat_order` it reports the IMU quaternion in the other order than the hardware file
    says, as a robot whose firmware was misdescribed would.
    """

    def __init__(self, inner, other_quat_order: bool = False):
        self.inner = inner
        self.other_quat_order = other_quat_order
        self.last_state: RobotState | None = None
        self.received: list[tuple[RobotState, JointCommand]] = []

    def read_state(self) -> RobotState:
        s = self.inner.read_state()
        if self.other_quat_order and s.imu_quat is not None:
            w, x, y, z = s.imu_quat  # the twin reports the hardware's order, wxyz here
            s = replace(s, imu_quat=np.array([x, y, z, w]))
        self.last_state = s
        return s

    def send_command(self, command: JointCommand) -> None:
        self.received.append((self.last_state, command))
        self.inner.send_command(command)

    def close(self) -> None:
        self.inner.close()

    @property
    def time(self) -> float:
        return self.inner.time


def never_connect(monkeypatch):
    """Fail the test if anything tries to create a transport."""

    def refuse(*args, **kwargs):
        raise AssertionError("a robot was connected although the input should have been refused first")

    monkeypatch.setattr(session_mod, "make_robot", refuse)


def edited_policy(tmp_path: Path, edit) -> Path:
    """A copy of the Go2 reference policy whose embedded contract JSON was changed by `edit(raw)`."""
    model = onnx.load(str(GO2_POLICY))
    for prop in model.metadata_props:
        if prop.key == CONTRACT_KEY:
            raw = json.loads(prop.value)
            edit(raw)
            prop.value = json.dumps(raw)
    out = tmp_path / "edited.onnx"
    onnx.save(model, str(out))
    return out


def edited_hardware(tmp_path: Path, edit, source: Path = GO2_HW) -> Path:
    raw = yaml.safe_load(source.read_text())
    edit(raw)
    out = tmp_path / "robot.yaml"
    out.write_text(yaml.safe_dump(raw))
    return out


def run_to_policy(session, policy_ticks: int) -> None:
    c = session.controller
    c.request_ramp()
    for _ in range(1000):
        c.tick(session.robot.time)
        if c.mode is Mode.READY:
            c.start_policy()
            break
    for _ in range(policy_ticks):
        c.tick(session.robot.time)


def assert_twin_got_only_safe_commands(session) -> None:
    assert session.robot.received
    for state, cmd in session.robot.received:
        assert_guarantees(session.hw, state, cmd, [])


# ------------------------------------------------------------------------------------------------ item 2


def test_hardware_files_bound_their_gains():
    for path in (GO2_HW, PANDA_HW):
        hw = load_hardware(path)
        assert np.all(hw.kp <= hw.kp_max) and np.all(hw.kd <= hw.kd_max)
        assert np.all(hw.kd_max >= hw.safety.damping_kd)


def test_contract_gain_above_kp_max_is_refused_at_load(tmp_path, monkeypatch):
    never_connect(monkeypatch)
    policy = edited_policy(tmp_path, lambda r: r.update(kp=[1e6] + r["kp"][1:]))
    with pytest.raises(ValueError, match=r"^contract kp for FL_hip_joint = 1e\+06 exceeds the robot's kp_max = 80 "):
        open_session(policy, GO2_HW, realtime=False)
    policy = edited_policy(tmp_path, lambda r: r.update(kd=r["kd"][:5] + [9.0] + r["kd"][6:]))
    with pytest.raises(ValueError, match="contract kd for FR_calf_joint = 9 exceeds the robot's kd_max = 5"):
        open_session(policy, GO2_HW, realtime=False)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.update(kp=[100] * 12), "kp for FR_hip_joint = 100 exceeds kp_max = 80"),
    (lambda r: r.pop("kp_max"), "kp_max must be a list of 12 numbers"),
    (lambda r: r.update(kd_max=[0] * 12), "kd_max = .*every entry must be > 0"),
])
def test_hardware_gain_bounds_are_checked(tmp_path, edit, message):
    with pytest.raises(ValueError, match=message):
        load_hardware(edited_hardware(tmp_path, edit))


# ------------------------------------------------------------------------------------------------ item 3


def test_command_ranges_come_from_the_contract():
    go2 = OnnxPolicy(GO2_POLICY).contract
    assert command_ranges(go2) == {"velocity_command": ((-1.0, -0.5, -1.0), (1.0, 0.5, 1.0))}
    panda = OnnxPolicy(PANDA_POLICY).contract
    assert command_ranges(panda) == {"target_pos": ((0.35, -0.25, 0.15), (0.65, 0.25, 0.55))}
    with pytest.raises(ValueError, match=r"extra.lin_vel_x = \[1.0, -1.0\]"):
        command_ranges(replace(go2, extra={**go2.extra, "lin_vel_x": [1.0, -1.0]}))


def test_check_command_clamps_with_one_line_and_refuses_non_finite():
    bounds = ((-1.0, -0.5, -1.0), (1.0, 0.5, 1.0))
    value, warning = check_command("velocity_command", [3.0, 0.0, 0.0], 3, bounds)
    np.testing.assert_array_equal(value, [1.0, 0.0, 0.0])
    assert warning == ("velocity_command [3, 0, 0] is outside the range the policy was trained on "
                       "(low [-1, -0.5, -1], high [1, 0.5, 1]); clamped to [1, 0, 0]")
    assert check_command("velocity_command", [0.5, 0.1, 0.0], 3, bounds)[1] is None
    for bad in ([math.nan, 0, 0], [0, math.inf, 0], [0, 0]):
        with pytest.raises(ValueError, match="^velocity_command = "):
            check_command("velocity_command", bad, 3, bounds)


def test_non_finite_command_is_refused_before_connecting(monkeypatch):
    never_connect(monkeypatch)
    with pytest.raises(ValueError, match=r"velocity_command = \[nan, 0, 0\]: non-finite input refused"):
        open_session(GO2_POLICY, GO2_HW, realtime=False, commands={"velocity_command": [math.nan, 0, 0]})
    with pytest.raises(ValueError, match="target_pos = .*non-finite"):
        open_session(PANDA_POLICY, PANDA_HW, realtime=False, commands={"target_pos": [0.5, math.inf, 0.3]})
    with pytest.raises(ValueError, match="does not take it"):
        open_session(PANDA_POLICY, PANDA_HW, realtime=False, commands={"velocity_command": [0.5, 0, 0]})


def test_run_time_commands_are_checked_too():
    warnings = []
    s = open_session(PANDA_POLICY, PANDA_HW, realtime=False, warn=warnings.append)
    np.testing.assert_allclose(s.policy.commands["target_pos"], [0.5, 0.0, 0.35])  # centre of the box
    np.testing.assert_allclose(s.policy.set_command("target_pos", [2.0, 0.0, 0.3]), [0.65, 0.0, 0.3])
    assert len(warnings) == 1 and warnings[0].startswith("target_pos [2, 0, 0.3] is outside")
    with pytest.raises(ValueError, match="non-finite"):
        s.policy.commands["target_pos"] = [math.nan, 0.0, 0.3]
    np.testing.assert_allclose(s.policy.commands["target_pos"], [0.65, 0.0, 0.3])  # the old value stays
    s.robot.close()


def test_absurd_velocity_is_clamped_and_the_twin_walks_safely():
    """--velocity 50,0,0 used to collapse the twin with no fault: now it is clamped to 1 m/s."""
    warnings = []
    s = open_session(GO2_POLICY, GO2_HW, realtime=False, commands={"velocity_command": [50.0, 0.0, 0.0]},
                     warn=warnings.append, wrap_robot=RecordingRobot)
    assert len(warnings) == 1 and "clamped to [1, 0, 0]" in warnings[0]
    run_to_policy(s, policy_ticks=150)  # 3 s of walking
    assert s.controller.mode is Mode.POLICY and s.controller.last_fault is None
    assert s.robot.inner.data.qpos[2] > 0.2  # base height: still on its feet
    assert s.robot.inner.data.qpos[0] > 1.0  # and it walked forward
    assert_twin_got_only_safe_commands(s)


# ------------------------------------------------------------------------------------------------ item 4


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["safety"].update(torque_margin=5), r"safety.torque_margin = 5 is outside its safe range \(0, 1\]"),
    (lambda r: r["safety"].update(max_position_step=100), r"safety.max_position_step = 100 .* \(0, 0.5\]"),
    (lambda r: r["safety"].update(state_timeout_s=1e9), r"safety.state_timeout_s = 1000000000.0 .* \(0, 0.5\]"),
    (lambda r: r["safety"].update(ramp_time_s=0), r"safety.ramp_time_s = 0 .* \[0.5, 10\]"),
    (lambda r: r["safety"].pop("max_tilt_rad"), "safety.max_tilt_rad is missing: a legged robot needs"),
    (lambda r: r["safety"].update(damping_kd=50), r"safety.damping_kd = 50 .* \(0, 5\]"),
    (lambda r: r["safety"].update(overspeed_factor=3), r"safety.overspeed_factor = 3 .* \[1, 1.5\]"),
    (lambda r: r.update(kp=[-1] + [25] * 11), "kp = .*every entry must be >= 0"),
    (lambda r: r.update(velocity_limits=[0] * 12), "velocity_limits = .*every entry must be > 0"),
])
def test_hardware_file_cannot_switch_safety_off(tmp_path, monkeypatch, edit, message):
    never_connect(monkeypatch)
    path = edited_hardware(tmp_path, edit)
    with pytest.raises(ValueError, match=message) as err:
        open_session(GO2_POLICY, path, realtime=False)
    assert "\n" not in str(err.value)


def test_unsafe_override_is_explicit_and_loud(tmp_path):
    path = edited_hardware(tmp_path, lambda r: r["safety"].update(torque_margin=5))
    lines = []
    hw = load_hardware(path, allow_unsafe=True, warn=lines.append)
    assert hw.safety.torque_margin == 5
    assert len(lines) == 1 and lines[0].startswith("WARNING: UNSAFE HARDWARE OVERRIDE") and "torque_margin" in lines[0]


def test_arm_kind_on_a_legged_robot_is_refused(tmp_path, monkeypatch):
    never_connect(monkeypatch)
    # feet and the estimator are for legged robots (load_hardware refuses them on an arm): gone, like the IMU
    path = edited_hardware(tmp_path, lambda r: (r.update(kind="arm"), r.pop("feet"), r.pop("estimator")))
    with pytest.raises(ValueError, match="term 'base_ang_vel' needs an IMU on a floating base, but hardware 'go2' "
                                         "is kind 'arm'"):
        open_session(GO2_POLICY, path, realtime=False)
    from robo_rl.deploy.transports.sim import SimRobot

    with pytest.raises(ValueError, match="has a free joint .* but hardware 'go2' is kind 'arm'"):
        SimRobot(REPO / "envs" / "go2.xml", load_hardware(path), control_dt=0.02)


def yaw_quat(yaw: float) -> np.ndarray:
    return np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)])  # (w, x, y, z)


def test_gravity_check_physics_and_its_blind_spot():
    # A misread order shows a tilt equal to the heading's distance from one blind heading: |yaw| for
    # xyzw data read as wxyz, |pi - yaw| for wxyz data read as xyzw. Headings 1.2-2.0 rad are caught by both.
    for yaw in (1.2, math.pi / 2, 2.0):
        q = yaw_quat(yaw)
        assert upright_problem(q, "wxyz", 1.0) is None
        xyzw_data = np.roll(q, -1)  # a robot sending (x, y, z, w), misdescribed as wxyz
        assert "quaternion_order looks wrong" in upright_problem(xyzw_data, "wxyz", 1.0)
        assert "quaternion_order looks wrong" in upright_problem(q, "xyzw", 1.0)
    # Within max_tilt of the blind heading the misread quaternion is a level base turned about z: no
    # gravity check can tell (the physics limit documented in upright_problem).
    assert upright_problem(np.roll(yaw_quat(0.0), -1), "wxyz", 1.0) is None
    assert upright_problem(np.roll(yaw_quat(0.5), -1), "wxyz", 1.0) is None
    assert upright_problem(yaw_quat(math.pi - 0.5), "xyzw", 1.0) is None
    # A robot really lying on its side is not blamed on the quaternion order.
    side = np.array([math.cos(math.pi / 4), math.sin(math.pi / 4), 0.0, 0.0])
    assert "looks wrong" not in upright_problem(side, "wxyz", 1.0)


def yawed_go2_session(other_quat_order: bool):
    s = open_session(GO2_POLICY, GO2_HW, realtime=False,
                     wrap_robot=lambda r: RecordingRobot(r, other_quat_order=other_quat_order))
    sim = s.robot.inner
    qpos = sim.data.qpos.copy()
    qpos[3:7] = yaw_quat(math.pi / 2)  # facing +y
    sim.reset("home", qpos=qpos)
    return s


def test_wrong_quaternion_order_is_caught_before_the_gains_rise():
    s = yawed_go2_session(other_quat_order=True)
    run_to_policy(s, policy_ticks=0)
    c = s.controller
    assert c.mode is Mode.DAMP and c.state_machine.fault_reason == "imu_check"
    assert "quaternion_order wxyz" in c.last_error and "quaternion_order looks wrong" in c.last_error
    assert all(np.all(cmd.kp == 0.0) for _, cmd in s.robot.received)  # never stiffened
    assert_twin_got_only_safe_commands(s)


def test_yawed_robot_with_the_right_order_passes_the_gravity_check():
    s = yawed_go2_session(other_quat_order=False)
    run_to_policy(s, policy_ticks=50)
    assert s.controller.mode is Mode.POLICY and s.controller.last_fault is None
    assert_twin_got_only_safe_commands(s)


# ------------------------------------------------------------------------------------------------ item 5


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["observation"][0].update(name="base_angular_velocity"),
     r"contract observation\[0\] \('base_angular_velocity'\): unknown term name"),
    (lambda r: r["observation"][1].update(scale=math.nan), r"contract observation\[1\] .*scale = nan"),
    (lambda r: r["observation"][2].update(clip=-1.0), r"contract observation\[2\] .*clip = -1.0"),
    (lambda r: r.update(policy_dt=0.0), "contract policy_dt = 0.0: must be a finite number > 0"),
    (lambda r: r.update(physics_dt=math.inf), "contract physics_dt = inf"),
    (lambda r: r["action"].update(scale=[math.nan] * 12), r"contract action.terms\[0\] .*scale = \[nan"),
    (lambda r: r["action"].update(chunk=0), "contract action.chunk = 0"),
    (lambda r: r.update(kd=[-0.5] + r["kd"][1:]), "contract kd for FL_hip_joint = -0.5: must be a finite number"),
])
def test_bad_contract_is_refused_at_load(tmp_path, monkeypatch, edit, message):
    never_connect(monkeypatch)
    with pytest.raises(ValueError, match=message) as err:
        open_session(edited_policy(tmp_path, edit), GO2_HW, realtime=False)
    assert "\n" not in str(err.value)


def test_contract_dims_and_history_are_checked():
    contract = OnnxPolicy(GO2_POLICY).contract
    hw = load_hardware(GO2_HW)
    terms = list(contract.observation)
    for change, message in (
        (replace(terms[0], dim=4), r"observation\[0\] \('base_ang_vel'\): dim = 4: the term has 3 entries"),
        (replace(terms[3], dim=11), r"observation\[3\] \('joint_pos_rel'\): dim = 11: the term has 12 entries"),
        (replace(terms[0], history=0), "history = 0: must be an integer >= 1"),
    ):
        i = terms.index(next(t for t in terms if t.name == change.name))
        bad = replace(contract, observation=tuple(terms[:i] + [change] + terms[i + 1:]))
        with pytest.raises(ValueError, match=message):
            validate_contract(bad, hw)
    with pytest.raises(ValueError, match=r"\('image:front'\): unknown term name"):  # an input term: contract.inputs
        validate_contract(replace(contract, observation=(*terms[:-1], replace(terms[-1], name="image:front"))), hw)
    assert DeployContract.from_json(contract.to_json()) == contract


def deploy(*extra: str) -> int:
    return main(["deploy", "--policy", str(GO2_POLICY), "--robot", str(GO2_HW), "--transport", "sim", *extra])


def test_cli_refuses_nan_velocity_with_one_line(capsys, monkeypatch):
    never_connect(monkeypatch)
    assert deploy("--velocity", "nan,0,0") == 2
    out, err = capsys.readouterr()
    assert err == "robo-rl: --velocity 'nan,0,0': non-finite value refused; expected three finite numbers\n"
    assert out == ""


def test_cli_clamps_out_of_range_velocity_with_a_warning(capsys):
    assert deploy("--velocity", "3,0,0", "--duration", "1") == 0
    out, err = capsys.readouterr()
    assert "warning: velocity_command [3, 0, 0] is outside the range the policy was trained on" in err
    assert "commands {'velocity_command': [1.0, 0.0, 0.0]}" in out
    assert "Traceback" not in err


def test_cli_fault_prints_the_reason_and_exits_non_zero(capsys):
    # Sensor noise of 20 rad/s on dq reads as overspeed within the first ticks (seeded, reproducible).
    assert deploy("--noise", "20", "--duration", "3") == 1
    out, err = capsys.readouterr()
    assert "stopped in DAMP" in out
    line = err.strip().splitlines()[-1]
    assert line.startswith("robo-rl: deploy stopped on fault overspeed: ") and "above 1.2 x velocity limit" in line
