"""LeRobot's SmolVLA behind the VLA interface (`robo_rl.learn.networks.vla.VLA`, DESIGN.md 5b).

LeRobot (`lerobot.policies.smolvla`) is imported inside the functions that need it: this module imports without it.
It needs its own virtualenv (LeRobot 0.4.4 pins an older torch; `scripts/lerobot_vla_env.py` builds it).

What maps to what (LeRobot's `VLAFlowMatching`, `policy.model`):
- `encode_prefix(obs)`: the "image" group (N, 3, S, S) uint8 becomes LeRobot's float image in [0, 1], which its own
  `prepare_images` resizes with padding to `image_resolution` and maps to [-1, 1] (SigLIP's range); the "text"
  group's instruction index picks its tokens, tokenised once per instruction by the VLM's tokenizer as LeRobot's
  processor does (the text plus "\\n", padded on the right, at most `tokenizer_max_length` tokens); the "policy"
  group's `state_terms`, normalised by our running statistics (`obs_normalizer`, in place of LeRobot's dataset
  statistics), zero-padded to `max_state_dim` (`prepare_state`). `embed_prefix` embeds them and the VLM's layers
  run over the prefix once (`fill_kv_cache`), as `sample_actions` does before it denoises.
- ctx (N, L, C) is that run's KV cache packed into one tensor, so that the RL code can index, repeat and store it
  like any context: channel 0 the prefix's pad mask (1: a token, 0: padding), then the VLM's final hidden states
  (W, what the value and noise heads pool), then each VLM layer's keys (after RoPE) and values (H_kv D_h each),
  layer by layer. L is fixed for a task (its instructions are padded to the longest), so ctx fits a buffer; but
  it is large: the default size stores 1 + 960 + 16 x 2 x 320 = 11 201 values per token, about 1.3 M per decision
  (L = 113), so `algo.freeze_prefix`'s stored contexts cost ~5 MB per decision in float32.
- `velocity(ctx, x_t, t)`: LeRobot's `denoise_step` (its action expert over the cached prefix) with the time
  convention converted: LeRobot's x_τ = τ noise + (1 - τ) action is integrated from τ = 1 to 0 with
  u = noise - action, ours from t = 0 to 1 with v = action - noise, so τ = 1 - t and
  v(x, t) = -u(x, 1 - t): our Euler chain from x_0 is LeRobot's `sample_actions` from the same noise, step for step.
- The action projection: our flat chunk (N, H A) is LeRobot's (N, chunk_size = H, max_action_dim); with
  `max_action_dim` > A the padded coordinates are held at 0 (LeRobot's demonstrations pad them with 0) and
  dropped from its output, so the chain stays in our D = H A. With padding the chain is not LeRobot's
  `sample_actions` (which lets the padded coordinates move from noise); `max_action_dim: 0` (the default) pads
  nothing.
- `value(ctx)`: an MLP of ours on the prefix's final hidden states averaged over its tokens (gradient stopped
  unless `value_input: shared`); `noise_std(ctx, x_t, t)`: Flow-Noise's head of ours (an MLP on that average,
  x_t and the time features, `bounded_std`).

Not supported (not written or not verified): π0 (LeRobot 0.4.4's `PI0Policy` needs a patched transformers that is
not on PyPI: it refuses to build with PyPI's); LeRobot's action normalisation (the chain's actions are the task's,
as `VLAPolicy`'s, so pretrained SmolVLA weights need their dataset's action statistics folded in: not done); the
`vla-sft` / `vla-rl` registry entries (they build `VLAPolicy`; this class is used directly, e.g. with `VLARL`, whose
`freeze_prefix` buffer is sized from `VLAPolicyConfig.width`, not from `context_width`); ONNX export and the deploy
contract (`inference_policy`); several cameras (the task has one: it takes LeRobot's first image feature).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from robo_rl.core.config import ConfigError, _f
from robo_rl.learn.networks.actor_critic import mlp
from robo_rl.learn.networks.flow import check_chunk_and_noise
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.networks.vla import ChunkSampling, bounded_std, pi0_time_embedding

SMOLVLM = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
"""SmolVLA's VLM backbone (a hub name: on a machine without the hub, pass a folder from `write_smolvlm_folder`)."""


