"""ReinFlow (learn/algorithms/reinflow.py):
exact first-epoch ratio, critic warm-up, the σ schedule, the pretrained start,
and flow-bc -> reinflow through the CLI."""

import pytest
import torch

from robo_rl.cli import main as cli
from robo_rl.learn.algorithms.bc import FlowPolicyConfig
from robo_rl.learn.algorithms.reinflow import ReinFlow, ReinFlowConfig, chain_stats, sample_chain
from robo_rl.learn.networks.flow import FlowPolicy, chain_log_prob
from robo_rl.learn.networks.normalizer import EmpiricalNormalization

N, T, O, A = 8, 6, 5, 3


def _algo(**cfg) -> ReinFlow:
    torch.manual_seed(0)
    policy = FlowPolicy(O, O + 2, A, FlowPolicyConfig(hidden_dims=(32, 32), noise_hidden_dims=(16,),
                                                      critic_hidden_dims=(32,)), action_clip=1.0)
    policy.obs_normalizer.update(torch.randn(100, O))  # as flow-bc leaves it: fitted, then frozen
    cfg = ReinFlowConfig(num_steps_per_env=T, num_mini_batches=2, num_learning_epochs=2, **cfg)
    return ReinFlow(cfg, policy, None, N, torch.Generator().manual_seed(1))


def _rollout(algo: ReinFlow) -> None:
    g = torch.Generator().manual_seed(2)
    for _ in range(T):
        actions = algo.act(torch.randn(N, O, generator=g), torch.randn(N, O + 2, generator=g))
        assert actions.shape == (N, A) and actions.abs().max() <= 1.0
        algo.process_env_step(torch.randn(N, generator=g), torch.zeros(N, dtype=torch.bool),
                              torch.zeros(N, dtype=torch.bool), torch.randn(N, O + 2, generator=g))
    algo.compute_returns(torch.randn(N, O + 2, generator=g))


def test_the_first_minibatch_ratio_is_exactly_one():
    algo = _algo(critic_warmup_iterations=0)
    _rollout(algo)
    stats = algo.update()
    assert abs(stats["ratio_first"] - 1.0) < 1e-5 and stats["actor_trained"] == 1.0
    # the trap it guards against (ReinFlow #5): inputs that changed between the rollout and the update
    algo = _algo(critic_warmup_iterations=0)
    _rollout(algo)
    algo.storage.obs += 0.5  # e.g. an observation normaliser that kept updating
    assert abs(algo.update()["ratio_first"] - 1.0) > 1e-3


