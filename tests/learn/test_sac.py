"""SAC maths and storage as small pure functions, checked against hand-computed or numerical values."""

import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from robo_rl.core.config import ConfigError
from robo_rl.learn.algorithm_registry import EnvSpec
from robo_rl.learn.algorithms.sac import (
    SAC,
    SACConfig,
    SACPolicy,
    SACPolicyConfig,
    demo_bc_loss,
    resolve_action_bound,
    rlpd_variant,
    temperature_loss,
)
from robo_rl.learn.networks.q_ensemble import QEnsemble, categorical_projection, subset_min
from robo_rl.learn.networks.squashed_gaussian import bounded_log_std, squashed_gaussian_log_prob
from robo_rl.learn.replay_buffer import (
    ReplayBuffer,
    dataset_transitions,
    demo_share,
    episode_transitions,
    load_demo_arrays,
    mixed_batch,
    n_step_return,
)

T, F = True, False


# ---------------------------------------------------------------------------------------------- n-step returns
def test_n_step_return_stops_at_truncation_with_bootstrap_and_at_termination_without():
    g = 0.5
    rewards = torch.tensor([[1.0, 2.0, 4.0]] * 4)
    terminated = torch.tensor([[F, F, F], [F, F, F], [F, T, F], [F, F, F]])
    truncated = torch.tensor([[F, F, F], [F, T, F], [F, F, F], [F, F, F]])
    valid = torch.tensor([[T, T, T], [T, T, T], [T, T, T], [T, T, F]])  # row 3: only two steps stored yet
    returns, discount, last = n_step_return(rewards, terminated, truncated, valid, g)
    # full window: 1 + 0.5 * 2 + 0.25 * 4 = 3, bootstrap gamma^3 from the third step's next observation
    # time-out at step 1: 1 + 0.5 * 2 = 2, bootstrap gamma^2 from step 1's (pre-reset) final observation
    # termination at step 1: the same return, no bootstrap
    # window cut by the newest stored step: 1 + 0.5 * 2 = 2, bootstrap gamma^2 from step 1's next observation
    assert returns.tolist() == [3.0, 2.0, 2.0, 2.0]
    assert discount.tolist() == [0.125, 0.25, 0.0, 0.25]
    assert last.tolist() == [2, 1, 1, 1]


def test_n_step_return_with_an_episode_end_at_the_first_step():
    returns, discount, last = n_step_return(
        torch.tensor([[3.0, 5.0], [3.0, 5.0]]), torch.tensor([[T, F], [F, F]]), torch.tensor([[F, F], [T, F]]),
        torch.ones(2, 2, dtype=torch.bool), 0.9,
    )
    assert returns.tolist() == [3.0, 3.0]  # the next episode's reward 5 never leaks in
    assert discount.tolist() == pytest.approx([0.0, 0.9])
    assert last.tolist() == [0, 0]


def _filled_buffer(steps, rows=4, num_envs=1, terminated_at=(), truncated_at=()):
    """A buffer whose step t has obs t, reward t and next observation 100 + t (a final obs after an end)."""
    buf = ReplayBuffer(rows, num_envs, obs_dim=1, action_dim=1)
    for t in range(steps):
        v = torch.full((num_envs, 1), float(t))
        buf.add_obs(v, v)
        buf.add_outcome(torch.full((num_envs,), float(t)), torch.full((num_envs,), t in terminated_at),
                        torch.full((num_envs,), t in truncated_at), v + 100.0)
    return buf


def test_replay_sample_bootstraps_from_the_final_observation_of_a_time_out():
    buf = _filled_buffer(4, rows=8, truncated_at=(1,), terminated_at=(2,))
    batch = buf.sample(256, 3, 0.5, torch.Generator().manual_seed(0))
    by_start = {int(o): (float(r), float(d), float(n)) for o, r, d, n in
                zip(batch["obs"][:, 0], batch["returns"], batch["discount"], batch["next_obs"][:, 0], strict=True)}
    assert by_start[0] == (0.0 + 0.5 * 1.0, 0.25, 101.0)  # time-out at step 1: bootstrap from its final obs
    assert by_start[1] == (1.0, 0.5, 101.0)
    assert by_start[2] == (2.0, 0.0, 102.0)  # termination: no bootstrap
    assert by_start[3] == (3.0, 0.5, 103.0)  # the newest step: its own next observation
    assert sorted(by_start) == [0, 1, 2, 3]


