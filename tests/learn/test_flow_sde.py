"""πRL's stochastic denoising steps (robo_rl.learn.networks.flow): Flow-SDE against its formulas and against the
marginals it must preserve, the hybrid sampler's one stochastic step, and the masked chain log-likelihood."""

from __future__ import annotations

import math

import torch

from robo_rl.learn.networks.flow import (
    chain_log_prob,
    euler_step_stats,
    flow_sde_hybrid_stats,
    flow_sde_step_stats,
    hybrid_step_mask,
    noisy_chain,
)


def _pi0_reference(x, v, t, dt, a):
    """shared/REFERENCES.md's Flow-SDE step written in π0's time s = 1 - t (s = 1 noise), u = -v."""
    s, u = 1.0 - t[:, None], -v
    x_action, x_noise = x - s * u, x + (1.0 - s) * u
    sigma = a * torch.sqrt(s / (1.0 - s))
    mean = x_action * (1.0 - (s - dt)) + x_noise * (s - dt - sigma**2 * dt / (2.0 * s))
    return mean, math.sqrt(dt) * sigma.expand_as(mean)


def test_flow_sde_step_matches_the_formulas_on_random_tensors():
    g = torch.Generator().manual_seed(0)
    x, v = torch.randn(64, 6, generator=g, dtype=torch.float64), torch.randn(64, 6, generator=g, dtype=torch.float64)
    for k in (4, 10):
        dt = 1.0 / k
        t = torch.randint(1, k, (64,), generator=g).to(torch.float64) * dt  # interior grid times
        mean, std = flow_sde_step_stats(x, v, t, dt, 0.5)
        want_mean, want_std = _pi0_reference(x, v, t, dt, 0.5)
        torch.testing.assert_close(mean, want_mean, rtol=0, atol=1e-12)
        torch.testing.assert_close(std, want_std, rtol=0, atol=1e-12)
        # the first step (pure noise, s = 1): σ's denominator takes the next grid time, σ = a sqrt(1 / Δ)
        mean0, std0 = flow_sde_step_stats(x, v, torch.zeros(64, dtype=torch.float64), dt, 0.5)
        assert torch.allclose(std0, torch.full_like(std0, math.sqrt(dt) * 0.5 * math.sqrt(1.0 / dt)))
        assert torch.isfinite(mean0).all()
    # without noise the step is the Euler step
    zero_mean, zero_std = flow_sde_step_stats(x, v, torch.full((64,), 0.5, dtype=torch.float64), 0.1, 1e-12)
    torch.testing.assert_close(zero_mean, x + 0.1 * v, rtol=0, atol=1e-9)


def _gaussian_velocity(mu: float, sd: float):
    """The exact rectified-flow velocity E[x1 - x0 | x_t] for data N(mu, sd²) and noise N(0, 1)."""
    def field(x, t):
        tt = t[:, None]
        var = (1 - tt) ** 2 + tt**2 * sd**2
        return mu + (tt * sd**2 - (1 - tt)) / var * (x - tt * mu)
    return field


def test_flow_sde_chain_keeps_the_data_distribution_that_the_ode_reaches():
    """With the exact velocity of Gaussian data, the all-SDE chain and the hybrid chain end at the data's mean and
    spread, as the ODE does (to within the discretisation error: K = 200 steps). A wrong sign or factor in the mean or
    the std moves them far off."""
    mu, sd, k, n = 1.5, 0.3, 200, 40_000
    field = _gaussian_velocity(mu, sd)
    g = torch.Generator().manual_seed(1)
    x0 = torch.randn(n, 1, generator=g, dtype=torch.float64)
    eps = torch.randn(n, k, 1, generator=g, dtype=torch.float64)
    every = torch.ones(n, k, dtype=torch.bool)
    for mask in (every, hybrid_step_mask(n, k, g)):
        chain, _, stds = noisy_chain(flow_sde_hybrid_stats(field, k, 0.5, mask), x0, eps, None)
        final = chain[:, -1, 0]
        assert abs(final.mean().item() - mu) < 0.02, final.mean()
        assert abs(final.std().item() - sd) < 0.01, final.std()
        assert ((stds[..., 0] > 0) == mask).all()
    ode = noisy_chain(flow_sde_hybrid_stats(field, k, 0.5, torch.zeros(n, k, dtype=torch.bool)), x0, eps, None)[0]
    assert abs(ode[:, -1, 0].std().item() - sd) < 0.01


