"""gymnasium both ways: our tasks as gymnasium envs (robo_rl.adapters.to_gymnasium), gymnasium envs under our PPO
(robo_rl.adapters.from_gymnasium, task names `gym:<id>`), and SB3's PPO on our vector env."""

import subprocess
import sys
import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import robo_rl.adapters.to_gymnasium as rgym
from robo_rl.adapters.from_gymnasium import box_scale, to_box
from robo_rl.core.config import ConfigError, UserError
from robo_rl.learn.algorithms.ppo import PPO, REWARD_CLIP, PPOConfig, scale_rewards
from robo_rl.learn.checkpoint import load_checkpoint, load_run_checkpoint, save_checkpoint
from robo_rl.learn.networks.actor_critic import ActorCritic, PolicyConfig
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.tasks.task_registry import TASKS, make_env, task_config_class, task_entry
from tests.cli.test_cli_errors import TINY, call, one_line_error
from tests.conftest import REPO, run_cli

ARM = "robo_rl.adapters.to_gymnasium:robo_rl/arm-reach-v0"
SHORT = {"episode_length_s": 0.2}  # arm-reach: 10 policy steps per episode


# ---------------------------------------------------------------------------------------------- our tasks in gymnasium
def test_single_world_env_passes_check_env():
    expected = ("recommend using a symmetric and normalized space", "infinity")  # unbounded obs, Box(-3, 3) actions
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(ARM)
        check_env(env.unwrapped)  # reset/step determinism, data not reused, render modes, close
    unexpected = [str(w.message) for w in caught if not any(e in str(w.message) for e in expected)]
    assert not unexpected, unexpected
    assert isinstance(env.unwrapped, rgym.TaskGymEnv)
    env.close()


def test_single_world_env_ends_with_the_final_observation_and_waits_for_reset():
    env = rgym.TaskGymEnv("arm-reach", config=SHORT)
    ref = make_env("arm-reach", 1, cfg=task_config_class("arm-reach")(**SHORT))
    obs, _ = env.reset(seed=5)
    ref_obs = ref.reset(seed=5, random_start=False)
    np.testing.assert_array_equal(obs, ref_obs["policy"][0].numpy())
    gen = torch.Generator().manual_seed(0)
    for t in range(10):
        action = torch.randn(1, 7, generator=gen)
        obs, reward, terminated, truncated, info = env.step(action[0].numpy())
        ref_obs, ref_reward, _, ref_truncated, ref_info = ref.step(action)
        assert truncated == bool(ref_truncated[0]) == (t == 9) and not terminated
        assert reward == pytest.approx(float(ref_reward[0]))
    np.testing.assert_array_equal(obs, ref_info["final_obs"]["policy"][0].numpy())  # pre-reset, not the new start
    assert not np.array_equal(obs, ref_obs["policy"][0].numpy())
    assert "Metrics/ee_distance_final" in info["log"]
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(np.zeros(7, dtype=np.float32))
    new, _ = env.reset()
    assert env.observation_space.contains(new)
    env.close()
    ref.close()