def test_replay_wrap_around_keeps_the_newest_rows_and_windows_stop_at_the_newest_step():
    buf = _filled_buffer(6, rows=4, num_envs=2)  # steps 0, 1 overwritten by 4, 5
    assert (buf.size, buf.ptr, buf.num_transitions) == (4, 2, 8)
    assert buf.data["obs"][:, 0, 0].tolist() == [4.0, 5.0, 2.0, 3.0]
    batch = buf.sample(512, 3, 0.5, torch.Generator().manual_seed(1))
    starts = batch["obs"][:, 0]
    assert set(starts.tolist()) == {2.0, 3.0, 4.0, 5.0}  # the oldest steps are gone
    for start, ret, disc, nxt in zip(starts, batch["returns"], batch["discount"], batch["next_obs"][:, 0],
                                     strict=True):
        n = min(3, 6 - int(start))  # window length: never past the newest step (5), never into old rows
        want = sum(0.5**k * (start + k) for k in range(n))
        assert (float(ret), float(disc), float(nxt)) == (pytest.approx(want), 0.5**n, start + n - 1 + 100.0)
    assert torch.equal(batch["step_next_obs"], batch["obs"] + 100.0)  # the observation right after the step


def test_replay_state_dict_round_trip():
    buf = _filled_buffer(3, rows=5, num_envs=2)
    other = ReplayBuffer(5, 2, obs_dim=1, action_dim=1)
    other.load_state_dict(buf.state_dict())
    assert (other.size, other.ptr) == (3, 3)
    for k, v in buf.data.items():
        assert torch.equal(other.data[k], v), k
    with pytest.raises(ValueError, match="does not fit"):
        ReplayBuffer(5, 3, obs_dim=1, action_dim=1).load_state_dict(buf.state_dict())


# ---------------------------------------------------------------------------------------------- ensembles
def test_subset_min_is_the_minimum_over_the_drawn_members():
    q = torch.tensor([[5.0, 1.0], [2.0, 7.0], [4.0, 3.0], [9.0, 0.0]])  # (E=4, B=2)
    gen = torch.Generator().manual_seed(3)
    seen = set()
    for _ in range(50):
        values, members = subset_min(q, 2, gen)
        assert members.numel() == 2 and len(set(members.tolist())) == 2
        assert values.tolist() == q[members].min(0).values.tolist()
        seen.update(members.tolist())
    assert seen == {0, 1, 2, 3}  # every member takes part over time (REDQ's random subsets)
    full, members = subset_min(q, 4, gen)
    assert full.tolist() == [2.0, 0.0] and sorted(members.tolist()) == [0, 1, 2, 3]


def test_ensemble_members_are_independent_networks():
    q = QEnsemble(3, 2, (16, 16), ensemble=3, activation="relu", layer_norm=True)
    out = q(torch.randn(5, 3), torch.randn(5, 2))
    assert out.shape == (3, 5)
    assert not torch.allclose(out[0], out[1])
    q.zero_grad()
    out[1].sum().backward()
    grads = [q.out.weight.grad[i].abs().sum().item() for i in range(3)]
    assert grads[1] > 0 and grads[0] == grads[2] == 0.0  # member 1's loss moves member 1 only


def test_categorical_projection_matches_hand_computed_masses():
    support = torch.linspace(-2.0, 2.0, 5)  # atoms -2 -1 0 1 2
    probs = torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.5, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    returns = torch.tensor([0.5, 0.0, 10.0])
    discount = torch.tensor([1.0, 0.5, 1.0])
    target = categorical_projection(probs, returns, discount, support)
    # 0 + 0.5 lands half way between atoms 0 and 1; +-1 * 0.5 splits over -1, 0, 1; +10 clips to v_max
    assert target[0].tolist() == pytest.approx([0, 0, 0.5, 0.5, 0])
    assert target[1].tolist() == pytest.approx([0, 0.25, 0.5, 0.25, 0])
    assert target[2].tolist() == pytest.approx([0, 0, 0, 0, 1])
    assert torch.allclose(target.sum(1), torch.ones(3))


# ---------------------------------------------------------------------------------------------- temperature
@pytest.mark.parametrize("entropy, rises", [(-3.0, True), (1.0, False)])
def test_temperature_rises_below_the_target_entropy_and_falls_above(entropy, rises):
    target = -1.0
    log_alpha = torch.zeros((), requires_grad=True)
    log_prob = torch.full((64,), -entropy)  # -log pi is the entropy estimate
    opt = torch.optim.SGD([log_alpha], lr=0.1)
    temperature_loss(log_alpha, log_prob, target).backward()
    opt.step()
    assert (log_alpha.item() > 0) == rises and log_alpha.item() != 0
    assert log_alpha.item() == pytest.approx(0.1 * (target - entropy))  # d loss / d log alpha = -(log pi + H)


