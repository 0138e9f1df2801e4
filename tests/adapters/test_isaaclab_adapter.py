"""Isaac Lab and mjlab environments through our adapter (robo_rl.adapters.isaaclab): step, train, export, deploy.

The framework tests need the framework in this Python. mjlab pins mujoco 3.11, so it lives in a second
venv, `.venv-mjlab` (scripts/setup_mjlab.sh); tests/adapters/test_mjlab_venv.py builds it and runs this file there,
on mjlab's CPU device. Isaac Lab 3 needs Python 3.12 and a CUDA GPU: the same tests run where it is
installed (`python -m pytest tests/adapters/test_isaaclab_adapter.py -k isaaclab`, see docs/isaaclab.md), and skip
here with that reason.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from robo_rl.adapters.isaaclab.contract_translation import _one_scale, _symmetric_clip, vocabulary_name
from robo_rl.cli import main as cli
from robo_rl.core.config import ConfigError, UserError
from robo_rl.tasks.task_registry import make_env, task_entry

REPO = Path(__file__).resolve().parents[2]

# framework -> (its Go1 flat-ground velocity task, a second task (cartpole), the hardware file of the Go1)
TASKS = {
    "mjlab": ("Mjlab-Velocity-Flat-Unitree-Go1", "Mjlab-Cartpole-Balance"),
    "isaaclab": ("Isaac-Velocity-Flat-Unitree-Go1-v0", "Isaac-Cartpole-v0"),
}
SKIP_REASON = {
    "mjlab": "mjlab is not installed in this Python (it pins mujoco 3.11); "
             "tests/adapters/test_mjlab_venv.py runs these tests in .venv-mjlab",
    "isaaclab": "Isaac Lab 3 needs Python 3.12 and a CUDA GPU; run these tests where it is installed: "
                "python -m pytest tests/adapters/test_isaaclab_adapter.py -k isaaclab (docs/isaaclab.md)",
}
INSTALLED = {fw: importlib.util.find_spec(fw) is not None for fw in TASKS}
DEVICE = "cpu" if INSTALLED["mjlab"] else "cuda:0"
TINY_PPO = ["--num-envs", "4", "--max-iterations", "2", "--set", "algo.num_steps_per_env=8",
            "--set", "algo.num_mini_batches=2", "--set", "runner.eval_episodes=0",
            "--set", "runner.progress_bar=false", "--set", f"sim.device={DEVICE}", "--set", f"device={DEVICE}"]
TINY_SAC = ["--algo", "sac", "--num-envs", "4", "--max-iterations", "2", "--set", "algo.buffer_size=400",
            "--set", "algo.batch_size=32", "--set", "algo.learning_starts=2", "--set", "policy.actor_hidden_dims=[16]",
            "--set", "policy.critic_hidden_dims=[16, 16]", "--set", "runner.eval_episodes=0",
            "--set", "runner.progress_bar=false", "--set", f"sim.device={DEVICE}", "--set", f"device={DEVICE}"]


def framework_params(index: int) -> list:
    return [pytest.param(fw, ids[index], id=fw, marks=pytest.mark.skipif(not INSTALLED[fw], reason=SKIP_REASON[fw]))
            for fw, ids in TASKS.items()]


def call(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


# ---------------------------------------------------------------------- without a framework
def test_task_names_route_to_the_adapter_and_an_empty_id_is_refused():
    env_cls, cfg_cls = task_entry("mjlab:Mjlab-Velocity-Flat-Unitree-Go1")
    assert env_cls.__name__ == "IsaacLabVecEnv" and cfg_cls().id == "Mjlab-Velocity-Flat-Unitree-Go1"
    assert cfg_cls().robot_name == "go1" and cfg_cls.framework == "mjlab"
    assert task_entry("isaaclab:Isaac-Cartpole-v0")[1].framework == "isaaclab"
    with pytest.raises(ConfigError, match="expected mjlab:<task id>"):
        task_entry("mjlab:")
    with pytest.raises(ConfigError, match="env.id = 'Other': must be 'Isaac-Cartpole-v0'"):
        task_entry("isaaclab:Isaac-Cartpole-v0")[1](id="Other").validate()


@pytest.mark.parametrize("framework", [fw for fw in TASKS if not INSTALLED[fw]] or ["none-missing"])
def test_a_framework_that_is_not_installed_gets_a_one_line_error_with_the_install_step(framework):
    if framework == "none-missing":
        pytest.skip("every framework is installed in this Python")
    with pytest.raises(UserError, match=f"needs {framework}, which is not installed in this Python; ") as err:
        make_env(f"{framework}:{TASKS[framework][0]}", 2)
    assert "\n" not in str(err.value)
    assert ("setup_mjlab.sh" if framework == "mjlab" else "docs/isaaclab.md") in str(err.value)


def test_observation_terms_map_onto_our_vocabulary_by_function_or_by_name():
    assert vocabulary_name("joint_pos", "joint_pos_rel", 12, 12) == "joint_pos_rel"
    assert vocabulary_name("joint_vel", "joint_vel_rel", 12, 12) == "joint_vel"
    assert vocabulary_name("actions", "last_action", 12, 12) == "last_action"
    assert vocabulary_name("command", "generated_commands", 3, 12) == "velocity_command"
    assert vocabulary_name("base_ang_vel", "builtin_sensor", 3, 12) == "base_ang_vel"  # a generic sensor term
    assert vocabulary_name("command", "generated_commands", 7, 12) is None  # a pose command: no deploy term
    assert vocabulary_name("joint_pos", "joint_pos_rel", 6, 12) is None  # a subset of the joints
    assert vocabulary_name("foot_height", "foot_height", 4, 12) is None
    assert _symmetric_clip(None, "t") is None and _symmetric_clip((-math.inf, math.inf), "t") is None
    assert _symmetric_clip((-5.0, 5.0), "t") == 5.0
    with pytest.raises(ValueError, match="clip \\(-1, 2\\) is not symmetric"):
        _symmetric_clip((-1.0, 2.0), "t")
    assert _one_scale(None, "t") == 1.0 and _one_scale(0.25, "t") == 0.25 and _one_scale((2.0, 2.0, 2.0), "t") == 2.0
    with pytest.raises(ValueError, match="differs per dimension"):
        _one_scale(torch.tensor([1.0, 2.0]), "t")


# ---------------------------------------------------------------------- with the framework
@pytest.fixture(scope="module")
def go1_env(request):
    """The framework's Go1 flat-ground task with 4 worlds, shared by the tests of one framework."""
    envs = {}
    yield lambda fw: envs.setdefault(fw, make_env(f"{fw}:{TASKS[fw][0]}", 4, seed=3, device=DEVICE))
    for env in envs.values():
        env.close()