@dataclass(frozen=True, kw_only=True)
class LeRobotVLAConfig:
    """A LeRobot SmolVLA behind the VLA interface (`LeRobotVLA`), built with `build_smolvla`."""

    vlm: str = SMOLVLM
    """SmolVLA's `vlm_model_name`: the VLM's config, tokenizer and processor (a hub name, or a local folder:
    `write_smolvlm_folder`)."""
    load_vlm_weights: bool = False
    """Load the VLM's pretrained weights from `vlm` (False: random weights, built from its config alone)."""
    horizon: int = _f(50, ge=1, le=256)
    """H: LeRobot's `chunk_size`."""
    execute_steps: int = _f(10, ge=1, le=256)
    """E <= H: actions of each chunk run before the policy decides again."""
    num_steps: int = _f(10, ge=1, le=64)
    """K: denoising steps (LeRobot's `num_steps`)."""
    initial_noise: str = _f("sample", choices=("sample", "zeros"))
    """x_0 of `initial_chain`: N(0, I) or 0 (as `VLAPolicyConfig.initial_noise`)."""
    image_resolution: int = _f(512, ge=8)
    """Images are resized with padding to this square (`resize_imgs_with_padding`; the VLM's vision input size)."""
    tokenizer_max_length: int = _f(48, ge=1)
    max_state_dim: int = _f(0, ge=0)
    """The state is zero-padded to this (0: the task's state size; SmolVLA's pretrained weights use 32)."""
    max_action_dim: int = _f(0, ge=0)
    """The action expert's action width (0: the task's A; SmolVLA's pretrained weights use 32: the padded
    coordinates are then held at 0, see the module docstring)."""
    num_vlm_layers: int = _f(16, ge=1)
    """The VLM's first layers that SmolVLA keeps."""
    num_expert_layers: int = _f(0, ge=0)
    """The action expert's layers (0: one per kept VLM layer)."""
    self_attn_every_n_layers: int = _f(2, ge=0)
    expert_width_multiplier: float = _f(0.75, gt=0.0, le=1.0)
    train_expert_only: bool = True
    """The VLM stays frozen (LeRobot's default)."""
    freeze_vision_encoder: bool = True
    state_terms: tuple[str, ...] = ()
    """Terms of the "policy" group read as the robot state (`VLAPolicyConfig.state_terms`); () : the whole group."""
    time_beta: tuple[float, float] = _f((1.5, 1.0))
    """π0's (and SmolVLA's) flow-matching time distribution (`VLAPolicyConfig.time_beta`)."""
    sigma_min: float = _f(0.08, gt=0.0)
    sigma_max: float = _f(0.16, gt=0.0)
    noise_hidden_dims: tuple[int, ...] = _f((256,))
    sde_noise_level: float = _f(0.5, gt=0.0, le=2.0)
    value_input: str = _f("detached", choices=("detached", "shared"))
    critic_hidden_dims: tuple[int, ...] = _f((256, 256))
    activation: str = _f("silu", choices=("elu", "relu", "tanh", "silu"))
    obs_normalization: bool = True
    obs_norm_eps: float = _f(1e-2, gt=0.0, le=1.0)
    obs_norm_clip: float = _f(5.0, ge=0.0)

    def validate(self) -> None:
        check_chunk_and_noise(self)
        if len(self.time_beta) != 2 or self.time_beta[0] <= 0 or self.time_beta[1] != 1.0:
            raise ConfigError(f"config error: policy.time_beta = {list(self.time_beta)!r}: expected [a, 1] with a > 0")


def pack_context(pad_mask: Tensor, hidden: Tensor, cache: dict[int, dict[str, Tensor]]) -> Tensor:
    """ctx (N, L, 1 + W + layers 2 H_kv D_h) from the prefix's pad mask (N, L), final hidden states (N, L, W) and the
    VLM layers' KV cache ({layer: {"key_states", "value_states": (N, L, H_kv, D_h)}}), in the layers' order."""
    dtype = cache[0]["key_states"].dtype
    parts = [pad_mask.to(dtype)[..., None], hidden.to(dtype)]
    for i in range(len(cache)):
        parts += [cache[i]["key_states"].flatten(2), cache[i]["value_states"].to(dtype).flatten(2)]
    return torch.cat(parts, dim=-1)


