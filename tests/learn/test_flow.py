"""Flow-matching policies (learn/networks/flow.py):
the chain likelihood, the noise bounds, two modes where a Gaussian
has one, shortcut consistency, and flow-bc's action chunks."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from robo_rl.core.config import ConfigError
from robo_rl.learn.algorithms.bc import FlowPolicyConfig, chunk_indices
from robo_rl.learn.networks.flow import FlowPolicy, NoiseNet, chain_log_prob, conditioned, euler_sample

MODES = torch.tensor([[0.6, 0.6], [-0.6, -0.6]])


def test_chain_log_prob_matches_a_brute_force_sum_of_normal_log_densities():
    g = torch.Generator().manual_seed(0)
    b, k, d = 5, 4, 3
    chain = torch.randn(b, k + 1, d, generator=g)
    means = torch.randn(b, k, d, generator=g)
    stds = 0.05 + torch.rand(b, k, d, generator=g)
    got = chain_log_prob(chain, means, stds)
    for i in range(b):
        total = sum(-0.5 * float(x) ** 2 - 0.5 * math.log(2 * math.pi) for x in chain[i, 0])
        for step in range(k):
            for j in range(d):
                x, mu, s = float(chain[i, step + 1, j]), float(means[i, step, j]), float(stds[i, step, j])
                total += -0.5 * ((x - mu) / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi)
        assert got[i].item() == pytest.approx(total, rel=1e-5, abs=1e-4)


def test_noise_std_stays_within_its_bounds_and_follows_a_lowered_upper_bound():
    net = NoiseNet(3, 4, (16,), "silu", 8, sigma_min=0.05, sigma_max=0.12)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(100.0)  # saturate the tanh both ways
    obs, t = 10 * torch.randn(256, 3), torch.rand(256)
    std = net(t, obs)
    assert std.min() >= 0.05 - 1e-7 and std.max() <= 0.12 + 1e-7
    assert std.min() < 0.051 and std.max() > 0.119  # both bounds are reached
    net.max_sigma.fill_(0.08)
    assert net(t, obs).max() <= 0.08 + 1e-7
    with pytest.raises(ValueError, match="need 0 < sigma_min <= sigma_max"):
        NoiseNet(3, 4, (16,), "silu", 8, sigma_min=0.2, sigma_max=0.1)


def _toy_policy(variant: str, steps: int, seed: int = 0) -> FlowPolicy:
    """A flow policy trained on a constant observation and actions from two modes, +-(0.6, 0.6)."""
    torch.manual_seed(seed)
    cfg = FlowPolicyConfig(variant=variant, hidden_dims=(128, 128), obs_normalization=False)
    policy = FlowPolicy(1, 1, 2, cfg, action_clip=1.0)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(policy.velocity.parameters(), lr=2e-3)
    for _ in range(steps):
        which = torch.randint(0, 2, (256,), generator=g)
        x1 = MODES[which] + 0.05 * torch.randn(256, 2, generator=g)
        loss = policy.flow_matching_loss(torch.zeros(256, 1), x1, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return policy.eval()


def _mode_shares(samples: torch.Tensor) -> tuple[float, float, float]:
    """Shares of samples (B, 2) within 0.25 of each mode, and between the modes (|a| < 0.3)."""
    near = [((samples - m).norm(dim=-1) < 0.25).float().mean().item() for m in MODES]
    middle = (samples.norm(dim=-1) < 0.3).float().mean().item()
    return near[0], near[1], middle


@pytest.fixture(scope="module")
def shortcut_policy():
    return _toy_policy("shortcut", 4000)


@pytest.mark.parametrize("num_steps", [1, 4])
def test_a_flow_policy_represents_both_modes_where_a_gaussian_cannot(shortcut_policy, num_steps):
    from robo_rl.learn.networks.actor_critic import ActorCritic, PolicyConfig

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        samples = shortcut_policy.sample(torch.zeros(2000, 1), torch.randn(2000, 2, generator=g), num_steps)[:, 0]
    first, second, middle = _mode_shares(samples)
    assert first > 0.3 and second > 0.3 and middle < 0.06, (first, second, middle)
    # the Gaussian policy (behaviour cloning's MSE) on the same data: its one action is between the modes
    gauss = ActorCritic(1, 1, 2, PolicyConfig(actor_hidden_dims=(64, 64), obs_normalization=False))
    opt = torch.optim.Adam(gauss.parameters(), lr=3e-3)
    for _ in range(300):
        which = torch.randint(0, 2, (256,), generator=g)
        loss = (gauss.act_inference(torch.zeros(256, 1)) - MODES[which]).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    mean = gauss.act_inference(torch.zeros(1, 2 - 1)).detach()[0]
    assert min((mean - m).norm().item() for m in MODES) > 0.6  # far from both demonstrated actions


def test_shortcut_one_step_of_2d_matches_two_steps_of_d(shortcut_policy):
    g = torch.Generator().manual_seed(2)
    x0 = torch.randn(500, 2, generator=g)
    obs = torch.zeros(500, 1)
    v = shortcut_policy.velocity
    with torch.no_grad():
        for d in (0.25, 0.125):
            for t0 in (0.0, 0.5):
                t = torch.full((500,), t0)
                x = x0 if t0 == 0 else euler_sample(conditioned(v, obs, 0.5), x0, 2)  # a point on the path
                one = x + 2 * d * v(x, t, obs, torch.full((500,), 2 * d))
                half = x + d * v(x, t, obs, torch.full((500,), d))
                two = half + d * v(half, t + d, obs, torch.full((500,), d))
                gap = (one - two).norm(dim=-1).mean().item()
                assert gap < 0.05, (d, t0, gap)  # actions are O(1): the modes are 1.7 apart


def test_chunk_indices_stay_inside_each_episode():
    episodes = np.array([0, 0, 0, 1, 1, 2])
    assert chunk_indices(episodes, 3).tolist() == [[0, 1, 2], [1, 2, 2], [2, 2, 2], [3, 4, 4], [4, 4, 4], [5, 5, 5]]
    assert chunk_indices(episodes, 1).tolist() == [[i] for i in range(6)]


def test_the_actor_is_k_euler_steps_from_its_initial_noise(shortcut_policy):
    obs = torch.zeros(3, 1)
    p = shortcut_policy
    with torch.no_grad():
        from_zeros = p.actor(p.obs_normalizer(obs))  # initial_noise: zeros
        torch.testing.assert_close(from_zeros, p.sample(obs, torch.zeros(3, 2), p.num_steps)[:, 0])
        # initial_noise: sample (the default): x_0 ~ N(0, I) from the policy's own evaluation generator
        state = p._eval_generator.get_state()
        got = p.act_inference(obs)
        p._eval_generator.set_state(state)
        x0 = torch.randn(3, 2, generator=p._eval_generator)
        torch.testing.assert_close(got, p.sample(obs, x0, p.num_steps)[:, 0])
    assert got.shape == (3, 2) and p.noise_input_dim == 2 and not torch.equal(got, from_zeros)


def test_the_step_noise_actor_is_reinflows_stochastic_chain_given_its_draws():
    """policy.step_noise: the deployed chain is `noisy_chain` on the graph's noise input (x_0 and one draw per step);
    zero step draws give the noise-free chain, and ReinFlow's sampler with the same draws gives the same action."""
    from robo_rl.learn.algorithms.reinflow import sample_chain

    torch.manual_seed(0)
    cfg = FlowPolicyConfig(hidden_dims=(16,), noise_hidden_dims=(8,), critic_hidden_dims=(8,), num_steps=2,
                           horizon=2, step_noise=True)
    p = FlowPolicy(3, 3, 2, cfg, action_clip=1.0)  # D = 4, K = 2: noise (B, 12)
    plain = FlowPolicy(3, 3, 2, dataclasses.replace(cfg, step_noise=False), action_clip=1.0)
    plain.load_state_dict(p.state_dict())
    assert p.noise_input_dim == 12 and plain.noise_input_dim == 4
    obs_n = torch.randn(5, 3)
    with torch.no_grad():
        x0 = torch.randn(5, 4)
        torch.testing.assert_close(p.actor(obs_n, torch.cat([x0, torch.zeros(5, 8)], 1)), plain.actor(obs_n, x0))
        g = torch.Generator().manual_seed(7)
        chain, _, _ = sample_chain(p, obs_n, g, 1.0)
        g = torch.Generator().manual_seed(7)
        draws = torch.cat([torch.randn(5, 4, generator=g) for _ in range(3)], 1)
        torch.testing.assert_close(p.actor(obs_n, draws), chain[:, -1].clamp(-1, 1).reshape(5, 2, 2)[:, 0])
    assert p.deploy_extra()["flow"]["step_noise"] is True
    with pytest.raises(ConfigError, match="step_noise = true needs policy.initial_noise = sample"):
        FlowPolicyConfig(step_noise=True, initial_noise="zeros").validate()


def test_a_checkpoint_from_before_the_actor_held_the_noise_net_still_loads():
    cfg = FlowPolicyConfig(hidden_dims=(8,), noise_hidden_dims=(8,), critic_hidden_dims=(8,))
    source, target = FlowPolicy(3, 3, 2, cfg, action_clip=1.0), FlowPolicy(3, 3, 2, cfg, action_clip=1.0)
    old = {k: v for k, v in source.state_dict().items() if not k.startswith("actor.noise_net.")}
    target.load_state_dict(old)  # strict
    torch.testing.assert_close(target.actor.noise_net.net[0].weight, source.noise.net[0].weight)
