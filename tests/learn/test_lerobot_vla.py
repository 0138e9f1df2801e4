"""LeRobot's SmolVLA behind the VLA interface (robo_rl.learn.networks.lerobot_vla), with random weights.

A tiny SmolVLA runs on the CPU; the default-size one (SmolVLM2-500M's architecture) on a CUDA GPU (`gpu`). Both are
built offline from a folder `write_smolvlm_folder` writes (config, tokenizer, processor): nothing is fetched. LeRobot
lives in its own virtualenv (`python3 scripts/lerobot_vla_env.py --ensure-venv PATH`); without it these skip.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

pytest.importorskip("lerobot", reason="LeRobot is not installed here: it needs its own virtualenv "
                                      "(python3 scripts/lerobot_vla_env.py --ensure-venv PATH)")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a missing file must fail, not be fetched from the hub
pytest.importorskip("lerobot.policies.smolvla.modeling_smolvla",
                    reason="LeRobot's SmolVLA needs its extra (transformers, num2words)")

from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors  # noqa: E402
from lerobot.utils.constants import ACTION, OBS_STATE  # noqa: E402

from robo_rl.learn.algorithms.vla_rl import VLARL, VLARLConfig  # noqa: E402
from robo_rl.learn.networks.flow import euler_sample  # noqa: E402
from robo_rl.learn.networks.lerobot_vla import LeRobotVLAConfig, build_smolvla, write_smolvlm_folder  # noqa: E402
from robo_rl.learn.networks.vla import bind  # noqa: E402

TEXTS = ("pick up the red cube and place it on the green target", "put the blue cube on the target",
         "stack the red cube")
OBS_DIM, STATE_COLUMNS, ACTION_DIM, IMAGE = 9, torch.tensor([0, 1, 2, 3, 6, 7]), 4, 48
SETUPS = {
    "tiny": dict(size="tiny", device="cpu", n=3,
                 cfg=LeRobotVLAConfig(horizon=6, execute_steps=2, num_steps=4, image_resolution=32, num_vlm_layers=4,
                                      critic_hidden_dims=(32,), noise_hidden_dims=(32,))),
    "default": dict(size="default", device="cuda", n=2, cfg=LeRobotVLAConfig(horizon=50, execute_steps=10,
                                                                            num_steps=10)),
}


@pytest.fixture(scope="module", params=["tiny", pytest.param("default", marks=pytest.mark.gpu)])
def setup(request, tmp_path_factory):
    """(the wrapped SmolVLA in eval mode, observation groups of n worlds, its LeRobot config name)."""
    s = SETUPS[request.param]
    if s["device"] == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    folder = write_smolvlm_folder(tmp_path_factory.mktemp(f"vlm-{s['size']}"), TEXTS, s["size"])
    vla = build_smolvla(replace_vlm(s["cfg"], folder), STATE_COLUMNS, ACTION_DIM, IMAGE, TEXTS, 1.0,
                        device=s["device"]).eval()
    return vla, observations(s["n"], s["device"])


def replace_vlm(cfg: LeRobotVLAConfig, folder) -> LeRobotVLAConfig:
    return dataclasses.replace(cfg, vlm=str(folder))


def observations(n: int, device: str, seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"image": torch.randint(0, 256, (n, 3, IMAGE, IMAGE), generator=g, dtype=torch.uint8).to(device),
            "text": (torch.arange(n) % len(TEXTS)).to(device),
            "policy": torch.randn(n, OBS_DIM, generator=g).to(device)}


def lerobot_batch(vla, obs: dict[str, torch.Tensor]) -> dict:
    """The same observations as LeRobot's own preprocessor makes them (its tokenizer step on the task texts)."""
    pre, _ = make_smolvla_pre_post_processors(vla.lerobot.config, None)
    state = vla.obs_normalizer(obs["policy"][:, vla.state_columns])
    return pre({vla.image_key: obs["image"].float() / 255.0, OBS_STATE: state,
                "task": [TEXTS[i] for i in obs["text"].tolist()]})


