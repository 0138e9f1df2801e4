"""Behaviour cloning from a LeRobot v3.0 demonstration dataset: a Gaussian MLP (`--algo bc`) or a flow-matching
policy over action chunks (`--algo flow-bc`, see the end of this module).

The policy is PPO's `ActorCritic` (its critic unused), so a cloned policy exports, deploys and can be
fine-tuned with PPO like any other. Its observation normaliser is fitted once to the dataset's
observations; each gradient step regresses the actor's mean onto a batch of demonstrated actions
(mean squared error; with `algo.loss: nll` the Gaussian negative log-likelihood, which also learns
the std). Observations are the dataset's `observation.policy` (the policy observation of the task's
deploy contract, as `robo-rl record --expert` writes it) or another feature named by
`algo.observation_key`, and must have the task's policy observation size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from robo_rl.core.config import ConfigError, _f
from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.errors import DatasetError
from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS, AlgorithmEntry, EnvSpec
from robo_rl.learn.networks.actor_critic import ActorCritic, PolicyConfig, gaussian_log_prob
from robo_rl.learn.networks.flow import FlowPolicy, check_chunk_and_noise
from robo_rl.learn.runner import OfflineRunner


@dataclass(frozen=True, kw_only=True)
class BCPolicyConfig(PolicyConfig):
    """PPO's Gaussian MLP, its normalised inputs clipped: a state the demonstrations never show (an input far
    outside their spread) otherwise drives a cloned policy to extreme actions (measured on arm-reach: success
    0 % unclipped, 20 % with clip 5 and clean demos, 97 % with clip 5 and demos recorded with --noise 0.2)."""

    obs_norm_clip: float = _f(5.0, ge=0.0)


@dataclass(frozen=True, kw_only=True)
class BCConfig:
    """Behaviour cloning."""

    dataset: str = ""
    """The demonstration dataset (a LeRobot v3.0 folder; `robo-rl train --dataset PATH`)."""
    observation_key: str = "observation.policy"
    """Dataset feature fed to the policy; it must have the task's policy observation size."""
    action_key: str = "action"
    num_steps_per_env: int = _f(100, ge=1, le=100_000)
    """Gradient steps per iteration (the name the runner reads for every algorithm)."""
    batch_size: int = _f(512, ge=1, le=1_000_000)
    learning_rate: float = _f(1e-3, gt=0.0, le=1.0)
    weight_decay: float = _f(0.0, ge=0.0)
    loss: str = _f("mse", choices=("mse", "nll"))
    """`mse`: regress the mean; `nll`: Gaussian negative log-likelihood (also learns the std)."""


def load_demonstrations(cfg: BCConfig, spec: EnvSpec, horizon: int = 1) -> tuple[Tensor, Tensor]:
    """(obs (M, O), actions (M, A)) float32 of the dataset, checked against the env's sizes.

    With `horizon` H > 1 the actions are chunks (M, H * A): frame i's actions i .. i+H-1 of its episode, the
    episode's last action repeated past its end (see `chunk_indices`).
    """
    if not cfg.dataset:  # checked when training starts: a config without one still resolves (play, export)
        raise ConfigError("config error: algo.dataset is not set; pass --dataset PATH (a LeRobot v3.0 folder)")
    reader = DatasetReader(cfg.dataset)
    for key in (cfg.observation_key, cfg.action_key):
        if key not in reader.features:
            raise DatasetError(f"{cfg.dataset}: has no feature {key!r}; features: {', '.join(reader.features)}")
    frames = reader.frames([cfg.observation_key, cfg.action_key, "episode_index"])
    obs = torch.tensor(frames[cfg.observation_key], dtype=torch.float32).reshape(reader.num_frames, -1)
    actions = torch.tensor(frames[cfg.action_key], dtype=torch.float32).reshape(reader.num_frames, -1)
    if obs.shape[1] != spec.obs_dim or actions.shape[1] != spec.action_dim:
        raise DatasetError(f"{cfg.dataset}: {cfg.observation_key} has {obs.shape[1]} values and {cfg.action_key} "
                           f"{actions.shape[1]}; the task's policy takes {spec.obs_dim} and acts with "
                           f"{spec.action_dim}")
    if spec.action_clip is not None:
        actions = actions.clamp(-spec.action_clip, spec.action_clip)
    if horizon > 1:
        idx = torch.from_numpy(chunk_indices(np.asarray(frames["episode_index"]), horizon))  # (M, H)
        actions = actions[idx].reshape(reader.num_frames, -1)  # (M, H * A)
    return obs.to(spec.device), actions.to(spec.device)