def test_hybrid_sampler_marks_exactly_one_stochastic_step_per_decision():
    g = torch.Generator().manual_seed(2)
    mask = hybrid_step_mask(4000, 8, g)
    assert mask.shape == (4000, 8) and (mask.sum(1) == 1).all()
    counts = mask.sum(0).float()
    assert counts.min() > 0.8 * 4000 / 8  # every step is drawn, about uniformly
    field = lambda x, t: -x  # noqa: E731
    x0 = torch.randn(4000, 3, generator=g)
    eps = torch.randn(4000, 8, 3, generator=g)
    chain, means, stds = noisy_chain(flow_sde_hybrid_stats(field, 8, 0.5, mask), x0, eps, None)
    stochastic = (stds > 0).all(-1)  # (B, K)
    assert torch.equal(stochastic, mask)
    deterministic = ~mask[..., None].expand_as(means)
    assert torch.equal(chain[:, 1:][deterministic], means[deterministic])  # the ODE steps add no noise


def test_masked_chain_log_prob_is_the_stochastic_steps_normal_log_density():
    g = torch.Generator().manual_seed(3)
    b, k, d = 16, 5, 4
    chain = torch.randn(b, k + 1, d, generator=g, dtype=torch.float64)
    means = torch.randn(b, k, d, generator=g, dtype=torch.float64)
    stds = torch.rand(b, k, d, generator=g, dtype=torch.float64) + 0.1
    mask = hybrid_step_mask(b, k, g)
    stds_with_zeros = torch.where(mask[..., None], stds, torch.zeros_like(stds))
    got = chain_log_prob(chain, means, stds_with_zeros, steps=mask, prior=False)
    j = mask.int().argmax(1)
    rows = torch.arange(b)
    want = torch.distributions.Normal(means[rows, j], stds[rows, j]).log_prob(chain[rows, j + 1]).sum(-1)
    torch.testing.assert_close(got, want)
    full = chain_log_prob(chain, means, stds)
    want_full = (torch.distributions.Normal(0.0, 1.0).log_prob(chain[:, 0]).sum(-1)
                 + torch.distributions.Normal(means, stds).log_prob(chain[:, 1:]).sum((-1, -2)))
    torch.testing.assert_close(full, want_full)


def test_flow_noise_euler_step_uses_the_learned_std():
    field = lambda x, t: torch.ones_like(x)  # noqa: E731
    step = euler_step_stats(field, lambda x, t: torch.full_like(x, 0.1), 4)
    mean, std = step(torch.zeros(2, 3), torch.zeros(2))
    assert torch.equal(mean, torch.full((2, 3), 0.25)) and torch.equal(std, torch.full((2, 3), 0.1))


def test_dual_clip_and_huber_losses_against_direct_computations():
    from robo_rl.learn.algorithms.ppo import dual_clip_surrogate_loss, huber_value_loss

    ratio = torch.tensor([0.5, 1.0, 1.5, 10.0, 10.0, 0.5])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -2.0])
    # per sample: min(r A, clip(r, 0.8, 1.2) A), and for A < 0 at least 3 A
    want = torch.tensor([0.5, -1.0, 1.2, -3.0, 1.2, -1.6])
    got = dual_clip_surrogate_loss(torch.log(ratio), torch.zeros(6), adv, 0.2, 3.0)
    torch.testing.assert_close(got, -want.mean())
    value, old, ret = torch.tensor([0.0, 5.0, 30.0]), torch.tensor([0.0, 4.0, 0.0]), torch.tensor([1.0, 0.0, 0.0])
    huber = lambda e: torch.where(e.abs() <= 10, 0.5 * e**2, 10 * (e.abs() - 5))  # noqa: E731
    clipped = old + (value - old).clamp(-0.2, 0.2)
    want_v = torch.max(huber(value - ret), huber(clipped - ret)).mean()
    torch.testing.assert_close(huber_value_loss(value, old, ret, 0.2, 10.0), want_v)
    torch.testing.assert_close(huber_value_loss(value, old, ret, None, 10.0), huber(value - ret).mean())


def test_grpo_advantages_normalise_within_groups_and_drop_groups_without_signal():
    from robo_rl.learn.algorithms.vla_rl import grpo_advantages

    returns = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [3.0, 1.0, 2.0, 2.0]])
    success = returns > 0.5
    adv, keep = grpo_advantages(returns, success, band=(0.1, 0.9))
    assert keep.tolist() == [True, False, False, False]  # all solved / all failed / all "solved": dropped
    torch.testing.assert_close(adv[0], torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-5, rtol=0)
    assert (adv[1:] == 0).all()
    adv, keep = grpo_advantages(returns, success, band=(0.0, 1.0))
    assert keep.all()
    r = returns[3]
    torch.testing.assert_close(adv[3], (r - r.mean()) / (r.std(unbiased=False) + 1e-6))