def test_the_interface_shapes_dtypes_and_noise_bounds(setup):
    vla, obs = setup
    n, d = obs["text"].shape[0], vla.horizon * ACTION_DIM
    with torch.no_grad():
        ctx = vla.encode_prefix(obs)
        assert ctx.shape == (n, vla.context_len, vla.context_width)
        x, t = torch.randn(n, d, device=ctx.device), torch.rand(n, device=ctx.device)
        v, value, std = vla.velocity(ctx, x, t), vla.value(ctx), vla.noise_std(ctx, x, t)
        assert v.shape == std.shape == (n, d) and value.shape == (n,)
        assert v.dtype == value.dtype == std.dtype == torch.float32
        assert torch.isfinite(v).all() and torch.isfinite(value).all()
        assert (std >= vla.config.sigma_min - 1e-6).all() and (std <= vla.config.sigma_max + 1e-6).all()
        # the context is batch first: rows picked or repeated give those rows' velocities (what the RL code does)
        rows = torch.tensor([n - 1, 0, n - 1], device=ctx.device)
        assert torch.allclose(vla.velocity(ctx[rows], x[rows], t[rows]), v[rows], atol=1e-5)
        actions = vla.act_inference(obs)
        assert actions.shape == (n, vla.execute_steps, ACTION_DIM)
        assert actions.abs().max() <= vla.action_clip
        for p in vla.noise_head.parameters():  # whatever its weights, the noise stays in its bounds
            p.mul_(1000.0)
        std = vla.noise_std(ctx, x, t)
        for p in vla.noise_head.parameters():
            p.div_(1000.0)
    assert (std >= vla.config.sigma_min - 1e-6).all() and (std <= vla.config.sigma_max + 1e-6).all()


def test_our_euler_chain_is_lerobots_sample_actions_from_the_same_noise(setup):
    """Our convention (t = 0 noise, v = action - noise) over LeRobot's denoise step, integrated by our sampler from
    x_0, is LeRobot's own `predict_action_chunk` (its t = 1 -> 0 integration) from noise x_0, step for step."""
    vla, obs = setup
    n = obs["text"].shape[0]
    noise = torch.randn(n, vla.horizon, ACTION_DIM, generator=torch.Generator().manual_seed(2)).to(obs["image"].device)
    with torch.no_grad():
        theirs = vla.lerobot.predict_action_chunk(lerobot_batch(vla, obs), noise=noise.clone())
        ours = euler_sample(bind(vla, vla.encode_prefix(obs)), noise.reshape(n, -1), vla.num_steps)
    assert theirs.shape == (n, vla.horizon, ACTION_DIM)
    scale = theirs.abs().max().item()
    assert scale > 0.1  # the chain moved: random weights give velocities of order one
    assert torch.allclose(ours.reshape(theirs.shape), theirs, atol=1e-4 * max(scale, 1.0)), \
        (ours.reshape(theirs.shape) - theirs).abs().max()
    # our instruction tokens are what LeRobot's tokenizer step makes of the texts (padding apart)
    tokens, mask = batch_tokens(vla, obs)
    for row in range(n):
        ours_row = vla.instruction_tokens[obs["text"][row]][vla.instruction_mask[obs["text"][row]]]
        assert torch.equal(ours_row.cpu(), tokens[row][mask[row]].cpu())


def batch_tokens(vla, obs):
    batch = lerobot_batch(vla, obs)
    return batch["observation.language.tokens"], batch["observation.language.attention_mask"]


def test_flow_matching_loss_is_lerobots_training_loss(setup):
    """SFT through our velocity (the expert over the cached prefix) computes LeRobot's flow-matching loss (its
    training forward runs prefix and suffix in one pass) for the same noise and time, converted: τ = 1 - t."""
    vla, obs = setup
    n, dev = obs["text"].shape[0], obs["image"].device
    g = torch.Generator().manual_seed(3)
    x1 = (torch.rand(n, vla.horizon, ACTION_DIM, generator=g) * 2 - 1).to(dev)  # demonstrated chunks
    x0 = torch.randn(n, vla.horizon, ACTION_DIM, generator=g).to(dev)
    tau = torch.rand(n, generator=g).to(dev)  # LeRobot's time
    with torch.no_grad():
        batch = lerobot_batch(vla, obs)
        batch[ACTION] = x1
        lr = vla.lerobot
        images, masks = lr.prepare_images(batch)
        theirs = lr.model.forward(images, masks, batch["observation.language.tokens"],
                                  batch["observation.language.attention_mask"], lr.prepare_state(batch),
                                  lr.prepare_action(batch), x0, tau)  # (N, H, A) per element
        t = 1.0 - tau
        xt = (1 - t[:, None]) * x0.flatten(1) + t[:, None] * x1.flatten(1)
        ours = (vla.velocity(vla.encode_prefix(obs), xt, t) - (x1 - x0).flatten(1)).square()
    assert torch.allclose(ours.reshape(theirs.shape), theirs, rtol=1e-3, atol=1e-4), \
        (ours.reshape(theirs.shape) - theirs).abs().max()


