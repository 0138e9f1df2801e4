"""Algorithms as plug-ins: the registry, SAC through the CLI on every task, exact resume after SIGKILL, export."""

import dataclasses

import numpy as np
import pytest
import torch

from robo_rl.cli import main as cli
from robo_rl.core.config import ConfigError
from robo_rl.learn.algorithm_registry import ALGORITHMS, algorithm_configs
from robo_rl.learn.algorithms.ppo import PPOConfig
from robo_rl.learn.builders import resolve_config
from robo_rl.learn.checkpoint import load_checkpoint, load_run_checkpoint
from robo_rl.learn.runner import OffPolicyRunner, OnPolicyRunner, make_runner
from robo_rl.learn.train_config import resolve_train_config
from robo_rl.tasks.task_registry import TASKS, task_config_class
from tests.conftest import sigkill_then_resume

TINY_SAC = ["--num-envs", "4", "--set", "algo.buffer_size=400", "--set", "algo.batch_size=32",
            "--set", "algo.learning_starts=2", "--set", "policy.actor_hidden_dims=[16]",
            "--set", "policy.critic_hidden_dims=[16, 16]", "--set", "runner.eval_episodes=0",
            "--set", "runner.progress_bar=false"]


def call(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


# ---------------------------------------------------------------------------------------------- registry
def test_unknown_algorithm_lists_the_registered_ones():
    with pytest.raises(ConfigError, match="algo_name = 'sacc': unknown algorithm; valid: ppo, sac, bc, flow-bc"):
        resolve_config({"task": "arm-reach", "algo_name": "sacc"})
    # the engine itself reads the registry: no algorithm is special
    sac = resolve_train_config({"task": "arm-reach", "algo_name": "sac"}, env_config_cls=task_config_class)
    assert type(sac.algo) is ALGORITHMS.get("sac").config_cls and type(sac.algo).__name__ == "SACConfig"
    assert resolve_config({"task": "arm-reach"}).algo_name == ALGORITHMS.default == "ppo"


def test_sac_config_cross_checks():
    with pytest.raises(ConfigError, match=r"algo.buffer_size = 10: must hold algo.n_step = 3 steps .* \(>= 24\)"):
        resolve_config({"task": "arm-reach", "algo_name": "sac"}, ["sim.num_envs=8", "algo.buffer_size=10"])
    with pytest.raises(ConfigError, match="algo.target_subset_size = 3: must be <= policy.num_critics = 2"):
        resolve_config({"task": "arm-reach", "algo_name": "sac"}, ["algo.target_subset_size=3"])
    with pytest.raises(ConfigError, match="policy.v_min = 5.0: must be < policy.v_max = 1.0"):
        resolve_config({"task": "arm-reach", "algo_name": "sac"}, ["policy.v_min=5", "policy.v_max=1"])
    with pytest.raises(ConfigError, match="unknown key 'algo.num_learning_epochs'"):  # PPO's keys are not SAC's
        resolve_config({"task": "arm-reach", "algo_name": "sac", "algo": {"num_learning_epochs": 5}})


@dataclasses.dataclass(frozen=True, kw_only=True)
class SlowPPOConfig(PPOConfig):
    """A user's own algorithm config (here PPO's fields with another default)."""

    learning_rate: float = 1e-4


def test_a_registered_plugin_trains_through_the_runner_and_its_config(tmp_path):
    ppo = ALGORITHMS.get("ppo")
    with ALGORITHMS.registered("slow-ppo", dataclasses.replace(ppo, config_cls=SlowPPOConfig)):  # undone after
        _train_slow_ppo(ppo, tmp_path)
    assert "slow-ppo" not in ALGORITHMS


def _train_slow_ppo(ppo, tmp_path):
    with pytest.raises(ValueError, match="already registered"):
        ALGORITHMS.register("slow-ppo", ppo)
    with pytest.raises(ValueError, match="lower-case letters"):
        ALGORITHMS.register("Bad Name", ppo)
    with pytest.raises(ValueError, match="expected a AlgorithmEntry"):
        ALGORITHMS.register("other", object())
    assert algorithm_configs("slow-ppo")[0] is SlowPPOConfig
    cfg = resolve_config({"task": "arm-reach", "algo_name": "slow-ppo"},
                         ["sim.num_envs=4", "runner.max_iterations=1", "algo.num_steps_per_env=4"])
    assert cfg.algo.learning_rate == 1e-4
    runner = make_runner(cfg, tmp_path)
    try:
        assert isinstance(runner, OnPolicyRunner) and not isinstance(runner, OffPolicyRunner)
        assert "Loss/value_loss" in runner.learn()
    finally:
        runner.close()


def test_rlpd_runner_samples_in_memory_demonstrations(tmp_path):
    from robo_rl.learn.algorithms.sac import rlpd_variant

    cfg = resolve_config({"task": "arm-reach", "algo_name": "sac"},
                         ["sim.num_envs=4", "runner.max_iterations=1", "algo.buffer_size=400", "algo.batch_size=32",
                          "algo.learning_starts=2", "policy.actor_hidden_dims=[16]", "policy.critic_hidden_dims=[16]"])
    algo, policy = rlpd_variant(cfg.algo, cfg.policy, num_critics=4, updates_per_step=3)
    cfg = dataclasses.replace(cfg, algo=algo, policy=policy)
    rng = np.random.default_rng(0)
    m = 50
    demos = {"obs": rng.normal(size=(m, 27)), "action": rng.uniform(-3, 3, (m, 7)), "reward": rng.normal(size=m),
             "next_obs": rng.normal(size=(m, 27)), "terminated": np.zeros(m, bool), "truncated": rng.random(m) < 0.1}
    runner = OffPolicyRunner(cfg, tmp_path, demos=demos)
    try:
        assert runner.algo.demos.size == m and runner.policy.critic.ensemble == 4
        stats = runner.learn()
    finally:
        runner.close()
    assert np.isfinite(stats["Loss/critic_loss"]) and runner.algo.num_updates == 3 * (8 - 1)  # from step 2 on


def test_rlpd_learns_from_expert_demonstrations_with_an_asymmetric_critic(tmp_path):
    """arm-pick-place's critic sees more than its actor: the expert's recorded critic observations feed RLPD."""
    from robo_rl.learn.algorithms.sac import rlpd_variant
    from robo_rl.tasks.experts import PickPlaceExpert, rollout_expert
    from robo_rl.tasks.task_registry import make_env

    env = make_env("arm-pick-place", 2, seed=3)
    demo = rollout_expert(env, PickPlaceExpert(env), 2, seed=3)
    dims = env.obs_dims
    env.close()
    arrays = demo.arrays()
    m = demo.obs.shape[0]
    assert dims["critic"] > dims["policy"]
    assert arrays["critic_obs"].shape == arrays["next_critic_obs"].shape == (m, dims["critic"])
    torch.testing.assert_close(arrays["critic_obs"][:, : dims["policy"]], arrays["obs"])  # policy terms lead
    cfg = resolve_config({"task": "arm-pick-place", "algo_name": "sac"},
                         ["sim.num_envs=2", "runner.max_iterations=1", "algo.buffer_size=400", "algo.batch_size=32",
                          "algo.learning_starts=2", "policy.actor_hidden_dims=[16]", "policy.critic_hidden_dims=[16]"])
    algo, policy = rlpd_variant(cfg.algo, cfg.policy, num_critics=2, updates_per_step=1)
    runner = OffPolicyRunner(dataclasses.replace(cfg, algo=algo, policy=policy), tmp_path, demos=arrays)
    try:
        assert runner.policy.asymmetric and runner.algo.demos.data["critic_obs"].shape == (m, dims["critic"])
        stats = runner.learn()
    finally:
        runner.close()
    assert np.isfinite(stats["Loss/critic_loss"])


def test_learn_stops_when_the_stop_callback_says_so(tmp_path):
    cfg = resolve_config({"task": "arm-reach", "algo_name": "sac"},
                         ["sim.num_envs=4", "runner.max_iterations=50", "algo.buffer_size=400", "algo.batch_size=32",
                          "policy.actor_hidden_dims=[16]", "policy.critic_hidden_dims=[16]"])
    runner = OffPolicyRunner(cfg, tmp_path)
    seen = []
    try:
        runner.learn(stop=lambda r: seen.append(r.iteration) or r.iteration == 3)
    finally:
        runner.close()
    assert seen == [1, 2, 3] and runner.iteration == 3
    assert (tmp_path / "model_000003.pt").is_file()  # the stopped run saved its last iteration


# ---------------------------------------------------------------------------------------------- every task
@pytest.mark.parametrize("task", list(TASKS))
def test_train_algo_sac_runs_on_every_task(task, tmp_path, capsys):
    code = call(["train", "--task", task, "--algo", "sac", "--max-iterations", "2", "--run-name", "r",
                 "--set", f"runner.log_dir={tmp_path}", *TINY_SAC])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"training {task} with sac" in out.out
    state = load_run_checkpoint(tmp_path / "r" / "model_000002.pt")
    assert state["config"]["algo_name"] == "sac"
    assert state["config"]["algo"]["num_steps_per_env"] == 8  # the task's SAC preset was used
    assert state["algo"]["num_updates"] > 0  # learning started (learning_starts=2 of 16 steps)
    assert state["replay"] == "replay_000002.pt" and (tmp_path / "r" / state["replay"]).is_file()
    assert sorted(p.name for p in (tmp_path / "r").glob("replay_*.pt")) == ["replay_000002.pt"]
    assert all(torch.isfinite(t).all() for t in state["algo"]["policy"].values() if t.is_floating_point())


def test_sac_nan_reward_stops_training_with_exit_1(tmp_path, capsys, monkeypatch):
    from robo_rl.tasks.arm_reach import ArmReachEnv

    original = ArmReachEnv._reward_terms
    calls = {"n": 0}

    def reward_terms(self):
        terms = original(self)
        calls["n"] += 1
        if calls["n"] > 8 + 3:  # the 3rd env step of iteration 2
            terms["position_error"] = torch.full_like(terms["position_error"], float("nan"))
        return terms

    monkeypatch.setattr(ArmReachEnv, "_reward_terms", reward_terms)
    code = call(["train", "--task", "arm-reach", "--algo", "sac", "--max-iterations", "4", "--run-name", "nan",
                 "--set", f"runner.log_dir={tmp_path}", "--set", "runner.save_interval=1", *TINY_SAC])
    err = capsys.readouterr().err
    assert code == 1 and "training stopped at iteration 2: non-finite reward in 4 of 4 worlds" in err, err
    assert sorted(p.name for p in (tmp_path / "nan").glob("*.pt")) == ["model_000001.pt", "replay_000001.pt"]


# ---------------------------------------------------------------------------------------------- resume
RESUME = ["train", "--task", "arm-reach", "--algo", "sac", "--seed", "3", "--set", "runner.save_interval=2", *TINY_SAC]


def test_sac_sigkill_then_resume_restores_the_replay_buffer_and_matches_an_uninterrupted_run(cli, tmp_path):
    resumed = sigkill_then_resume(cli, tmp_path, RESUME, killed_max_iterations=100000)
    assert "resuming" in resumed.stdout and "note:" not in resumed.stdout  # nothing was lost

    a = load_checkpoint(tmp_path / "full" / "model_000006.pt")
    b = load_checkpoint(tmp_path / "killed" / "model_000006.pt")
    for name, tensor in a["algo"]["policy"].items():
        assert torch.equal(tensor, b["algo"]["policy"][name]), name
    assert a["algo"]["num_updates"] == b["algo"]["num_updates"] > 0
    ra, rb = load_checkpoint(tmp_path / "full" / a["replay"]), load_checkpoint(tmp_path / "killed" / b["replay"])
    assert ra.keys() == rb.keys() and all(torch.equal(ra[k], rb[k]) if torch.is_tensor(ra[k]) else ra[k] == rb[k]
                                          for k in ra)
    assert torch.equal(a["env"]["physics_state"], b["env"]["physics_state"])
    assert sorted(p.name for p in (tmp_path / "killed").glob("replay_*.pt")) == ["replay_000006.pt"]


def test_resume_without_a_saved_replay_buffer_says_so_and_continues(tmp_path, capsys):
    log = ["--set", f"runner.log_dir={tmp_path}", "--run-name", "r"]
    assert call([*RESUME, *log, "--max-iterations", "2", "--set", "algo.save_replay=false"]) == 0
    assert not list((tmp_path / "r").glob("replay_*.pt"))
    capsys.readouterr()
    assert call(["train", "--resume", str(tmp_path / "r"), "--max-iterations", "4"]) == 0
    out = capsys.readouterr().out
    assert "note: the replay buffer was not saved" in out and "refills from empty" in out
    state = load_run_checkpoint(tmp_path / "r" / "model_000004.pt")
    assert state["iteration"] == 4 and state["replay"] is None  # save_replay stays off for the resumed run


def test_replay_over_the_size_cap_is_not_saved(tmp_path):
    cfg = resolve_config({"task": "arm-reach", "algo_name": "sac"},
                         ["sim.num_envs=4", "algo.buffer_size=400", "algo.batch_size=16", "runner.max_iterations=1",
                          "policy.actor_hidden_dims=[8]", "policy.critic_hidden_dims=[8]",
                          "algo.save_replay_max_mb=0.001"])  # 1 kB: smaller than 8 steps of 4 worlds
    runner = make_runner(cfg, tmp_path)
    try:
        runner.learn()
    finally:
        runner.close()
    assert load_run_checkpoint(tmp_path / "model_000001.pt")["replay"] is None
    assert not list(tmp_path.glob("replay_*.pt"))


# ---------------------------------------------------------------------------------------------- export
def test_exported_sac_policy_is_the_scaled_tanh_mean_with_the_tasks_contract(tmp_path):
    from robo_rl.deploy.policy import OnnxPolicy
    from robo_rl.export import onnx_export as export_mod
    from robo_rl.learn.builders import build_env, load_policy, load_trained

    cfg = resolve_config({"task": "arm-reach", "algo_name": "sac"},
                         ["sim.num_envs=8", "runner.max_iterations=2", "algo.buffer_size=800", "algo.batch_size=32",
                          "algo.learning_starts=2", "policy.actor_hidden_dims=[16]", "policy.critic_hidden_dims=[16]",
                          "policy.action_bound=0.5"])
    runner = make_runner(cfg, tmp_path / "run")
    runner.learn()
    runner.policy.obs_normalizer.mean.add_(0.3)  # a missing normaliser in the graph would show
    with torch.no_grad():
        runner.policy.actor.mean.weight.mul_(50.0)  # saturate tanh: the bound must hold
    runner.save()
    runner.close()

    out = tmp_path / "sac.onnx"
    contract = export_mod.export_policy(tmp_path / "run", out, parity_envs=8, parity_steps=5)
    _, state, cfg = load_trained(tmp_path / "run")
    env = build_env(cfg, num_envs=16)
    try:
        assert contract.action == env.contract.action  # kind, scale and clip as the task says
        assert contract.obs_normalization and contract.extra["task"] == "arm-reach"
        policy = load_policy(state, cfg, env)
        obs = env.reset()["policy"]
    finally:
        env.close()
    actions, targets = OnnxPolicy(out)(obs.numpy())
    with torch.no_grad():
        want = 0.5 * torch.tanh(policy.actor.mean(policy.actor.trunk(policy.obs_normalizer(obs))))
    assert np.abs(actions - want.numpy()).max() <= 1e-5
    assert np.abs(actions).max() <= 0.5 and np.abs(actions).max() > 0.45
    expected = np.asarray(contract.default_joint_pos) + np.asarray(contract.action.scale) * actions
    assert np.abs(targets - expected).max() <= 1e-5
