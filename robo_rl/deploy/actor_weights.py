"""The SAC actor as numpy arrays: what the learner sends the actor process, and its forward pass in numpy.

The actor process runs the policy on the CPU without torch: the observation normaliser, the MLP trunk (linear,
optional LayerNorm, activation), the mean and bounded log-std heads of the tanh-squashed Gaussian
(`robo_rl.learn.networks.squashed_gaussian`), so exploring actions are bound * tanh(mean + std * noise) and the
deterministic ones bound * tanh(mean). A parity test holds it to the torch module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from robo_rl.deploy.learner_wire import WireError

ACTIVATIONS = {
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}
LAYER_KINDS = ("linear", "layer_norm", *ACTIVATIONS)


@dataclass(frozen=True)
class ActorWeights:
    """One version of the actor's weights (float32 arrays), with the learner that made it.

    `layers` is the trunk in order: ("linear", W (out, in), b (out,)), ("layer_norm", gain, bias, eps) or
    (activation name,). The heads map the trunk's output to the pre-tanh mean (A,) and the raw log std (A,).
    """

    layers: tuple[tuple[Any, ...], ...]
    mean_head: tuple[np.ndarray, np.ndarray]
    """(W (A, H), b (A,))."""
    log_std_head: tuple[np.ndarray, np.ndarray]
    """(W (A, H), b (A,))."""
    log_std_bounds: tuple[float, float]
    obs_mean: np.ndarray | None
    """(O,) running mean of the observation normaliser; None: the actor sees raw observations."""
    obs_var: np.ndarray | None
    obs_eps: float
    obs_clip: float
    bound: float
    """Actions are bound * tanh(.)."""
    learner_id: str
    """The learner process that made them (a restarted learner has another)."""
    version: int
    """Increases with every publication of one learner."""
    random_actions: bool
    """The learner wants uniformly random actions in [-bound, bound] (before `learning_starts`)."""

    @property
    def obs_dim(self) -> int:
        first = next((layer[1] for layer in self.layers if layer[0] == "linear"), self.mean_head[0])
        return int(first.shape[1])

    @property
    def action_dim(self) -> int:
        return int(self.mean_head[0].shape[0])

    # -------------------------------------------------------------------------------------- forward pass
    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        if self.obs_mean is None:
            return obs
        y = (obs - self.obs_mean) / (np.sqrt(self.obs_var) + self.obs_eps)  # (B, O)
        return np.clip(y, -self.obs_clip, self.obs_clip) if self.obs_clip > 0 else y

    def distribution(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pre-tanh mean (B, A) and bounded log std (B, A) for raw observations (B, O)."""
        h = self._normalize(np.asarray(obs, dtype=np.float32))
        for layer in self.layers:
            kind = layer[0]
            if kind == "linear":
                h = h @ layer[1].T + layer[2]
            elif kind == "layer_norm":
                mu = h.mean(-1, keepdims=True)
                var = h.var(-1, keepdims=True)
                h = (h - mu) / np.sqrt(var + layer[3]) * layer[1] + layer[2]
            else:
                h = ACTIVATIONS[kind](h)
        mean = h @ self.mean_head[0].T + self.mean_head[1]
        low, high = self.log_std_bounds
        log_std = low + 0.5 * (high - low) * (np.tanh(h @ self.log_std_head[0].T + self.log_std_head[1]) + 1.0)
        return mean.astype(np.float32), log_std.astype(np.float32)

    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        """bound * tanh(mean) (B, A): what the exported policy would do."""
        mean, _ = self.distribution(obs)
        return (self.bound * np.tanh(mean)).astype(np.float32)

    def sample(self, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Exploring actions (B, A): bound * tanh(mean + std * noise), or uniform in [-bound, bound] while the
        learner asks for random actions."""
        obs = np.asarray(obs, dtype=np.float32)
        if self.random_actions:
            return rng.uniform(-self.bound, self.bound, (obs.shape[0], self.action_dim)).astype(np.float32)
        mean, log_std = self.distribution(obs)
        u = mean + np.exp(log_std) * rng.standard_normal(mean.shape, dtype=np.float32)
        return (self.bound * np.tanh(u)).astype(np.float32)

    # -------------------------------------------------------------------------------------- message form
    def to_message(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, header) for `learner_wire.encode`."""
        arrays: dict[str, np.ndarray] = {}
        kinds: list[dict[str, Any]] = []
        for i, layer in enumerate(self.layers):
            kinds.append({"kind": layer[0], **({"eps": float(layer[3])} if layer[0] == "layer_norm" else {})})
            for j, array in enumerate(layer[1:3] if layer[0] in ("linear", "layer_norm") else ()):
                arrays[f"layer{i}_{j}"] = np.asarray(array, dtype=np.float32)
        arrays["mean_w"], arrays["mean_b"] = self.mean_head
        arrays["log_std_w"], arrays["log_std_b"] = self.log_std_head
        if self.obs_mean is not None:
            arrays["obs_mean"], arrays["obs_var"] = self.obs_mean, self.obs_var
        meta = {"kind": "actor_weights", "layers": kinds, "log_std_bounds": list(self.log_std_bounds),
                "obs_eps": self.obs_eps, "obs_clip": self.obs_clip, "bound": self.bound,
                "learner_id": self.learner_id, "version": self.version, "random_actions": self.random_actions}
        return {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}, meta

    @staticmethod
    def from_message(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> ActorWeights:
        """Rebuild from `learner_wire.decode`'s output; WireError (one line) for anything malformed."""
        try:
            if meta.get("kind") != "actor_weights":
                raise WireError(f"expected actor weights, got a message of kind {meta.get('kind')!r}")
            layers: list[tuple[Any, ...]] = []
            width = None
            for i, spec in enumerate(meta["layers"]):
                kind = spec["kind"]
                if kind not in LAYER_KINDS:
                    raise WireError(f"actor weights: layer {i} of unknown kind {kind!r}; known: {LAYER_KINDS}")
                if kind == "linear":
                    w, b = arrays[f"layer{i}_0"], arrays[f"layer{i}_1"]
                    if w.ndim != 2 or b.shape != (w.shape[0],) or (width is not None and w.shape[1] != width):
                        raise WireError(f"actor weights: linear layer {i} has shapes {w.shape}, {b.shape}")
                    width = w.shape[0]
                    layers.append((kind, w, b))
                elif kind == "layer_norm":
                    g, b = arrays[f"layer{i}_0"], arrays[f"layer{i}_1"]
                    if g.shape != (width,) or b.shape != (width,):
                        raise WireError(f"actor weights: layer norm {i} has shapes {g.shape}, {b.shape}")
                    layers.append((kind, g, b, float(spec["eps"])))
                else:
                    layers.append((kind,))
            heads = tuple((arrays[f"{h}_w"], arrays[f"{h}_b"]) for h in ("mean", "log_std"))
            for w, b in heads:
                if w.ndim != 2 or b.shape != (w.shape[0],) or (width is not None and w.shape[1] != width):
                    raise WireError(f"actor weights: a head has shapes {w.shape}, {b.shape} after width {width}")
            obs_mean, obs_var = arrays.get("obs_mean"), arrays.get("obs_var")
            weights = ActorWeights(
                layers=tuple(layers), mean_head=heads[0], log_std_head=heads[1],
                log_std_bounds=(float(meta["log_std_bounds"][0]), float(meta["log_std_bounds"][1])),
                obs_mean=obs_mean, obs_var=obs_var, obs_eps=float(meta["obs_eps"]), obs_clip=float(meta["obs_clip"]),
                bound=float(meta["bound"]), learner_id=str(meta["learner_id"]), version=int(meta["version"]),
                random_actions=bool(meta["random_actions"]))
        except KeyError as exc:
            raise WireError(f"actor weights lack {exc.args[0]!r}") from None
        except (TypeError, ValueError, IndexError) as exc:
            if isinstance(exc, WireError):
                raise
            raise WireError(f"actor weights are malformed: {exc}") from None
        if obs_mean is not None and (obs_var is None or obs_mean.shape != obs_var.shape or obs_mean.ndim != 1):
            raise WireError("actor weights: obs_mean and obs_var must both be (O,)")
        if not all(np.isfinite(a).all() for a in arrays.values()) or not weights.bound > 0:
            raise WireError("actor weights hold non-finite values or a bound <= 0")
        return weights