def test_one_sft_step_trains_the_action_expert_and_leaves_the_frozen_vlm(setup):
    vla, obs = setup
    n = obs["text"].shape[0]
    vla.train()
    try:
        params = [p for p in vla.lerobot.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-3)
        x1 = torch.rand(n, vla.horizon * ACTION_DIM, device=obs["image"].device) * 2 - 1
        expert = vla.lerobot.model.action_out_proj.weight.detach().clone()
        frozen = next(vla.lerobot.model.vlm_with_expert.vlm.parameters()).detach().clone()
        g = torch.Generator(device=obs["image"].device).manual_seed(4)
        loss = vla.flow_matching_loss(vla.encode_prefix(obs), x1, g)
        assert loss.dtype == torch.float32 and loss.ndim == 0 and torch.isfinite(loss)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    finally:
        vla.eval()
    assert not torch.equal(expert, vla.lerobot.model.action_out_proj.weight)
    assert torch.equal(frozen, next(vla.lerobot.model.vlm_with_expert.vlm.parameters()))


@pytest.mark.parametrize("method", ["flow-noise", "flow-sde"])
def test_vla_rl_recomputes_the_rollouts_chain_likelihood_and_updates(setup, method):
    """vla-rl's PPO (`VLARL`) on the wrapped SmolVLA: a rollout's stochastic chains, then an update whose first
    minibatch recomputes exactly the stored log-likelihoods (ratio 1), and the actor's weights move."""
    vla, obs = setup
    n = obs["text"].shape[0]
    state = {k: v.detach().clone() for k, v in vla.state_dict().items()}
    expert = vla.lerobot.model.action_out_proj.weight.detach().clone()
    try:
        cfg = VLARLConfig(method=method, num_steps_per_env=2, num_mini_batches=1, num_learning_epochs=1,
                          critic_warmup_iterations=0, schedule="fixed", kl_stop=0.0)
        algo = VLARL(cfg, vla, n, OBS_DIM, torch.Generator().manual_seed(5))
        dev = obs["image"].device
        for step in range(cfg.num_steps_per_env):
            actions = algo.act(obs, obs)
            assert actions.shape == (n, vla.execute_steps, ACTION_DIM) and actions.dtype == torch.float32
            assert algo.storage.log_probs[step].dtype == torch.float32
            assert torch.isfinite(algo.storage.log_probs[step]).all()
            obs = observations(n, str(dev), seed=10 + step)
            no = torch.zeros(n, dtype=torch.bool, device=dev)
            algo.process_env_step(torch.rand(n, device=dev), no, no, obs)
        algo.compute_returns(obs)
        stats = algo.update()
        moved = not torch.equal(expert, vla.lerobot.model.action_out_proj.weight)
    finally:
        vla.load_state_dict(state)
        vla.eval()
    assert abs(stats["ratio_first"] - 1.0) < 1e-4, stats
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values()), stats
    assert stats["actor_trained"] == 1.0
    assert moved


def test_padded_action_coordinates_are_held_at_zero_as_lerobots_demonstrations_pad_them(tmp_path):
    """With max_action_dim > A (SmolVLA's pretrained weights use 32) the expert's padded coordinates are 0 in our
    chain; LeRobot's training forward, whose demonstrations are zero-padded, gives the same loss on the real
    coordinates when its noise's padded coordinates are 0 too."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    folder = write_smolvlm_folder(tmp_path / "vlm", TEXTS, "tiny")
    cfg = replace_vlm(SETUPS["tiny"]["cfg"], folder)
    vla = build_smolvla(dataclasses.replace(cfg, max_action_dim=7, max_state_dim=8), STATE_COLUMNS, ACTION_DIM,
                        IMAGE, TEXTS, 1.0).eval()
    assert vla.lerobot.config.max_action_dim == 7 and vla.lerobot.config.max_state_dim == 8
    obs = observations(2, "cpu")
    g = torch.Generator().manual_seed(6)
    x1 = torch.rand(2, vla.horizon, ACTION_DIM, generator=g) * 2 - 1
    x0 = torch.randn(2, vla.horizon, ACTION_DIM, generator=g)
    tau = torch.tensor([0.3, 0.9])
    with torch.no_grad():
        batch = lerobot_batch(vla, obs)
        batch[ACTION] = x1
        lr = vla.lerobot
        images, masks = lr.prepare_images(batch)
        noise = torch.cat([x0, torch.zeros(2, vla.horizon, 3)], dim=-1)
        theirs = lr.model.forward(images, masks, batch["observation.language.tokens"],
                                  batch["observation.language.attention_mask"], lr.prepare_state(batch),
                                  lr.prepare_action(batch), noise, tau)[..., :ACTION_DIM]
        t = 1.0 - tau
        xt = (1 - t[:, None]) * x0.flatten(1) + t[:, None] * x1.flatten(1)
        ours = (vla.velocity(vla.encode_prefix(obs), xt, t) - (x1 - x0).flatten(1)).square()
        assert vla.sample(vla.encode_prefix(obs), x0.flatten(1)).shape == (2, vla.horizon, ACTION_DIM)
    assert torch.allclose(ours.reshape(theirs.shape), theirs, rtol=1e-3, atol=1e-4)
