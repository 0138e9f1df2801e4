"""Record a robot (twin, DDS, ROS 2) at its control rate into a dataset, never blocking the control loop.

`RecordingRobot` wraps any `RobotInterface` (`open_session(..., wrap_robot=...)`): each command sent
is one frame: the state read just before it (`observation.state` joint positions,
`observation.velocity`), the command (`action`, the joint position targets in the robot's joint
order), and the newest image of each camera. `scored`: each frame also carries the outcome the robot-side reward
modules gave it (`next.reward`, `next.done`, `next.terminated`, `next.success`, as `robo-rl record` writes them):
a frame waits for the next tick's scored step (`outcome`), so the last command of an episode, never scored, is not
written, and neither are the frames of an episode that an operator or a fault ends before their outcome.
Frames go to a `DatasetWriter` with `block=False`: when the writer's queue is full the frame is dropped and
counted, never waited for. `report()` gives frames, drops and the achieved rate; the caller shows it. Cameras are
callables returning the newest (H, W, 3) uint8 RGB frame at once; both kinds capture on their own thread, so a slow
camera never stalls the loop: `SimCameras` renders the twin's MuJoCo cameras, `LatestFrameCamera` reads an OpenCV
`VideoCapture`; `state_camera` takes the frame a transport brought with the tick's state (the robot's camera
topics over DDS).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.demos.dataset_metadata import camera, scalar, vector
from robo_rl.demos.dataset_writer import DatasetWriter

Camera = Callable[[], np.ndarray]


def robot_features(joint_names: tuple[str, ...], cameras: Mapping[str, tuple[int, int]], fps: float,
                   policy: tuple[Sequence[str], int] | None = None, scored: bool = False) -> dict:
    """Dataset features of a recorded robot: joint positions and velocities, joint targets, camera images.

    `policy` (observation names, action size) of the policy driving the robot: its observation
    (`observation.policy`) and raw actions (`action`) are recorded too, the joint targets then as
    `command.joint_position` — the features `robo-rl record` writes in simulation, so BC trains on either.
    Without one, `action` holds the joint targets. `scored`: the reward modules' outcome of each frame too.
    """
    features = {"observation.state": vector(joint_names), "observation.velocity": vector(joint_names)}
    if policy is None:
        features["action"] = vector(joint_names)
    else:
        obs_names, action_dim = policy
        features.update({"observation.policy": vector(list(obs_names)),
                         "action": vector([f"action_{i}" for i in range(action_dim)]),
                         "command.joint_position": vector(joint_names)})
    for name, (height, width) in cameras.items():
        features[f"observation.images.{name}"] = camera(height, width, fps)
    if scored:
        features.update({"next.reward": scalar(), "next.done": scalar("bool"), "next.terminated": scalar("bool"),
                         "next.success": scalar("bool")})
    return features


def outcome_columns(reward: float, done: bool, terminated: bool, success: bool) -> dict:
    """A frame's outcome features (`robot_features(scored=True)`, `robo-rl record`'s next.* names)."""
    return {"next.reward": np.float32(reward), "next.done": bool(done), "next.terminated": bool(terminated),
            "next.success": bool(success)}


class RecordingRobot:
    """A RobotInterface that also records every control tick; see the module docstring.

    Args:
        robot: the robot to drive.
        writer: where frames go (its features from `robot_features`).
        task: the task string of the episodes.
        cameras: name -> callable giving the newest (H, W, 3) uint8 image.
        recording: record from the start (else call `start()`).
        scored: frames wait for their outcome (`outcome`, the writer's features from `robot_features(scored=True)`).
    """

    def __init__(self, robot: Any, writer: DatasetWriter, *, task: str, cameras: Mapping[str, Camera] | None = None,
                 recording: bool = True, gate: Callable[[], bool] | None = None, policy: Any = None,
                 scored: bool = False):
        self.robot, self.writer, self.task = robot, writer, task
        self.scored = scored
        self._pending: deque[dict] = deque(maxlen=2)  # scored: the frames of the last two ticks, oldest first
        self.policy = policy
        """The PolicyStep driving the robot (its `last_obs`, `last_action` of this tick are recorded), or None."""
        self.cameras = dict(cameras or {})
        self.recording = recording
        self.gate = gate
        """Frames are recorded only while gate() is true (e.g. the controller is in POLICY); when it turns
        false after frames were recorded, the episode ends."""
        self._open = False
        self._last_state: Any = None
        self._frames = 0
        self._dropped = 0
        self._t0: float | None = None
        self._t_last = 0.0
        self.save_block_s: list[float] = []
        """Seconds each `end_episode` call took (the control loop's cost of a save)."""

    def __getattr__(self, name: str) -> Any:  # reset, place_object, time, base_twist, ... of the wrapped robot
        return getattr(self.robot, name)

    def read_state(self) -> Any:
        self._last_state = self.robot.read_state()
        return self._last_state

    def send_command(self, command: Any) -> None:
        self.robot.send_command(command)
        if self.recording and self.gate is not None and not self.gate():
            if self._open:
                self.end_episode()
            return
        if not self.recording or self._last_state is None:
            return
        state = self._last_state
        order = [command.joint_names.index(n) for n in state.joint_names]  # targets in the state's joint order
        frame = {"observation.state": state.q, "observation.velocity": state.dq}
        if self.policy is None:
            frame["action"] = command.q[order]
        else:  # recorded while the policy drives (the gate): its observation and raw actions of this tick
            frame.update({"observation.policy": self.policy.last_obs, "action": self.policy.last_action,
                          "command.joint_position": command.q[order]})
        for name, grab in self.cameras.items():
            frame[f"observation.images.{name}"] = grab()
        now = time.monotonic()
        self._t0 = now if self._t0 is None else self._t0
        self._t_last = now
        if self.scored:
            self._pending.append(frame)
        else:
            self._write(frame)

    def outcome(self, step: Any) -> None:
        """A scored step (a RewardStep: it scores the state read this tick) completes the frame of the tick before;
        one that ends the episode ends it here. The first step of an episode scores its starting state: no frame."""
        if not self.scored or len(self._pending) < 2:
            return
        frame = self._pending.popleft()
        frame.update(outcome_columns(step.reward, step.done, step.terminal, step.success))
        self._write(frame)
        if step.done:
            self.end_episode()

    def _write(self, frame: dict) -> None:
        if self.writer.add_frame(frame, task=self.task, block=False):
            self._frames += 1
            self._open = True
        else:
            self._dropped += 1

    def state_camera(self, name: str) -> Camera:
        """A camera reading the frame that came with the tick's state (`state.images[name]`: a transport that
        brings the robot's camera topics, e.g. DdsRobot with `cameras`)."""
        return lambda: self._last_state.images[name]

    @property
    def episode_open(self) -> bool:
        """Frames were recorded since the last `end_episode` (an episode is open)."""
        return self._open

    def start(self) -> None:
        self.recording = True

    def end_episode(self) -> None:
        """Close the episode recorded so far (the save runs on the writer's thread)."""
        t = time.perf_counter()
        self._pending.clear()
        if self._open:
            self.writer.end_episode()
        self._open = False
        self.save_block_s.append(time.perf_counter() - t)

    def report(self) -> dict[str, float]:
        """frames recorded, frames dropped (never silently), and the achieved rate (Hz)."""
        span = self._t_last - self._t0 if self._t0 is not None else 0.0
        ticks = self._frames + self._dropped
        return {"frames": self._frames, "dropped": self._dropped,
                "rate_hz": (ticks - 1) / span if span > 0 else 0.0}

    def close(self) -> None:
        self.robot.close()


class SimCameras:
    """Cameras of a MuJoCo twin (`robot.model`, `robot.data`) rendered on their own thread at `rate_hz`.

    Like real cameras: the control loop takes the newest frame (`camera(name)()`, no waiting) and never
    renders itself. The thread owns its OpenGL context (contexts belong to one thread) and draws with the
    fast settings of `robo_rl.sim.render` (no shadows or reflections, coarse round shapes). Headless
    rendering needs MUJOCO_GL=egl (or osmesa) set before mujoco is first imported.
    """

    def __init__(self, robot: Any, names: list[str], height: int, width: int, rate_hz: float):
        import mujoco  # the twin's: the train extra (mujoco, torch), not installed on a robot

        from robo_rl.sim.render import RenderSettings, render_model  # mujoco, torch (the train extra)

        for name in names:
            if mujoco.mj_name2id(robot.model, mujoco.mjtObj.mjOBJ_CAMERA, name) < 0:
                raise ValueError(f"camera {name!r} is not in the twin's model")
        self._mj, self.robot, self.names, self.period = mujoco, robot, list(names), 1.0 / rate_hz
        self._settings = RenderSettings()
        self._model = render_model(robot.model, width, height, self._settings)
        self._size = (height, width)
        self._lock = getattr(robot, "_lock", threading.Lock())
        self._frames = {n: np.zeros((height, width, 3), np.uint8) for n in names}
        self._ready = threading.Event()
        self._running = True
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="sim-cameras", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30.0)
        if self._error is not None:
            raise RuntimeError(f"sim cameras: {self._error}") from self._error

    def _run(self) -> None:
        mj = self._mj
        try:
            renderer = mj.Renderer(self._model, height=self._size[0], width=self._size[1])
            flags = renderer.scene.flags
            flags[mj.mjtRndFlag.mjRND_SHADOW] = self._settings.shadows
            flags[mj.mjtRndFlag.mjRND_REFLECTION] = self._settings.reflections
            flags[mj.mjtRndFlag.mjRND_SKYBOX] = self._settings.skybox
        except BaseException as exc:  # reported by the constructor
            self._error = exc
            self._ready.set()
            return
        next_t = time.monotonic()
        try:
            while self._running:
                for name in self.names:
                    with self._lock:  # copy the scene out of the twin's data; drawing needs no lock
                        renderer.update_scene(self.robot.data, camera=name)
                    self._frames[name] = renderer.render().copy()
                self._ready.set()
                next_t += self.period
                time.sleep(max(0.0, next_t - time.monotonic()))
        finally:
            renderer.close()

    def camera(self, name: str) -> Camera:
        return lambda: self._frames[name]

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=2.0)


