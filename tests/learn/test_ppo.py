import math

import pytest
import torch

from robo_rl.core.config import ConfigError, build
from robo_rl.learn.algorithms.ppo import PPO, PPOConfig, approx_kl, clip_fraction, explained_variance
from robo_rl.learn.networks.actor_critic import STD_MIN, ActorCritic, PolicyConfig, gaussian_log_prob
from robo_rl.learn.precision import resolve_precision


def test_clip_fraction_matches_hand_computed_numbers():
    # ratios 1.0, 1.1, 1.3, 0.7, 0.85 with clip 0.2: 1.3 and 0.7 lie outside [0.8, 1.2] -> 2 / 5
    old = torch.tensor([0.5, -1.0, 2.0, 0.0, 0.3])
    new = old + torch.log(torch.tensor([1.0, 1.1, 1.3, 0.7, 0.85]))
    assert clip_fraction(new, old, 0.2).item() == pytest.approx(0.4)
    assert clip_fraction(old, old, 0.2).item() == 0.0


def test_approx_kl_matches_hand_computed_numbers():
    # log r = 0, log 2, -log 2: (r - 1) - log r = 0, 1 - log 2, -1/2 + log 2; the logs cancel -> mean 0.5 / 3
    old = torch.zeros(3)
    new = torch.tensor([0.0, math.log(2.0), -math.log(2.0)])
    assert approx_kl(new, old).item() == pytest.approx(1.0 / 6.0)
    assert approx_kl(old, old).item() == 0.0


def test_approx_kl_is_close_to_the_exact_kl_for_nearby_gaussians():
    # Samples from the old N(0, 1); new N(0.1, 1): KL(old || new) = 0.1^2 / 2 = 0.005
    x = torch.randn(200_000, 1, generator=torch.Generator().manual_seed(0))
    old = gaussian_log_prob(x, torch.zeros(1), torch.zeros(1))
    new = gaussian_log_prob(x, torch.full((1,), 0.1), torch.zeros(1))
    assert approx_kl(new, old).item() == pytest.approx(0.005, rel=0.05)


def test_explained_variance_matches_hand_computed_numbers():
    returns = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(returns, returns).item() == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), 2.5), returns).item() == pytest.approx(0.0)
    # residuals 1, 0, 0, -1: Var = 2/3; Var(returns) = 5/3 -> 1 - 0.4
    assert explained_variance(torch.tensor([0.0, 2.0, 3.0, 5.0]), returns).item() == pytest.approx(0.6)
    # a critic that predicts the opposite of the returns' deviations is worse than a constant
    assert explained_variance(torch.tensor([4.0, 3.0, 2.0, 1.0]), returns).item() == pytest.approx(-3.0)
    # constant returns: nothing to explain, 0 rather than NaN (which would stop training in the NaN guard)
    assert explained_variance(torch.zeros(4), torch.ones(4)).item() == 0.0


@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_both_std_parameterisations_start_at_init_noise_std(std_type):
    policy = ActorCritic(3, 4, 2, PolicyConfig(init_noise_std=0.5, noise_std_type=std_type))
    assert torch.allclose(policy.action_std(), torch.full((2,), 0.5))
    assert torch.allclose(policy.action_log_std(), torch.full((2,), math.log(0.5)))
    names = {n for n, _ in policy.named_parameters()}
    assert ("std" in names, "log_std" in names) == (std_type == "scalar", std_type == "log")


def test_scalar_std_stays_positive():
    policy = ActorCritic(3, 4, 2, PolicyConfig(noise_std_type="scalar"))
    with torch.no_grad():
        policy.std.copy_(torch.tensor([-0.3, 0.2]))  # an optimiser step may push sigma below zero
    assert torch.allclose(policy.action_std(), torch.tensor([STD_MIN, 0.2]))
    assert torch.isfinite(policy.action_log_std()).all()


def test_noise_std_type_is_validated():
    with pytest.raises(ConfigError, match="noise_std_type"):
        build(PolicyConfig, {"noise_std_type": "softplus"}, "policy")