@pytest.mark.filterwarnings("ignore:task .* does not return the observation before an auto-reset")
@pytest.mark.parametrize("framework, task_id", framework_params(0))
def test_go1_resets_and_steps_with_the_shapes_of_its_contract(go1_env, framework, task_id):
    env = go1_env(framework)
    contract = env.contract
    obs = env.reset()
    assert obs["policy"].shape == (4, env.obs_dims["policy"]) == (4, contract.obs_dim)
    assert obs["critic"].shape == (4, env.obs_dims["critic"]) and env.obs_dims["critic"] > contract.obs_dim
    assert env.action_dim == contract.action_dim == len(contract.joint_names) == 12
    assert [t.name for t in contract.observation] == ["base_lin_vel", "base_ang_vel", "projected_gravity",
                                                      "joint_pos_rel", "joint_vel", "last_action", "velocity_command"]
    assert math.isclose(contract.policy_dt, env.dt) and contract.physics_dt < contract.policy_dt
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(4, env.action_dim, device=env.device))
    assert reward.shape == terminated.shape == truncated.shape == (4,) and terminated.dtype == torch.bool
    assert info["final_obs"]["policy"].shape == (4, contract.obs_dim) and isinstance(info["log"], dict)
    assert torch.isfinite(obs["policy"]).all() and torch.isfinite(reward).all()


@pytest.mark.parametrize("framework, task_id", [p for p in framework_params(0) if p.values[0] == "mjlab"])
def test_the_contract_equals_mjlabs_own_exporter_metadata(go1_env, framework, task_id):
    from mjlab.rl.exporter_utils import get_base_metadata

    env = go1_env(framework)
    meta = get_base_metadata(env.unwrapped, "run")
    contract = env.contract
    assert list(contract.joint_names) == meta["joint_names"]
    np.testing.assert_allclose(contract.default_joint_pos, meta["default_joint_pos"], atol=1e-7)
    (term,) = contract.action.terms
    assert term.kind == "joint_position_offset" and list(term.joints) == meta["joint_names"]
    np.testing.assert_allclose(term.scale, meta["action_scale"], rtol=1e-6)
    np.testing.assert_allclose(contract.kp, meta["joint_stiffness"], rtol=1e-6)
    np.testing.assert_allclose(contract.kd, meta["joint_damping"], rtol=1e-6)
    assert [t.history for t in contract.observation] == [max(1, h) for h in meta["observation_terms_history_length"]]
    assert [t.scale for t in contract.observation] == meta["observation_terms_scale"]


