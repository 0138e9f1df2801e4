"""The logic of the ROS 2 `demo_recorder_node`, without ROS: sample the newest topics at a fixed rate into a dataset.

Messages arrive whenever their publishers send them (callbacks call `on_joint_state`, `on_command`,
`on_image`, `on_event`); `tick()`, called at `rate_hz` by the node's timer, turns the newest value of
each stream into one frame (the resampling a bag import does: hold the last value) and hands it to a
`DatasetWriter` without waiting (a full queue drops the frame and counts it). Joints are matched by
name. Episodes follow the policy node's `~/episode_events` (JSON with "kind": start, then success,
failure or reset end it); with `use_events=False` one episode runs from the first complete frame to
`close()`. Frames start once every stream (joint state, command, each camera) has a first message.

Given the deployed policy's sizes (`policy`), the policy node's `~/policy_step` (its observation and raw actions of
the same tick, one message) is a stream too: frames then carry `observation.policy`, `action` (raw) and the command's
targets as `command.joint_position` — the features `deploy --record` and `robo-rl record` write, so BC trains on a
ROS recording without conversion.

`scored` (the policy node runs reward modules, parameter `rewards`): every ~/policy_step also carries the outcome its
tick scored, which is the outcome of the command sent one tick earlier. Frames are then made per policy step, not by
the timer: each waits for the next step's outcome (`next.reward`, `next.done`, `next.terminated`, `next.success`, as
`deploy --record --reward` writes them), so the last command of an episode, never scored, is not written. One
topic carries both, so nothing depends on the order in which two topics arrive: a done outcome ends the episode; an
end event that arrives before the step carrying the last outcome leaves the episode open for that step (until the
next start or `close`).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.demos.recorder import outcome_columns
from robo_rl.deploy import ros_commands as rc
from robo_rl.deploy import ros_messages as rm

END_KINDS = ("success", "failure", "reset")
IMAGE_TOPIC_SUFFIXES = ("compressed", "image_raw", "image_rect_raw", "image_rect", "image_color", "image_rect_color",
                        "image_mono", "image")
"""Trailing topic segments that name the image stream, not the camera (image_transport's and camera drivers')."""


def split_topics(text: str) -> list[str]:
    """The `camera_topics` parameter ("topic,topic", spaces allowed) as a list of topics."""
    return [t.strip() for t in text.split(",") if t.strip()]


def camera_name(topic: str) -> str:
    """Dataset camera name of an image topic: the topic path without its image-stream suffixes, "_"-joined.

    "/camera/color/image_raw/compressed" -> "camera_color", "/wrist_cam/image_raw" -> "wrist_cam".
    """
    parts = [p for p in topic.strip("/").split("/") if p]
    while len(parts) > 1 and parts[-1] in IMAGE_TOPIC_SUFFIXES:
        parts.pop()
    return re.sub(r"[^A-Za-z0-9_]", "_", "_".join(parts))


def camera_names(topics: Sequence[str]) -> dict[str, str]:
    """{topic: camera name} of image topics; ValueError (one line) when a name is empty or two topics share one."""
    out: dict[str, str] = {}
    for topic in topics:
        name = camera_name(topic)
        if not name:
            raise ValueError(f"camera_topics: {topic!r} names no camera")
        clash = next((other for other, n in out.items() if n == name), None)
        if clash is not None:
            raise ValueError(f"camera_topics: {clash!r} and {topic!r} both make the camera name {name!r}; "
                             "record one stream per camera")
        out[topic] = name
    return out


class TopicRecorder:
    """See the module docstring.

    Args:
        writer: the dataset (features from `robo_rl.demos.recorder.robot_features`).
        hw: the robot's HardwareSpec (joint order of the dataset, command decoding).
        command_interface: how commands are sent (`robo_rl.deploy.ros_interface.COMMAND_INTERFACES`).
        cameras: camera names, as in the features (`observation.images.<name>`).
        task: the task string of every episode.
        use_events: follow episode events (else one episode from the first frame).
        policy: (observation size O, action size A) of the policy whose `~/policy_step` is recorded, or None.
        scored: frames carry the policy steps' outcomes (needs `policy`; the writer's features from
            `robot_features(..., scored=True)`).
    """

    def __init__(self, writer: DatasetWriter, hw: Any, command_interface: str, cameras: Sequence[str] = (), *,
                 task: str = "demonstration", use_events: bool = True, policy: tuple[int, int] | None = None,
                 scored: bool = False):
        if scored and policy is None:
            raise ValueError("scored recording needs the policy's sizes (policy_path): outcomes come on its "
                             "~/policy_step")
        self.writer, self.hw, self.interface, self.task = writer, hw, command_interface, task
        self.policy, self.scored = policy, scored
        self._step: tuple[np.ndarray, np.ndarray] | None = None  # (O,), (A,) of the newest policy step
        self._pending: dict | None = None  # scored: the frame of the last policy step, waiting for its outcome
        self._closing = False  # scored: an end event came; the episode stays open for its last outcome
        self.cameras = list(cameras)
        self.use_events = use_events
        self.recording = not use_events
        self._lock = threading.Lock()
        self._q: np.ndarray | None = None
        self._dq: np.ndarray | None = None
        self._target: np.ndarray | None = None
        self._images: dict[str, np.ndarray] = {}
        self.frames = self.dropped = self.episodes = self.rejected = 0
        self.last_error = ""
        self._open = False  # frames added since the last end_episode

    # ------------------------------------------------------------------ callbacks (any thread)
    def on_joint_state(self, msg: Any) -> None:
        """A JointState in any joint order; joints the robot does not have (a hand's, say) are ignored."""
        names, q, dq, _tau, _stamp = rm.read_joint_state(msg)
        mine = [i for i, n in enumerate(names) if n in self.hw.joint_names]
        if not mine:
            raise ValueError(f"joint_states: none of {self.hw.robot}'s joints (got {', '.join(names)})")
        index = self.hw.index_of([names[i] for i in mine])
        with self._lock:
            if self._q is None:
                self._q, self._dq = np.zeros(len(self.hw.joint_names)), np.zeros(len(self.hw.joint_names))
            self._q[index] = np.asarray(q)[mine]
            self._dq[index] = np.asarray(dq)[mine] if dq is not None and len(dq) else 0.0

    def on_command(self, msg: Any) -> None:
        command = rc.decode_command(msg, self.interface, self.hw)  # robot joint order
        with self._lock:
            self._target = np.asarray(command.q, dtype=np.float64).copy()

    def on_policy_step(self, msg: Any) -> bool:
        """The policy node's ~/policy_step; False for one of other sizes than `policy`'s (another policy's): counted
        in `rejected`, its reason kept in `last_error`, never raised into the executor."""
        if self.policy is None:
            return False
        try:
            obs, action, outcome = rm.read_policy_step(msg, *self.policy)
        except ValueError as exc:
            self.rejected += 1
            self.last_error = str(exc)
            return False
        with self._lock:
            self._step = (obs, action)
            if not self.scored:
                return True
            done = self._complete(outcome)
            self._pending = self._frame() if self.recording and not done else None
        return True

    def _complete(self, outcome: rm.StepOutcome | None) -> bool:
        """Scored (lock held): write the pending frame with `outcome` (the next step's); True when that ended the
        episode. A step without an outcome leaves the pending frame unscored: it is dropped, never guessed."""
        frame, self._pending = self._pending, None
        if frame is None or outcome is None:
            return False
        frame.update(outcome_columns(outcome.reward, outcome.done, outcome.terminated, outcome.success))
        self._write(frame)
        if outcome.done or self._closing:
            self._closing = False
            self._end()
            return True
        return False

    def on_image(self, camera: str, rgb: np.ndarray) -> None:
        with self._lock:
            self._images[camera] = rgb

    def on_event(self, text: str) -> None:
        try:
            kind = json.loads(text).get("kind")
        except (ValueError, AttributeError):
            return
        if not self.use_events:
            return
        with self._lock:
            if kind == "start":
                self._pending, self._closing = None, False
                self._end()
                self.recording = True
            elif kind in END_KINDS:
                self.recording = False
                if self.scored and self._pending is not None:
                    self._closing = True  # the step with the last outcome may still be on its way
                else:
                    self._end()

    # ------------------------------------------------------------------ timer
    def tick(self) -> bool:
        """Record one frame of the newest values; False when not recording, incomplete, or dropped."""
        if not self.recording or self.scored:  # scored: frames come with the policy steps
            return False
        with self._lock:
            frame = self._frame()
        return frame is not None and self._write(frame)

    def _frame(self) -> dict | None:
        """A frame of the newest values (lock held); None until every stream has sent one."""
        if self._q is None or self._target is None or any(c not in self._images for c in self.cameras) or (
                self.policy is not None and self._step is None):
            return None
        frame = {"observation.state": self._q.copy(), "observation.velocity": self._dq.copy(),
                 **{f"observation.images.{c}": self._images[c] for c in self.cameras}}
        if self.policy is None:
            frame["action"] = self._target.copy()
        else:
            frame.update({"observation.policy": self._step[0], "action": self._step[1],
                          "command.joint_position": self._target.copy()})
        return frame

    def _write(self, frame: dict) -> bool:
        if self.writer.add_frame(frame, task=self.task, block=False):
            self.frames += 1
            self._open = True
            return True
        self.dropped += 1
        return False

    def _end(self) -> None:
        if self._open:
            self.writer.end_episode()
            self.episodes += 1
            self._open = False

    def close(self) -> None:
        with self._lock:
            self._pending = None  # never scored
            self._end()
        self.writer.close()

    def report(self) -> dict[str, int]:
        out = {"frames": self.frames, "dropped": self.dropped, "episodes": self.episodes}
        return {**out, "rejected": self.rejected} if self.rejected else out
