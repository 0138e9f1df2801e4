"""PPO options with SB3's semantics: each option on its own, and one update against SB3's PPO on the same batch."""

import copy

import numpy as np
import pytest
import torch

from robo_rl.core.config import ConfigError, build
from robo_rl.learn.algorithms.ppo import PPO, PPOConfig, normalize_advantages
from robo_rl.learn.networks.actor_critic import ActorCritic, PolicyConfig
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.rollout_storage import RolloutStorage
from robo_rl.learn.train_config import resolve_train_config

# ---------------------------------------------------------------------------------------------- options


def _storage(steps: int = 4, envs: int = 3) -> RolloutStorage:
    s = RolloutStorage(steps, envs, 2, 2, 1)
    s.advantages = torch.arange(steps * envs, dtype=torch.float32).reshape(steps, envs)  # sample ids (T, N)
    return s


def _partitions(reshuffle: bool) -> list[list[frozenset[int]]]:
    """The minibatches of each epoch, as sets of sample ids."""
    epochs, n_mb = 3, 2
    mbs = list(_storage().minibatches(n_mb, epochs, torch.Generator().manual_seed(0), reshuffle=reshuffle))
    ids = [frozenset(int(i) for i in mb["advantages"]) for mb in mbs]
    return [ids[e * n_mb : (e + 1) * n_mb] for e in range(epochs)]


def test_default_minibatches_are_one_partition_for_all_epochs():
    parts = _partitions(reshuffle=False)
    assert parts[0] == parts[1] == parts[2]
    assert frozenset().union(*parts[0]) == frozenset(range(12))


def test_reshuffled_minibatches_are_a_new_partition_of_all_samples_each_epoch():
    parts = _partitions(reshuffle=True)
    for epoch in parts:
        assert frozenset().union(*epoch) == frozenset(range(12)) and sum(len(mb) for mb in epoch) == 12
    assert len({frozenset(epoch) for epoch in parts}) > 1  # 3 draws of 462 partitions: the same three is ~5e-6


def test_normalize_advantages_gives_zero_mean_unit_std_and_leaves_one_sample_alone():
    out = normalize_advantages(torch.tensor([1.0, 2.0, 3.0, 6.0]))
    assert out.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert out.std().item() == pytest.approx(1.0, abs=1e-6)
    assert normalize_advantages(torch.tensor([5.0])).item() == 5.0