@pytest.mark.filterwarnings("ignore:task .* does not return the observation before an auto-reset")
@pytest.mark.parametrize("framework, task_id", [p for p in framework_params(0) if p.values[0] == "mjlab"])
def test_the_deploy_side_computes_the_frameworks_observation_terms(go1_env, framework, task_id):
    """Our numpy terms on a RobotState read from world 0 equal mjlab's own uncorrupted terms (its critic group)."""
    from robo_rl.deploy.hardware import load_hardware
    from robo_rl.deploy.observations import ObservationBuilder
    from robo_rl.deploy.robot import RobotState
    from robo_rl.terms import OBSERVATION_TERMS

    env = go1_env(framework)
    env.reset()
    for _ in range(5):
        obs, *_ = env.step(0.5 * torch.randn(4, env.action_dim, generator=torch.Generator().manual_seed(0)))
    u, contract = env.unwrapped, env.contract
    data = u.scene["robot"].data
    state = RobotState(stamp=0.0, received=0.0, joint_names=contract.joint_names,
                       q=data.joint_pos[0].cpu().numpy().astype(np.float64),
                       dq=data.joint_vel[0].cpu().numpy().astype(np.float64),
                       imu_quat=data.root_link_quat_w[0].cpu().numpy().astype(np.float64),
                       imu_gyro=np.zeros(3), base_lin_vel=np.zeros(3))
    command = u.command_manager.get_command("twist")[0].cpu().numpy()
    builder = ObservationBuilder(contract, load_hardware(REPO / "hardware" / "go1.yaml"))
    ours = builder.terms(state, commands={"velocity_command": command},
                         action=u.action_manager.action[0].cpu().numpy())
    theirs = obs["critic"][0].cpu().numpy()  # the critic group repeats the policy terms without noise or bias
    start = 0
    for term in contract.observation:
        if term.name not in ("base_lin_vel", "base_ang_vel"):  # IMU sensor values: what the robot reports
            np.testing.assert_allclose(ours[term.name], theirs[start:start + term.dim], atol=1e-5, err_msg=term.name)
        start += term.dim
    assert start == contract.obs_dim and OBSERVATION_TERMS.get("velocity_command").dim == 3


@pytest.mark.filterwarnings("ignore:task .* does not return the observation before an auto-reset")
@pytest.mark.parametrize("framework, task_id", framework_params(0))
def test_ppo_trains_exports_and_the_policy_passes_deploy_validation_for_go1(tmp_path, go1_env, framework, task_id):
    from robo_rl.deploy.hardware import load_hardware
    from robo_rl.deploy.policy import OnnxPolicy, PolicyStep
    from robo_rl.deploy.robot import RobotState
    from robo_rl.export.onnx_export import export_policy

    run = tmp_path / "go1"
    assert call(["train", "--task", f"{framework}:{task_id}", *TINY_PPO, "--run-name", "go1",
                 "--set", f"runner.log_dir={tmp_path}", "--set", "env.episode_length_s=1"]) == 0
    assert (run / "model_000002.pt").is_file()
    contract = export_policy(run, tmp_path / "go1.onnx", parity_envs=4, parity_steps=5, evaluate=False)
    policy = OnnxPolicy(tmp_path / "go1.onnx")
    assert policy.contract == contract and contract.robot == "go1"
    if framework == "mjlab":  # the file's contract against mjlab's own exporter metadata for the same task
        from mjlab.rl.exporter_utils import get_base_metadata

        meta = get_base_metadata(go1_env(framework).unwrapped, "run")
        assert list(contract.joint_names) == meta["joint_names"] == list(contract.action.terms[0].joints)
        np.testing.assert_allclose(contract.default_joint_pos, meta["default_joint_pos"], atol=1e-7)
        np.testing.assert_allclose(contract.action.scale, meta["action_scale"], rtol=1e-6)
    hw = load_hardware(REPO / "hardware" / "go1.yaml")
    step = PolicyStep(policy, hw, commands={"velocity_command": [0.5, 0.0, 0.0]})  # validates the contract
    q = np.asarray(contract.default_joint_pos)
    targets = step(RobotState(stamp=0.0, received=0.0, joint_names=contract.joint_names, q=q, dq=np.zeros(12),
                              imu_quat=np.array([1.0, 0, 0, 0]), imu_gyro=np.zeros(3), base_lin_vel=np.zeros(3)))
    assert targets.shape == (12,) and np.isfinite(targets).all()


