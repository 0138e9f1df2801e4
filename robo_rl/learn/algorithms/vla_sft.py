"""Supervised fine-tuning of a VLA on recorded demonstrations (`--algo vla-sft`): flow matching on action chunks
from camera images, instruction texts and the robot state.

The dataset is a LeRobot v3.0 recording of the task with its camera (`robo-rl record --task arm-pick-place-vision
--expert --cameras scene`): each frame's image (`observation.images.<camera>`), its task text (the episode's
instruction, meta/tasks.parquet), its "policy" observation and its action. Item i pairs frame i's observation with
the chunk of actions i .. i+H-1 of its episode (the last one repeated past its end, `bc.chunk_indices`). Every
gradient step draws a batch, shifts its images randomly by up to `algo.image_shift` pixels (DrQ) and regresses the
action expert's velocity on the flow-matching target at π0's Beta-distributed times
(`VLAPolicy.flow_matching_loss`). The state normaliser is fitted once to the dataset; the noise head and the critic
are the RL fine-tuning's and stay untouched.

The policy (`VLAPolicy`, robo_rl.learn.networks.vla) is built here for every VLA learner (`build_vla_policy`): its
image encoder, the frozen sentence embedding of each of the task's instructions, and the state columns it reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from robo_rl.core.config import ConfigError, _f
from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.errors import DatasetError
from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS, AlgorithmEntry, EnvSpec
from robo_rl.learn.algorithms.bc import chunk_indices
from robo_rl.learn.builders import build_env
from robo_rl.learn.networks.text_encoder import InstructionEmbeddings
from robo_rl.learn.networks.vision import ImageEncoder, make_image_encoder, random_shift
from robo_rl.learn.networks.vla import VLAPolicy, VLAPolicyConfig, state_columns
from robo_rl.learn.precision import PRECISIONS, autocast, resolve_precision
from robo_rl.learn.runner import OfflineRunner
from robo_rl.learn.train_config import TrainConfig


def build_vla_policy(cfg: VLAPolicyConfig, spec: EnvSpec) -> VLAPolicy:
    """The small VLA for a task with a camera image and instructions (arm-pick-place-vision).

    Raises:
        ConfigError: the task renders no image or has no instructions (one line).
    """
    if spec.camera is None or not spec.instructions:
        raise ConfigError("config error: a VLA policy reads a camera image and an instruction; this task has "
                          f"{'no image group' if spec.camera is None else 'no instructions'} (use "
                          "arm-pick-place-vision with env.images: true)")
    encoder = make_image_encoder(cfg.image_encoder, **({"stride": cfg.image_stride} if cfg.image_stride else {}))
    embeddings = InstructionEmbeddings()
    table, mask = (embeddings.tokens(spec.instructions) if cfg.instruction_pool == "attention"
                   else (embeddings.table(spec.instructions), None))  # (I, L, E) and (I, L), or (I, E); frozen
    columns = state_columns(spec.policy_terms, cfg.state_terms, spec.obs_dim)
    aux = state_columns(spec.policy_terms, cfg.aux_terms, spec.obs_dim, "policy.aux_terms") if cfg.aux_terms else None
    policy = VLAPolicy(cfg, columns, spec.action_dim, encoder, spec.image_size, table, spec.action_clip, aux, mask,
                       critic_obs_dim=spec.critic_obs_dim)
    return policy.to(spec.device)


@dataclass(frozen=True, kw_only=True)
class VLASFTConfig:
    """Flow-matching SFT of a VLA (`--algo vla-sft`)."""

    dataset: str = ""
    """The demonstration dataset with camera images (`robo-rl train --dataset PATH`)."""
    observation_key: str = "observation.policy"
    """The dataset feature holding the task's "policy" observation (the VLA reads its `policy.state_terms`)."""
    action_key: str = "action"
    num_steps_per_env: int = _f(50, ge=1, le=100_000)
    """Gradient steps per iteration."""
    batch_size: int = _f(64, ge=1, le=100_000)
    learning_rate: float = _f(3e-4, gt=0.0, le=1.0)
    weight_decay: float = _f(1e-4, ge=0.0)
    max_grad_norm: float = _f(1.0, gt=0.0)
    image_shift: int = _f(4, ge=0, le=16)
    """Random-shift augmentation of the SFT images (pixels; 0: none)."""
    feature_cache: int = _f(0, ge=0, le=64)
    """K > 0: run the image encoder's frozen part (`efficientnet-lite0`'s trunk) once, before training, on K copies
    of every frame (the first as recorded, the others randomly shifted by up to `image_shift` pixels), kept in
    memory as float16; each gradient step then reads one copy per sample instead of encoding its images. 0: encode
    (and shift) every step's images."""
    aux_loss_coef: float = _f(1.0, ge=0.0)
    """Weight of the auxiliary prediction of `policy.aux_terms` (when it names any) beside the flow-matching loss."""
    aux_first_frames: int = _f(0, ge=0)
    """F > 0: the auxiliary loss reads a batch of its own (`batch_size` frames), drawn from each episode's first F
    frames: before the hand reaches the goal cube, where only the image and the instruction say where it is (later
    the hand's own position gives it away). 0: the flow-matching batch."""
    aux_layouts: int = _f(0, ge=0, le=1_000_000)
    """L > 0: before training, render L fresh initial states of the task (new layouts and instructions, the hand at
    home; `render_layouts`); half of every auxiliary batch is drawn from them, half from the recordings (their first
    `aux_first_frames` frames, or any). The recordings hold a few hundred layouts, which the prefix learns to
    recognise instead of reading where the cubes are; rendered ones never repeat. Labels only: the flow-matching
    loss reads the recordings alone."""
    precision: str = _f("float32", choices=PRECISIONS)
    """`bfloat16`: the gradient steps' forward passes run under `torch.autocast` in bfloat16 (parameters, optimiser
    and loss float32; `robo_rl.learn.precision`); `auto`: bfloat16 where the hardware has it. Evaluation, the feature
    cache and export compute in float32."""


