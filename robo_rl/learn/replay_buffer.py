"""Off-policy storage: a per-world replay ring buffer with n-step returns, demonstrations, mixed batches.

The online buffer keeps one row per env step of all N worlds, (T, N, ...) preallocated on the
training device, so the n steps after a sampled transition of world i are rows t+1 .. t+n-1 of
column i. A window stops at the first episode end: a time-out (`truncated`) bootstraps from the
pre-reset observation (`info["final_obs"]`), a termination does not bootstrap at all. A window that
reaches the newest row stops there and bootstraps from that row's next observation (exact too).

Demonstrations are flat one-step transitions (M, ...) loaded from in-memory arrays or from a LeRobot v3.0
dataset recorded by `robo-rl record` (`dataset_transitions`); RLPD's symmetric sampling draws a fixed share
of every batch from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from robo_rl.demos.dataset_reader import DatasetReader

BATCH_KEYS = ("obs", "critic_obs", "actions", "returns", "discount", "next_obs", "next_critic_obs", "step_next_obs")
"""Keys of a sampled batch: observations (B, O) / (B, O_c), actions (B, A), n-step returns (B,), the
bootstrap discount (B,) (gamma^steps, 0 after a termination), the bootstrap observations, and the policy
observation right after the sampled step (B, O) (pre-reset; for smoothness terms)."""


def n_step_return(
    rewards: Tensor, terminated: Tensor, truncated: Tensor, valid: Tensor, gamma: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Discounted sums over windows of up to n steps that stop at the first episode end.

    Args:
        rewards: (B, n) rewards of the steps t .. t+n-1 of each sampled transition's world.
        terminated: (B, n) bool, the episode failed at that step (no bootstrap).
        truncated: (B, n) bool, the episode timed out at that step (bootstrap from its final observation).
        valid: (B, n) bool, the step exists (False past the newest stored step); step 0 is always valid.
        gamma: discount.

    Returns:
        returns (B,): sum_k gamma^k r_k over the window; discount (B,): gamma^len, or 0 when the
        window ends in a termination; last (B,) long: index of the window's last step, whose next
        observation is the bootstrap observation.
    """
    done = (terminated | truncated).to(torch.int32)
    ended_before = torch.cumsum(done, 1) - done  # (B, n) episode ends strictly before step k
    in_window = valid & (ended_before == 0)  # (B, n)
    last = in_window.sum(1) - 1  # (B,) windows are prefixes
    powers = gamma ** torch.arange(rewards.shape[1], dtype=rewards.dtype, device=rewards.device)  # (n,)
    returns = (rewards * powers * in_window).sum(1)  # (B,)
    ends_in_termination = terminated.gather(1, last[:, None]).squeeze(1)  # (B,)
    discount = torch.where(ends_in_termination, 0.0, gamma * powers[last])  # (B,)
    return returns, discount, last


def mixed_batch(online: dict[str, Tensor], demo: dict[str, Tensor]) -> dict[str, Tensor]:
    """Concatenate an online and a demonstration batch key by key (online rows first): (B_o + B_d, ...)."""
    return {k: torch.cat((online[k], demo[k])) for k in BATCH_KEYS}


def demo_share(batch_size: int, demo_ratio: float) -> int:
    """How many of `batch_size` samples come from demonstrations (RLPD's symmetric sampling: ratio 0.5)."""
    return int(round(batch_size * demo_ratio))


