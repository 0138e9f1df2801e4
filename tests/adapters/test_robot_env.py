"""RobotEnv: the deploy core as a gymnasium env, on the MuJoCo twin (sim transport, simulated time)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from robo_rl.adapters.robot_env import ENV_ID, RobotEnv
from robo_rl.deploy.policy import OnnxPolicy
from robo_rl.deploy.state_machine import Mode
from tests.conftest import REPO

PANDA = (str(REPO / "policies" / "panda_reach.onnx"), str(REPO / "hardware" / "panda.yaml"))
GO2 = (str(REPO / "policies" / "go2_walk.onnx"), str(REPO / "hardware" / "go2.yaml"))


@pytest.fixture
def panda_env():
    env = RobotEnv(*PANDA, rewards=("goal_distance",), reset_module="random", max_episode_steps=150)
    yield env
    env.close()


def test_the_env_checker_passes_on_the_arm_and_the_legged_twin():
    """gymnasium's own checker (spaces, reset / step signatures and types, seeding, no reused buffers); the Go2's
    velocity_tracking reward reads the robot-side base velocity estimate, as on the real robot."""
    for args, kwargs in ((PANDA, {"reset_module": "random"}),
                         (GO2, {"rewards": ("velocity_tracking",), "reset_module": None})):
        env = RobotEnv(*args, max_episode_steps=20, **kwargs)
        try:
            check_env(env, skip_render_check=True)
            assert env.spec.nondeterministic  # a robot, even its twin, carries its state over between episodes
        finally:
            env.close()


def test_the_trained_reach_policy_succeeds_through_the_env(panda_env):
    """The exported policy acting through step() reaches targets drawn from its trained range: the observation, the
    action path (external actions -> action terms -> safety filter -> robot) and the reward agree with deployment."""
    policy = OnnxPolicy(PANDA[0])
    low, high = panda_env.runtime.policy.commands.ranges["target_pos"]
    for episode in range(3):
        obs, info = panda_env.reset(seed=episode)
        target = np.array(info["commands"]["target_pos"])
        assert np.all(target >= np.array(low) - 1e-9) and np.all(target <= np.array(high) + 1e-9)
        assert obs.shape == panda_env.observation_space.shape and obs.dtype == np.float32
        steps, terminated, truncated = 0, False, False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = panda_env.step(policy(obs)[0])
            steps += 1
        # goal_distance's success stops a reward that would go on: a truncation (no terminal state)
        assert truncated and not terminated and info["success"] and not info["failure"], info
        assert info["terms"]["goal_distance_m"] < 0.03 and steps < 100
        assert panda_env.runtime.controller.mode is Mode.READY  # the episode ended: READY holds the pose


def test_episodes_truncate_and_a_fault_ends_one_as_a_failure_then_reset_ramps_again():
    env = RobotEnv(*PANDA, reset_module="home", max_episode_steps=5, sample_commands=False)
    try:
        env.set_command("target_pos", [0.5, 0.2, 0.5])
        env.reset(seed=0)
        zero = np.zeros(env.action_space.shape, np.float32)
        outcomes = [env.step(zero)[2:4] for _ in range(5)]
        assert outcomes[:4] == [(False, False)] * 4 and outcomes[4] == (False, True)  # truncated at 5 steps
        with pytest.raises(RuntimeError, match="^step before reset"):
            env.step(zero)
        env.reset()
        env.runtime.controller.stop()  # the operator's stop (or any safety fault): DAMP
        _, _, terminated, truncated, info = env.step(zero)
        assert terminated and not truncated and info["failure"] and info["fault"] == "damp"  # a stop: no fault reason
        obs, _ = env.reset()  # DAMP -> PASSIVE -> RAMP -> READY -> the reset module -> POLICY
        assert env.runtime.controller.mode is Mode.POLICY and np.isfinite(obs).all()
        env.runtime.controller.estop()
        env.step(zero)
        with pytest.raises(RuntimeError, match="^the e-stop is latched: an operator must release it"):
            env.reset()
    finally:
        env.close()


def test_after_a_stall_reset_damps_until_the_state_is_fresh_then_ramps():
    """A robot (or twin) whose state stalls: stale_state damps it; reset waits, damping, until its state is fresh again
    before the ramp (a ramp on the old state would fault at once), and says so in one line if it never is."""
    import dataclasses

    env = RobotEnv(*PANDA, reset_module="home", max_episode_steps=50, sample_commands=False)
    try:
        env.set_command("target_pos", [0.5, 0.2, 0.5])
        env.reset(seed=0)
        c = env.runtime.controller
        real, stall = c.robot.read_state, {"reads": 0, "until": 20}

        def stalled_read():  # the next reads return states a second old, then fresh ones again
            state = real()
            if stall["reads"] >= stall["until"]:
                return state
            stall["reads"] += 1
            return dataclasses.replace(state, received=state.received - 1.0)

        c.robot.read_state = stalled_read
        zero = np.zeros(env.action_space.shape, np.float32)
        _, _, terminated, _, info = env.step(zero)
        assert terminated and info["fault"] == "stale_state"
        env.reset()  # damps through the remaining stale reads, then DAMP -> RAMP -> READY -> POLICY
        assert c.mode is Mode.POLICY and stall["reads"] == 20
        stall["reads"], stall["until"] = 0, 10**9  # stalled for good
        env.step(zero)
        with pytest.raises(RuntimeError, match=r"^no fresh robot state within 5 s \(newest 1.00 s old\): the robot "
                                               r"stays damped$"):
            env.reset()
        assert c.mode is Mode.DAMP
    finally:
        env.close()


def test_bad_input_is_refused_with_one_line(panda_env):
    panda_env.reset(seed=0)
    with pytest.raises(ValueError, match=r"^action \[nan, 0\.0.*\]: must be finite numbers$"):
        panda_env.step(np.array([np.nan] + [0.0] * 6))
    with pytest.raises(ValueError, match="^max_episode_steps = 0: must be an integer > 0$"):
        RobotEnv(*PANDA, max_episode_steps=0)


def test_gymnasium_make_builds_it_and_actions_are_clipped_to_the_space():
    env = gym.make(ENV_ID, policy_path=PANDA[0], hardware_path=PANDA[1], max_episode_steps=3).unwrapped
    try:
        env.reset(seed=0)
        policy = env.runtime.policy
        taken = []
        original = policy.targets
        policy.targets = lambda actions, state: taken.append(actions.copy()) or original(actions, state)
        env.step(np.full(env.action_space.shape, 1e6, np.float32))
        np.testing.assert_array_equal(taken[0], env.action_space.high)  # the contract's clip, not 1e6
    finally:
        env.close()


def test_an_operator_takes_over_while_the_device_is_held_and_the_takeover_enters_the_demonstrations():
    """HIL-SERL's interventions: a scripted device deflected for steps 10-39 drives the arm (+x at 0.2 m/s) instead
    of the learner, through the policy's action terms and the safety filter; each step is flagged and carries the
    action executed; released, the learner acts again. The flagged transitions extend SAC's demonstrations."""
    import torch

    from robo_rl.demos.teleop import DeviceTakeover, TeleopInput, arm_chain
    from robo_rl.learn.algorithm_registry import EnvSpec
    from robo_rl.learn.algorithms.sac import SAC, SACConfig, SACPolicy, SACPolicyConfig

    step = [0]
    env = RobotEnv(*PANDA, reset_module="home", max_episode_steps=100, sample_commands=False)
    try:
        hw = env.runtime.hw
        env.takeover = DeviceTakeover(lambda: TeleopInput(np.array([1.0 if 10 <= step[0] < 40 else 0.0, 0, 0])),
                                      arm_chain(hw), hw, 1.0 / hw.control_rate_hz, max_speed=0.2)
        env.set_command("target_pos", [0.5, 0.0, 0.4])
        obs, _ = env.reset(seed=0)
        learner = np.zeros(env.action_space.shape, np.float32)
        flags, executed, ee_x, transitions = [], [], [], []
        for step[0] in range(60):
            next_obs, reward, terminated, truncated, info = env.step(learner)
            flags.append(info["intervention"])
            executed.append(info["action"])
            ee_x.append(env.runtime.controller.robot.read_state().ee_pos[0])
            transitions.append((obs, info["action"], reward, next_obs, terminated, truncated, info["intervention"]))
            obs = next_obs
        assert flags == [False] * 10 + [True] * 30 + [False] * 20
        moved = ee_x[39] - ee_x[9]
        assert 0.08 < moved < 0.14, moved  # 0.2 m/s for 0.6 s through the arm's impedance: 0.110 m measured
        assert all(np.abs(a).max() > 1e-3 for a in executed[10:40])  # the operator's actions, not the learner's zeros
        assert all(np.array_equal(a, learner) for a in executed[:10] + executed[40:])
    finally:
        env.close()
    taken = [t for t in transitions if t[6]]
    arrays = {"obs": np.stack([t[0] for t in taken]), "action": np.stack([t[1] for t in taken]),
              "reward": np.array([t[2] for t in taken]), "next_obs": np.stack([t[3] for t in taken]),
              "terminated": np.array([t[4] for t in taken]), "truncated": np.array([t[5] for t in taken])}
    spec = EnvSpec(1, obs.shape[0], obs.shape[0], learner.shape[0], float(env.action_space.high[0]))
    sac = SAC(SACConfig(batch_size=8, buffer_size=64, learning_starts=1, demo_ratio=0.5),
              SACPolicy(SACPolicyConfig(actor_hidden_dims=(8,), critic_hidden_dims=(8,)), spec),
              spec, torch.Generator().manual_seed(0))
    sac.add_demos(arrays)
    sac.add_demos(arrays)  # a second takeover appends
    assert sac.demos.size == 60
    np.testing.assert_allclose(sac.demos.data["action"][:30].numpy() * spec.action_clip, arrays["action"], atol=1e-6)