@dataclass
class VLADemonstrations:
    """A dataset in memory: images (M, 3, S, S) uint8, instruction index (M,), "policy" observation (M, O) and
    action chunks (M, H A)."""

    images: Tensor
    text: Tensor
    obs: Tensor
    actions: Tensor
    frame_index: Tensor | None = None
    """(M,) long: each frame's index within its episode."""

    def batch(self, idx: Tensor, images: bool = True) -> tuple[dict[str, Tensor], Tensor]:
        """(observation groups, action chunks) of rows `idx`; without "image" when `images` is False."""
        obs = {"text": self.text[idx], "policy": self.obs[idx]}
        if images:
            obs["image"] = self.images[idx]
        return obs, self.actions[idx]

    def to(self, device: torch.device | str) -> VLADemonstrations:
        """The same rows on `device`."""
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                                            if getattr(self, f.name) is not None})


def load_vla_demonstrations(cfg: VLASFTConfig, spec: EnvSpec, horizon: int) -> VLADemonstrations:
    """The dataset's frames with their images, instruction indices and action chunks, checked against the task.

    Raises:
        ConfigError: no dataset given. DatasetError (one line): a missing feature, other sizes, images of another
            size than the task's, or a frame whose task text is not one of the task's instructions.
    """
    if not cfg.dataset:
        raise ConfigError("config error: algo.dataset is not set; pass --dataset PATH (a LeRobot v3.0 folder recorded "
                          "with the task's camera)")
    reader = DatasetReader(cfg.dataset)
    image_key = f"observation.images.{spec.camera}"
    for key in (cfg.observation_key, cfg.action_key, image_key):
        if key not in reader.features:
            raise DatasetError(f"{cfg.dataset}: has no feature {key!r}; features: {', '.join(reader.features)}")
    frames = reader.frames([cfg.observation_key, cfg.action_key, "episode_index", "task_index"])
    m = reader.num_frames
    obs = torch.tensor(frames[cfg.observation_key], dtype=torch.float32).reshape(m, -1)
    actions = torch.tensor(frames[cfg.action_key], dtype=torch.float32).reshape(m, -1)
    if obs.shape[1] != spec.obs_dim or actions.shape[1] != spec.action_dim:
        raise DatasetError(f"{cfg.dataset}: {cfg.observation_key} has {obs.shape[1]} values and {cfg.action_key} "
                           f"{actions.shape[1]}; the task's policy takes {spec.obs_dim} and acts with "
                           f"{spec.action_dim}")
    if spec.action_clip is not None:
        actions = actions.clamp(-spec.action_clip, spec.action_clip)
    idx = torch.from_numpy(chunk_indices(np.asarray(frames["episode_index"]), horizon))  # (M, H)
    actions = actions[idx].reshape(m, -1)  # (M, H A)
    text = torch.tensor([_instruction_index(reader.meta.tasks[int(i)], spec, cfg.dataset)
                         for i in frames["task_index"]], dtype=torch.long)  # (M,)
    images = torch.empty(m, 3, spec.image_size, spec.image_size, dtype=torch.uint8)
    for ep in reader.meta.episodes:
        video = reader.episode(int(ep["episode_index"]))[image_key]  # (T, H, W, 3)
        if video.shape[1:] != (spec.image_size, spec.image_size, 3):
            raise DatasetError(f"{cfg.dataset}: {image_key} images are {video.shape[2]}x{video.shape[1]}; the task "
                               f"renders {spec.image_size}x{spec.image_size} (env.image_size)")
        start = int(ep["dataset_from_index"])
        images[start:start + video.shape[0]] = torch.from_numpy(video).permute(0, 3, 1, 2)
    first = np.flatnonzero(np.diff(np.asarray(frames["episode_index"]), prepend=np.nan) != 0)  # (E,) episode starts
    frame_index = np.arange(m) - first[np.searchsorted(first, np.arange(m), side="right") - 1]  # (M,)
    return VLADemonstrations(images, text, obs, actions, torch.from_numpy(frame_index)).to(spec.device)