def unpack_context(ctx: Tensor, hidden_width: int, layers: int, kv_heads: int, head_dim: int
                   ) -> tuple[Tensor, Tensor, dict[int, dict[str, Tensor]]]:
    """(pad mask (N, L) bool, hidden states (N, L, W), KV cache) of a packed ctx (views, no copies)."""
    n, length = ctx.shape[:2]
    kv = kv_heads * head_dim
    start = 1 + hidden_width
    cache = {}
    for i in range(layers):
        k = ctx[..., start + 2 * i * kv: start + (2 * i + 1) * kv].reshape(n, length, kv_heads, head_dim)
        v = ctx[..., start + (2 * i + 1) * kv: start + (2 * i + 2) * kv].reshape(n, length, kv_heads, head_dim)
        cache[i] = {"key_states": k, "value_states": v}
    return ctx[..., 0] > 0.5, ctx[..., 1:start], cache


class LeRobotVLA(ChunkSampling, nn.Module):
    """A LeRobot `SmolVLAPolicy` behind the VLA interface (see the module docstring).

    Args:
        cfg: the adapter's configuration.
        policy: the SmolVLAPolicy (random or pretrained weights) with one image feature, chunk_size = H.
        state_columns: (O_s,) long, the "policy" group's columns it reads as the state.
        action_dim: A.
        image_size: S, the task's image side.
        instructions: the texts the "text" group indexes (`env.instruction_set.texts`).
        action_clip: the task's action clip, or None.
    """

    reads_observation_groups = True

    def __init__(self, cfg: LeRobotVLAConfig, policy: nn.Module, state_columns: Tensor, action_dim: int,
                 image_size: int, instructions: tuple[str, ...], action_clip: float | None):
        super().__init__()
        lr_cfg = policy.config
        if lr_cfg.chunk_size != cfg.horizon or lr_cfg.max_action_dim < action_dim or not lr_cfg.use_cache:
            raise ValueError(f"SmolVLA config: chunk_size {lr_cfg.chunk_size}, max_action_dim "
                             f"{lr_cfg.max_action_dim}, use_cache {lr_cfg.use_cache}: need chunk_size = horizon = "
                             f"{cfg.horizon}, max_action_dim >= A = {action_dim} and use_cache")
        if not lr_cfg.image_features:
            raise ValueError("SmolVLA config: no image feature")
        self.config, self.lerobot = cfg, policy
        self.horizon, self.action_dim, self.num_steps = cfg.horizon, action_dim, cfg.num_steps
        self.execute_steps, self.action_clip, self.image_size = cfg.execute_steps, action_clip, image_size
        self.flat_dim = cfg.horizon * action_dim
        self.image_key = next(iter(lr_cfg.image_features))
        self.register_buffer("state_columns", state_columns.to(torch.long).clone())  # (O_s,)
        self.state_dim = int(state_columns.numel())
        vlm = policy.model.vlm_with_expert
        text = vlm.config.text_config
        self._kv = (vlm.num_vlm_layers, text.num_key_value_heads, text.head_dim)  # layers, H_kv, D_h
        self.hidden_width = w = text.hidden_size  # W
        tokens = vlm.processor.tokenizer([t if t.endswith("\n") else f"{t}\n" for t in instructions],
                                         max_length=lr_cfg.tokenizer_max_length, truncation=True, padding="longest",
                                         padding_side="right", return_tensors="pt")
        self.register_buffer("instruction_tokens", tokens["input_ids"].long())  # (I, L_text)
        self.register_buffer("instruction_mask", tokens["attention_mask"].bool())  # (I, L_text)
        self.obs_normalizer = (EmpiricalNormalization(self.state_dim, eps=cfg.obs_norm_eps, clip=cfg.obs_norm_clip)
                               if cfg.obs_normalization else nn.Identity())
        self.critic = mlp(w, cfg.critic_hidden_dims, 1, cfg.activation)
        self.noise_head = mlp(w + self.flat_dim + 32, cfg.noise_hidden_dims, self.flat_dim, cfg.activation)
        self._eval_generator = torch.Generator().manual_seed(0)
        device = next(policy.parameters()).device
        self.to(device)
        with torch.no_grad():  # the context's size, from one prefix
            probe = self.encode_prefix({"image": torch.zeros(1, 3, image_size, image_size, dtype=torch.uint8,
                                                             device=device),
                                        "text": torch.zeros(1, dtype=torch.long, device=device),
                                        "policy": torch.zeros(1, int(state_columns.max()) + 1, device=device)})
        self.context_len, self.context_width = probe.shape[1:]  # L and C of ctx (N, L, C)

    # ------------------------------------------------------------------ the VLA interface
    def encode_prefix(self, obs: dict[str, Tensor]) -> Tensor:
        """Observation groups ("image" (N, 3, S, S) uint8, "text" (N,) long, "policy" (N, O)) -> ctx (N, L, C)."""
        from lerobot.policies.smolvla.modeling_smolvla import make_att_2d_masks
        from lerobot.utils.constants import OBS_STATE

        lr, model = self.lerobot, self.lerobot.model
        state = self.obs_normalizer(obs["policy"][:, self.state_columns])  # (N, O_s)
        batch = {self.image_key: obs["image"].float() / 255.0, OBS_STATE: state}
        images, image_masks = lr.prepare_images(batch)  # resized with padding, in [-1, 1]
        text = obs["text"].long()
        embs, pad, att = model.embed_prefix(images, image_masks, self.instruction_tokens[text],
                                            self.instruction_mask[text], state=lr.prepare_state(batch))
        (hidden, _), cache = model.vlm_with_expert.forward(
            attention_mask=make_att_2d_masks(pad, att), position_ids=torch.cumsum(pad, dim=1) - 1,
            past_key_values=None, inputs_embeds=[embs, None], use_cache=True, fill_kv_cache=True)
        return pack_context(pad, hidden, cache)

    def velocity(self, ctx: Tensor, x_t: Tensor, t: Tensor) -> Tensor:
        """ctx (N, L, C), x_t (N, D), t (N,) -> v (N, D): -LeRobot's velocity at its time 1 - t."""
        n = x_t.shape[0]
        pad, _, cache = unpack_context(ctx, self.hidden_width, *self._kv)
        x = x_t.reshape(n, self.horizon, self.action_dim)  # (N, H, A)
        width = self.lerobot.config.max_action_dim
        if width > self.action_dim:  # the padded coordinates are held at 0
            x = torch.cat([x, x.new_zeros(n, self.horizon, width - self.action_dim)], dim=-1)  # (N, H, A_max)
        u = self.lerobot.model.denoise_step(prefix_pad_masks=pad, past_key_values=cache, x_t=x,
                                            timestep=(1.0 - t).float())  # (N, H, A_max)
        return -u[..., : self.action_dim].reshape(n, self.flat_dim).float()

    def pooled(self, ctx: Tensor) -> Tensor:
        """The prefix's final hidden states averaged over its tokens (N, W), padding left out."""
        pad, hidden, _ = unpack_context(ctx, self.hidden_width, *self._kv)
        mask = pad.to(hidden.dtype)[..., None]  # (N, L, 1)
        return ((hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)).float()

    def noise_std(self, ctx: Tensor, x_t: Tensor, t: Tensor) -> Tensor:
        """Flow-Noise's step std (N, D) in [σ_min, σ_max]."""
        raw = self.noise_head(torch.cat([self.pooled(ctx), x_t, pi0_time_embedding(t, 32)], dim=-1)).float()
        return bounded_std(raw, self.config.sigma_min, self.config.sigma_max)

    def value(self, ctx: Tensor, critic_obs: Tensor | None = None) -> Tensor:
        """V (N,) on the pooled prefix (its gradient stopped unless `value_input: shared`)."""
        pooled = self.pooled(ctx)
        if self.config.value_input == "detached":
            pooled = pooled.detach()
        return self.critic(pooled).squeeze(-1).float()