def _filled(cfg: PPOConfig, n: int = 8) -> PPO:
    policy = ActorCritic(3, 3, 2, PolicyConfig(actor_hidden_dims=(8,), critic_hidden_dims=(8,)))
    algo = PPO(cfg, policy, n, torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(2)
    for _ in range(cfg.num_steps_per_env):
        obs = torch.randn(n, 3, generator=gen)
        algo.act(obs, obs)
        no = torch.zeros(n, dtype=torch.bool)
        algo.process_env_step(5.0 + torch.randn(n, generator=gen), no, no, obs)  # advantages far from mean 0
    algo.compute_returns(torch.randn(n, 3, generator=gen))
    return algo


def test_per_minibatch_normalisation_leaves_the_stored_advantages_raw():
    per_batch = _filled(PPOConfig(num_steps_per_env=4))
    per_mb = _filled(PPOConfig(num_steps_per_env=4, advantage_norm_per_minibatch=True))
    assert per_batch.storage.advantages.mean().abs().item() < 1e-5
    assert per_mb.storage.advantages.mean().item() > 1.0  # normalised only inside update()
    assert np.isfinite(list(per_mb.update().values())).all()


def test_joint_clip_is_one_group_of_all_parameters_and_adam_eps_reaches_the_optimizer():
    algo = _filled(PPOConfig(num_steps_per_env=2, grad_clip="joint", adam_eps=1e-5))
    assert [{id(p) for p in g} for g in algo._clip_groups] == [{id(p) for p in algo.policy.parameters()}]
    assert algo.optimizer.param_groups[0]["eps"] == 1e-5
    default = _filled(PPOConfig(num_steps_per_env=2))
    assert len(default._clip_groups) == 2 and default.optimizer.param_groups[0]["eps"] == 1e-8


@pytest.mark.parametrize(
    ("section", "cls", "field", "value"),
    [("algo", PPOConfig, "grad_clip", "global"), ("algo", PPOConfig, "adam_eps", 0.0),
     ("policy", PolicyConfig, "obs_norm_clip", -1.0), ("policy", PolicyConfig, "obs_norm_eps", 0.0)],
)  # fmt: skip
def test_bad_option_values_are_one_line_config_errors(section, cls, field, value):
    with pytest.raises(ConfigError, match=rf"^config error: {section}\.{field} = ") as err:
        build(cls, {field: value}, section)
    assert "\n" not in str(err.value)


def test_normaliser_eps_and_clip():
    norm = EmpiricalNormalization(2, eps=1e-4, clip=10.0)
    norm.update(torch.tensor([[0.0, 0.0], [2.0, 0.002]]))  # mean (1, 0.001), std (1, 0.001)
    y = norm(torch.tensor([[3.0, 0.002], [-50.0, 0.0]]))  # (2, 2)
    assert y[0].tolist() == pytest.approx([2.0 / (1 + 1e-4), 0.001 / (0.001 + 1e-4)], rel=1e-4)
    assert y[1].tolist() == pytest.approx([-10.0, -0.001 / (0.001 + 1e-4)], rel=1e-4)  # -51 clipped to -10
    unclipped = EmpiricalNormalization(2)
    unclipped.load_state_dict(norm.state_dict())
    assert unclipped(torch.tensor([[-50.0, 0.0]]))[0, 0].item() < -10.0


def test_policy_config_reaches_the_normalisers():
    policy = ActorCritic(3, 4, 2, PolicyConfig(obs_norm_eps=1e-4, obs_norm_clip=5.0))
    for norm in (policy.obs_normalizer, policy.critic_obs_normalizer):
        assert (norm.eps, norm.clip) == (1e-4, 5.0)


def test_exported_policy_bakes_in_the_observation_clip(tmp_path):
    from robo_rl.deploy.policy import OnnxPolicy
    from robo_rl.export import onnx_export as export_mod
    from robo_rl.learn.runner import OnPolicyRunner
    from robo_rl.tasks.task_registry import task_config_class

    overrides = ["sim.num_envs=8", "runner.max_iterations=1", "algo.num_steps_per_env=8", "runner.eval_episodes=0",
                 "policy.obs_norm_clip=0.5"]  # fmt: skip
    cfg = resolve_train_config({"task": "arm-reach"}, overrides, env_config_cls=task_config_class)
    runner = OnPolicyRunner(cfg, tmp_path / "run")
    runner.learn()
    runner.save()
    policy, obs = runner.policy, runner.env.get_observations()["policy"][:4]  # (4, O)
    runner.close()
    obs = obs + 100.0 * torch.randn(obs.shape, generator=torch.Generator().manual_seed(0))  # far outside the clip
    assert (policy.obs_normalizer(obs).abs() == 0.5).any()
    out = tmp_path / "policy.onnx"
    contract = export_mod.export_policy(tmp_path / "run", out, parity_envs=4, parity_steps=2)
    actions, _ = OnnxPolicy(out)(obs.numpy())
    with torch.no_grad():
        want = policy.act_inference(obs).clamp(-contract.action.clip, contract.action.clip)  # (4, A)
    assert np.abs(actions - want.numpy()).max() <= 1e-5


# ---------------------------------------------------------------------------------------------- against SB3

T, EPOCHS = 64, 3
HP = {"learning_rate": 9.80828e-05, "gamma": 0.999, "lam": 0.99, "entropy_coef": 0.00229519,
      "value_loss_coef": 0.835671, "max_grad_norm": 0.7}  # fmt: skip  (RL Zoo's Hopper PPO)
SB3_OPTIONS = {"grad_clip": "joint", "adam_eps": 1e-5, "advantage_norm_per_minibatch": True}
# our ActorCritic's layers <- SB3 MlpPolicy's (separate actor and critic MLPs, net_arch dict(pi, vf))
LAYERS = {"actor.0": "mlp_extractor.policy_net.0", "actor.2": "mlp_extractor.policy_net.2", "actor.4": "action_net",
          "critic.0": "mlp_extractor.value_net.0", "critic.2": "mlp_extractor.value_net.2", "critic.4": "value_net"}


@pytest.fixture(scope="module")
def sb3_update():
    """SB3's PPO after one rollout on Pendulum-v1: (policy before its update, rollout buffer, policy after)."""
    pytest.importorskip("stable_baselines3")
    import gymnasium
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.vec_env import DummyVecEnv
    from torch import nn

    env = DummyVecEnv([lambda: gymnasium.make("Pendulum-v1")])
    model = SB3PPO(
        "MlpPolicy", env, n_steps=T, batch_size=T, n_epochs=EPOCHS, learning_rate=HP["learning_rate"],
        gamma=HP["gamma"], gae_lambda=HP["lam"], ent_coef=HP["entropy_coef"], vf_coef=HP["value_loss_coef"],
        max_grad_norm=HP["max_grad_norm"], seed=0, device="cpu",
        policy_kwargs={"log_std_init": -2.0, "ortho_init": False, "activation_fn": nn.ReLU,
                       "net_arch": {"pi": [16, 16], "vf": [16, 16]}},
    )  # fmt: skip
    _, callback = model._setup_learn(T, None)
    callback.on_training_start(locals(), globals())
    model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=T)
    before = copy.deepcopy(model.policy)
    buffer = copy.deepcopy(model.rollout_buffer)
    model.train()
    env.close()
    return before, buffer, model.policy


