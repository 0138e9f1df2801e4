"""arm-pick-place: the task's own checks, sim/deploy parity of its observations, and an exported policy closing
the loop on the sim twin with its gripper and cube."""

import numpy as np
import pytest
import torch

from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.observations import ObservationBuilder
from robo_rl.deploy.policy import OnnxPolicy, PolicyStep
from robo_rl.deploy.robot import RobotState
from robo_rl.deploy.session import open_session
from robo_rl.deploy.state_machine import Mode
from robo_rl.export.onnx_export import PARITY_TOLERANCE, ExportedPolicy, embed_contract, onnx_bytes, parity_error
from robo_rl.learn.networks.actor_critic import ActorCritic, PolicyConfig
from robo_rl.tasks.experts import PickPlaceExpert
from robo_rl.tasks.task_registry import make_env
from tests.conftest import REPO

HW = REPO / "hardware" / "panda_gripper.yaml"
GENTLE = 0.15
"""Output scale of the random test policy."""


def robot_state_of(env, world, hw):
    """What the arm (and a perception system reporting the goal cube) would send for world `world`."""
    b = env.backend
    qpos, qvel = b.qpos[world].numpy(), b.qvel[world].numpy()
    return RobotState(
        stamp=0.0, received=0.0, joint_names=hw.joint_names,
        q=qpos[b.joint_qpos_index(hw.model_names).numpy()], dq=qvel[b.joint_qvel_index(hw.model_names).numpy()],
        ee_pos=b.sensordata[world, b.sensor_slice("ee_pos")].numpy(),
        object_pos=env.object_pos_w[world].double().numpy(),
    )


def test_zero_actions_never_succeed_and_metrics_are_logged():
    """The cube starts at least min_place_distance from the target: a robot that does nothing never succeeds."""
    env = make_env("arm-pick-place", 4, seed=0)
    env.reset(random_start=False)
    assert torch.all(torch.linalg.vector_norm((env.object_pos_w - env.target)[:, :2], dim=-1) >= 0.1 - 1e-6)
    for _ in range(env.max_episode_length):
        _, reward, terminated, _, info = env.step(torch.zeros(4, env.action_dim))
        assert not terminated.any()
    assert info["log"]["Metrics/success"] == 0.0 and info["log"]["Metrics/lifted"] == 0.0
    assert set(info["log"]) >= {f"Episode_Reward/{k}" for k in env.reward_terms} | {"Metrics/object_distance_final"}
    env.close()


def test_observation_parity_on_recorded_states():
    hw = load_hardware(HW)
    env = make_env("arm-pick-place", 6, seed=2)
    builder = ObservationBuilder(env.contract, hw)
    expert = PickPlaceExpert(env)  # visits grasps and carries, not only free motion
    obs = env.reset(random_start=False)
    worst = 0.0
    for step in range(240):
        obs, *_ = env.step(expert(env) + 0.1 * torch.randn(6, env.action_dim))
        if step % 12:
            continue
        for i in range(6):
            deploy = builder.build(robot_state_of(env, i, hw), commands={"target_pos": env.target[i].numpy()},
                                   action=env.action[i].numpy())
            worst = max(worst, float(np.abs(deploy - obs["policy"][i].numpy()).max()))
    assert env.lifted.any()  # the states include a held cube
    assert worst <= 1e-6, worst
    env.close()


@pytest.fixture(scope="module")
def pick_policy(tmp_path_factory):
    """A randomly initialised actor, its normaliser fitted to states the expert visits, exported to ONNX."""
    env = make_env("arm-pick-place", 16, seed=4)
    torch.manual_seed(0)
    cfg = PolicyConfig(actor_hidden_dims=(64, 64), critic_hidden_dims=(64,))
    policy = ActorCritic(env.obs_dims["policy"], env.obs_dims["critic"], env.action_dim, cfg).eval()
    with torch.no_grad():  # gentle steps (a few mm per tick), which the safety filter passes unchanged
        policy.actor[-1].weight.mul_(GENTLE)
        policy.actor[-1].bias.mul_(GENTLE)
    expert = PickPlaceExpert(env)
    obs = env.reset(random_start=False)
    for _ in range(60):
        policy.update_normalization(obs["policy"], obs["critic"])
        obs, *_ = env.step(expert(env))
    module = ExportedPolicy(policy, env.contract)
    model = embed_contract(onnx_bytes(module, obs["policy"][:4]), env.contract)
    assert parity_error(model, module, obs["policy"]) <= PARITY_TOLERANCE
    path = tmp_path_factory.mktemp("pick") / "pick.onnx"
    path.write_bytes(model)
    yield path, env
    env.close()


