"""Training through a robot's setpoint controller (env.setpoint_controller, robo_rl.tasks.setpoint_path): every world's
targets reach its actuators as the deploy core's jerk-limited setpoints for that robot, played per physics substep as
the twin plays them; the contract says so and a robot without that controller refuses the policy in one line."""

import dataclasses

import numpy as np
import pytest
import torch

from robo_rl.core.config import ConfigError
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.policy import check_setpoint_path
from robo_rl.deploy.smoothing import JerkLimitedInterpolator, SetpointLimits
from robo_rl.tasks.arm_pick_place import ArmPickPlaceVisionConfig, ArmPickPlaceVisionEnv
from robo_rl.tasks.arm_reach import ArmReachConfig, ArmReachEnv
from tests.conftest import REPO, hardware_variant

PANDA = load_hardware(REPO / "hardware" / "panda.yaml")


def test_a_batch_of_streams_equals_one_stream_per_robot():
    """The (N, J) interpolator gives each row exactly the setpoints a (J,) interpolator of its own gives, also after
    one row restarts."""
    limits = SetpointLimits.from_hardware(PANDA)
    rng = np.random.default_rng(0)
    start = np.asarray(PANDA.joint_lower + PANDA.joint_upper) / 2 + rng.uniform(-0.3, 0.3, (3, 7))  # (3, J)
    batch = JerkLimitedInterpolator(limits, 1000.0)
    batch.start(start)
    singles = [JerkLimitedInterpolator(limits, 1000.0) for _ in range(3)]
    for row, single in zip(start, singles, strict=True):
        single.start(row)
    for tick in range(30):
        if tick == 12:  # row 1 restarts at rest somewhere else
            batch.restart(np.array([1]), start[1:2] + 0.1)
            singles[1].start(start[1] + 0.1)
        targets = start + rng.uniform(-0.5, 0.5, (3, 7))
        points = batch.advance(targets, 20)  # (20, 3, J)
        for i, single in enumerate(singles):
            own = single.advance(targets[i], 20)
            np.testing.assert_array_equal(points.q[:, i], own.q)
            np.testing.assert_array_equal(points.dq[:, i], own.dq)


def make_env(setpoint_controller: str = "hardware/panda.yaml", num_envs: int = 2) -> ArmReachEnv:
    return ArmReachEnv(ArmReachConfig(setpoint_controller=setpoint_controller), num_envs, seed=0)


def record_substeps(env) -> list[np.ndarray]:
    """The actuator targets (N, J) of every physics substep `env` steps from now on, appended as they are played."""
    played = []
    original = env.backend.step

    def record(n_substeps=1):
        played.append(env.backend.ctrl[:, env._act_columns].numpy().copy())
        original(n_substeps)

    env.backend.step = record
    return played


def test_each_substep_plays_the_setpoint_the_twin_plays_then():
    """One policy step of 4 physics substeps: each substep's actuator targets are the setpoint reached at its start
    (1 kHz points 0, 4, 9, 14 of the tick's 20) plus kd / kp of its velocity, from the interpolator restarted at the
    reset pose; the next tick continues the same stream."""
    env = make_env()
    env.reset()
    q0 = env.backend.ctrl[:, env._act_columns].numpy().copy()  # (N, J) the reset targets, held before the first step
    reference = JerkLimitedInterpolator(env._setpoints.limits, 1000.0)
    reference.start(q0)
    lead = (env.kd / env.kp).double().numpy()  # (J,)
    played = record_substeps(env)
    actions = torch.linspace(-1.0, 1.0, 7).repeat(2, 1)  # (N, A)
    for _ in range(2):
        env.step(actions)
    targets = env.joint_targets(actions).double().numpy()  # (N, J)
    expected = []
    for _ in range(2):
        points = reference.advance(targets, 20)
        expected += [points.q[i] + lead * points.dq[i] for i in (0, 4, 9, 14)]
    np.testing.assert_allclose(np.stack(played), np.stack(expected), atol=1e-9)
    assert not np.allclose(played[0], targets)  # the targets are approached, not stepped to


