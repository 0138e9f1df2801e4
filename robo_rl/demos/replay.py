"""Open-loop replay of a recorded episode's joint targets on the twin or a robot, always through the deploy core's
safety filter.

`replay_episode` loads the hardware file, connects through a registered transport (the sim twin by default),
ramps the robot (RAMP, through the filter) to the episode's first recorded joint positions, then runs POLICY
with a `ReplayPolicy` that sends one recorded target per tick at the dataset's rate; every command passes the
safety filter (limits, velocity and torque guards), as a policy's would (on a setpoint controller as a policy's
trained through its stream: the stream bounds the steps). Targets are the dataset's
`command.joint_position` (sim expert recordings) or its `action` (robot recordings, where the action is the
commanded target), matched to the robot's joints by name. Gains are the recording's deploy contract's when the
dataset carries one (`info.json` "robo_rl"), else the hardware file's. What a transport needs follows from its
registry entry (`Transport.rehearsal`), never from its name: a rehearsal one (the twin) replays at once, as fast
as possible unless asked for real time; a real robot replays in real time, from a fresh state, and only on the
operator's confirmation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.errors import DatasetError
from robo_rl.deploy.controller import Controller
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.runtime import wait_for_fresh_state
from robo_rl.deploy.session import make_robot
from robo_rl.deploy.session import transport as find_transport
from robo_rl.deploy.smoothing import command_path
from robo_rl.deploy.state_machine import Mode


class ReplayPolicy:
    """The Controller's PolicyStep protocol over recorded targets (T, D) of joints `names`; holds the last one.

    The targets are commands as they were sent: on a setpoint controller they go to the robot's stream as they are
    (`trained_through_stream`), whose limits bound them, not stepped or budgeted a second time by the safety filter
    (which would move a recording of a policy trained through the stream off its path: SafetyFilter.filter_command).
    """

    trained_through_stream = True

    def __init__(self, targets: np.ndarray, names: list[str], hw: Any, kp: np.ndarray | None = None,
                 kd: np.ndarray | None = None):
        self.targets = np.asarray(targets, dtype=np.float64)
        self.robot_index = hw.index_of(names)  # (D,) robot position of each recorded joint
        self.hw = hw
        n = len(hw.joint_names)
        self.kp, self.kd = np.array(hw.kp, dtype=np.float64), np.array(hw.kd, dtype=np.float64)
        if kp is not None:
            self.kp[self.robot_index] = kp
            self.kd[self.robot_index] = kd
        self.t = 0
        self._n = n

    @property
    def done(self) -> bool:
        return self.t >= len(self.targets)

    def reset(self) -> None:
        self.t = 0

    def __call__(self, state: Any) -> np.ndarray:
        q = np.empty(self._n)
        q[self.hw.index_of(state.joint_names)] = state.q  # joints the recording does not drive hold still
        q[self.robot_index] = self.targets[min(self.t, len(self.targets) - 1)]
        self.t += 1
        return q


def paced_ticks(c: Any, clock: Callable[[], float], period: float, realtime: bool) -> Iterator[None]:
    """Tick controller `c` and yield after each tick, forever: in real time on the absolute grid of
    `period`, else as fast as possible (the fast twin's clock is its simulation time)."""
    next_t = time.monotonic()
    while True:
        c.tick(clock())
        yield
        if realtime:
            next_t += period
            time.sleep(max(0.0, next_t - time.monotonic()))


def _hold(c: Any, done: threading.Event, fps: float) -> None:
    """Tick the controller at `fps` (it holds READY) until `done` is set."""
    for _ in paced_ticks(c, time.monotonic, 1.0 / fps, True):
        if done.is_set():
            return


def episode_targets(reader: DatasetReader, episode: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """(targets (T, D), joint names) of an episode: command.joint_position, else action."""
    key = "command.joint_position" if "command.joint_position" in reader.features else "action"
    names = reader.features[key].get("names")
    if not names:
        raise DatasetError(f"{reader.root}: feature {key!r} has no joint names to replay by")
    return episode[key], list(names)


def replay_episode(dataset: str | Path, index: int, hardware: str | Path, *, realtime: bool = False,
                   transport: str = "sim", domain_id: int = 0,
                   confirm: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Replay episode `index` through the registered transport `transport` (the twin "sim", a robot over "dds", ...).

    On a real robot (a transport that is not a rehearsal) the replay runs in real time and starts only when
    `confirm()` (the operator: the CLI waits for `start` typed on its input) returns True once the robot holds
    the episode's first pose (READY); False stops. On a rehearsal transport `confirm` is asked only if given.

    Returns:
        {"q": (T, D) joint positions after each tick, "recorded": (T, D) the episode's observation.state,
        "interventions": safety-filter counts, "names": joints}.

    Raises:
        ValueError: an unknown transport (one line naming the available ones), a real robot without `confirm`.
    """
    entry = find_transport(transport)
    if not entry.rehearsal:
        if confirm is None:
            raise ValueError(f"replay over {transport} (a real robot) needs the operator's confirmation (confirm=...)")
        realtime = True
    reader = DatasetReader(dataset)
    ep = reader.episode(index, images=False)
    targets, names = episode_targets(reader, ep)
    hw = load_hardware(hardware)
    contract = reader.meta.info.get("robo_rl", {}).get("contract", {})
    kp = kd = None
    if contract and list(contract.get("joint_names", [])) == names:
        kp, kd = np.array(contract["kp"]), np.array(contract["kd"])
    fps = reader.fps
    robot = make_robot(transport, hw, 1.0 / fps, realtime=realtime, physics_dt=contract.get("physics_dt"),
                       domain_id=domain_id)
    try:
        policy = ReplayPolicy(targets, names, hw, kp, kd)
        start = np.empty(len(hw.joint_names))
        state_names = reader.features["observation.state"].get("names") or names
        if entry.rehearsal:
            first = robot.read_state()
        else:  # a robot's first states may be late or stale
            first = wait_for_fresh_state(robot, 10.0, hw.safety.state_timeout_s, time.monotonic)
        start[hw.index_of(first.joint_names)] = first.q
        start[hw.index_of(list(state_names))] = ep["observation.state"][0]
        clock = time.monotonic if realtime else (lambda: robot.time)
        # Commands reach the robot as the deploy core sends them (jerk-limited setpoints for a Franka).
        c = Controller(command_path(robot, hw, 1.0 / fps), hw, policy, start, rate_hz=fps, clock=clock)
        q_index = hw.index_of(names)
        replayed = []
        c.on_tick = lambda now, state, cmd: replayed.append(state.q[q_index].copy()) if c.mode is Mode.POLICY else None
        c.request_ramp()
        for _ in islice(paced_ticks(c, clock, 1.0 / fps, realtime), round(60 * fps)):  # at most a minute
            if c.mode is Mode.READY:
                break
        if c.mode is not Mode.READY:
            raise RuntimeError(f"replay: the robot never became READY ({c.status_line()})")
        if confirm is not None:
            holding = threading.Event()
            holder = threading.Thread(target=_hold, args=(c, holding, fps), daemon=True)
            holder.start()  # READY keeps being commanded while the operator decides
            go = confirm()
            holding.set()
            holder.join()
            if not go:
                c.shutdown()
                return {"q": np.zeros((0, len(names))), "recorded": ep["observation.state"], "names": names,
                        "interventions": dict(c.intervention_counts)}
        c.start_policy()
        replayed.clear()
        for _ in paced_ticks(c, clock, 1.0 / fps, realtime):
            if c.mode is not Mode.POLICY:
                raise RuntimeError(f"replay stopped at tick {policy.t}: {c.last_fault} ({c.last_error})")
            if policy.done:
                break
        final = robot.read_state()
        after = np.stack(replayed[1:] + [final.q[q_index]]) if replayed else np.zeros((0, len(names)))
        c.shutdown()
        return {"q": after, "recorded": ep["observation.state"], "names": names,
                "interventions": dict(c.intervention_counts)}
    finally:
        robot.close()


def render_episode(dataset: str | Path, index: int, hardware: str | Path, *, camera: str = "track",
                   width: int = 320, height: int = 240) -> tuple[list[np.ndarray], float]:
    """A re-render of episode `index`'s recorded joint positions on the twin's MJCF: (RGB frames, fps).

    Each frame puts the twin's joints at the recorded `observation.state` (by name; other joints and free
    bodies stay at the model's keyframe) and draws `camera`. Needs MUJOCO_GL=egl or osmesa headless.
    """
    from robo_rl.sim.mjmodel import mujoco  # the train extra; picks a headless MUJOCO_GL before mujoco loads
    from robo_rl.sim.render import video_renderer  # the train extra (mujoco, torch)

    reader = DatasetReader(dataset)
    ep = reader.episode(index, images=False)
    names = reader.features["observation.state"].get("names")
    if not names:
        raise DatasetError(f"{reader.root}: observation.state has no joint names to render by")
    hw = load_hardware(hardware)
    sim = hw.transport.get("sim") or {}
    if "model" not in sim:
        raise ValueError(f"hardware {hw.robot!r} has no transport.sim.model (the MJCF of its twin)")
    model = mujoco.MjModel.from_xml_path(str(find_asset(sim["model"], what="sim twin model")))
    data = mujoco.MjData(model)
    if sim.get("keyframe"):
        mujoco.mj_resetDataKeyframe(model, data, mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, sim["keyframe"]))
    adr = []
    to_model = dict(zip(hw.joint_names, hw.model_names, strict=True))  # the robot's names -> the model's
    for name in names:
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, to_model.get(name, name))
        if j < 0:
            raise DatasetError(f"joint {name!r} of the recording is not in the twin's model")
        adr.append(int(model.jnt_qposadr[j]))
    if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
        raise ValueError(f"camera {camera!r} is not in the twin's model")
    frames = []
    with video_renderer(model, width, height) as renderer:
        for q in ep["observation.state"]:
            data.qpos[adr] = q
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera=camera)
            frames.append(renderer.render().copy())
    return frames, reader.fps