def test_stored_log_probs_equal_the_batched_recomputation():
    algo = _algo()
    p = algo.policy
    obs_n = p.obs_normalizer(torch.randn(N, O))
    chain, means, stds = sample_chain(p, obs_n, torch.Generator().manual_seed(3), 1.0)
    m2, s2 = chain_stats(p, obs_n, chain)
    torch.testing.assert_close(m2, means, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(s2, stds, atol=1e-6, rtol=1e-6)
    assert chain.shape == (N, p.num_steps + 1, A) and (stds >= 0.05 - 1e-7).all() and (stds <= 0.12 + 1e-7).all()
    noise = (chain[:, 1:] - means) / stds  # the chain holds the samples before the clamp of the next step's input
    assert noise.abs().max() <= 3.0 + 1e-4  # the noise is clipped at 3 sigma
    assert chain[:, 1:].abs().max() > 1.0  # this untrained net's samples leave the bound: the clamp is exercised
    assert torch.isfinite(chain_log_prob(chain, means, stds)).all()


def test_critic_warmup_leaves_the_actor_alone_then_trains_it():
    algo = _algo(critic_warmup_iterations=1, actor_learning_rate=1e-3)
    actor = [q.clone() for q in algo.policy.velocity.parameters()]
    critic = [q.clone() for q in algo.policy.critic.parameters()]
    _rollout(algo)
    assert algo.update()["actor_trained"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(actor, algo.policy.velocity.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(critic, algo.policy.critic.parameters(), strict=True))
    _rollout(algo)
    assert algo.update()["actor_trained"] == 1.0
    assert not all(torch.equal(a, b) for a, b in zip(actor, algo.policy.velocity.parameters(), strict=True))


def test_the_upper_noise_bound_decays_linearly_to_its_final_value():
    algo = _algo(sigma_max_final=0.06, sigma_decay_iterations=2)
    seen = []
    for _ in range(3):
        _rollout(algo)
        seen.append(algo.update()["sigma_max"])
    assert seen == pytest.approx([0.09, 0.06, 0.06])


def test_the_actor_normaliser_stays_frozen_during_rollouts():
    algo = _algo()
    norm = algo.policy.obs_normalizer
    assert isinstance(norm, EmpiricalNormalization)
    before = norm.mean.clone()
    _rollout(algo)
    assert torch.equal(norm.mean, before)
    assert int(algo.policy.critic_obs_normalizer.count) == N * T  # the critic's adapts


def call(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def test_flow_bc_then_reinflow_through_the_cli(tmp_path, capsys):
    demos = tmp_path / "demos"
    assert call(["record", "--task", "arm-reach", "--expert", "--episodes", "4", "--num-envs", "4",
                 "--out", str(demos)]) == 0
    common = ["--task", "arm-reach", "--num-envs", "4", "--set", f"runner.log_dir={tmp_path}",
              "--set", "runner.eval_episodes=0", "--set", "runner.progress_bar=false",
              "--set", "policy.hidden_dims=[32,32]"]
    assert call(["train", "--algo", "flow-bc", "--dataset", str(demos), "--max-iterations", "2",
                 "--set", "algo.num_steps_per_env=5", *common, "--run-name", "fbc"]) == 0
    assert call(["train", "--algo", "reinflow", "--max-iterations", "2", "--set", f"algo.pretrained={tmp_path / 'fbc'}",
                 "--set", "algo.num_steps_per_env=8", "--set", "algo.critic_warmup_iterations=1", *common,
                 "--run-name", "rf"]) == 0
    assert (tmp_path / "rf" / "model_000002.pt").is_file()
    capsys.readouterr()
    assert call(["train", "--algo", "reinflow", "--max-iterations", "1", "--set", f"algo.pretrained={tmp_path / 'fbc'}",
                 *common, "--set", "policy.hidden_dims=[64,64]", "--run-name", "rf2"]) != 0
    assert "policy.hidden_dims = (64, 64), but the pretrained run has (32, 32)" in capsys.readouterr().err
    assert call(["train", "--algo", "reinflow", "--max-iterations", "1", *common, "--run-name", "rf3"]) != 0
    assert "algo.pretrained is not set" in capsys.readouterr().err


def test_a_flow_policy_exports_with_its_noise_input_and_runs_in_the_deploy_core(tmp_path, capsys):
    import numpy as np

    from robo_rl.deploy.policy import OnnxPolicy
    from robo_rl.export.onnx_export import export_policy

    demos = tmp_path / "demos"
    assert call(["record", "--task", "arm-reach", "--expert", "--episodes", "2", "--num-envs", "2",
                 "--out", str(demos)]) == 0
    runs = {}
    for noise in ("sample", "zeros", "steps"):  # x_0 drawn, x_0 = 0, x_0 and every step's noise drawn
        initial, steps = ("sample", "true") if noise == "steps" else (noise, "false")
        assert call(["train", "--task", "arm-reach", "--algo", "flow-bc", "--dataset", str(demos), "--num-envs", "2",
                     "--max-iterations", "1", "--set", "algo.num_steps_per_env=2",
                     "--set", f"runner.log_dir={tmp_path}",
                     "--set", "runner.eval_episodes=0", "--set", "policy.hidden_dims=[16]",
                     "--set", f"policy.initial_noise={initial}", "--set", f"policy.step_noise={steps}",
                     "--set", "policy.num_steps=3", "--run-name", noise]) == 0
        contract = export_policy(tmp_path / noise, tmp_path / f"{noise}.onnx", parity_envs=2, parity_steps=2,
                                 evaluate=False)  # parity <= 1e-5 with random noise, or it raises
        runs[noise] = (contract, OnnxPolicy(tmp_path / f"{noise}.onnx"))
    contract, policy = runs["sample"]
    assert contract.extra["flow"] == {"num_steps": 3, "horizon": 1, "variant": "shortcut", "initial_noise": "sample",
                                      "step_noise": False, "noise_input_dim": 7, "execute_steps": 1}
    obs = np.zeros(contract.obs_dim, dtype=np.float32)
    first, second = policy(obs)[0], policy(obs)[0]
    assert first.shape == (7,) and not np.array_equal(first, second)  # a fresh x_0 every inference
    assert [i.name for i in policy.session.get_inputs()] == ["obs", "noise"]
    zeros_contract, zeros_policy = runs["zeros"]
    assert zeros_contract.extra["flow"]["noise_input_dim"] == 0
    assert [i.name for i in zeros_policy.session.get_inputs()] == ["obs"]
    assert np.array_equal(zeros_policy(obs)[0], zeros_policy(obs)[0])  # integrates from zeros: deterministic
    steps_contract, steps_policy = runs["steps"]
    assert steps_contract.extra["flow"]["noise_input_dim"] == 4 * 7  # x_0 and 3 steps' draws
    assert steps_policy.session.get_inputs()[1].shape[-1] == 28
    capsys.readouterr()
    assert call(["play", str(tmp_path / "sample"), "--episodes", "2", "--flow-steps", "1"]) == 0
    assert "evaluation: 2 episodes" in capsys.readouterr().out
    assert call(["play", str(tmp_path / "sample"), "--episodes", "2", "--flow-steps", "0"]) != 0
    assert "--flow-steps 0: must be 1 .. 128" in capsys.readouterr().err


def test_quadruped_presets_from_a_ppo_teacher(tmp_path, capsys):
    """The quadruped-walk-flat pipeline end to end at toy size: PPO teacher -> record --teacher -> flow-bc and ReinFlow
    presets (chunks of 4 run open-loop)."""
    common = ["--num-envs", "4", "--set", f"runner.log_dir={tmp_path}", "--set", "runner.eval_episodes=0",
              "--set", "runner.progress_bar=false", "--set", "env.episode_length_s=0.5"]
    assert call(["train", "--task", "quadruped-walk-flat", "--max-iterations", "1", "--set", "algo.num_steps_per_env=4",
                 "--set", "algo.num_mini_batches=1", *common, "--run-name", "ppo"]) == 0
    demos = tmp_path / "go2"
    assert call(["record", "--task", "quadruped-walk-flat", "--teacher", str(tmp_path / "ppo"), "--episodes", "2",
                 "--num-envs", "2", "--noise", "0.1", "--out", str(demos)]) == 0
    out = capsys.readouterr().out
    assert "2 episodes, 50 frames, dropped frames 0" in out  # 0.5 s at 50 Hz: the teacher's task config
    from robo_rl.demos.dataset_reader import DatasetReader
    from robo_rl.learn.builders import load_policy, load_trained
    from robo_rl.tasks.task_registry import make_env

    frames = DatasetReader(demos).frames(["observation.policy", "action"])
    _, state, cfg = load_trained(tmp_path / "ppo")
    teacher = load_policy(state, cfg, make_env("quadruped-walk-flat", 1))
    with torch.no_grad():  # the labels are the teacher's actions on the very observations recorded (noise included)
        want = teacher.act_inference(torch.tensor(frames["observation.policy"], dtype=torch.float32))
    want = want.clamp(-cfg.env.action_clip, cfg.env.action_clip)
    torch.testing.assert_close(torch.tensor(frames["action"], dtype=torch.float32), want, atol=1e-5, rtol=1e-5)
    small = ["--set", "policy.hidden_dims=[16]", "--set", "policy.noise_hidden_dims=[8]",
             "--set", "policy.critic_hidden_dims=[16]"]
    assert call(["train", "--config", "sim_configs/quadruped-walk-flat-flow-bc.yaml", "--dataset", str(demos),
                 "--max-iterations", "1", "--set", "algo.num_steps_per_env=2", *small, *common,
                 "--run-name", "fbc"]) == 0
    assert call(["train", "--config", "sim_configs/quadruped-walk-flat-reinflow.yaml", "--max-iterations", "1",
                 "--set", f"algo.pretrained={tmp_path / 'fbc'}", "--set", "algo.num_steps_per_env=3",
                 "--set", "algo.num_mini_batches=2", *small, *common, "--run-name", "rf"]) == 0
    assert (tmp_path / "rf" / "model_000001.pt").is_file()
    capsys.readouterr()
    assert call(["record", "--task", "arm-reach", "--teacher", str(tmp_path / "ppo"), "--episodes", "1",
                 "--out", str(tmp_path / "x")]) != 0
    assert "was trained on 'quadruped-walk-flat', not 'arm-reach'" in capsys.readouterr().err
    assert call(["record", "--task", "quadruped-walk-flat", "--expert", "--episodes", "1",
                 "--out", str(tmp_path / "y")]) != 0
    err = capsys.readouterr().err
    assert "has no scripted expert" in err and "--teacher RUN" in err