def chunk_indices(episode_index: np.ndarray, horizon: int) -> np.ndarray:
    """Frame indices (M, H) of each frame's action chunk: i .. i+H-1, clamped to the last frame of i's episode.

    `episode_index` (M,) is the dataset's per-frame episode, frames of one episode contiguous.
    """
    m = episode_index.shape[0]
    idx = np.arange(m)[:, None] + np.arange(horizon)[None, :]  # (M, H)
    # the last frame of each frame's episode: where the episode index changes next, minus one
    change = np.flatnonzero(np.diff(episode_index)) + 1  # (E-1,) first frames of episodes 2..E
    ends = np.append(change, m) - 1  # (E,) last frame of each episode
    last = ends[np.searchsorted(ends, np.arange(m))]  # (M,)
    return np.minimum(idx, last[:, None])


class BC:
    """Gradient steps of behaviour cloning on in-memory demonstrations (see the module docstring)."""

    stat_names = ("bc_loss", "action_mse")
    """What `_loss` returns after the loss, averaged by `update`."""

    def __init__(self, cfg: BCConfig, policy: ActorCritic, obs: Tensor, actions: Tensor, generator: torch.Generator):
        self.cfg, self.policy, self.generator = cfg, policy, generator
        self.obs, self.actions = obs, actions  # (M, O), (M, A) or (M, H * A)
        self.optimizer = torch.optim.Adam(self._trained_parameters(), lr=cfg.learning_rate,
                                          weight_decay=cfg.weight_decay)
        if int(policy.obs_normalizer.count) == 0 and hasattr(policy.obs_normalizer, "update"):
            policy.obs_normalizer.update(obs)  # fitted once, to the whole dataset

    def _trained_parameters(self) -> list[torch.nn.Parameter]:
        return [p for n, p in self.policy.named_parameters() if not n.startswith("critic.")]

    def _loss(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, ...]:
        """(loss, action MSE) of a batch of raw observations and demonstrated actions."""
        mean = self.policy.act_inference(obs)
        err = (mean - actions).pow(2).mean()
        if self.cfg.loss == "nll":
            return -gaussian_log_prob(actions, mean, self.policy.action_log_std()).mean(), err
        return err, err

    def act(self, obs: Tensor, critic_obs: Tensor) -> Tensor:
        return self.policy.act_inference(obs)

    def update(self) -> dict[str, float]:
        """`num_steps_per_env` gradient steps on random batches; the means of `_loss`'s statistics."""
        cfg, m = self.cfg, self.obs.shape[0]
        total = torch.zeros(len(self.stat_names), device=self.obs.device)
        for _ in range(cfg.num_steps_per_env):
            idx = torch.randint(0, m, (min(cfg.batch_size, m),), generator=self.generator,
                                device=self.generator.device).to(self.obs.device)
            stats = self._loss(self.obs[idx], self.actions[idx])
            self.optimizer.zero_grad(set_to_none=True)
            stats[0].backward()
            distributed.all_reduce_gradients(self.policy.parameters())
            self.optimizer.step()
            total += torch.stack([x.detach() for x in stats])
        return dict(zip(self.stat_names, (total / cfg.num_steps_per_env).tolist(), strict=True))

    def inference_policy(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        return self.policy.inference_policy()

    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])


def build_policy(cfg: BCPolicyConfig, spec: EnvSpec) -> ActorCritic:
    return ActorCritic(spec.obs_dim, spec.critic_obs_dim, spec.action_dim, cfg).to(spec.device)


def build(cfg: BCConfig, policy: ActorCritic, spec: EnvSpec, generator: torch.Generator) -> BC:
    obs, actions = load_demonstrations(cfg, spec)
    return BC(cfg, policy, obs, actions, generator)


ENTRY = ALGORITHMS.register("bc", AlgorithmEntry(config_cls=BCConfig, policy_config_cls=BCPolicyConfig,
                                                  runner_cls=OfflineRunner, build_policy=build_policy, build=build))
"""The registry entry."""