def test_every_task_is_registered_once_for_make_and_make_vec():
    ids = [rgym.gym_id(t) for t in TASKS]
    assert all(i in gymnasium.registry for i in ids)
    spec = gymnasium.spec(ids[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # re-registering would warn "Overriding environment"
        assert rgym.register_tasks() == ids
    assert gymnasium.spec(ids[0]) is spec
    single = gymnasium.make(ARM)
    assert single.observation_space.shape == (27,) and single.action_space.shape == (7,)
    single.close()
    vec = gymnasium.make_vec(ARM, num_envs=8)
    assert isinstance(vec, rgym.TaskVectorEnv) and vec.num_envs == 8
    assert vec.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert vec.observation_space.shape == (8, 27) and vec.action_space.shape == (8, 7)
    obs, _ = vec.reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (8, 27)
    vec.close()


def test_only_robo_rl_gym_imports_gymnasium_torch_and_mujoco():
    code = ("import sys, robo_rl.core.config; a = [m in sys.modules for m in ('torch', 'mujoco', 'gymnasium')]; "
            "import robo_rl.tasks; b = 'gymnasium' in sys.modules; import gymnasium, robo_rl.adapters.to_gymnasium; "
            "print(a, b, 'robo_rl/arm-reach-v0' in gymnasium.registry)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[False, False, False] False True"


def test_vector_env_same_step_autoreset_and_episode_statistics():
    envs = rgym.TaskVectorEnv("arm-reach", 4, config=SHORT)
    wrapped = gymnasium.wrappers.vector.RecordEpisodeStatistics(
        rgym.TaskVectorEnv("arm-reach", 4, config=SHORT, episode_statistics=False)
    )
    obs, _ = envs.reset(seed=3)
    wrapped.reset(seed=3)
    returns = np.zeros(4)
    rng = np.random.default_rng(0)
    for t in range(10):
        actions = rng.normal(size=(4, 7)).astype(np.float32)
        prev = obs
        obs, reward, terminated, truncated, info = envs.step(actions)
        w_info = wrapped.step(actions)[-1]
        returns += reward
        assert obs.dtype == np.float32 and reward.shape == (4,) and not terminated.any()
        if t < 9:
            assert "final_obs" not in info and "episode" not in info
    assert truncated.all()
    assert info["_final_obs"].all() and info["final_obs"].dtype == object
    final = np.stack(info["final_obs"])  # (4, 27) last observations of the episodes
    assert not np.allclose(final, obs)  # obs are the new episodes' first (new targets)
    np.testing.assert_allclose(final[:, :7], prev[:, :7], atol=0.2)  # joints move little in one step
    assert info["_episode"].all() and (info["episode"]["l"] == 10).all()
    np.testing.assert_allclose(info["episode"]["r"], returns, rtol=1e-5)
    np.testing.assert_allclose(w_info["episode"]["r"], info["episode"]["r"], rtol=1e-5)  # gymnasium's own wrapper
    assert "Metrics/ee_distance_final" in info["log"]
    envs.close()
    wrapped.close()


def test_stable_baselines3_ppo_trains_on_arm_reach_through_the_vector_env():
    from stable_baselines3 import PPO as SB3PPO

    from robo_rl.adapters.sb3 import SB3VecEnv

    venv = SB3VecEnv(rgym.TaskVectorEnv("arm-reach", 8, config={"episode_length_s": 1.0}))
    model = SB3PPO("MlpPolicy", venv, n_steps=64, batch_size=256, n_epochs=2, seed=0, device="cpu",
                   policy_kwargs={"net_arch": [32, 32]})
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(2000)
    assert model.num_timesteps >= 2000
    episodes = list(model.ep_info_buffer)  # our episode statistics, read by SB3 as from its Monitor
    assert len(episodes) >= 8 and all(e["l"] == 50 and np.isfinite(e["r"]) for e in episodes)
    after = list(model.policy.parameters())
    assert all(torch.isfinite(p).all() for p in after)
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    venv.close()


def test_sb3_vec_env_refuses_next_step_autoreset():
    from robo_rl.adapters.sb3 import SB3VecEnv

    envs = gymnasium.make_vec("Pendulum-v1", num_envs=2)  # gymnasium's default: NEXT_STEP
    with pytest.raises(ValueError, match="needs AutoresetMode.SAME_STEP"):
        SB3VecEnv(envs)
    envs.close()


# ---------------------------------------------------------------------------------------------- gymnasium under our PPO
def test_actions_are_clipped_to_unit_range_then_scaled_onto_the_box():
    low, high = np.array([-2.0, 0.0, -np.inf]), np.array([2.0, 1.0, np.inf])
    center, half, finite = box_scale(low, high)
    acts = np.array([[0.5, -1.0, 7.0], [3.0, 0.0, -7.0]])
    np.testing.assert_allclose(to_box(acts, center, half, finite), [[1.0, 0.0, 7.0], [2.0, 0.5, -7.0]])


def test_gymnasium_vec_env_final_obs_and_truncation_match_gymnasium():
    env = make_env("gym:Pendulum-v1", 2, cfg=task_config_class("gym:Pendulum-v1")(max_episode_steps=5), seed=11)
    assert (env.num_envs, env.obs_dims, env.action_dim, env.dt, env.max_episode_length) == (
        2, {"policy": 3, "critic": 3}, 1, 0.05, 5)
    refs = [gymnasium.make("Pendulum-v1", max_episode_steps=5) for _ in range(2)]
    obs = env.reset()
    for i, ref in enumerate(refs):
        np.testing.assert_allclose(obs["policy"][i].numpy(), ref.reset(seed=11 + i)[0])  # copy i: seed + i
    actions = torch.tensor([[0.5], [-3.0]])  # -> torques 1.0 and -2.0 (clipped) on Box(-2, 2)
    total = np.zeros(2)
    for t in range(5):
        obs, reward, terminated, truncated, info = env.step(actions)
        steps = [ref.step(np.array([2.0 * min(max(float(a), -1.0), 1.0)], np.float32)) for ref, a in
                 zip(refs, actions[:, 0], strict=True)]
        total += [s[1] for s in steps]
        np.testing.assert_allclose(reward.numpy(), [s[1] for s in steps], rtol=1e-6)
        assert not terminated.any() and truncated.tolist() == [t == 4] * 2
    for i, ref in enumerate(refs):
        np.testing.assert_allclose(info["final_obs"]["critic"][i].numpy(), steps[i][0], rtol=1e-6)  # last obs
        np.testing.assert_allclose(obs["policy"][i].numpy(), ref.reset()[0], rtol=1e-6)  # the autoreset start
    assert info["episode"]["ids"].tolist() == [0, 1]
    np.testing.assert_allclose(info["episode"]["return"].numpy(), total, rtol=1e-5)
    assert info["log"]["Episode/length"] == 5 and info["log"]["Episode/terminated"] == 0.0
    assert info["log"]["Episode/return"] == pytest.approx(total.mean(), rel=1e-5)
    env.close()


def test_gymnasium_vec_env_state_round_trips_through_a_checkpoint(tmp_path):
    def build():
        return make_env("gym:Hopper-v5", 2, seed=3)

    env, other = build(), build()
    env.reset()
    for _ in range(30):
        env.step(torch.zeros(2, 3))
    save_checkpoint(tmp_path / "env.pt", {"env": env.state_dict()})
    state = load_checkpoint(tmp_path / "env.pt")["env"]  # weights_only: the RNG states survive it
    env.load_state_dict(state)
    other.load_state_dict(state)
    assert torch.equal(env.get_observations()["policy"], other.get_observations()["policy"])
    assert not torch.equal(env.get_observations()["policy"], build().reset()["policy"])
    env.close()
    other.close()


def test_gym_task_config_is_the_task_id():
    cfg_cls = task_config_class("gym:Pendulum-v1")
    assert cfg_cls().id == "Pendulum-v1"
    with pytest.raises(ConfigError, match="env.id = 'Ant-v5': must be 'Pendulum-v1'"):
        cfg_cls(id="Ant-v5").validate()
    env = task_entry("gym:Pendulum-v1")[0](cfg_cls(), 1)
    with pytest.raises(UserError, match="no deploy contract"):
        _ = env.contract
    env.close()


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("runs")
    code = call(["train", "--task", "gym:Pendulum-v1", "--num-envs", "2", "--max-iterations", "2", "--run-name", "p",
                 "--set", f"runner.log_dir={log_dir}", *TINY])
    assert code == 0
    return log_dir / "p"


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "Hopper-v5"])
def test_our_runner_trains_two_iterations_on_a_gymnasium_env(tmp_path, capsys, env_id):
    code = call(["train", "--task", f"gym:{env_id}", "--num-envs", "2", "--max-iterations", "2", "--set",
                 f"runner.log_dir={tmp_path}", *TINY, "--set", "runner.eval_episodes=2",
                 "--set", "algo.num_steps_per_env=64"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "it 2/2" in out and "evaluation: 2 episodes" in out
    (run,) = tmp_path.iterdir()
    assert run.name.startswith(f"gym_{env_id}_")  # no ':' in the default run folder name
    state = load_run_checkpoint(run / "model_000002.pt")
    assert state["config"]["task"] == f"gym:{env_id}" and state["config"]["env"]["id"] == env_id
    assert all(torch.isfinite(t).all() for t in state["algo"]["policy"].values())


def test_export_of_a_gymnasium_run_is_refused_in_one_line(capsys, pendulum_run, tmp_path):
    out = tmp_path / "p.onnx"
    one_line_error(capsys, call(["export", str(pendulum_run), "--out", str(out)]), "has no deploy contract")
    assert not out.exists() and not out.with_suffix(".json").exists()


GYM_MISTAKES = [
    (["--task", "gym:Hoper-v5"], "unknown gymnasium id 'Hoper-v5' in task 'gym:Hoper-v5' (did you mean Hopper-v5"),
    (["--task", "gym:"], "expected gym:<gymnasium id>"),
    (["--task", "gym:CartPole-v1"], "its action space Discrete(2) is not a 1-D Box"),
    (["--task", "gym:Pendulum-v1", "--set", "env.id=Ant-v5"], "env.id = 'Ant-v5': must be 'Pendulum-v1'"),
    (["--task", "gym:Pendulum-v1", "--set", "env.max_episode_steps=-1"], "env.max_episode_steps = -1: must be >= 0"),
]


@pytest.mark.parametrize("argv, fragment", GYM_MISTAKES, ids=[a[1] + " " + a[-1] for a, _ in GYM_MISTAKES])
def test_bad_gym_task_is_one_line_and_writes_nothing(capsys, tmp_path, argv, fragment):
    log_dir = tmp_path / "runs"
    one_line_error(capsys, call(["train", "--set", f"runner.log_dir={log_dir}", *TINY, *argv]), fragment)
    assert not log_dir.exists()


def test_bad_gym_id_exits_2_from_the_command_line(tmp_path):
    result = run_cli("train", "--task", "gym:NoSuchEnv-v0", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "unknown gymnasium id 'NoSuchEnv-v0'" in result.stderr
    assert "gymnasium.pprint_registry()" in result.stderr and not (tmp_path / "runs").exists()


def test_tasks_command_mentions_the_gym_form(capsys):
    assert call(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "gym:<gymnasium id>\n  any gymnasium env with Box observations and actions, e.g. gym:Hopper-v5" in out


# ---------------------------------------------------------------------------------------------- reward normalisation
def test_scale_rewards_divides_by_the_running_std_of_the_discounted_return():
    gamma = 0.9
    rewards = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0], [1.0, 1.0]])  # (T, N)
    dones = torch.tensor([[False, False], [True, False], [False, False], [False, True]])
    ret, norm = torch.zeros(2), EmpiricalNormalization(1, eps=0.0)
    seen, expected_ret = [], np.zeros(2)
    for t in range(4):
        expected_ret = gamma * expected_ret + rewards[t].numpy()
        seen += expected_ret.tolist()
        want = np.clip(rewards[t].numpy() / (np.std(seen) + 1e-8), -REWARD_CLIP, REWARD_CLIP)
        got = scale_rewards(rewards[t], ret, dones[t], norm, gamma)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
        expected_ret[dones[t].numpy()] = 0.0
        np.testing.assert_allclose(ret.numpy(), expected_ret, rtol=1e-6)  # reset at episode ends


def test_ppo_reward_normalisation_state_is_checkpointed():
    cfg = PPOConfig(num_steps_per_env=4, normalize_reward=True)
    policy = ActorCritic(3, 3, 1, PolicyConfig(actor_hidden_dims=(8,), critic_hidden_dims=(8,)))
    algo = PPO(cfg, policy, 2, torch.Generator().manual_seed(0))
    for _ in range(4):
        algo.act(torch.randn(2, 3), torch.randn(2, 3))
        algo.process_env_step(100.0 * torch.rand(2), torch.zeros(2, dtype=torch.bool),
                              torch.zeros(2, dtype=torch.bool), torch.zeros(2, 3))
    assert algo.storage.rewards.abs().max() <= REWARD_CLIP  # scaled, not the raw ~50
    state = algo.state_dict()
    fresh = PPO(cfg, ActorCritic(3, 3, 1, PolicyConfig(actor_hidden_dims=(8,), critic_hidden_dims=(8,))), 2,
                torch.Generator())
    fresh.load_state_dict(state)
    assert torch.equal(fresh.discounted_return, algo.discounted_return)
    assert torch.equal(fresh.return_normalizer.var, algo.return_normalizer.var)
    assert "return_normalizer" not in PPO(PPOConfig(), policy, 2, torch.Generator()).state_dict()