class ReplayBuffer:
    """Ring buffer of (T, N, ...) rows, one per env step of all N worlds, preallocated on `device`.

    Observations are stored raw (normalised when sampled, with the statistics of that moment), actions
    in the actor's units (-1, 1) (env actions divided by the action bound).
    `add_obs` writes the observation and action of the current row when the action is taken;
    `add_outcome` completes the row and advances it. The critic's observations are stored only
    when the critic sees a different group than the actor (`critic_obs_dim` not None).

    Args:
        rows: T, env steps kept per world (the capacity is T * N transitions).
        num_envs: N.
        obs_dim: O.
        action_dim: A.
        critic_obs_dim: O_c of a separate critic group, or None when the critic sees the policy group.
        device: training device.
    """

    def __init__(self, rows: int, num_envs: int, obs_dim: int, action_dim: int,
                 critic_obs_dim: int | None = None, device: torch.device | str = "cpu"):
        if rows < 1:
            raise ValueError(f"replay buffer rows = {rows}: must be >= 1")
        t, n = rows, num_envs
        self.rows, self.num_envs = rows, num_envs
        self.device = torch.device(device)
        z = {"device": self.device}
        self.data: dict[str, Tensor] = {
            "obs": torch.zeros(t, n, obs_dim, **z),
            "actions": torch.zeros(t, n, action_dim, **z),
            "rewards": torch.zeros(t, n, **z),
            "terminated": torch.zeros(t, n, dtype=torch.bool, **z),
            "truncated": torch.zeros(t, n, dtype=torch.bool, **z),
            "next_obs": torch.zeros(t, n, obs_dim, **z),
        }
        if critic_obs_dim is not None:
            self.data["critic_obs"] = torch.zeros(t, n, critic_obs_dim, **z)
            self.data["next_critic_obs"] = torch.zeros(t, n, critic_obs_dim, **z)
        self.ptr = 0  # row written next
        self.size = 0  # rows filled

    @property
    def num_transitions(self) -> int:
        return self.size * self.num_envs

    @property
    def asymmetric(self) -> bool:
        return "critic_obs" in self.data

    def add_obs(self, obs: Tensor, actions: Tensor, critic_obs: Tensor | None = None) -> None:
        """Write the observations (N, O) [(N, O_c)] and actions (N, A) of the current row."""
        d, p = self.data, self.ptr
        d["obs"][p] = obs
        d["actions"][p] = actions
        if self.asymmetric:
            d["critic_obs"][p] = critic_obs

    def add_outcome(self, rewards: Tensor, terminated: Tensor, truncated: Tensor, next_obs: Tensor,
                    next_critic_obs: Tensor | None = None) -> None:
        """Complete the current row with the step's outcome (N,) and pre-reset observations, then advance."""
        d, p = self.data, self.ptr
        d["rewards"][p] = rewards
        d["terminated"][p] = terminated
        d["truncated"][p] = truncated
        d["next_obs"][p] = next_obs
        if self.asymmetric:
            d["next_critic_obs"][p] = next_critic_obs
        self.ptr = (p + 1) % self.rows
        self.size = min(self.size + 1, self.rows)

    def add_steps(self, steps: Mapping[str, Tensor], episode_start: Tensor | None = None) -> None:
        """Write T whole rows at once (steps collected elsewhere, e.g. by an actor process): `obs` (T, N, O),
        `actions` (T, N, A), `rewards`, `terminated`, `truncated` (T, N), `next_obs` (T, N, O) (and the critic's
        groups for an asymmetric buffer); the ring wraps as it does row by row.

        `episode_start` (T, N): steps that begin an episode. An episode they follow that ended neither way (its actor
        held, or was restarted) is closed as a time-out, so n-step windows never run from one episode into the next.
        """
        steps = {k: v.to(self.device) for k, v in steps.items()}
        if episode_start is not None:
            start = episode_start.to(self.device, torch.bool)
            truncated = steps["truncated"].to(torch.bool).clone()
            truncated[:-1] |= start[1:] & ~steps["terminated"].to(torch.bool)[:-1]  # (T-1, N) left open in the batch
            steps["truncated"] = truncated
            if self.size and bool(start[0].any()):
                newest = (self.ptr - 1) % self.rows
                self.data["truncated"][newest] |= start[0] & ~self.data["terminated"][newest]
        t = steps["obs"].shape[0]
        if t > self.rows:  # only the newest `rows` survive a write longer than the ring
            steps = {k: v[-self.rows:] for k, v in steps.items()}
            self.ptr = (self.ptr + t - self.rows) % self.rows
            t = self.rows
        idx = (self.ptr + torch.arange(t, device=self.device)) % self.rows  # (T,) rows written, in order
        for key, buf in self.data.items():
            buf[idx] = steps[key].to(buf.dtype)
        self.ptr = (self.ptr + t) % self.rows
        self.size = min(self.size + t, self.rows)

    def sample(self, batch_size: int, n_step: int, gamma: float, generator: torch.Generator) -> dict[str, Tensor]:
        """`batch_size` transitions drawn uniformly, with n-step returns; see BATCH_KEYS for the layout."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        row = torch.randint(0, self.size, (batch_size,), generator=generator).to(self.device)  # (B,)
        env = torch.randint(0, self.num_envs, (batch_size,), generator=generator).to(self.device)  # (B,)
        newest = (self.ptr - 1) % self.rows
        ahead = (newest - row) % self.rows  # (B,) stored steps after the sampled one
        k = torch.arange(n_step, device=self.device)  # (n,)
        window = (row[:, None] + k) % self.rows * self.num_envs + env[:, None]  # (B, n) flat indices
        flat = {key: v.flatten(0, 1) for key, v in self.data.items()}  # (T * N, ...)
        returns, discount, last = n_step_return(
            flat["rewards"][window], flat["terminated"][window], flat["truncated"][window],
            k <= ahead[:, None], gamma,
        )
        first = window[:, 0]  # (B,)
        boot = window.gather(1, last[:, None]).squeeze(1)  # (B,) row holding the bootstrap observation
        obs = flat["obs"].index_select(0, first)
        next_obs = flat["next_obs"].index_select(0, boot)
        return {
            "obs": obs,
            "critic_obs": flat["critic_obs"].index_select(0, first) if self.asymmetric else obs,
            "actions": flat["actions"].index_select(0, first),
            "returns": returns,
            "discount": discount,
            "next_obs": next_obs,
            "next_critic_obs": flat["next_critic_obs"].index_select(0, boot) if self.asymmetric else next_obs,
            "step_next_obs": flat["next_obs"].index_select(0, first),
        }

    def nbytes(self) -> int:
        """Bytes of the filled rows (what `state_dict` holds)."""
        return sum(v[: self.size].nbytes for v in self.data.values())

    def state_dict(self) -> dict[str, Any]:
        """The filled rows (a copy) with the ring position, for an exact resume."""
        return {"ptr": self.ptr, "size": self.size, **{k: v[: self.size].clone() for k, v in self.data.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        size, ptr = int(state["size"]), int(state["ptr"])
        for key, buf in self.data.items():
            stored = state[key]
            if tuple(stored.shape[1:]) != tuple(buf.shape[1:]) or stored.shape[0] != size or size > self.rows:
                raise ValueError(f"replay buffer {key}: stored shape {tuple(stored.shape)} does not fit "
                                 f"{tuple(buf.shape)} with {size} rows")
            buf[:size] = stored.to(self.device)
        self.size, self.ptr = size, ptr % self.rows


DEMO_KEYS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
"""Arrays a demonstration set must provide (optionally also `critic_obs`, `next_critic_obs`)."""


class DemoBuffer:
    """Flat demonstration transitions (M, ...) on the training device, sampled as one-step targets.

    Actions are held in the actor's units (-1, 1), like the online buffer's.

    Build it with `load_demo_arrays`. A demonstration's time-out bootstraps like any other step;
    only `terminated` stops the bootstrap.
    """

    def __init__(self, data: dict[str, Tensor]):
        self.data = data
        self.size = data["obs"].shape[0]

    def extend(self, more: DemoBuffer) -> None:
        """Append `more`'s transitions (same arrays and widths): e.g. an operator's takeovers while learning."""
        if set(more.data) != set(self.data):
            raise ValueError(f"demonstrations to append carry {sorted(more.data)}, the buffer {sorted(self.data)}")
        self.data = {k: torch.cat([v, more.data[k]]) for k, v in self.data.items()}
        self.size = self.data["obs"].shape[0]

    def sample(self, batch_size: int, gamma: float, generator: torch.Generator) -> dict[str, Tensor]:
        """`batch_size` transitions drawn uniformly; the layout of `ReplayBuffer.sample` with n = 1."""
        d = self.data
        idx = torch.randint(0, self.size, (batch_size,), generator=generator).to(d["obs"].device)  # (B,)
        obs, next_obs = d["obs"][idx], d["next_obs"][idx]
        return {
            "obs": obs,
            "critic_obs": d["critic_obs"][idx] if "critic_obs" in d else obs,
            "actions": d["action"][idx],
            "returns": d["reward"][idx],
            "discount": torch.where(d["terminated"][idx], 0.0, gamma),
            "next_obs": next_obs,
            "next_critic_obs": d["next_critic_obs"][idx] if "next_critic_obs" in d else next_obs,
            "step_next_obs": next_obs,
        }


def load_demo_arrays(
    arrays: Mapping[str, Any], *, obs_dim: int, action_dim: int, action_bound: float,
    critic_obs_dim: int | None = None, device: torch.device | str = "cpu",
) -> DemoBuffer:
    """Check and load in-memory demonstration arrays (numpy or torch) into a DemoBuffer.

    Args:
        arrays: `obs` (M, O), `action` (M, A) in env units, `reward` (M,), `next_obs` (M, O),
            `terminated` (M,) bool, `truncated` (M,) bool; with an asymmetric critic also
            `critic_obs` and `next_critic_obs` (M, O_c).
        obs_dim, action_dim: O and A of the policy being trained.
        action_bound: actions must lie in [-bound, bound] (the actor's range); they are stored divided by it.
        critic_obs_dim: O_c of a separate critic group, or None.
        device: training device.

    Raises:
        ValueError: one line naming the array and what is wrong (missing, shape, non-finite, out of range).
    """
    keys = DEMO_KEYS + (("critic_obs", "next_critic_obs") if critic_obs_dim is not None else ())
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise ValueError(f"demonstrations lack {', '.join(missing)}; expected arrays {', '.join(keys)}")
    data = {k: torch.as_tensor(np.asarray(arrays[k])) for k in keys}
    m = data["obs"].shape[0] if data["obs"].ndim else 0
    if m == 0:
        raise ValueError("demonstrations: obs holds no transitions; expected shape (M, O) with M >= 1")
    widths = {"obs": obs_dim, "next_obs": obs_dim, "action": action_dim,
              "critic_obs": critic_obs_dim, "next_critic_obs": critic_obs_dim}
    for k, v in data.items():
        want = (m, widths[k]) if k in widths else (m,)
        if tuple(v.shape) != want:
            raise ValueError(f"demonstrations: {k} has shape {tuple(v.shape)}; expected {want}")
        if k in ("terminated", "truncated"):
            if v.dtype != torch.bool and not bool(((v == 0) | (v == 1)).all()):
                raise ValueError(f"demonstrations: {k} must hold booleans (0 or 1)")
            data[k] = v.to(torch.bool)
        else:
            data[k] = v.to(torch.float32)
            if not torch.isfinite(data[k]).all():
                raise ValueError(f"demonstrations: {k} holds non-finite values")
    peak = float(data["action"].abs().max())
    if peak > action_bound * (1 + 1e-6):
        raise ValueError(f"demonstrations: action reaches |a| = {peak:.4g}, outside the actor's bound "
                         f"+-{action_bound:g} (policy.action_bound)")
    data["action"] = (data["action"] / action_bound).clamp(-1.0, 1.0)  # the actor's units, as stored online
    return DemoBuffer({k: v.to(device) for k, v in data.items()})


DATASET_KEYS = {"obs": "observation.policy", "action": "action", "reward": "next.reward",
                "terminated": "next.terminated", "critic_obs": "observation.critic"}
"""Dataset features the transitions are made of (what `robo-rl record` writes; `observation.critic` only for a
task whose critic sees more than its policy)."""


def episode_transitions(frames: Mapping[str, np.ndarray], episode_index: np.ndarray) -> dict[str, np.ndarray]:
    """One-step transitions (the arrays of `load_demo_arrays`) of recorded frames, episodes contiguous.

    Frame t's next observation is frame t+1's of its episode. An episode's last frame is kept when it
    terminated (nothing is bootstrapped: its next observation is its own); after a time-out or a stopped
    recording there is no next observation to bootstrap from, so that frame is dropped.

    Args:
        frames: `obs` (M, O), `action` (M, A), `reward` (M,), `terminated` (M,) and optionally `critic_obs`
            (M, O_c), in recording order.
        episode_index: (M,) each frame's episode.
    """
    m = len(episode_index)
    last = np.append(episode_index[1:] != episode_index[:-1], True)  # (M,) an episode's last frame
    nxt = np.where(last, np.arange(m), np.arange(m) + 1)  # (M,) the frame holding the next observation
    terminated = np.asarray(frames["terminated"], dtype=bool).reshape(m)
    keep = ~last | terminated  # (M,)
    out = {"obs": frames["obs"][keep], "action": frames["action"][keep],
           "reward": np.asarray(frames["reward"]).reshape(m)[keep], "next_obs": frames["obs"][nxt][keep],
           "terminated": terminated[keep], "truncated": np.zeros(int(keep.sum()), dtype=bool)}
    if "critic_obs" in frames:
        out["critic_obs"] = frames["critic_obs"][keep]
        out["next_critic_obs"] = frames["critic_obs"][nxt][keep]
    return out


def dataset_transitions(path: str, *, critic: bool) -> dict[str, np.ndarray]:
    """`episode_transitions` of a LeRobot v3.0 dataset (`DATASET_KEYS`); `critic`: also the critic's observations.

    Raises:
        ValueError: the dataset is unreadable or lacks a feature (one line naming it).
    """
    reader = DatasetReader(path)
    wanted = {k: v for k, v in DATASET_KEYS.items() if critic or k != "critic_obs"}
    missing = [v for v in wanted.values() if v not in reader.features]
    if missing:
        why = (" (the task's critic sees more than its policy: record the dataset with `robo-rl record`, which "
               "writes it)") if "observation.critic" in missing else ""
        raise ValueError(f"{path}: has no feature {', '.join(missing)}{why}; features: {', '.join(reader.features)}")
    columns = reader.frames([*wanted.values(), "episode_index"])
    return episode_transitions({k: columns[v] for k, v in wanted.items()}, columns["episode_index"])