# ---------------------------------------------------------------------------------------------- squashed actor
@pytest.mark.parametrize("mean, log_std", [(0.0, 0.0), (0.8, -0.5), (-1.5, 0.7)])
def test_tanh_log_prob_is_a_density_of_the_squashed_action(mean, log_std):
    """Numerical checks of the change of variables: the density integrates to 1 over (-1, 1), equals
    p_u(atanh y) / |d tanh / du| with the derivative taken by finite differences, and gives the interval
    probabilities that tanh of Gaussian samples shows."""
    m, s = torch.tensor([[mean]], dtype=torch.float64), torch.tensor([[log_std]], dtype=torch.float64)
    u = torch.linspace(-12, 12, 200_001, dtype=torch.float64)[:, None]
    density_y = squashed_gaussian_log_prob(u, m, s).exp()  # p(y) at y = tanh(u)
    y = torch.tanh(u[:, 0])
    assert torch.trapezoid(density_y, y).item() == pytest.approx(1.0, abs=1e-4)

    h = 1e-6
    dy_du = (torch.tanh(u + h) - torch.tanh(u - h)) / (2 * h)
    gaussian = torch.distributions.Normal(m[0, 0], s.exp()[0, 0]).log_prob(u[:, 0])
    mid = slice(50_000, 150_001)  # |u| <= 6, where the finite difference is accurate
    numeric = gaussian[mid] - torch.log(dy_du[mid, 0])
    assert torch.allclose(squashed_gaussian_log_prob(u[mid], m, s), numeric, atol=1e-5)

    samples = torch.tanh(mean + math.exp(log_std) * torch.randn(400_000, generator=torch.Generator().manual_seed(0),
                                                                    dtype=torch.float64))
    for lo, hi in [(-0.9, -0.3), (-0.2, 0.4), (0.5, 0.99)]:
        inside = (y >= lo) & (y <= hi)
        integral = torch.trapezoid(density_y[inside], y[inside]).item()
        assert ((samples >= lo) & (samples <= hi)).double().mean().item() == pytest.approx(integral, abs=3e-3)


def test_log_std_is_bounded():
    raw = torch.tensor([-1e4, -1.0, 0.0, 1.0, 1e4])
    out = bounded_log_std(raw, -5.0, 2.0)
    assert out.min().item() >= -5.0 and out.max().item() <= 2.0
    assert out[0].item() == -5.0 and out[-1].item() == 2.0 and out[2].item() == pytest.approx(-1.5)
    assert torch.all(out[1:] > out[:-1])


def _sac(num_envs=4, obs=3, critic=3, act=2, clip=2.0, algo=None, policy=None):
    spec = EnvSpec(num_envs, obs, critic, act, clip)
    torch.manual_seed(0)
    pol = SACPolicy(policy or SACPolicyConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16, 16)), spec)
    cfg = algo or SACConfig(batch_size=32, buffer_size=400, learning_starts=2, updates_per_step=2, policy_delay=1)
    return SAC(cfg, pol, spec, torch.Generator().manual_seed(1))


def _fill(sac, steps, gen_seed=2):
    gen = torch.Generator().manual_seed(gen_seed)
    n, o, oc = sac.spec.num_envs, sac.spec.obs_dim, sac.spec.critic_obs_dim
    for _ in range(steps):
        obs, cobs = torch.randn(n, o, generator=gen), torch.randn(n, oc, generator=gen)
        actions = sac.act(obs, cobs)
        assert actions.abs().max() <= sac.policy.action_bound
        sac.process_env_step(torch.randn(n, generator=gen), torch.rand(n, generator=gen) < 0.1,
                             torch.rand(n, generator=gen) < 0.1, obs + 1, cobs + 1)


def test_actions_are_bounded_by_the_action_clip_or_a_tighter_bound():
    assert resolve_action_bound(0.0, 3.0) == 3.0
    assert resolve_action_bound(1.5, 3.0) == 1.5
    with pytest.raises(ConfigError, match=r"policy.action_bound = 4.0: must be <= the task's action clip 3.0"):
        resolve_action_bound(4.0, 3.0)
    with pytest.raises(ConfigError, match="does not clip its actions"):
        resolve_action_bound(0.0, None)
    sac = _sac(clip=0.25)
    _fill(sac, 5)  # random and policy actions alike stay inside +-0.25
    obs = 100.0 * torch.randn(64, 3)
    assert sac.policy.act_inference(obs).abs().max() <= 0.25
    actor, normalizer = sac.inference_policy()
    assert torch.equal(actor(normalizer(obs)), sac.policy.act_inference(obs))