def _filled_ppo(std_type: str, *, epochs: int, minibatches: int, precision: str = "float32") -> PPO:
    n, t, o, a = 16, 6, 5, 3
    pol_cfg = PolicyConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,), noise_std_type=std_type)
    torch.manual_seed(0)
    policy = ActorCritic(o, o, a, pol_cfg)
    cfg = PPOConfig(num_steps_per_env=t, num_learning_epochs=epochs, num_mini_batches=minibatches,
                    precision=precision)
    algo = PPO(cfg, policy, n, torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(2)
    for _ in range(t):
        obs = torch.randn(n, o, generator=gen)
        algo.act(obs, obs)
        algo.process_env_step(torch.randn(n, generator=gen), torch.zeros(n, dtype=torch.bool),
                              torch.zeros(n, dtype=torch.bool), obs)  # fmt: skip
    algo.compute_returns(torch.randn(n, o, generator=gen))
    return algo


@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_first_minibatch_ratio_is_one(std_type):
    """One epoch of one minibatch sees the rollout's own policy: nothing clipped, no KL."""
    stats = _filled_ppo(std_type, epochs=1, minibatches=1).update()
    assert stats["clip_fraction"] == 0.0
    assert abs(stats["approx_kl"]) < 1e-6 and abs(stats["kl"]) < 1e-6


@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_update_reports_diagnostics(std_type):
    algo = _filled_ppo(std_type, epochs=4, minibatches=2)
    s = algo.storage
    expected_ev = explained_variance(s.values.flatten(), s.returns.flatten()).item()
    stats = algo.update()
    for key in ("value_loss", "surrogate_loss", "entropy", "kl", "clip_fraction", "approx_kl",
                "explained_variance", "learning_rate", "action_std"):  # fmt: skip
        assert isinstance(stats[key], float) and math.isfinite(stats[key]), key
    assert 0.0 <= stats["clip_fraction"] <= 1.0
    assert stats["approx_kl"] >= 0.0
    assert stats["explained_variance"] == pytest.approx(expected_ev)
    assert stats["action_std"] != 1.0  # the std is learned in both parameterisations


@pytest.mark.parametrize("std_type", ["scalar", "log"])
def test_actor_and_critic_are_clipped_separately(std_type):
    """As in RSL-RL: the std belongs to the actor's clip group, the critic has its own."""
    algo = _filled_ppo(std_type, epochs=1, minibatches=1)
    policy = algo.policy
    actor_ids = {id(p) for p in algo._actor_params}
    critic_ids = {id(p) for p in algo._critic_params}
    std_param = policy.std if std_type == "scalar" else policy.log_std
    assert id(std_param) in actor_ids and not actor_ids & critic_ids
    assert actor_ids | critic_ids == {id(p) for p in policy.parameters()}
    assert critic_ids == {id(p) for p in policy.critic.parameters()}


def test_bfloat16_precision_runs_the_layers_in_bfloat16_and_keeps_the_rest_float32():
    """`precision: bfloat16`: autocast over the actor's and critic's layers in the rollout and the update; the
    parameters, the stored rollout and the losses stay float32."""
    seen: list[torch.dtype] = []
    algo = _filled_ppo("log", epochs=1, minibatches=1, precision="bfloat16")
    for net in (algo.policy.actor, algo.policy.critic):
        net[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    obs = torch.randn(16, 5)
    algo.storage.step = 0
    algo.act(obs, obs)
    assert seen == [torch.bfloat16, torch.bfloat16]
    s = algo.storage
    assert s.means.dtype == s.log_probs.dtype == s.values.dtype == torch.float32
    stats = algo.update()
    assert seen[2:] == [torch.bfloat16, torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in algo.policy.parameters())
    assert all(math.isfinite(v) for v in stats.values())


def test_bfloat16_precision_sees_its_own_rollout_policy_in_the_first_minibatch():
    """The rollout's log-probabilities come from the same bfloat16 layers, so the first minibatch's ratio is one
    (float32 old log-probabilities against bfloat16 new ones are not: approx_kl 2e-6 here)."""
    stats = _filled_ppo("log", epochs=1, minibatches=1, precision="bfloat16").update()
    assert stats["clip_fraction"] == 0.0
    assert abs(stats["approx_kl"]) < 1e-6 and abs(stats["kl"]) < 1e-6


def test_bfloat16_precision_steps_close_to_float32():
    """Same rollout, same seed: one bfloat16 update moves the parameters as float32 does, within bfloat16's
    rounding (0.1-2.5 % of each parameter's step here)."""
    f32 = _filled_ppo("log", epochs=2, minibatches=2)
    b16 = _filled_ppo("log", epochs=2, minibatches=2, precision="bfloat16")
    before = [p.detach().clone() for p in f32.policy.parameters()]
    f32.update()
    b16.update()
    for p0, p32, p16 in zip(before, f32.policy.parameters(), b16.policy.parameters(), strict=True):
        step32, step16 = p32.detach() - p0, p16.detach() - p0
        assert torch.linalg.vector_norm(step16 - step32) <= 0.1 * torch.linalg.vector_norm(step32) + 1e-6


def test_precision_is_validated():
    with pytest.raises(ConfigError, match="precision"):
        build(PPOConfig, {"precision": "float16"}, "algo")


@pytest.mark.parametrize("amx", [True, False])
def test_auto_precision_is_bfloat16_only_where_the_cpu_has_amx(monkeypatch, amx):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == ("bfloat16" if amx else "float32")
    assert resolve_precision("float32", cpu) == "float32" and resolve_precision("bfloat16", cpu) == "bfloat16"
    pol = ActorCritic(4, 4, 2, PolicyConfig(actor_hidden_dims=(8,), critic_hidden_dims=(8,)))
    algo = PPO(PPOConfig(precision="auto"), pol, 2, torch.Generator())
    assert algo.precision == ("bfloat16" if amx else "float32")