# ---------------------------------------------------------------------------------------------- building
def build_smolvla(cfg: LeRobotVLAConfig, state_columns: Tensor, action_dim: int, image_size: int,
                  instructions: tuple[str, ...], action_clip: float | None,
                  device: torch.device | str = "cpu") -> LeRobotVLA:
    """A SmolVLA for a task, its VLM from `cfg.vlm` (random weights unless `load_vlm_weights`), wrapped."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    from lerobot.utils.constants import ACTION, OBS_STATE

    cfg.validate()
    state_dim = int(state_columns.numel())
    side = cfg.image_resolution
    lr_cfg = SmolVLAConfig(
        input_features={"observation.images.camera": PolicyFeature(FeatureType.VISUAL, (3, image_size, image_size)),
                        OBS_STATE: PolicyFeature(FeatureType.STATE, (state_dim,))},
        output_features={ACTION: PolicyFeature(FeatureType.ACTION, (action_dim,))},
        chunk_size=cfg.horizon, n_action_steps=cfg.horizon, num_steps=cfg.num_steps,
        max_state_dim=max(cfg.max_state_dim, state_dim), max_action_dim=max(cfg.max_action_dim, action_dim),
        resize_imgs_with_padding=(side, side), tokenizer_max_length=cfg.tokenizer_max_length,
        vlm_model_name=cfg.vlm, load_vlm_weights=cfg.load_vlm_weights, num_vlm_layers=cfg.num_vlm_layers,
        num_expert_layers=cfg.num_expert_layers or -1, self_attn_every_n_layers=cfg.self_attn_every_n_layers,
        expert_width_multiplier=cfg.expert_width_multiplier, train_expert_only=cfg.train_expert_only,
        freeze_vision_encoder=cfg.freeze_vision_encoder, device=str(torch.device(device).type))
    policy = SmolVLAPolicy(lr_cfg).to(device)
    return LeRobotVLA(cfg, policy, state_columns, action_dim, image_size, instructions, action_clip).to(device)


VLM_SIZES = {
    "tiny": {"vision": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                        "image_size": 32, "patch_size": 8},
             "text": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                      "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 512},
             "scale_factor": 2, "vocab_size": 0},
    "default": {"vision": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                           "num_attention_heads": 12, "image_size": 512, "patch_size": 16},
                "text": {"hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32,
                         "num_attention_heads": 15, "num_key_value_heads": 5, "head_dim": 64,
                         "max_position_embeddings": 8192, "rope_theta": 100000.0},
                "scale_factor": 4, "vocab_size": 49280},
}
"""VLM sizes for `write_smolvlm_folder`: `tiny` (a CPU test's) and `default`, SmolVLM2-500M's architecture as its
model card describes it (SigLIP base-patch16-512, pixel shuffle 4, SmolLM2-360M's text model), written here from
those published sizes, not read from the hub."""

_SPECIAL = {"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
            "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"}


def write_smolvlm_folder(path: str | Path, texts: tuple[str, ...], size: str = "tiny") -> Path:
    """A folder holding a SmolVLM config (`VLM_SIZES[size]`), a word-level tokenizer of `texts`' words and a
    processor: what SmolVLA's `vlm_model_name` names, so that it builds with random weights offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    if size not in VLM_SIZES:
        raise ValueError(f"size {size!r}: expected one of {', '.join(VLM_SIZES)}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    split = pre_tokenizers.Whitespace()
    words = sorted({w for text in texts for w, _ in split.pre_tokenize_str(text)})
    vocab = {tok: i for i, tok in enumerate(["<unk>", "<pad>", "<|im_start|>", *_SPECIAL.values(), *words])}
    model = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    model.pre_tokenizer = split
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<|im_start|>", eos_token="<end_of_utterance>",
                                        extra_special_tokens=_SPECIAL)
    sizes = VLM_SIZES[size]
    side = sizes["vision"]["image_size"]
    image_seq_len = (side // sizes["vision"]["patch_size"] // sizes["scale_factor"]) ** 2
    processor = SmolVLMProcessor(
        SmolVLMImageProcessor(size={"longest_edge": side}, max_image_size={"longest_edge": side},
                              do_image_splitting=False),
        tokenizer, SmolVLMVideoProcessor(), image_seq_len=image_seq_len)
    processor.save_pretrained(path)
    vocab_size = max(sizes["vocab_size"], len(vocab))
    config = SmolVLMConfig(vision_config=dict(sizes["vision"]),
                           text_config={"model_type": "llama", "vocab_size": vocab_size, "rms_norm_eps": 1e-5,
                                        "pad_token_id": vocab["<pad>"], **sizes["text"]},
                           scale_factor=sizes["scale_factor"], image_token_id=vocab["<image>"],
                           pad_token_id=vocab["<pad>"], vocab_size=vocab_size)
    config.save_pretrained(path)
    (path / "robo_rl.json").write_text(json.dumps({"size": size, "texts": list(texts)}) + "\n")
    return path