@pytest.mark.parametrize("atoms", [1, 51])
@pytest.mark.parametrize("asymmetric", [False, True])
def test_update_learns_and_moves_the_target_critics_slowly(atoms, asymmetric):
    sac = _sac(critic=5 if asymmetric else 3,
               policy=SACPolicyConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,), num_atoms=atoms,
                                      v_min=-5.0, v_max=5.0))
    assert sac.buffer.asymmetric == asymmetric
    assert sac.update() == {}  # nothing stored yet: nothing to learn from
    _fill(sac, 6)
    before = {k: v.clone() for k, v in sac.policy.state_dict().items()}
    stats = sac.update()
    assert set(stats) == {"critic_loss", "q_mean", "actor_loss", "alpha_loss", "alpha", "entropy"}
    assert all(math.isfinite(v) for v in stats.values())
    after = sac.policy.state_dict()
    for prefix in ("actor.", "critic.", "critic_target.", "log_alpha"):
        assert any(not torch.equal(before[k], after[k]) for k in after if k.startswith(prefix)), prefix
    # Polyak: the target moved by a fraction tau of the online change, far less than the online critic
    key = "critic.out.weight"
    online = (after[key] - before[key]).abs().sum()
    target = (after["critic_target.out.weight"] - before["critic_target.out.weight"]).abs().sum()
    assert 0 < target < 0.1 * online
    assert sac.num_updates == 2


def test_action_smoothness_pulls_consecutive_actions_together():
    def change_after(weight):
        gen = torch.Generator().manual_seed(5)
        sac = _sac(algo=SACConfig(batch_size=64, buffer_size=400, learning_starts=1, action_smoothness=weight,
                                  actor_learning_rate=3e-3))
        _fill(sac, 10)
        batch = sac._sample()
        batch["step_next_obs"] = torch.randn(batch["obs"].shape, generator=gen)  # far from obs: a large change
        for _ in range(30):
            stats = sac._actor_step(batch)
        with torch.no_grad():
            actor = sac.policy.actor
            return (actor.deterministic(batch["obs"]) - actor.deterministic(batch["step_next_obs"])).abs().mean(), stats

    (plain, plain_stats), (smooth, smooth_stats) = change_after(0.0), change_after(10.0)
    assert "action_change" not in plain_stats and smooth_stats["action_change"] >= 0
    assert smooth < 0.5 * plain, (smooth, plain)


def test_rlpd_variant_uses_its_recipe():
    algo, policy = rlpd_variant(SACConfig(), SACPolicyConfig())
    assert (algo.demo_ratio, algo.target_subset_size, algo.updates_per_step) == (0.5, 2, 20)
    assert (policy.num_critics, policy.critic_layer_norm) == (10, True)
    assert algo.demo_bc_weight == 0.0
    assert rlpd_variant(SACConfig(), SACPolicyConfig(), demo_bc_weight=0.4)[0].demo_bc_weight == 0.4


# ---------------------------------------------------------------------------------------------- demonstrations
def _demo_arrays(m=40, o=3, a=2, bound=2.0, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(m, o)), "action": rng.uniform(-bound, bound, (m, a)), "reward": rng.normal(size=m),
            "next_obs": rng.normal(size=(m, o)), "terminated": rng.random(m) < 0.2, "truncated": np.zeros(m, bool)}


def test_symmetric_sampling_takes_half_of_every_batch_from_the_demonstrations():
    assert [demo_share(256, 0.5), demo_share(255, 0.5), demo_share(10, 0.0), demo_share(8, 1.0)] == [128, 128, 0, 8]
    sac = _sac(algo=SACConfig(batch_size=64, buffer_size=400, learning_starts=1, demo_ratio=0.5))
    demos = _demo_arrays()
    demos["obs"] = demos["obs"] + 1000.0  # demonstration rows are recognisable by their observations
    sac.load_demos(demos)
    _fill(sac, 5)
    counts = []
    for _ in range(10):
        b = sac.buffer.sample(32, 3, 0.97, sac.generator)
        batch = mixed_batch(b, sac.demos.sample(32, 0.97, sac.generator))
        counts.append(int((batch["obs"][:, 0] > 500).sum()))
        assert all(v.shape[0] == 64 for v in batch.values())
    assert counts == [32] * 10
    raw_batch = sac._sample()  # the path update() takes: normalised, still 32 + 32 rows
    assert raw_batch["obs"].shape == (64, 3)
    assert math.isfinite(sum(sac.update().values()))


