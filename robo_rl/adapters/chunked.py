"""Open-loop action chunks: a VecEnv that runs E actions per step, one per policy step of the task.

A policy that executes action chunks (a flow policy with `execute_steps` E > 1) decides once every E env
steps. `ChunkedVecEnv` makes that one transition of the VecEnv contract: `step` takes (N, E, A), runs
the E actions in order and returns the observation after the chunk, the rewards summed over it, and
whether the episode ended inside it. A world whose episode ends inside a chunk stops there: its
reward and outcome are those up to that step and `info["final_obs"]` holds its observation then, so
time-out bootstrapping stays exact. Its remaining actions still run (the worlds step together), in
the fresh episode the env started; at the end of the chunk that world is reset once more
(`TaskEnv.reset_worlds`), so every episode starts from a reset state with a new chunk, as on a robot
that executes chunks. The extra steps are not counted anywhere (an episode shorter than E steps
right after such a reset is the one case whose end is logged, not returned).

Camera images are rendered only where a policy or a bootstrap reads them: after the chunk, and for the worlds whose
episode ends inside it (`TaskEnv.defer_images`); the images inside a chunk are never returned otherwise.

Everything else (obs_dims, action_dim, contract, state_dict, render, ...) is the wrapped env's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


class ChunkedVecEnv:
    """Runs (N, E, A) action chunks open-loop on a batched task env (see the module docstring).

    Args:
        env: a TaskEnv (it must offer `reset_worlds`).
        steps: E, actions per chunk (>= 2; a policy with E = 1 steps the env itself).

    Raises:
        ValueError: the env cannot reset single worlds.
    """

    def __init__(self, env: Any, steps: int):
        if not hasattr(env, "reset_worlds"):
            raise ValueError(f"executing action chunks needs an env that resets single worlds; {type(env).__name__} "
                             "cannot (set policy.execute_steps: 1)")
        self.env = env
        self.steps_per_action = steps
        """E: env steps per call of `step`."""
        self.on_substep: Callable[[Tensor], None] | None = None
        """Called after each of the E steps with `ended` (N,) bool, the worlds whose episode ended in this chunk
        before that step (videos render every step with it)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, seed: int | None = None, **kwargs: Any) -> dict[str, Tensor]:
        return self.env.reset(seed, **kwargs)

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """Run chunks (N, E, A); returns (obs, summed reward (N,), terminated (N,), truncated (N,), info)."""
        env, e = self.env, self.steps_per_action
        want = (env.num_envs, e, env.action_dim)
        if tuple(actions.shape) != want:
            raise ValueError(f"action chunks have shape {tuple(actions.shape)}; expected {want}")
        n, dev = env.num_envs, env.device
        reward = torch.zeros(n, device=dev)
        terminated = torch.zeros(n, dtype=torch.bool, device=dev)
        truncated = torch.zeros_like(terminated)
        ended = torch.zeros_like(terminated)  # (N,) the episode ended in this chunk
        early: list[tuple[Tensor, dict[str, Tensor]]] = []  # (ids, their final observations) before the last step
        episodes: list[dict[str, Tensor]] = []
        logs: dict[str, list[tuple[float, int]]] = {}  # key -> (mean, episodes it averages)
        for j in range(e):
            env.defer_images = j < e - 1  # no policy reads the images inside a chunk: render only the final ones
            try:
                obs, r, term, trunc, info = env.step(actions[:, j])
            finally:
                env.defer_images = False
            live = ~ended
            reward += r * live
            term, trunc = term & live, trunc & live
            terminated |= term
            truncated |= trunc
            now = term | trunc
            if info["episode"]:
                first = live[info["episode"]["ids"]]  # the worlds ending their chunk's episode, not a stale one
                episodes.append({k: v[first] for k, v in info["episode"].items()})
                count = int(first.sum())
                for key, value in info["log"].items():
                    logs.setdefault(key, []).append((float(value), max(count, 1)))
            if j < e - 1 and bool(now.any()):
                ids = now.nonzero().squeeze(-1)
                early.append((ids, {k: v[ids].clone() for k, v in info["final_obs"].items()}))
            if self.on_substep is not None:
                self.on_substep(ended)
            ended |= now
        final_obs = info["final_obs"]
        if early:
            final_obs = {k: v.clone() for k, v in final_obs.items()}
            restart = torch.cat([ids for ids, _ in early])
            for ids, rows in early:
                for k, v in rows.items():
                    final_obs[k][ids] = v
            obs = env.reset_worlds(restart, obs)
        out: dict[str, Any] = {"final_obs": final_obs, "log": _weighted_means(logs), "episode": {}}
        episodes = [ep for ep in episodes if ep["ids"].numel()]
        if episodes:
            out["episode"] = {k: torch.cat([ep[k] for ep in episodes]) for k in episodes[0]}
        return obs, reward, terminated, truncated, out


def _weighted_means(logs: dict[str, list[tuple[float, int]]]) -> dict[str, float]:
    """Per key, the mean of per-step means weighted by the episodes behind each."""
    return {k: sum(v * c for v, c in pairs) / sum(c for _, c in pairs) for k, pairs in logs.items()}


def chunked(env: Any, steps: int) -> Any:
    """`env` itself for steps == 1, else a ChunkedVecEnv running `steps` actions per step."""
    return env if steps <= 1 else ChunkedVecEnv(env, steps)
