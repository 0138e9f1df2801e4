"""The torch Dataset with observation and action horizons over a recorded dataset."""

from __future__ import annotations

import numpy as np
import torch

from robo_rl.demos.torch_dataset import FrameDataset
from tests.demos.test_demos_dataset import synthetic_frame, write_episodes


def test_horizons_stack_frames_and_pad_at_episode_edges(tmp_path):
    write_episodes(tmp_path / "ds", [6, 4])
    ds = FrameDataset(tmp_path / "ds", observation_keys=("observation.state", "observation.images.front"),
                      obs_horizon=2, action_horizon=3)
    assert len(ds) == 10
    state = lambda e, i: torch.as_tensor(synthetic_frame(e, i, [6, 4][e])["observation.state"])  # noqa: E731
    action = lambda e, i: torch.as_tensor(synthetic_frame(e, i, [6, 4][e])["action"])  # noqa: E731
    first = ds[0]  # episode 0, frame 0: the observation before it repeats frame 0
    assert torch.equal(first["observation.state"], torch.stack([state(0, 0), state(0, 0)]))
    assert first["observation.state_is_pad"].tolist() == [True, False]
    assert torch.equal(first["action"], torch.stack([action(0, 0), action(0, 1), action(0, 2)]))
    last = ds[5]  # episode 0's last frame: the actions after it repeat it, never episode 1's
    assert torch.equal(last["action"], torch.stack([action(0, 5)] * 3))
    assert last["action_is_pad"].tolist() == [False, True, True]
    second = ds[7]  # episode 1, frame 1
    assert torch.equal(second["observation.state"], torch.stack([state(1, 0), state(1, 1)]))
    images = second["observation.images.front"]
    assert images.shape == (2, 3, 32, 48) and images.dtype == torch.uint8
    want = np.stack([synthetic_frame(1, i, 4)["observation.images.front"] for i in (0, 1)]).transpose(0, 3, 1, 2)
    assert np.abs(images.numpy().astype(int) - want.astype(int)).mean() < 5.0
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert batch["action"].shape == (4, 3, 2) and batch["observation.state"].shape == (4, 2, 3)