@pytest.mark.realtime
def test_the_same_env_runs_against_the_twin_over_dds_in_real_time(dds_domain, tmp_path):
    """`robo-rl twin` in another process, RobotEnv over DDS at the control rate: steps keep the 50 Hz grid and the
    trained policy acting through step() reaches its target, as on the in-process twin."""
    import time

    from tests.dds_support import relaxed_hardware, start_twin, stop_process

    hardware = relaxed_hardware(tmp_path, "panda")
    twin = start_twin(hardware, dds_domain, log=tmp_path / "twin.log")
    env = None
    try:
        env = RobotEnv(PANDA[0], hardware, "dds", realtime=True, reset_module="home", max_episode_steps=150,
                       session={"domain_id": dds_domain})
        policy = OnnxPolicy(PANDA[0])
        obs, info = env.reset(seed=3)
        start, steps, terminated, truncated = time.monotonic(), 0, False, False
        while not (terminated or truncated):
            obs, _, terminated, truncated, info = env.step(policy(obs)[0])
            steps += 1
        elapsed = time.monotonic() - start
        assert truncated and info["success"], info
        assert abs(elapsed / steps - 0.02) < 0.004, elapsed / steps  # the control period, held by the env
    finally:
        if env is not None:
            env.close()
        stop_process(twin)