def test_a_gripper_with_its_own_controller_steps_to_its_target_at_the_tick():
    """Through hardware/panda_gripper.yaml's stream: franka_gripper, not the 1 kHz stream, moves the finger
    (SmoothingRobot keeps its target in every setpoint), so every substep plays the finger's tick target as it is,
    with no lead, while the arm's joints approach theirs."""
    cfg = ArmPickPlaceVisionConfig(images=False, setpoint_controller="hardware/panda_gripper.yaml", physics_dt=0.002,
                                   decimation=10)
    env = ArmPickPlaceVisionEnv(cfg, 2, seed=0)
    env.reset()
    played = record_substeps(env)
    actions = torch.tensor([[0.5, -0.5, -1.0, 1.0]]).repeat(2, 1)  # (N, A): a step down and toward, close
    targets = env.joint_targets(actions).double().numpy()  # (N, J)
    env.step(actions)
    played = np.stack(played)  # (decimation, N, J)
    assert played.shape[0] == 10
    np.testing.assert_allclose(played[:, :, 7], np.broadcast_to(targets[:, 7], (10, 2)), atol=1e-7)
    assert not np.allclose(played[0, :, :7], targets[:, :7], atol=1e-4)  # the arm is approached, not stepped to
    env.close()


def test_a_resumed_env_continues_the_setpoint_stream_bit_for_bit():
    env, twin = make_env(), make_env()
    env.reset()
    actions = torch.linspace(-1.0, 1.0, 7).repeat(2, 1)  # (N, A)
    for _ in range(3):
        env.step(actions)
    twin.load_state_dict(env.state_dict())
    for _ in range(3):
        a, b = env.step(-actions)[0]["policy"], twin.step(-actions)[0]["policy"]
        assert torch.equal(a, b)
    assert torch.equal(env.q, twin.q)


def test_the_contract_says_so_and_a_robot_without_that_controller_refuses_it_in_one_line():
    contract = make_env().contract
    assert contract.extra["setpoint_rate_hz"] == 1000.0
    check_setpoint_path(contract, PANDA)  # the Panda's controller takes 1 kHz setpoints
    no_setpoints = dataclasses.replace(PANDA, controller=dataclasses.replace(PANDA.controller, setpoint_rate_hz=None))
    with pytest.raises(ValueError) as exc:
        check_setpoint_path(contract, no_setpoints)
    assert str(exc.value) == ("contract: the policy was trained through 1000 Hz setpoints (env.setpoint_controller), "
                              "but the controller of hardware 'panda' takes no setpoints (controller.setpoint_rate_hz)")
    assert "setpoint_rate_hz" not in make_env("").contract.extra  # trained on targets that step in at the tick


@pytest.mark.parametrize("edit, message", [
    (("model_joint_names: [joint1,", "model_joint_names: [shoulder,"), "joint1"),  # a joint the task moves is missing
    (("  setpoint_rate_hz: 1000\n", "  setpoint_rate_hz: 150\n"),  # 0.75 setpoints per 5 ms physics step
     "controller.setpoint_rate_hz (played per physics step of 0.005 s) = 150 Hz"),
    (None, "hardware file 'hardware/nope.yaml'"),
])
def test_a_setpoint_controller_that_cannot_drive_the_task_is_refused_in_one_line(tmp_path, edit, message):
    hardware = "hardware/nope.yaml" if edit is None else hardware_variant(tmp_path, "panda", *edit)
    with pytest.raises(ConfigError) as exc:
        make_env(hardware)
    text = str(exc.value)
    assert text.startswith("config error: env.setpoint_controller") and "\n" not in text and message in text, text


def test_targets_beyond_the_limits_are_clamped_as_the_safety_filter_clamps_them():
    """A target past a joint limit streams to the limit less the hardware's joint_limit_margin (SafetyFilter's
    clamp, all it changes of a setpoint controller's target), never beyond it."""
    env = make_env(num_envs=1)
    env.reset()
    hw = PANDA
    beyond = torch.from_numpy(hw.joint_upper + 0.5)[None]  # (1, J), joint order of hardware and task alike
    upper = hw.joint_upper - hw.safety.joint_limit_margin
    for _ in range(200):  # 4 s
        played = env._setpoints.substep_targets(beyond).numpy()  # (decimation, 1, J) setpoints plus their lead
        assert np.all(env._setpoints.interpolator.q <= upper + 1e-9)  # the last setpoint, no lead
    np.testing.assert_allclose(played[-1, 0], upper, atol=1e-9)
    env.close()