def test_exported_graph_leaves_state_dependent_targets_to_the_robot(pick_policy):
    path, env = pick_policy
    policy = OnnxPolicy(path)
    actions, targets = policy(env.get_observations()["policy"].numpy())
    assert actions.shape == (16, 4) and targets.shape == (16, 8)
    assert np.isnan(targets).all()  # ee_delta (7 joints) and gripper: computed by the deploy side


def test_twin_and_sim_apply_the_same_targets_from_the_same_state(pick_policy):
    path, env = pick_policy
    hw = load_hardware(HW)
    obs = env.get_observations()["policy"]
    actions, _ = OnnxPolicy(path)(obs.numpy())
    sim_targets = env._action_targets(torch.from_numpy(actions))  # (N, J)
    prev = env.backend.ctrl[:, env._act_columns].numpy()  # (N, J) the targets the gripper moves on from
    for i in range(env.num_envs):
        step = PolicyStep(OnnxPolicy(path), hw, commands={"target_pos": env.target[i].numpy()}, warn=lambda _: None)
        step.last_action[:] = env.action[i].numpy()
        step.action_map._prev = prev[i].copy()
        twin_targets = step(robot_state_of(env, i, hw))  # (J,) robot order (= policy order here)
        np.testing.assert_allclose(step.last_action, actions[i], atol=1e-5)  # the same observation went in
        np.testing.assert_allclose(twin_targets, sim_targets[i].numpy(), atol=2e-5)


def test_exported_policy_runs_on_the_twin_with_gripper_and_cube(pick_policy, tmp_path):
    """Through the whole deploy core (contract check, observations with the cube from the twin, ONNX, numpy IK and
    gripper terms, safety filter, controller): a few hundred ticks in POLICY without a fault; and the twin follows
    the training sim, started from the same state and driven by the same policy."""
    path, env = pick_policy
    target = np.array([0.5, 0.15, env.rest_z])
    # The training physics: the Franka's 1 kHz setpoint limits (controller.setpoint_rate_hz) left out, since the
    # training sim had none (tests/deploy/test_smoothing.py covers them).
    unlimited = tmp_path / "panda_gripper.yaml"
    text = HW.read_text()
    unlimited.write_text(text[:text.index("  setpoint_rate_hz:")] + text[text.index("gripper:"):])
    session = open_session(path, unlimited, realtime=False, commands={"target_pos": target}, warn=lambda _: None)
    c, robot = session.controller, session.robot
    c.request_ramp()
    while c.mode is not Mode.READY:
        c.tick(robot.time)
        assert c.mode in (Mode.RAMP, Mode.READY), c.status_line()
    c.start_policy()
    # The training sim, world 0, put into the twin's state at the start of POLICY.
    b = env.backend
    b.state[0, b.slices["qpos"]] = torch.from_numpy(robot.data.qpos)
    b.state[0, b.slices["qvel"]] = torch.from_numpy(robot.data.qvel)
    b.ctrl[0] = torch.from_numpy(robot.data.ctrl)
    env.target[0] = torch.from_numpy(target).float()
    env.action[0] = 0.0
    env.episode_length[0] = 0  # no time-out during the comparison
    env._refresh()
    onnx = OnnxPolicy(path)
    gaps, tcp = [], []
    for _ in range(300):
        c.tick(robot.time)
        assert c.mode is Mode.POLICY, f"{c.status_line()} {c.last_error}"
        actions, _ = onnx(env.get_observations()["policy"].numpy())
        env.step(torch.from_numpy(actions))
        state = robot.read_state()
        gaps.append(np.linalg.norm(state.ee_pos - env.ee_pos_w[0].numpy()))
        tcp.append(state.ee_pos)
    print(f"twin vs sim TCP gap over 300 ticks: max {max(gaps) * 1000:.2f} mm; interventions "
          f"{dict(c.intervention_counts)}")
    assert np.ptp(np.array(tcp), axis=0).max() > 0.05  # the policy really moves the arm
    assert max(gaps) < 0.005, max(gaps)  # the twin is the training physics, gripper and cube included
    assert c.intervention_counts.get("nan_command", 0) == 0