# ---------------------------------------------------------------------------------------------- flow-bc
@dataclass(frozen=True, kw_only=True)
class FlowPolicyConfig:
    """A flow-matching policy over action chunks (robo_rl.learn.networks.flow), with ReinFlow's noise net and critic."""

    horizon: int = _f(1, ge=1, le=64)
    """Action chunk length H that the policy predicts (1: one action per inference)."""
    execute_steps: int = _f(1, ge=1, le=64)
    """E <= H: the first E actions of each chunk run open-loop, one per env step, before the policy is asked again
    (1: receding horizon, a new chunk every step). In training and evaluation (`robo_rl.adapters.chunked`) and on the
    robot (the contract's `action.chunk`)."""
    num_steps: int = _f(4, ge=1, le=128)
    """Denoising steps K of the deployed policy (Euler steps from x_0 = 0)."""
    initial_noise: str = _f("sample", choices=("sample", "zeros"))
    """x_0 of the deployed chain: `sample` draws N(0, I) (the exported graph takes it as input `noise`, the robot side
    draws it), `zeros` integrates from 0 (deterministic, but it can fall between a multimodal policy's modes)."""
    step_noise: bool = False
    """The deployed chain also adds ReinFlow's learned noise σ_φ(s, t_k) at every denoising step: the stochastic
    policy ReinFlow fine-tuned, not its noise-free chain (the `noise` input is then (K + 1) H A wide; needs
    `initial_noise: sample`). Meant for a fine-tuned policy: after flow-bc alone the noise net is untrained."""
    variant: str = _f("shortcut", choices=("shortcut", "rectified"))
    """`shortcut`: conditioned on the step size, so 1-4 steps stay accurate; `rectified`: plain rectified flow."""
    hidden_dims: tuple[int, ...] = _f((256, 256, 256))
    """The velocity network's MLP."""
    activation: str = _f("silu", choices=("elu", "relu", "tanh", "silu"))
    time_dim: int = _f(16, ge=2)
    """Size of each sinusoidal time (and step-size) embedding."""
    noise_hidden_dims: tuple[int, ...] = _f((128, 128))
    """ReinFlow's noise network σ_φ(obs, t_k)."""
    sigma_min: float = _f(0.05, gt=0.0)
    sigma_max: float = _f(0.12, gt=0.0)
    """Bounds of the noise std (ReinFlow's shortcut-model range); fine-tuning may lower the upper one."""
    critic_hidden_dims: tuple[int, ...] = _f((256, 256, 256))
    """V(s) of ReinFlow's PPO (unused by flow-bc)."""
    obs_normalization: bool = True
    obs_norm_eps: float = _f(1e-2, gt=0.0, le=1.0)
    obs_norm_clip: float = _f(5.0, ge=0.0)
    """Normalised observations are clipped to +-this (0: not clipped), as BCPolicyConfig's."""

    def validate(self) -> None:
        if self.step_noise and self.initial_noise != "sample":
            raise ConfigError("config error: policy.step_noise = true needs policy.initial_noise = sample (the chain "
                              "is stochastic from x_0 on)")
        check_chunk_and_noise(self)


@dataclass(frozen=True, kw_only=True)
class FlowBCConfig(BCConfig):
    """Flow-matching behaviour cloning (`--algo flow-bc`)."""

    learning_rate: float = _f(3e-4, gt=0.0, le=1.0)
    shortcut_fraction: float = _f(0.25, ge=0.0, lt=1.0)
    """Share of each batch trained on the shortcut model's self-consistency target (variant shortcut)."""


class FlowBC(BC):
    """Flow-matching gradient steps on in-memory demonstrations (chunks of `policy.horizon` actions)."""

    stat_names = ("flow_loss",)

    def _trained_parameters(self) -> list[torch.nn.Parameter]:
        return list(self.policy.velocity.parameters())  # the noise net and the critic are ReinFlow's

    def _loss(self, obs: Tensor, actions: Tensor) -> tuple[Tensor, ...]:
        return (self.policy.flow_matching_loss(self.policy.obs_normalizer(obs), actions, self.generator,
                                               shortcut_fraction=self.cfg.shortcut_fraction),)


def build_flow_policy(cfg: FlowPolicyConfig, spec: EnvSpec) -> FlowPolicy:
    return FlowPolicy(spec.obs_dim, spec.critic_obs_dim, spec.action_dim, cfg, spec.action_clip).to(spec.device)


def build_flow_bc(cfg: FlowBCConfig, policy: FlowPolicy, spec: EnvSpec, generator: torch.Generator) -> FlowBC:
    obs, actions = load_demonstrations(cfg, spec, horizon=policy.horizon)
    return FlowBC(cfg, policy, obs, actions, generator)


FLOW_ENTRY = ALGORITHMS.register("flow-bc", AlgorithmEntry(
    config_cls=FlowBCConfig, policy_config_cls=FlowPolicyConfig, runner_cls=OfflineRunner,
    build_policy=build_flow_policy, build=build_flow_bc))
"""The registry entry."""
