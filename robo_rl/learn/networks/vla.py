"""A small vision-language-action policy behind the VLA interface that every VLA learner uses (DESIGN.md 5b).

The interface (`VLA`):
- `encode_prefix(obs) -> ctx`: the camera image, the instruction and the robot state, fused once per decision
  into a context (N, L, W) (batch first: chains repeat it along the batch);
- `velocity(ctx, x_t, t) -> v`: the flow action expert over flattened action chunks x_t (N, D = H A) at flow
  time t (N,) (our convention, `robo_rl.learn.networks.flow`: t = 0 noise, t = 1 action, v = action - noise);
- `value(ctx, critic_obs=None) -> (N,)`: the critic, on the fused prefix (or, in simulation, on the task's
  privileged critic observations: `value_input: privileged`);
- `noise_std(ctx, x_t, t) -> (N, D)`: Flow-Noise's learned step noise, bounded in [σ_min, σ_max].
Their outputs are float32 whatever precision the layers ran in (`robo_rl.learn.precision.autocast`), so the chains'
arithmetic and likelihoods stay float32.
Sampling, chain log-likelihoods, SFT and the RL algorithms call only these (plus the sizes `horizon`, `action_dim`,
`num_steps`, `action_clip`), so a large VLA (π0, SmolVLA) can stand behind the same interface.

`VLAPolicy` is the small one that trains on a CPU: image tokens from an image encoder
(`robo_rl.learn.networks.vision`), pooled to a small grid or to spatial-softmax keypoints; one token for the
instruction (a frozen sentence embedding looked up by the "text" group's index); one for the normalised state
("policy" group); a transformer encoder over them. The action expert is π0-shaped: one token per action of the
chunk, fused with a sinusoidal time embedding through an MLP, then transformer decoder layers that attend to each
other and to the prefix. Flow-matching times are drawn from π0's Beta distribution (noisier times more often).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor, nn

from robo_rl.core.config import ConfigError, _f
from robo_rl.learn.networks.actor_critic import mlp
from robo_rl.learn.networks.flow import Velocity, check_chunk_and_noise, euler_sample
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.networks.text_encoder import AttentionPool


class VLA(Protocol):
    """What the VLA learners use of a policy (see the module docstring)."""

    horizon: int
    """H: actions per chunk."""
    action_dim: int
    """A."""
    num_steps: int
    """K: denoising steps."""
    action_clip: float | None

    def encode_prefix(self, obs: dict[str, Tensor]) -> Tensor: ...

    def velocity(self, ctx: Tensor, x_t: Tensor, t: Tensor) -> Tensor: ...

    def value(self, ctx: Tensor, critic_obs: Tensor | None = None) -> Tensor: ...

    def noise_std(self, ctx: Tensor, x_t: Tensor, t: Tensor) -> Tensor: ...


def bind(vla: VLA, ctx: Tensor) -> Velocity:
    """The velocity field x, t -> vla.velocity(ctx, x, t) of one prefix, for the samplers of `flow`."""
    return lambda x, t: vla.velocity(ctx, x, t)


@dataclass(frozen=True, kw_only=True)
class VLAPolicyConfig:
    """The small VLA (`VLAPolicy`) and how its chunks are sampled and executed."""

    horizon: int = _f(8, ge=1, le=64)
    """H: actions per predicted chunk."""
    execute_steps: int = _f(4, ge=1, le=64)
    """E <= H: actions of each chunk run open-loop before the policy decides again."""
    num_steps: int = _f(4, ge=1, le=32)
    """K: denoising steps of a decision (training rollouts and the exported chain)."""
    initial_noise: str = _f("sample", choices=("sample", "zeros"))
    """x_0 of the deterministic deployed chain: drawn N(0, I) (an input of the exported graph) or 0 (vla-rl's
    rollouts then start their chains at 0 too: the method's noise is all their exploration)."""
    state_terms: tuple[str, ...] = ()
    """Terms of the "policy" group the VLA reads as its robot state (e.g. joint_pos_rel, joint_vel, ee_pos,
    last_action: what the robot measures, not where the goal cube is); () reads the whole group."""
    aux_terms: tuple[str, ...] = ()
    """Terms of the "policy" group that SFT teaches the prefix to predict (an auxiliary loss, `algo.aux_loss_coef`),
    e.g. object_pos and target_pos: the recorded observations hold where the goal cube and the target are, the VLA
    never reads them. Labels for training only: the deployed policy needs none of them. () : no auxiliary loss."""
    aux_token: bool = False
    """The auxiliary head's prediction (standardised, its gradient stopped) becomes one more context token that the
    action expert and the heads attend to: the expert reads where the prefix sees the cubes, as a state-based policy
    reads their positions, instead of whatever else in the image tells its training layouts apart. The head is then
    part of the deployed chain (it reads the image; still no labels)."""
    image_encoder: str = "cnn"
    """`robo_rl.learn.networks.vision` encoder: `cnn` (trained from scratch) or `efficientnet-lite0` (pretrained,
    early blocks frozen)."""
    image_stride: int = _f(0, ge=0, le=16)
    """Pixels per side of the encoder's feature cells: 4 or 8 (0: the encoder's default, 8; 64 px -> 8 x 8 cells).
    Keypoints locate better on the finer grid of stride 4."""
    image_pool: str = _f("avg", choices=("avg", "keypoints"))
    """How the encoder's feature grid becomes image tokens: `avg`, average-pooled to `image_grid`²; `keypoints`,
    `image_keypoints` spatial-softmax keypoints (robomimic's and Diffusion Policy's pooling for precise
    manipulation), each a token of its expected image position and the features it attends to."""
    image_grid: int = _f(4, ge=0, le=16)
    """`avg`: image tokens are average-pooled to an image_grid x image_grid grid (0: the encoder's own grid)."""
    image_keypoints: int = _f(16, ge=1, le=256)
    """`keypoints`: K, the number of keypoints (image tokens)."""
    instruction_keypoints: int = _f(0, ge=0, le=64)
    """`keypoints`: K_q more keypoints whose logits are each cell's features dotted with a query made from the
    instruction's embedding: "where is what the instruction names", found by what it looks like wherever it lies."""
    instruction_pool: str = _f("mean", choices=("mean", "attention"))
    """How an instruction becomes one embedding: `mean`, the sentence encoder's own (the mean of its token states,
    fixed); `attention`, the token states weighted by a query the policy learns (`AttentionPool`, starting as the
    mean), so that it can read the words that name the goal; the exported instruction encoder then includes it."""
    width: int = _f(128, ge=8)
    """W: token width of the prefix and the action expert."""
    heads: int = _f(4, ge=1)
    prefix_layers: int = _f(2, ge=0, le=12)
    """Transformer encoder layers over the prefix tokens (image, instruction, state)."""
    expert_layers: int = _f(2, ge=1, le=12)
    """Transformer decoder layers of the action expert (self-attention over the chunk, cross-attention to the
    prefix)."""
    ffn_mult: int = _f(2, ge=1, le=8)
    """Feed-forward width of every transformer layer, in multiples of W."""
    time_beta: tuple[float, float] = _f((1.5, 1.0))
    """π0's flow-matching time distribution: π0's time s ~ Beta(a, b) scaled to [0.001, 1] (s = 1 is noise;
    our t = 1 - s): noisy times are drawn more often."""
    sigma_min: float = _f(0.08, gt=0.0)
    sigma_max: float = _f(0.16, gt=0.0)
    """Flow-Noise: bounds of the learned step noise std (πRL: [0.08, 0.16])."""
    noise_hidden_dims: tuple[int, ...] = _f((128,))
    """Flow-Noise's noise head: an MLP on the pooled prefix, x_t and the time features."""
    sde_noise_level: float = _f(0.5, gt=0.0, le=2.0)
    """Flow-SDE: a in σ_s = a sqrt(s / (1 - s)) (πRL: 0.5)."""
    value_input: str = _f("detached", choices=("detached", "shared", "privileged"))
    """The value head reads the pooled prefix with its gradient stopped (`detached`: the encoders learn only from the
    actor's loss) or not (`shared`: the value loss also trains the shared backbone, RL4VLA's lighter choice); or
    (`privileged`) the task's critic observation group instead, normalised by its own running statistics: the
    simulator's state that the camera only hints at (where the cubes and the target are), an asymmetric critic for
    training in simulation (the deployed chain has no value head)."""
    critic_hidden_dims: tuple[int, ...] = _f((256, 256))
    activation: str = _f("silu", choices=("elu", "relu", "tanh", "silu"))
    obs_normalization: bool = True
    obs_norm_eps: float = _f(1e-2, gt=0.0, le=1.0)
    obs_norm_clip: float = _f(5.0, ge=0.0)

    def validate(self) -> None:
        check_chunk_and_noise(self)
        if self.image_stride not in (0, 4, 8):
            raise ConfigError(f"config error: policy.image_stride = {self.image_stride}: must be 4 or 8 (0: the "
                              "encoder's default, 8)")
        if self.width % self.heads:
            raise ConfigError(f"config error: policy.width = {self.width}: must be a multiple of policy.heads = "
                              f"{self.heads}")
        if self.aux_token and not self.aux_terms:
            raise ConfigError("config error: policy.aux_token: the token is the prediction of policy.aux_terms; name "
                              "them (e.g. [object_pos,target_pos])")
        if len(self.time_beta) != 2 or self.time_beta[0] <= 0 or self.time_beta[1] != 1.0:
            raise ConfigError(f"config error: policy.time_beta = {list(self.time_beta)!r}: expected [a, 1] with a > 0 "
                              "(Beta(a, 1); π0's is [1.5, 1])")


def state_columns(policy_terms: tuple[tuple[str, int], ...], names: tuple[str, ...], obs_dim: int,
                  field: str = "policy.state_terms") -> Tensor:
    """Columns (O_s,) of the "policy" group holding the terms `names` (in the group's order), from its layout
    `policy_terms` ((name, width) in order); all O columns when `names` is empty.

    Raises:
        ConfigError: a name that is not a term of the group (one line naming the config `field`, listing the terms).
    """
    if not names:
        return torch.arange(obs_dim)
    known = [n for n, _ in policy_terms]
    for name in names:
        if name not in known:
            raise ConfigError(f"config error: {field}: {name!r} is not a policy observation term of this "
                              f"task ({', '.join(known) or 'none known'})")
    columns, start = [], 0
    for name, width in policy_terms:
        if name in names:
            columns.append(torch.arange(start, start + width))
        start += width
    return torch.cat(columns)


def pi0_time_embedding(t: Tensor, dim: int, min_period: float = 4e-3, max_period: float = 4.0) -> Tensor:
    """π0's sinusoidal time features: t (B,) -> (B, dim), sin and cos at periods spaced geometrically from
    `min_period` to `max_period` (dim even)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, device=t.device, dtype=t.dtype)  # (dim/2,)
    period = min_period * (max_period / min_period) ** fraction
    angles = t[:, None] * (2 * math.pi / period)[None, :]  # (B, dim/2)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def sample_flow_times(n: int, beta: tuple[float, float], generator: torch.Generator) -> Tensor:
    """Flow-matching times t (n,) in our convention: π0's s ~ Beta(a, 1) * 0.999 + 0.001, t = 1 - s.

    Beta(a, 1) is drawn by inverting its CDF s^a (`VLAPolicyConfig.validate` admits only b = 1).
    """
    u = torch.rand(n, generator=generator, device=generator.device)
    s = u.pow(1.0 / beta[0]) * 0.999 + 0.001  # (n,) π0's time, 1 = noise
    return 1.0 - s


def bounded_std(raw: Tensor, sigma_min: float, sigma_max: float) -> Tensor:
    """A std in [σ_min, σ_max] from an unbounded output: a tanh-squashed log-variance (Flow-Noise's head)."""
    lo, hi = 2 * math.log(sigma_min), 2 * math.log(sigma_max)
    log_var = lo + (hi - lo) * 0.5 * (torch.tanh(raw) + 1.0)
    return torch.exp(0.5 * log_var)


def cell_centres(side: int) -> Tensor:
    """(side², 2) the (x, y) centres of a side x side grid's cells, row-major, in [-1, 1] (image left/top = -1)."""
    c = (torch.arange(side, dtype=torch.float32) + 0.5) / side * 2 - 1  # (side,)
    y, x = torch.meshgrid(c, c, indexing="ij")
    return torch.stack([x.flatten(), y.flatten()], dim=-1)


def spatial_softmax(logits: Tensor, features: Tensor, cell_xy: Tensor) -> tuple[Tensor, Tensor]:
    """Spatial-softmax keypoints: each keypoint's softmax over the cells of its logits (N, T, K) weights the cells'
    features (N, T, C) and centres (T, 2); returns (features (N, K, C), expected positions (N, K, 2))."""
    attention = torch.softmax(logits, dim=1).transpose(1, 2)  # (N, K, T), each row sums to 1
    return attention @ features, attention @ cell_xy.to(attention.dtype)


def _encoder_layer(cfg: VLAPolicyConfig, decoder: bool) -> nn.Module:
    kind = nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer
    return kind(cfg.width, cfg.heads, dim_feedforward=cfg.ffn_mult * cfg.width, dropout=0.0, activation="gelu",
                batch_first=True, norm_first=True)


class ChunkSampling:
    """Sampling and SFT over a VLA's interface, shared by the VLAs (`VLAPolicy`, the LeRobot adapter): they have
    `horizon`, `action_dim`, `num_steps`, `action_clip`, `execute_steps`, `flat_dim` (H A), `_eval_generator` and a
    config with `initial_noise` and `time_beta`."""

    def sample(self, ctx: Tensor, x0: Tensor, num_steps: int | None = None) -> Tensor:
        """Deterministic Euler chunks (N, H, A) from x0 (N, D)."""
        x = euler_sample(bind(self, ctx), x0, num_steps or self.num_steps, clip=self.action_clip)
        return x.reshape(-1, self.horizon, self.action_dim)

    def flow_matching_loss(self, ctx: Tensor, x1: Tensor, generator: torch.Generator) -> Tensor:
        """SFT's loss || v(ctx, x_t, t) - (x1 - x0) ||² on demonstrated chunks x1 (B, D) with their prefixes ctx:
        x0 ~ N(0, I), t from π0's Beta distribution (`config.time_beta`), x_t = (1 - t) x0 + t x1."""
        x0 = torch.randn(x1.shape, generator=generator, device=generator.device).to(x1.device)
        t = sample_flow_times(x1.shape[0], self.config.time_beta, generator).to(x1.device)
        xt = (1 - t[:, None]) * x0 + t[:, None] * x1
        return (self.velocity(ctx, xt, t) - (x1 - x0)).square().mean()

    def initial_chain(self, n: int, generator: torch.Generator, device: torch.device | str) -> Tensor:
        """x_0 (N, D) of n chains as `config.initial_noise` says: N(0, I) drawn from `generator`, or zeros."""
        if self.config.initial_noise == "zeros":
            return torch.zeros(n, self.flat_dim, device=device)
        return torch.randn(n, self.flat_dim, generator=generator, device=generator.device).to(device)

    def act_inference(self, obs: dict[str, Tensor]) -> Tensor:
        """The executed actions for observation groups: the first E actions (N, E, A) of the deterministic chain
        from x_0 ~ N(0, I) (or zeros), or the first action (N, A) when E = 1."""
        ctx = self.encode_prefix(obs)
        chunk = self.sample(ctx, self.initial_chain(ctx.shape[0], self._eval_generator, ctx.device))
        return chunk[:, 0] if self.execute_steps == 1 else chunk[:, : self.execute_steps]


class VLAPolicy(ChunkSampling, nn.Module):
    """The small VLA (see the module docstring).

    Args:
        cfg: its configuration.
        state_columns: (O_s,) long, the columns of the "policy" group it reads as its state (`state_columns`).
        action_dim: A.
        image_encoder: uint8 images (N, 3, S, S) -> tokens (N, T, C) on a side x side grid
            (`robo_rl.learn.networks.vision`).
        image_size: S.
        instruction_table: (I, E) float32, the frozen sentence embedding of every instruction the "text" group
            indexes; with `instruction_pool: attention`, their token states (I, L, E) instead.
        instruction_mask: (I, L) the token states' attention masks (`instruction_pool: attention` only).
        action_clip: the task's action clip (bounds every sample), or None.
        critic_obs_dim: O_c, the task's critic observation group's size (`value_input: privileged` reads it).
    """

    reads_observation_groups = True
    """`act_inference` takes the observation groups ("image", "text", "policy"), not the "policy" tensor alone."""

    def __init__(self, cfg: VLAPolicyConfig, state_columns: Tensor, action_dim: int, image_encoder: nn.Module,
                 image_size: int, instruction_table: Tensor, action_clip: float | None,
                 aux_columns: Tensor | None = None, instruction_mask: Tensor | None = None, critic_obs_dim: int = 0):
        super().__init__()
        self.config = cfg
        self.horizon, self.action_dim, self.num_steps = cfg.horizon, action_dim, cfg.num_steps
        self.execute_steps, self.action_clip = cfg.execute_steps, action_clip
        self.flat_dim = cfg.horizon * action_dim
        state_dim = int(state_columns.numel())
        self.state_dim, self.image_size = state_dim, image_size
        self.register_buffer("state_columns", state_columns.to(torch.long).clone())  # (O_s,)
        w = cfg.width
        self.instruction_dim = e = int(instruction_table.shape[-1])  # E
        if (cfg.instruction_pool == "attention") != (instruction_mask is not None and instruction_table.dim() == 3):
            raise ValueError(f"instruction_pool = {cfg.instruction_pool}: got an instruction table of shape "
                             f"{list(instruction_table.shape)} {'with' if instruction_mask is not None else 'without'} "
                             "a token mask; expected (I, L, E) token states with their mask for attention, an (I, E) "
                             "table for mean")
        self.image_encoder = image_encoder
        with torch.no_grad():
            tokens = image_encoder(torch.zeros(1, 3, image_size, image_size, dtype=torch.uint8))  # (1, T0, C)
        side = math.isqrt(tokens.shape[1])
        if side * side != tokens.shape[1]:
            raise ValueError(f"image encoder gives {tokens.shape[1]} tokens: expected a square grid")
        self._grid = (side, cfg.image_grid if 0 < cfg.image_grid < side else side)  # (encoder side, pooled side)
        num_image_tokens = self._grid[1] ** 2
        if cfg.image_pool == "keypoints":
            num_image_tokens = cfg.image_keypoints + cfg.instruction_keypoints
            self.keypoint_logits = nn.Linear(tokens.shape[2], cfg.image_keypoints)  # per cell, one logit per keypoint
            if cfg.instruction_keypoints:  # instruction (E,) -> K_q queries (K_q, C)
                queries = cfg.instruction_keypoints * tokens.shape[2]
                self.keypoint_queries = nn.Linear(e, queries)
            self.keypoint_proj = nn.Linear(2, w)
            self.register_buffer("cell_xy", cell_centres(side))  # (side², 2)
        if instruction_mask is None:
            self.register_buffer("instruction_table", instruction_table.to(torch.float32).clone())  # (I, E)
            self.instruction_pool = None
        else:
            self.register_buffer("instruction_tokens", instruction_table.to(torch.float32).clone())  # (I, L, E)
            self.register_buffer("instruction_mask", instruction_mask.to(torch.long).clone())  # (I, L)
            self.instruction_pool = AttentionPool(e)
        self.image_proj = nn.Linear(tokens.shape[2], w)
        self.text_proj = nn.Linear(e, w)
        self.state_proj = nn.Linear(state_dim, w)
        self.prefix_len = num_image_tokens + 2  # L: image tokens, the instruction's, the state's
        self.prefix_pos = nn.Parameter(0.02 * torch.randn(1, self.prefix_len, w))
        self.prefix = (nn.TransformerEncoder(_encoder_layer(cfg, False), cfg.prefix_layers, enable_nested_tensor=False)
                       if cfg.prefix_layers else nn.Identity())
        self.prefix_norm = nn.LayerNorm(w)
        self.action_in = nn.Linear(action_dim, w)
        self.action_time_mlp = nn.Sequential(nn.Linear(2 * w, w), nn.SiLU(), nn.Linear(w, w))  # π0's fusion
        self.action_pos = nn.Parameter(0.02 * torch.randn(1, cfg.horizon, w))
        self.expert = nn.TransformerDecoder(_encoder_layer(cfg, True), cfg.expert_layers)
        self.action_out = nn.Sequential(nn.LayerNorm(w), nn.Linear(w, action_dim))
        self.noise_head = mlp(w + self.flat_dim + 32, cfg.noise_hidden_dims, self.flat_dim, cfg.activation)
        self.critic_obs_dim = critic_obs_dim  # O_c
        if cfg.value_input == "privileged":
            if critic_obs_dim <= 0:
                raise ConfigError("config error: policy.value_input = privileged reads the task's critic observation "
                                  "group: this task has none")
            self.critic = mlp(critic_obs_dim, cfg.critic_hidden_dims, 1, cfg.activation)
            self.critic_normalizer = EmpiricalNormalization(critic_obs_dim, eps=cfg.obs_norm_eps)  # updated by RL
        else:
            self.critic = mlp(w, cfg.critic_hidden_dims, 1, cfg.activation)
        aux = torch.zeros(0, dtype=torch.long) if aux_columns is None else aux_columns.to(torch.long)
        self.register_buffer("aux_columns", aux.clone())  # (O_aux,)
        self.register_buffer("aux_mean", torch.zeros(aux.numel()))  # (O_aux,) the labels' statistics (SFT fits them)
        self.register_buffer("aux_std", torch.zeros(aux.numel()))  # all 0: not fitted yet
        self.aux_head = mlp(w, (w,), aux.numel(), cfg.activation) if aux.numel() else None
        self.aux_token = nn.Linear(aux.numel(), w) if cfg.aux_token and aux.numel() else None
        self.obs_normalizer = (EmpiricalNormalization(state_dim, eps=cfg.obs_norm_eps, clip=cfg.obs_norm_clip)
                               if cfg.obs_normalization else nn.Identity())
        self._eval_generator = torch.Generator().manual_seed(0)  # x_0 of act_inference (evaluation only)

    # ------------------------------------------------------------------ the VLA interface
    def encode_prefix(self, obs: dict[str, Tensor]) -> Tensor:
        """Observation groups ("image" (N, 3, S, S) uint8, "text" (N,) long, "policy" (N, O)) -> ctx (N, L, W).

        "image_frozen" (N, C0, h, w) in place of "image": the image encoder's frozen features of the images,
        computed ahead (`ImageEncoder.frozen_features`; SFT's `algo.feature_cache`)."""
        state = self.obs_normalizer(obs["policy"][:, self.state_columns])  # (N, O_s)
        instruction = self.instruction(obs["text"])  # (N, E)
        if "image_frozen" in obs:
            return self.fuse_tokens(self.image_encoder.tokens_from_frozen(obs["image_frozen"]), instruction, state)
        return self.fuse(obs["image"], instruction, state)

    @property
    def context_len(self) -> int:
        """Tokens of ctx: the prefix's L, and the auxiliary prediction's with `aux_token`."""
        return self.prefix_len + (self.aux_token is not None)

    def instruction(self, text: Tensor) -> Tensor:
        """The embeddings (N, E) of instruction indices `text` (N,): the sentence encoder's, or pooled by the
        policy's `AttentionPool` (over the I instructions once, then indexed)."""
        if self.instruction_pool is None:
            return self.instruction_table[text.long()]
        return self.instruction_pool(self.instruction_tokens, self.instruction_mask)[text.long()]

    def fuse(self, image: Tensor, instruction: Tensor, state: Tensor) -> Tensor:
        """The prefix ctx (N, L, W) of images (N, 3, S, S) uint8, instruction embeddings (N, E) and normalised states
        (N, O_s): what `encode_prefix` computes once the instruction is embedded (the exported graph's inputs)."""
        return self.fuse_tokens(self.image_encoder(image), instruction, state)

    def fuse_tokens(self, tokens: Tensor, instruction: Tensor, state: Tensor) -> Tensor:
        """`fuse` from the image encoder's tokens (N, T0, C)."""
        side, pooled = self._grid
        if self.config.image_pool == "keypoints":
            logits = self.keypoint_logits(tokens)  # (N, T, K)
            if self.config.instruction_keypoints:
                queries = self.keypoint_queries(instruction).view(tokens.shape[0], -1, tokens.shape[2])  # (N, K_q, C)
                logits = torch.cat([logits, tokens @ queries.transpose(1, 2) / math.sqrt(tokens.shape[2])], dim=-1)
            features, xy = spatial_softmax(logits, tokens, self.cell_xy)  # (N, K + K_q, C), (N, K + K_q, 2)
            image = self.image_proj(features) + self.keypoint_proj(xy)  # (N, K, W)
        else:
            if pooled != side:
                grid = tokens.transpose(1, 2).reshape(tokens.shape[0], -1, side, side)  # (N, C, side, side)
                tokens = nn.functional.adaptive_avg_pool2d(grid, pooled).flatten(2).transpose(1, 2)  # (N, T, C)
            image = self.image_proj(tokens)  # (N, T, W)
        parts = [image, self.text_proj(instruction)[:, None], self.state_proj(state)[:, None]]
        x = torch.cat(parts, dim=1) + self.prefix_pos  # (N, L, W)
        ctx = self.prefix_norm(self.prefix(x))
        if self.aux_token is None:
            return ctx
        where = self.aux_token(self.aux_prediction(ctx).detach())[:, None]  # (N, 1, W)
        return torch.cat([ctx, where], dim=1)  # (N, L + 1, W)

    def velocity(self, ctx: Tensor, x_t: Tensor, t: Tensor) -> Tensor:
        """ctx (N, L, W), x_t (N, D), t (N,) -> v (N, D)."""
        n, w = x_t.shape[0], self.config.width
        tok = self.action_in(x_t.reshape(n, self.horizon, self.action_dim))  # (N, H, W)
        time = pi0_time_embedding(t, w)[:, None].expand(n, self.horizon, w)  # (N, H, W)
        tok = self.action_time_mlp(torch.cat([tok, time], dim=-1)) + self.action_pos
        return self.action_out(self.expert(tok, ctx)).reshape(n, self.flat_dim).float()

    def noise_std(self, ctx: Tensor, x_t: Tensor, t: Tensor) -> Tensor:
        """Flow-Noise's step std (N, D) in [σ_min, σ_max] for ctx (N, L, W), x_t (N, D), t (N,)."""
        raw = self.noise_head(torch.cat([ctx.mean(1), x_t, pi0_time_embedding(t, 32)], dim=-1)).float()
        return bounded_std(raw, self.config.sigma_min, self.config.sigma_max)

    def value(self, ctx: Tensor | None, critic_obs: Tensor | None = None) -> Tensor:
        """V (N,) on the pooled prefix ctx (N, L, W) (its gradient stopped unless `value_input` is `shared`), or on
        the critic observations (N, O_c) alone (`privileged`: ctx may be None)."""
        if self.config.value_input == "privileged":
            if critic_obs is None:
                raise ValueError("policy.value_input = privileged: value() needs the critic observations")
            return self.critic(self.critic_normalizer(critic_obs)).squeeze(-1).float()
        pooled = ctx.mean(1)
        if self.config.value_input == "detached":
            pooled = pooled.detach()
        return self.critic(pooled).squeeze(-1).float()

    # ------------------------------------------------------------------ sampling and SFT
    def aux_prediction(self, ctx: Tensor) -> Tensor:
        """The `aux_terms` (N, O_aux), standardised by `aux_mean` and `aux_std`, predicted from the pooled prefix
        tokens of ctx (N, L[+1], W) (not the `aux_token` that holds this very prediction)."""
        return self.aux_head(ctx[:, : self.prefix_len].mean(1))

    def aux_loss(self, ctx: Tensor, obs: Tensor) -> Tensor:
        """Mean squared error of `aux_prediction` against the `aux_terms`' values in the "policy" observations
        (N, O), standardised."""
        target = (obs[:, self.aux_columns] - self.aux_mean) / self.aux_std  # (N, O_aux)
        return (self.aux_prediction(ctx).float() - target).square().mean()

    # ------------------------------------------------------------------ export
    @property
    def noise_input_dim(self) -> int:
        """Width of the exported graph's `noise` input (x_0, D), or 0 when the chain starts from zeros."""
        return self.flat_dim if self.config.initial_noise == "sample" else 0

    def inference_policy(self) -> tuple[nn.Module, nn.Module]:
        """(the deterministic chain as a module (normalised state, [noise,] image, instruction embedding) -> the E
        executed actions (N, E, A) or (N, A), the state normaliser): what export turns into a graph."""
        return VLAChain(self), self.obs_normalizer

    def graph_inputs(self, obs: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """The exported graph's inputs for observation groups: (raw state (N, O_s), image (N, 3, S, S) uint8,
        instruction embedding (N, E))."""
        return obs["policy"][:, self.state_columns], obs["image"], self.instruction(obs["text"]).detach()

    def deploy_extra(self) -> dict:
        """What the deploy contract records of the exported chain (`extra["flow"]`, as for a flow policy)."""
        return {"flow": {"num_steps": self.num_steps, "horizon": self.horizon, "variant": "vla",
                         "initial_noise": self.config.initial_noise, "step_noise": False,
                         "noise_input_dim": self.noise_input_dim, "execute_steps": self.execute_steps},
                "vla": {"state_terms": list(self.config.state_terms)}}


class VLAChain(nn.Module):
    """A VLA's deterministic decision as one module for export: (normalised state (N, O_s), [noise (N, D),] image
    (N, 3, S, S) uint8, instruction embedding (N, E)) -> the executed actions, as `VLAPolicy.act_inference`."""

    def __init__(self, policy: VLAPolicy):
        super().__init__()
        self.policy = policy

    def forward(self, state: Tensor, *inputs: Tensor) -> Tensor:
        p = self.policy
        noise = inputs[0] if p.noise_input_dim else None
        image, instruction = inputs[-2:]
        ctx = p.fuse(image, instruction, state)
        x0 = noise if noise is not None else torch.zeros(state.shape[0], p.flat_dim, dtype=state.dtype)
        chunk = p.sample(ctx, x0)
        return chunk[:, 0] if p.execute_steps == 1 else chunk[:, : p.execute_steps]