def test_trained_policy_exports_with_its_action_terms(tmp_path):
    """The exporter itself (tiny training run -> export_policy): the terms travel, parity holds with NaN targets."""
    from robo_rl.export.onnx_export import export_policy
    from robo_rl.learn.runner import OnPolicyRunner
    from robo_rl.learn.train_config import resolve_train_config
    from robo_rl.tasks.task_registry import task_config_class

    cfg = resolve_train_config(
        {"task": "arm-pick-place"},
        ["sim.num_envs=8", "runner.max_iterations=1", "algo.num_steps_per_env=8", "runner.eval_episodes=0",
         "runner.progress_bar=false", "policy.actor_hidden_dims=[16]", "policy.critic_hidden_dims=[16]"],
        env_config_cls=task_config_class,
    )
    runner = OnPolicyRunner(cfg, tmp_path / "run")
    runner.learn()
    runner.close()
    contract = export_policy(tmp_path / "run", tmp_path / "pick.onnx", parity_envs=4, parity_steps=5)
    policy = OnnxPolicy(tmp_path / "pick.onnx")
    assert policy.contract == contract and contract.action.kinds == ("ee_delta", "gripper")
    assert contract.extra["task"] == "arm-pick-place" and "success" in contract.extra["train_eval"]
    validate_hw = load_hardware(HW)
    PolicyStep(policy, validate_hw, warn=lambda _: None)  # the robot side accepts it


def test_several_cubes_are_config_and_the_goal_is_state(tmp_path):
    """The cube count comes from the config (and the MJCF), the goal cube is drawn per world and episode."""
    from robo_rl.tasks.arm_pick_place import ArmPickPlaceConfig

    xml = (REPO / "envs" / "panda_pick.xml").read_text()
    cube = xml[xml.index('    <body name="cube"'):xml.index("    </body>", xml.index('<body name="cube"')) + 12]
    extra = "".join(cube.replace('name="cube"', f'name="cube{i}"') for i in (1, 2))
    home = "0.5 0 0.025 1 0 0 0"  # the cube's part of the keyframe
    xml = xml.replace(cube, cube + extra).replace(home, " ".join([home] * 3))
    path = tmp_path / "three_cubes.xml"
    path.write_text(xml)
    cfg = ArmPickPlaceConfig(model=str(path), cube_bodies=("cube", "cube1", "cube2"))
    cfg.validate()
    env = make_env("arm-pick-place", 64, cfg=cfg, seed=0)
    env.reset(random_start=False)
    assert set(env.goal.tolist()) == {0, 1, 2}
    assert env.cube_pos.shape == (64, 3, 3)
    torch.testing.assert_close(env.object_pos_w, env.cube_pos[torch.arange(64), env.goal])
    planar = env.cube_pos[..., :2]
    gaps = torch.cdist(planar, planar) + torch.eye(3) * 1e9
    assert gaps.min() >= cfg.min_cube_separation - 1e-6
    env.step(torch.zeros(64, env.action_dim))
    assert torch.isfinite(env.get_observations()["critic"]).all()
    env.close()


def test_impossible_layout_is_a_one_line_config_error():
    from robo_rl.core.config import ConfigError
    from robo_rl.tasks.arm_pick_place import ArmPickPlaceConfig

    env = make_env("arm-pick-place", 2, cfg=ArmPickPlaceConfig(min_place_distance=1.0))
    with pytest.raises(ConfigError, match=r"no layout of 1 cube\(s\) .* target 1.0 m from the goal cube") as err:
        env.reset()
    assert "\n" not in str(err.value)
    env.close()
