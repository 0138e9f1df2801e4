"""Behaviour cloning of a Gaussian MLP policy from a LeRobot v3.0 demonstration dataset (`--algo bc`).

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

import torch
from torch import Tensor

from robo_rl.algos.base import AlgorithmEntry, EnvSpec
from robo_rl.config import ConfigError, PolicyConfig, _f
from robo_rl.networks.actor_critic import ActorCritic, gaussian_log_prob


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


def load_demonstrations(cfg: BCConfig, spec: EnvSpec) -> tuple[Tensor, Tensor]:
    """(obs (M, O), actions (M, A)) float32 of the dataset, checked against the env's sizes."""
    from robo_rl.demos.dataset import DatasetError, DatasetReader

    if not cfg.dataset:  # checked when training starts: a config without one still resolves (play, export)
        raise ConfigError("config error: algo.dataset is not set; pass --dataset PATH (a LeRobot v3.0 folder)")
    reader = DatasetReader(cfg.dataset)
    for key in (cfg.observation_key, cfg.action_key):
        if key not in reader.features:
            raise DatasetError(f"{cfg.dataset}: has no feature {key!r}; features: {', '.join(reader.features)}")
    frames = reader.frames([cfg.observation_key, cfg.action_key])
    obs = torch.tensor(frames[cfg.observation_key], dtype=torch.float32).reshape(reader.num_frames, -1)
    actions = torch.tensor(frames[cfg.action_key], dtype=torch.float32).reshape(reader.num_frames, -1)
    if obs.shape[1] != spec.obs_dim or actions.shape[1] != spec.action_dim:
        raise DatasetError(f"{cfg.dataset}: {cfg.observation_key} has {obs.shape[1]} values and {cfg.action_key} "
                           f"{actions.shape[1]}; the task's policy takes {spec.obs_dim} and acts with "
                           f"{spec.action_dim}")
    if spec.action_clip is not None:
        actions = actions.clamp(-spec.action_clip, spec.action_clip)
    return obs.to(spec.device), actions.to(spec.device)


class BC:
    """Gradient steps of behaviour cloning on in-memory demonstrations (see the module docstring)."""

    def __init__(self, cfg: BCConfig, policy: ActorCritic, obs: Tensor, actions: Tensor, generator: torch.Generator):
        self.cfg, self.policy, self.generator = cfg, policy, generator
        self.obs, self.actions = obs, actions  # (M, O), (M, A)
        params = [p for n, p in policy.named_parameters() if not n.startswith("critic.")]
        self.optimizer = torch.optim.Adam(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        if int(policy.obs_normalizer.count) == 0 and hasattr(policy.obs_normalizer, "update"):
            policy.obs_normalizer.update(obs)  # fitted once, to the whole dataset

    def act(self, obs: Tensor, critic_obs: Tensor) -> Tensor:
        return self.policy.act_inference(obs)

    def update(self) -> dict[str, float]:
        """`num_steps_per_env` gradient steps on random batches; mean loss and action error."""
        cfg, m = self.cfg, self.obs.shape[0]
        total = torch.zeros(2, device=self.obs.device)
        for _ in range(cfg.num_steps_per_env):
            idx = torch.randint(0, m, (min(cfg.batch_size, m),), generator=self.generator,
                                device=self.generator.device).to(self.obs.device)
            mean = self.policy.act_inference(self.obs[idx])
            err = (mean - self.actions[idx]).pow(2).mean()
            if cfg.loss == "nll":
                loss = -gaussian_log_prob(self.actions[idx], mean, self.policy.action_log_std()).mean()
            else:
                loss = err
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total += torch.stack([loss.detach(), err.detach()])
        loss, mse = (total / cfg.num_steps_per_env).tolist()
        return {"bc_loss": loss, "action_mse": mse}

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


ENTRY = AlgorithmEntry(config_cls=BCConfig, policy_config_cls=BCPolicyConfig, off_policy=False,
                       build_policy=build_policy, build=build, offline=True)
"""The registry entry (robo_rl.algos.ALGORITHMS["bc"])."""