class LatestFrameCamera:
    """An OpenCV camera read on its own thread; calling it returns the newest frame (RGB) at once."""

    def __init__(self, source: int | str, height: int, width: int):
        import cv2  # opencv-python-headless (the demos extra)

        self._cv2 = cv2
        self._cap = cv2.VideoCapture(source)
        if not self._cap.isOpened():
            raise ValueError(f"camera {source!r} cannot be opened")
        self.height, self.width = height, width
        self._frame = np.zeros((height, width, 3), np.uint8)
        self._running = True
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        cv2 = self._cv2
        while self._running:
            ok, bgr = self._cap.read()
            if not ok:
                time.sleep(0.005)
                continue
            self._frame = cv2.cvtColor(cv2.resize(bgr, (self.width, self.height)), cv2.COLOR_BGR2RGB)

    def __call__(self) -> np.ndarray:
        return self._frame

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=1.0)
        self._cap.release()


def policy_dims(contract: Any) -> tuple[list[str], int]:
    """(observation names (O,), action size A) of a deploy contract: `robot_features`'s `policy` argument."""
    return [f"{t.name}_{i}" for t in contract.observation for i in range(t.dim * t.history)], contract.action_dim


def recording_wrapper(root: str | Path, *, task: str, policy: Callable[[], Any] | None = None,
                      scored: bool = False) -> tuple[Callable[[Any], RecordingRobot], dict]:
    """(wrap_robot for `open_session`, holder): the wrapped robot records every tick into a new dataset at
    `root` (the robot's joints, the commands; with `policy`, which returns the PolicyStep driving the robot once it
    is loaded (when the robot is wrapped), its observations and raw actions; `scored`: the reward modules' outcome
    of each frame, handed to `holder["rec"].outcome`); holder["rec"] is the RecordingRobot once wrapped."""
    holder: dict[str, Any] = {}

    def wrap(robot: Any) -> RecordingRobot:
        hw = robot.hw
        step = policy() if policy is not None else None
        dims = policy_dims(step.policy.contract) if step is not None else None
        writer = DatasetWriter(root, fps=hw.control_rate_hz, robot_type=hw.robot,
                               features=robot_features(hw.joint_names, {}, hw.control_rate_hz, dims, scored))
        holder["rec"] = RecordingRobot(robot, writer, task=task, policy=step, scored=scored)
        return holder["rec"]

    return wrap, holder