@pytest.mark.filterwarnings("ignore:task .* does not return the observation before an auto-reset")
@pytest.mark.parametrize("framework, task_id", framework_params(0))
def test_sac_trains_two_iterations_on_go1(tmp_path, framework, task_id):
    assert call(["train", "--task", f"{framework}:{task_id}", *TINY_SAC, "--set", f"runner.log_dir={tmp_path}",
                 "--set", "env.action_clip=1", "--run-name", "sac"]) == 0
    assert (tmp_path / "sac" / "model_000002.pt").is_file()


@pytest.mark.filterwarnings("ignore:task .* does not return the observation before an auto-reset")
@pytest.mark.parametrize("framework, task_id", framework_params(1))
def test_cartpole_steps_trains_with_ppo_and_sac_but_is_refused_for_export(tmp_path, framework, task_id):
    env = make_env(f"{framework}:{task_id}", 4, seed=1, device=DEVICE)
    try:
        obs = env.reset()
        assert obs["policy"].shape == (4, env.obs_dims["policy"]) and env.action_dim >= 1
        obs, reward, terminated, truncated, _ = env.step(torch.zeros(4, env.action_dim, device=env.device))
        assert obs["policy"].shape == (4, env.obs_dims["policy"]) and reward.shape == (4,)
        with pytest.raises(UserError, match=f"task '{framework}:{task_id}': ") as err:
            _ = env.contract  # no robot joints driven by position targets: nothing the deploy side can run
        assert "\n" not in str(err.value)
    finally:
        env.close()
    assert call(["train", "--task", f"{framework}:{task_id}", *TINY_PPO, "--set", f"runner.log_dir={tmp_path}",
                 "--run-name", "ppo"]) == 0
    assert call(["train", "--task", f"{framework}:{task_id}", *TINY_SAC, "--set", f"runner.log_dir={tmp_path}",
                 "--set", "env.action_clip=1", "--run-name", "sac"]) == 0


@pytest.mark.parametrize("framework, task_id", [p for p in framework_params(0) if p.values[0] == "mjlab"])
def test_terminal_obs_gives_the_last_observation_of_ended_episodes(framework, task_id):
    """env.terminal_obs: ended worlds' final_obs is their last observation, and resetting them leaves the others'."""
    from robo_rl.tasks.task_registry import task_config_class

    cfg = task_config_class(f"{framework}:{task_id}")(terminal_obs=True, episode_length_s=0.2)  # 10 steps
    env = make_env(f"{framework}:{task_id}", 4, cfg=cfg, seed=2, device=DEVICE)
    gen = torch.Generator().manual_seed(0)
    mixed = 0
    try:
        obs = env.reset(random_start=True)
        for _ in range(12):
            obs, _, terminated, truncated, info = env.step(0.3 * torch.randn(4, env.action_dim, generator=gen))
            ended = (terminated | truncated).cpu()
            same = ((info["final_obs"]["policy"] - obs["policy"]).abs().amax(-1) < 1e-6).cpu()  # (N,)
            assert torch.equal(same, ~ended), (same, ended)
            mixed += bool(ended.any() and not ended.all())
            if ended.any():
                assert "Episode/length" in info["log"]
    finally:
        env.close()
    assert mixed, "no step had ended and running worlds side by side"


@pytest.mark.filterwarnings("ignore:task .* does not return the observation before an auto-reset")
@pytest.mark.parametrize("framework, task_id", [p for p in framework_params(0) if p.values[0] == "mjlab"])
def test_a_run_resumes_with_new_episodes(tmp_path, framework, task_id, capsys):
    args = ["train", "--task", f"{framework}:{task_id}", *TINY_PPO, "--set", f"runner.log_dir={tmp_path}",
            "--set", "env.episode_length_s=1", "--run-name", "r"]
    assert call(args) == 0
    assert call(["train", "--resume", str(tmp_path / "r"), "--max-iterations", "3"]) == 0
    assert (tmp_path / "r" / "model_000003.pt").is_file()
