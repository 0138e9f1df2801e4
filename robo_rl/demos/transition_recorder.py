"""The actor's own record of its transitions (learning on a robot): a LeRobot v3.0 dataset, one frame per step.

Per frame: `observation.policy` (the contract's observation the action was chosen from), `action` (as executed, in
the policy's action units), `next.reward`, `next.done` (the episode ended) and `next.terminated` (it ended on a
success or failure, not a time limit): the features `robo-rl record` writes, so the recording trains BC and RLPD
(`--dataset`) as it is. An episode interrupted because the learner was lost ends as a time-out (done, not
terminated). Frames go through `DatasetWriter(block=False)`: a full queue drops the frame and counts it, never
waits, and a kill loses at most the last second (`robo_rl.demos.dataset_recovery`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.demos.dataset_metadata import scalar, vector
from robo_rl.demos.dataset_writer import DatasetWriter


def transition_features(obs_names: Sequence[str], action_dim: int) -> dict[str, Any]:
    """The dataset features of an actor's transitions."""
    return {"observation.policy": vector(obs_names), "action": vector([f"action_{i}" for i in range(action_dim)]),
            "next.reward": scalar(), "next.done": scalar("bool"), "next.terminated": scalar("bool"),
            "intervention": scalar("bool")}


class TransitionRecorder:
    """Records an actor's transitions into the dataset at `root` (created, or appended to after a repair).

    Args:
        root: dataset folder.
        obs_names: one name per observation component (O,).
        action_dim: A.
        fps: the control rate.
        task: the task string of every episode.
        extra_info: more info.json keys (the template, the robot, the learner).
    """

    def __init__(self, root: str | Path, *, obs_names: Sequence[str], action_dim: int, fps: float, task: str,
                 extra_info: Mapping[str, Any] | None = None):
        self.writer = DatasetWriter(root, fps=fps, features=transition_features(obs_names, action_dim),
                                    extra_info=extra_info, queue_frames=1024)
        self.task = task
        self.frames = 0
        self.dropped = 0
        self._open = False

    def add(self, obs: np.ndarray, action: np.ndarray, reward: float, terminated: bool, truncated: bool, *,
            intervention: bool = False) -> None:
        """One step (never blocks: a full queue drops it and counts it); `intervention`: an operator's takeover
        executed `action` instead of the policy."""
        frame = {"observation.policy": obs, "action": action, "next.reward": np.float32(reward),
                 "next.done": bool(terminated or truncated), "next.terminated": bool(terminated),
                 "intervention": bool(intervention)}
        if self.writer.add_frame(frame, self.task, block=False):
            self.frames += 1
            self._open = True
        else:
            self.dropped += 1

    def end_episode(self) -> None:
        """Commit the episode recorded so far (nothing when no frame was recorded since the last one)."""
        if self._open:
            self.writer.end_episode()
            self._open = False

    def close(self) -> None:
        """Commit the open episode and finish writing."""
        self.writer.close()