def test_a_legged_robot_stands_up_from_lying_and_a_fall_damps_it_until_it_is_righted():
    """The Go2 twin lying on its belly stands up through the ramp at reset; a shove that makes it fall ends the
    episode (failure, DAMP, fault "fall"); lying on its back it is refused with one line; righted, it stands again."""
    env = RobotEnv(*GO2, rewards=("velocity_tracking",), reset_module=None, max_episode_steps=200)
    try:
        twin = env.runtime.robot
        d = twin.data

        def lie_on_the_belly():
            qpos = twin.model.key_qpos[0].copy()
            qpos[2], qpos[7:] = 0.12, [0.0, 1.36, -2.65] * 4  # legs folded under the body
            twin.reset(None, qpos=qpos)
            twin.advance(50 * twin.substeps)  # 1 s, motors passive: it settles on the floor

        lie_on_the_belly()
        assert d.qpos[2] < 0.08
        env.reset(seed=0)
        assert d.qpos[2] > 0.18 and env.runtime.controller.mode is Mode.POLICY  # stood up through the ramp
        d.qvel[1], d.qvel[3] = 2.5, 8.0  # a shove: sideways, rolling
        for _ in range(100):
            _, _, terminated, truncated, info = env.step(np.zeros(env.action_space.shape, np.float32))
            if terminated or truncated:
                break
        assert terminated and info["failure"] and info["fault"] == "fall"
        assert env.runtime.controller.mode is Mode.DAMP
        twin.advance(100 * twin.substeps)  # it comes to rest on its back
        with pytest.raises(RuntimeError, match=r"^the robot did not reach READY \(mode DAMP, IMU gravity points .* "
                                               r"it is not upright, right it by hand, then reset$"):
            env.reset()
        lie_on_the_belly()  # righted by hand
        env.reset()
        assert d.qpos[2] > 0.18 and env.runtime.controller.mode is Mode.POLICY
    finally:
        env.close()
