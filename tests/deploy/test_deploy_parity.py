"""Sim-side (torch) and deploy-side (numpy) observations agree on the same physics states."""

import numpy as np
import pytest
import torch

from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.observations import ObservationBuilder
from robo_rl.deploy.robot import RobotState
from robo_rl.tasks.task_registry import make_env
from tests.conftest import REPO

CASES = [("quadruped-walk-flat", "go2", "velocity_command"), ("arm-reach", "panda", "target_pos")]


def robot_state_of(env, world: int, hw) -> RobotState:
    """What a robot reporting in its own joint order would send for world `world` of `env`."""
    b = env.backend
    qpos, qvel = b.qpos[world].numpy(), b.qvel[world].numpy()
    floating = hw.kind == "legged"
    ee = b.sensordata[world, b.sensor_slice("ee_pos")].numpy() if not floating else None
    return RobotState(
        stamp=0.0,
        received=0.0,
        joint_names=hw.joint_names,
        q=qpos[b.joint_qpos_index(hw.model_names).numpy()],  # the model's names of the robot's joints
        dq=qvel[b.joint_qvel_index(hw.model_names).numpy()],
        imu_quat=qpos[3:7] if floating else None,
        imu_gyro=qvel[3:6] if floating else None,
        ee_pos=ee,
    )


@pytest.mark.parametrize("task, robot, command_term", CASES)
def test_observation_parity_on_recorded_states(task, robot, command_term):
    hw = load_hardware(REPO / "hardware" / f"{robot}.yaml")
    env = make_env(task, 6, seed=2)
    obs = env.reset()
    builder = ObservationBuilder(env.contract, hw)
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for step in range(40):
        obs, *_ = env.step(0.5 * torch.randn(6, env.action_dim, generator=gen))
        if step % 5:
            continue
        command = env.command if command_term == "velocity_command" else env.target
        for i in range(6):
            state = robot_state_of(env, i, hw)
            deploy = builder.build(state, commands={command_term: command[i].numpy()}, action=env.action[i].numpy())
            worst = max(worst, float(np.abs(deploy - obs["policy"][i].numpy()).max()))
    assert worst <= 1e-6, worst
    env.close()


def test_joint_order_is_resolved_by_name():
    hw = load_hardware(REPO / "hardware" / "go2.yaml")
    env = make_env("quadruped-walk-flat", 1)
    obs = env.reset(random_start=False)
    builder = ObservationBuilder(env.contract, hw)
    state = robot_state_of(env, 0, hw)
    perm = np.random.default_rng(0).permutation(len(hw.joint_names))
    shuffled = RobotState(
        stamp=0.0, received=0.0, joint_names=tuple(np.array(hw.joint_names)[perm]), q=state.q[perm],
        dq=state.dq[perm], imu_quat=state.imu_quat, imu_gyro=state.imu_gyro,
    )
    commands = {"velocity_command": env.command[0].numpy()}
    a = builder.build(state, commands=commands, action=np.zeros(12, np.float32))
    b = builder.build(shuffled, commands=commands, action=np.zeros(12, np.float32))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, obs["policy"][0].numpy(), atol=1e-6)
    missing = RobotState(stamp=0.0, received=0.0, joint_names=hw.joint_names[1:], q=state.q[1:], dq=state.dq[1:],
                         imu_quat=state.imu_quat, imu_gyro=state.imu_gyro)
    with pytest.raises(ValueError, match="lacks joint"):
        builder.build(missing, commands=commands, action=np.zeros(12, np.float32))