def render_layouts(cfg: TrainConfig, count: int, seed: int, batch: int = 64) -> VLADemonstrations:
    """`count` fresh initial states of `cfg`'s task rendered as the policy sees them: images (L, 3, S, S) uint8,
    instruction indices (L,), "policy" observations (L, O) (the labels `policy.aux_terms` names), with zero action
    chunks (L, H A) and frame index 0. Worlds of an env of `batch` worlds seeded `seed`, reset again and again."""
    env = build_env(cfg, num_envs=min(batch, count), seed=seed)
    try:
        parts: list[dict[str, Tensor]] = []
        for _ in range(-(-count // env.num_envs)):
            obs = env.reset(random_start=False)
            parts.append({k: obs[k].clone() for k in ("image", "text", "policy")})
    finally:
        env.close()
    rows = {k: torch.cat([p[k] for p in parts])[:count] for k in parts[0]}
    flat = cfg.policy.horizon * env.action_dim
    return VLADemonstrations(rows["image"], rows["text"].long(), rows["policy"].float(), torch.zeros(count, flat),
                             torch.zeros(count, dtype=torch.long))


def _instruction_index(task: str, spec: EnvSpec, dataset: str) -> int:
    try:
        return spec.instructions.index(task)
    except ValueError:
        raise DatasetError(f"{dataset}: frame task {task!r} is not one of the task's {len(spec.instructions)} "
                           "instructions (record the dataset with this task)") from None


def frozen_feature_cache(encoder: ImageEncoder, images: Tensor, copies: int, shift: int,
                         generator: torch.Generator, chunk: int = 1024) -> Tensor:
    """The encoder's frozen features of `copies` versions of every image (M, 3, S, S) uint8: the first as given, the
    others DrQ-shifted by up to `shift` pixels -> (copies, M, C0, h, w) float16.

    Raises:
        ConfigError: the encoder has no frozen part (one line).
    """
    probe = encoder.frozen_features(images[:1])
    if probe is None:
        raise ConfigError(f"config error: algo.feature_cache = {copies}: the image encoder "
                          f"({type(encoder).__name__}) trains every layer, so nothing can be computed ahead; use "
                          "policy.image_encoder: efficientnet-lite0, or algo.feature_cache: 0")
    m = images.shape[0]
    cache = torch.empty(copies, m, *probe.shape[1:], dtype=torch.float16, device=images.device)
    for k in range(copies):
        for start in range(0, m, chunk):
            part = images[start:start + chunk]
            if k and shift:
                part = random_shift(part, shift, generator)
            cache[k, start:start + chunk] = encoder.frozen_features(part).to(torch.float16)
    return cache


class VLASFT:
    """Flow-matching gradient steps on in-memory demonstrations (see the module docstring)."""

    def __init__(self, cfg: VLASFTConfig, policy: VLAPolicy, demos: VLADemonstrations, generator: torch.Generator,
                 layouts: VLADemonstrations | None = None):
        self.cfg, self.policy, self.demos, self.generator = cfg, policy, demos, generator
        if layouts is not None and policy.aux_head is None:
            raise ConfigError(f"config error: algo.aux_layouts = {cfg.aux_layouts}: rendered layouts only train the "
                              "auxiliary prediction; name its terms in policy.aux_terms (e.g. [object_pos,target_pos])")
        self.layouts = None if layouts is None else layouts.to(demos.obs.device)
        policy.eval()  # evaluation runs in eval mode, fresh or resumed alike; `update` trains
        self.optimizer = torch.optim.AdamW(self._trained_parameters(), lr=cfg.learning_rate,
                                           weight_decay=cfg.weight_decay)
        normalizer = policy.obs_normalizer
        if hasattr(normalizer, "update") and int(normalizer.count) == 0:
            normalizer.update(demos.obs[:, policy.state_columns])  # fitted once, to the whole dataset
        if policy.aux_head is not None and not bool(policy.aux_std.any()):  # the labels' statistics, fitted once
            labels = demos.obs[:, policy.aux_columns]  # (M, O_aux)
            policy.aux_mean.copy_(labels.mean(0))
            policy.aux_std.copy_(labels.std(0).clamp_min(1e-3))
        self.precision = resolve_precision(cfg.precision, demos.obs.device)  # "float32" or "bfloat16"
        self.aux_rows = None  # (M_F,) the frames the auxiliary batches are drawn from (`aux_first_frames`)
        if policy.aux_head is not None and cfg.aux_first_frames:
            self.aux_rows = (demos.frame_index < cfg.aux_first_frames).nonzero().squeeze(-1)
        self.feature_cache = None  # (K, M, C0, h, w) float16: the frozen image features of K copies of each frame
        if cfg.feature_cache:
            seed = torch.Generator().manual_seed(generator.initial_seed() + 1)  # not the training stream: resumes alike
            self.feature_cache = frozen_feature_cache(policy.image_encoder, demos.images, cfg.feature_cache,
                                                      cfg.image_shift, seed)
        self.layout_cache = None  # (K, L, C0, h, w) float16: the same for the rendered layouts
        if cfg.feature_cache and self.layouts is not None:
            seed = torch.Generator().manual_seed(generator.initial_seed() + 2)
            self.layout_cache = frozen_feature_cache(policy.image_encoder, self.layouts.images, cfg.feature_cache,
                                                     cfg.image_shift, seed)
        if cfg.feature_cache:  # the steps read the cached features only: the images' memory goes (800 episodes: 3.9 GB)
            self.demos = dataclasses.replace(demos, images=demos.images[:0].clone())
            if self.layouts is not None:
                self.layouts = dataclasses.replace(self.layouts, images=self.layouts.images[:0].clone())

    def _trained_parameters(self) -> list[torch.nn.Parameter]:
        """Everything that shapes the deterministic chain (the frozen encoder parts excluded); not the noise head or
        the critic (RL fine-tuning's)."""
        return [p for n, p in self.policy.named_parameters()
                if p.requires_grad and not n.startswith(("noise_head.", "critic."))]

    def act(self, obs: dict[str, Tensor], critic_obs: Tensor) -> Tensor:
        return self.policy.act_inference(obs)

    def update(self) -> dict[str, float]:
        """`num_steps_per_env` gradient steps on random batches; the mean flow-matching loss."""
        cfg, demos, g = self.cfg, self.demos, self.generator
        m, total, total_aux = demos.obs.shape[0], 0.0, 0.0
        aux = self.policy.aux_head is not None and cfg.aux_loss_coef > 0
        self.policy.train()
        for _ in range(cfg.num_steps_per_env):
            idx = torch.randint(0, m, (min(cfg.batch_size, m),), generator=g, device=g.device).to(demos.obs.device)
            obs, chunks = self._batch(idx)
            aux_obs = self._aux_batch(idx.shape[0]) if aux else None
            with autocast(self.precision, chunks.device):
                ctx = self.policy.encode_prefix(obs)
                loss = self.policy.flow_matching_loss(ctx, chunks, g).float()
                aux_loss = torch.zeros(())
                if aux:
                    aux_loss = (self.policy.aux_loss(ctx, obs["policy"]) if aux_obs is None else
                                self.policy.aux_loss(self.policy.encode_prefix(aux_obs), aux_obs["policy"])).float()
            self.optimizer.zero_grad(set_to_none=True)
            (loss + cfg.aux_loss_coef * aux_loss).backward()
            distributed.all_reduce_gradients(self._trained_parameters())
            torch.nn.utils.clip_grad_norm_(self._trained_parameters(), cfg.max_grad_norm)
            self.optimizer.step()
            total += loss.item()
            total_aux += aux_loss.item()
        self.policy.eval()
        out = {"flow_loss": total / cfg.num_steps_per_env}
        if aux:
            out["aux_loss"] = total_aux / cfg.num_steps_per_env
        return out

    def _aux_batch(self, b: int) -> dict[str, Tensor] | None:
        """The auxiliary loss's own batch of B observations, or None when it reads the flow-matching batch: rows of
        the recordings' first `aux_first_frames` frames (or of any frame), half of them replaced by rendered layouts
        when there are some (`aux_layouts`)."""
        g, dev = self.generator, self.demos.obs.device
        if self.aux_rows is None and self.layouts is None:
            return None
        own = b if self.layouts is None else b - b // 2  # rows from the recordings
        if self.aux_rows is not None:
            pick = torch.randint(0, len(self.aux_rows), (own,), generator=g, device=g.device)
            rows = self.aux_rows[pick.to(dev)]
        else:
            rows = torch.randint(0, self.demos.obs.shape[0], (own,), generator=g, device=g.device).to(dev)
        obs = self._batch(rows)[0]
        if self.layouts is None:
            return obs
        drawn = torch.randint(0, self.layouts.obs.shape[0], (b // 2,), generator=g, device=g.device).to(dev)
        rendered = self._batch(drawn, self.layouts, self.layout_cache)[0]
        return {k: torch.cat([obs[k], rendered[k]]) for k in obs}

    def _batch(self, idx: Tensor, demos: VLADemonstrations | None = None,
               cache: Tensor | None = None) -> tuple[dict[str, Tensor], Tensor]:
        """(observation groups, action chunks) of rows `idx` (B,) of the recordings (or of `demos`, whose frozen
        features are `cache`) as a gradient step reads them: the frozen image features of one random copy each
        (`feature_cache`), or the images randomly shifted."""
        g = self.generator
        if demos is None:
            demos, cache = self.demos, self.feature_cache
        obs, chunks = demos.batch(idx, images=cache is None)
        if cache is not None:
            copy = torch.randint(0, cache.shape[0], idx.shape, generator=g, device=g.device)
            obs["image_frozen"] = cache[copy.to(idx.device), idx].float()  # (B, C0, h, w)
        elif self.cfg.image_shift:
            obs["image"] = random_shift(obs["image"], self.cfg.image_shift, g)
        return obs, chunks

    def inference_policy(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        return self.policy.inference_policy()

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])


def build(cfg: VLASFTConfig, policy: VLAPolicy, spec: EnvSpec, generator: torch.Generator,
          layouts: VLADemonstrations | None = None) -> VLASFT:
    return VLASFT(cfg, policy, load_vla_demonstrations(cfg, spec, policy.horizon), generator, layouts)


LAYOUT_SEED_OFFSET = 7_919_000
"""The rendered layouts' env is seeded `seed + LAYOUT_SEED_OFFSET`: a stream apart from the recordings' and the
evaluations' small seeds."""


class VLASFTRunner(OfflineRunner):
    """`OfflineRunner` that renders the task's fresh layouts for the auxiliary loss first (`algo.aux_layouts`)."""

    def _algorithm_inputs(self, rank_cfg: TrainConfig) -> dict:
        count = rank_cfg.algo.aux_layouts
        return {"layouts": render_layouts(rank_cfg, count, rank_cfg.seed + LAYOUT_SEED_OFFSET)} if count else {}


ENTRY = ALGORITHMS.register("vla-sft", AlgorithmEntry(
    config_cls=VLASFTConfig, policy_config_cls=VLAPolicyConfig, runner_cls=VLASFTRunner,
    build_policy=build_vla_policy, build=build))
"""The registry entry."""