def _our_update(sb3_policy, buffer, **options) -> ActorCritic:
    """Our PPO with SB3's weights, on SB3's batch (one minibatch: no shuffling to match); the updated policy."""
    obs_dim, action_dim = buffer.observations.shape[-1], buffer.actions.shape[-1]
    pcfg = PolicyConfig(actor_hidden_dims=(16, 16), critic_hidden_dims=(16, 16), activation="relu",
                        noise_std_type="log", init_noise_std=float(np.exp(-2.0)), obs_normalization=False)  # fmt: skip
    policy = ActorCritic(obs_dim, obs_dim, action_dim, pcfg)
    with torch.no_grad():
        for ours, theirs in LAYERS.items():
            policy.get_submodule(ours).weight.copy_(sb3_policy.get_submodule(theirs).weight)
            policy.get_submodule(ours).bias.copy_(sb3_policy.get_submodule(theirs).bias)
        policy.log_std.copy_(sb3_policy.log_std)
    cfg = PPOConfig(num_steps_per_env=T, num_learning_epochs=EPOCHS, num_mini_batches=1, schedule="fixed",
                    use_clipped_value_loss=False, **HP, **options)  # fmt: skip
    algo = PPO(cfg, policy, 1, torch.Generator().manual_seed(0))
    s = algo.storage

    def put(dst, src):
        dst.copy_(torch.as_tensor(src, dtype=torch.float32).reshape(dst.shape))

    for dst, src in ((s.obs, buffer.observations), (s.critic_obs, buffer.observations), (s.actions, buffer.actions),
                     (s.log_probs, buffer.log_probs), (s.values, buffer.values), (s.advantages, buffer.advantages),
                     (s.returns, buffer.returns)):  # fmt: skip
        put(dst, src)
    if not cfg.advantage_norm_per_minibatch:  # as compute_returns does
        s.advantages = normalize_advantages(s.advantages)
    s.step = T
    algo.update()
    return policy


def _largest_difference(policy: ActorCritic, sb3_policy) -> float:
    diffs = [(policy.log_std - sb3_policy.log_std).abs().max().item()]
    for ours, theirs in LAYERS.items():
        for name in ("weight", "bias"):
            a, b = getattr(policy.get_submodule(ours), name), getattr(sb3_policy.get_submodule(theirs), name)
            diffs.append((a - b).abs().max().item())
    return max(diffs)


def test_one_update_with_sb3_options_gives_sb3s_parameters(sb3_update):
    before, buffer, after = sb3_update
    step = _largest_difference(_our_update(before, buffer, **SB3_OPTIONS), before)
    assert step > 1e-4  # the update moved the parameters (lr ~1e-4 per Adam step)
    assert _largest_difference(_our_update(before, buffer, **SB3_OPTIONS), after) < 1e-7


@pytest.mark.parametrize("missing", ["grad_clip", "adam_eps"])
def test_without_each_sb3_option_the_update_differs(sb3_update, missing):
    """Joint clipping and Adam's eps each change this update by about a step's size: the parity test can fail."""
    before, buffer, after = sb3_update
    options = {k: v for k, v in SB3_OPTIONS.items() if k != missing}
    assert _largest_difference(_our_update(before, buffer, **options), after) > 3e-5