def test_demonstrations_are_checked_and_stored_in_actor_units():
    arrays = _demo_arrays(bound=2.0)
    buf = load_demo_arrays(arrays, obs_dim=3, action_dim=2, action_bound=2.0)
    assert buf.size == 40 and buf.data["action"].abs().max() <= 1.0
    assert torch.allclose(buf.data["action"], torch.as_tensor(arrays["action"], dtype=torch.float32) / 2.0)
    batch = buf.sample(200, 0.9, torch.Generator().manual_seed(0))
    term = batch["discount"] == 0
    assert term.any() and batch["discount"][~term].tolist() == pytest.approx([0.9] * int((~term).sum()))
    cases = [
        ({k: v for k, v in arrays.items() if k != "reward"}, "lack reward"),
        ({**arrays, "obs": arrays["obs"][:, :2]}, r"obs has shape \(40, 2\); expected \(40, 3\)"),
        ({**arrays, "reward": np.full(40, np.nan)}, "reward holds non-finite values"),
        ({**arrays, "action": arrays["action"] * 3}, "outside the actor's bound"),
        ({**arrays, "terminated": np.full(40, 0.5)}, "terminated must hold booleans"),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            load_demo_arrays(bad, obs_dim=3, action_dim=2, action_bound=2.0)
    with pytest.raises(ValueError, match="lack critic_obs, next_critic_obs"):
        load_demo_arrays(arrays, obs_dim=3, action_dim=2, action_bound=2.0, critic_obs_dim=5)


def test_demo_ratio_without_demonstrations_is_a_config_error():
    sac = _sac(algo=SACConfig(demo_ratio=0.5, buffer_size=400))
    with pytest.raises(ConfigError, match="algo.demo_ratio = 0.5: needs demonstrations"):
        sac.check_ready_to_train()


def test_demo_bc_term_pulls_the_actor_onto_the_demonstrated_actions_of_demo_rows_only():
    assert demo_bc_loss(torch.tensor([[0.5, -0.5], [0.0, 0.0]]), torch.tensor([[0.5, 0.5], [1.0, 0.0]])) == 1.0

    def distance_after(weight):
        sac = _sac(algo=SACConfig(batch_size=64, buffer_size=400, learning_starts=1, demo_ratio=0.5,
                                  demo_bc_weight=weight, actor_learning_rate=3e-3))
        demos = _demo_arrays(m=64)
        demos["action"] = np.tile([1.5, -1.0], (64, 1))  # one demonstrated action, env units (bound 2)
        sac.load_demos(demos)
        _fill(sac, 10)
        batch = sac._sample()
        for _ in range(40):
            stats = sac._actor_step(batch)
        with torch.no_grad():
            actor = sac.policy.actor
            demo_rows = actor.deterministic(batch["obs"][-32:])  # (32, A): the demonstration half
            online_rows = actor.deterministic(batch["obs"][:32])
        wanted = torch.tensor([0.75, -0.5])  # the demonstrated action in actor units
        return (demo_rows - wanted).norm(dim=-1).mean(), (online_rows - wanted).norm(dim=-1).mean(), stats

    plain, _, plain_stats = distance_after(0.0)
    cloned, online, cloned_stats = distance_after(20.0)
    assert "demo_bc" not in plain_stats and cloned_stats["demo_bc"] >= 0
    assert cloned < 0.25 < 0.75 < plain, (cloned, plain)
    assert online > cloned  # online rows are not cloned (they only follow through the shared network)
    with pytest.raises(ConfigError, match="algo.demo_bc_weight = 1.0: needs algo.demo_ratio > 0"):
        SACConfig(demo_bc_weight=1.0).check_sections(None)


# ---------------------------------------------------------------------------------------------- checkpoints
def _through_disk(state):
    """What a checkpoint file gives back (torch's optimiser load keeps references to in-process tensors)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_round_trip_continues_identically():
    a, b = _sac(), _sac()
    _fill(a, 6)
    a.update()
    b.load_state_dict(_through_disk(a.state_dict()))
    b.load_replay_state_dict(_through_disk(a.replay_state_dict()))
    for sac in (a, b):
        _fill(sac, 2, gen_seed=9)
        sac.update()
    for key, value in a.policy.state_dict().items():
        assert torch.equal(value, b.policy.state_dict()[key]), key


# ------------------------------------------------------------------------------------ demonstrations from a dataset
def test_episode_transitions_pair_each_frame_with_the_next_of_its_episode():
    """Episode 0 times out (its last frame has nothing to bootstrap from: dropped); episode 1 terminates (kept)."""
    obs = np.arange(5, dtype=np.float32)[:, None] * [1.0, 10.0]  # (5, 2): frame i holds (i, 10 i)
    frames = {"obs": obs, "action": obs[:, :1] * -1, "reward": np.arange(5.0), "critic_obs": obs * 2,
              "terminated": np.array([False, False, False, False, True])}
    out = episode_transitions(frames, np.array([0, 0, 0, 1, 1]))
    assert out["obs"][:, 0].tolist() == [0, 1, 3, 4]
    assert out["next_obs"][:, 0].tolist() == [1, 2, 4, 4]  # frame 2 (a time-out's last) is gone; 4 ends in failure
    assert out["reward"].tolist() == [0, 1, 3, 4] and out["action"][:, 0].tolist() == [0, -1, -3, -4]
    assert out["terminated"].tolist() == [False, False, False, True] and not out["truncated"].any()
    assert np.array_equal(out["next_critic_obs"], out["next_obs"] * 2)
    buf = load_demo_arrays(out, obs_dim=2, action_dim=1, action_bound=4.0, critic_obs_dim=2)
    assert buf.size == 4


def test_sac_takes_its_demonstrations_from_a_recorded_dataset(tmp_path):
    """`robo-rl record` -> `algo.dataset`: the runner loads every transition of it (critic observations included,
    since arm-pick-place's critic sees more) and trains; without demonstrations the error names the way to give them."""
    from robo_rl.core.config import load_yaml
    from robo_rl.demos.sim_record import record_expert
    from robo_rl.learn.builders import resolve_config
    from robo_rl.learn.runner import OffPolicyRunner

    data = tmp_path / "pick"
    summary = record_expert("arm-pick-place", 2, data, num_envs=2, seed=3)
    assert summary["frames"] == 800
    preset = load_yaml(Path(__file__).parents[2] / "sim_configs" / "arm-pick-place-rlpd.yaml")  # the README's
    overrides = ["sim.num_envs=2", "runner.max_iterations=2", f"runner.log_dir={tmp_path}", "runner.eval_episodes=0",
                 "algo.batch_size=32", "algo.learning_starts=1"]
    cfg = resolve_config(preset, [*overrides, f"algo.dataset={data}"])
    runner = OffPolicyRunner(cfg, tmp_path / "run")
    try:
        demos = runner.algo.demos
        assert demos.size == 800 - 2  # each time-out's last frame has no next observation
        assert demos.data["critic_obs"].shape == (798, runner.env.obs_dims["critic"])
        recorded = dataset_transitions(str(data), critic=True)
        assert torch.equal(demos.data["obs"], torch.as_tensor(recorded["obs"], dtype=torch.float32))
        runner.learn()
        assert runner.iteration == 2 and runner.algo.num_updates > 0
    finally:
        runner.close()
    with pytest.raises(ConfigError, match=r"algo.demo_ratio = 0.5: needs demonstrations \(--dataset PATH"):
        OffPolicyRunner(resolve_config(preset, overrides), tmp_path / "run2")


def test_rlpd_preset_is_the_learner_bench_rlpd_trains():
    """sim_configs/arm-pick-place-rlpd.yaml = the SAC preset through rlpd_variant with bench_rlpd's defaults."""
    import dataclasses

    from robo_rl.core.config import load_yaml
    from robo_rl.learn.builders import resolve_config
    from tests.conftest import load_script

    repo = Path(__file__).parents[2]
    bench = load_script("bench_rlpd")
    args = bench.parse_args([])
    sac = resolve_config(load_yaml(repo / "sim_configs" / "arm-pick-place-sac.yaml"))
    algo, policy = rlpd_variant(sac.algo, sac.policy, num_critics=args.rlpd_critics, updates_per_step=args.rlpd_updates,
                                demo_bc_weight=args.rlpd_bc)
    preset = resolve_config(load_yaml(repo / "sim_configs" / "arm-pick-place-rlpd.yaml"))
    assert preset.algo == algo and preset.policy == policy
    assert dataclasses.replace(preset, algo=sac.algo, policy=sac.policy, runner=sac.runner) == sac
    assert preset.runner.max_iterations == args.iterations
