"""A torch `Dataset` over a LeRobot v3.0 dataset, with observation and action horizons (action chunks).

Item i (a frame of some episode) holds, for each observation key, the frames i-h+1 .. i (h =
`obs_horizon`; before the episode's first frame the first one repeats) and for each action key the
frames i .. i+H-1 (H = `action_horizon`; past the episode's last frame the last one repeats), with
`<key>_is_pad` (h,) / (H,) bool masks marking the repeats, as LeRobot's `delta_timestamps` padding
does. Numeric columns are loaded once into memory; camera keys decode each episode's video once,
on first use, and keep it (fine for demonstration-sized datasets).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.errors import DatasetError


class FrameDataset(torch.utils.data.Dataset):
    """See the module docstring. Images come as (h, 3, H, W) uint8."""

    def __init__(self, root: str | Path, *, observation_keys: Sequence[str] = ("observation.state",),
                 action_keys: Sequence[str] = ("action",), obs_horizon: int = 1, action_horizon: int = 1):
        if obs_horizon < 1 or action_horizon < 1:
            raise ValueError(f"horizons must be >= 1 (obs_horizon={obs_horizon}, action_horizon={action_horizon})")
        self.reader = DatasetReader(root)
        for key in (*observation_keys, *action_keys):
            if key not in self.reader.features:
                raise DatasetError(f"{root}: has no feature {key!r}; features: {', '.join(self.reader.features)}")
        self.obs_keys, self.action_keys = list(observation_keys), list(action_keys)
        self.obs_horizon, self.action_horizon = obs_horizon, action_horizon
        videos = set(self.reader.video_keys)
        numeric = [k for k in (*self.obs_keys, *self.action_keys) if k not in videos]
        frames = self.reader.frames([*numeric, "episode_index"])
        self._numeric = {k: torch.as_tensor(frames[k]) for k in numeric}
        self._episode = np.asarray(frames["episode_index"])  # (M,)
        eps = self.reader.meta.episodes
        self._start = np.array([e["dataset_from_index"] for e in eps])[self._episode]  # (M,) first frame
        self._end = np.array([e["dataset_to_index"] for e in eps])[self._episode] - 1  # (M,) last frame
        self._images: dict[tuple[str, int], torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._episode)

    def _rows(self, key: str, idx: np.ndarray) -> torch.Tensor:
        if key in self._numeric:
            return self._numeric[key][idx]
        episode = int(self._episode[idx[0]])
        if (key, episode) not in self._images:
            frames = self.reader.episode(episode)[key]  # (T, H, W, 3)
            self._images[(key, episode)] = torch.as_tensor(frames).permute(0, 3, 1, 2).contiguous()
        return self._images[(key, episode)][idx - int(self._start[idx[0]])]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        start, end = int(self._start[i]), int(self._end[i])
        past = np.arange(i - self.obs_horizon + 1, i + 1)  # (h,)
        future = np.arange(i, i + self.action_horizon)  # (H,)
        out: dict[str, torch.Tensor] = {}
        for key in self.obs_keys:
            out[key] = self._rows(key, np.clip(past, start, end))
            out[f"{key}_is_pad"] = torch.as_tensor(past < start)
        for key in self.action_keys:
            out[key] = self._rows(key, np.clip(future, start, end))
            out[f"{key}_is_pad"] = torch.as_tensor(future > end)
        return out
