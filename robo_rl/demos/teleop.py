"""Teleoperation of an arm's end-effector: keyboard, gamepad (evdev or sensor_msgs/Joy), SpaceMouse.

Every device gives a `TeleopInput` each control tick: an end-effector velocity in the robot base frame
(each axis in [-1, 1] of `max_speed`), a gripper request and episode events. `EeTeleopPolicy` turns it
into joint targets: damped least squares on the arm's kinematic chain (the numpy chain of the deploy
core, built from the twin's MJCF) holding the end-effector's orientation, so the Controller sends it
through the same safety filter as a policy's. The device mappings are pure functions of the raw device
state (tested); the device classes only read hardware. `record_teleop` teleoperates a robot through any registered
transport (the twin in-process, a robot or `robo-rl twin` over DDS) and records every tick into a dataset
(`robo-rl record --teleop`), optionally in an exported policy's terms (`PolicyTermsTeleop`: its observations and
actions, so BC for that policy trains on the recording as on `deploy --record`'s):

    keyboard   w/s: +x/-x, a/d: +y/-y, r/f: +z/-z, space: toggle gripper, enter: end the episode, q: quit
    gamepad    left stick: x/y, right stick vertical: z, A (south): toggle gripper, start: end the episode
    SpaceMouse translation: x/y/z, left button: toggle gripper, right button: end the episode
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.demos.recorder import RecordingRobot, SimCameras, policy_dims, robot_features
from robo_rl.demos.replay import paced_ticks
from robo_rl.deploy.controller import Controller
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.robot import take_control
from robo_rl.deploy.runtime import check_reported_joints, control_path, observes_ee, wait_for_fresh_state
from robo_rl.deploy.session import make_robot
from robo_rl.deploy.session import transport as find_transport
from robo_rl.deploy.state_machine import Mode
from robo_rl.terms.ee_delta import dls_step, limit_step, orientation_error
from robo_rl.terms.kinematics import SerialChain, serial_chain

KEYS = {"w": (0, 1.0), "s": (0, -1.0), "a": (1, 1.0), "d": (1, -1.0), "r": (2, 1.0), "f": (2, -1.0)}
"""Keyboard key -> (axis, direction) of the end-effector velocity."""
KEY_HOLD_S = 0.15
"""A key counts as held this long after its last press (terminals repeat held keys every ~30-50 ms)."""


@dataclass(frozen=True)
class TeleopInput:
    velocity: np.ndarray  # (3,) in [-1, 1], base frame x, y, z
    toggle_gripper: bool = False
    end_episode: bool = False
    quit: bool = False


# ---------------------------------------------------------------------------------------------- mappings
def keyboard_input(held: Iterable[str], pressed: Iterable[str] = ()) -> TeleopInput:
    """Keys held now (velocity) and keys pressed since the last tick (events)."""
    v = np.zeros(3)
    for key in held:
        if key in KEYS:
            axis, sign = KEYS[key]
            v[axis] += sign
    pressed = set(pressed)
    return TeleopInput(np.clip(v, -1, 1), " " in pressed, "\n" in pressed or "\r" in pressed, "q" in pressed)


def deadzone(x: float, zone: float) -> float:
    """0 inside +-zone, rescaled to reach +-1 at +-1 outside it."""
    if abs(x) <= zone:
        return 0.0
    return float(np.sign(x) * (abs(x) - zone) / (1.0 - zone))


def gamepad_input(axes: Mapping[str, float], pressed: Iterable[str] = (), zone: float = 0.1) -> TeleopInput:
    """Normalised stick axes in [-1, 1] (evdev names ABS_X, ABS_Y, ABS_RY; y axes point down) and buttons."""
    v = np.array([-deadzone(axes.get("ABS_Y", 0.0), zone), -deadzone(axes.get("ABS_X", 0.0), zone),
                  -deadzone(axes.get("ABS_RY", 0.0), zone)])
    pressed = set(pressed)
    return TeleopInput(v, "BTN_SOUTH" in pressed, "BTN_START" in pressed, "BTN_MODE" in pressed)


def joy_input(axes: Sequence[float], buttons: Sequence[int], previous: Sequence[int] = (),
              zone: float = 0.1) -> TeleopInput:
    """sensor_msgs/Joy (the usual layout: axes 0/1 left stick, 4 right stick vertical; buttons 0 A, 7 start).

    ROS joystick drivers report up as +1, so no sign flips; events are buttons that went down since `previous`.
    """
    def axis(i: int) -> float:
        return deadzone(float(axes[i]), zone) if i < len(axes) else 0.0

    def went_down(i: int) -> bool:
        return i < len(buttons) and bool(buttons[i]) and not (i < len(previous) and previous[i])

    return TeleopInput(np.array([axis(1), axis(0), axis(4)]), went_down(0), went_down(7), went_down(8))


def spacemouse_input(x: float, y: float, z: float, buttons: Sequence[int], previous: Sequence[int] = (),
                     zone: float = 0.05) -> TeleopInput:
    """A SpaceMouse's translation (pyspacemouse's state x, y, z in [-1, 1]) and its two buttons."""
    def went_down(i: int) -> bool:
        return i < len(buttons) and bool(buttons[i]) and not (i < len(previous) and previous[i])

    v = np.array([deadzone(y, zone), -deadzone(x, zone), deadzone(z, zone)])  # device y forward = robot x
    return TeleopInput(v, went_down(0), went_down(1))


# ---------------------------------------------------------------------------------------------- policy
class EeTeleopPolicy:
    """The Controller's PolicyStep protocol: device velocity -> end-effector step -> joint targets (DLS).

    Args:
        read: returns the device's TeleopInput for this tick.
        chain: the arm's chain description (`robo_rl.terms.kinematics.serial_chain` of the twin's MJCF).
        hw: the hardware spec (joint order, gains).
        dt: control period (s).
        max_speed: end-effector speed at full deflection (m/s).
        gripper: (joint name, open position, closed position), or None for an arm without a hand.
        damping, max_joint_step: DLS damping (m) and largest joint change per tick (rad).
    """

    def __init__(self, read: Any, chain: dict, hw: Any, dt: float, *, max_speed: float = 0.1,
                 gripper: tuple[str, float, float] | None = None, damping: float = 0.05,
                 max_joint_step: float = 0.05):
        self.read, self.hw, self.dt, self.max_speed = read, hw, dt, max_speed
        self.chain = SerialChain(chain)
        self.arm_index = hw.index_of(list(self.chain.joint_names))  # (A,) robot positions of the chain joints
        self.kp, self.kd = np.array(hw.kp, dtype=np.float64), np.array(hw.kd, dtype=np.float64)
        self.damping, self.max_joint_step = damping, max_joint_step
        self.gripper = gripper
        self._gripper_index = int(hw.index_of([gripper[0]])[0]) if gripper else None
        self._closed = False
        self._target_rot: np.ndarray | None = None
        self._arm_target: np.ndarray | None = None
        self.last_input = TeleopInput(np.zeros(3))

    def reset(self) -> None:
        self._target_rot = self._arm_target = None

    def __call__(self, state: Any) -> np.ndarray:
        inp = self.read()
        self.last_input = inp
        q = np.empty(len(self.hw.joint_names))
        q[self.hw.index_of(state.joint_names)] = state.q
        # integrate from the last target, not the measured joints: a held key moves at the set speed
        arm = q[self.arm_index] if self._arm_target is None else self._arm_target
        _, rot, jac = self.chain.jacobian(arm)
        if self._target_rot is None:
            self._target_rot = rot  # hold the orientation teleoperation started with
        step = np.clip(inp.velocity, -1, 1) * self.max_speed * self.dt  # (3,) m
        error = np.concatenate([step, orientation_error(rot, self._target_rot)])
        dq = limit_step(dls_step(jac, error, self.damping), self.max_joint_step)
        self._arm_target = np.clip(arm + dq, self.chain.lower, self.chain.upper)
        q[self.arm_index] = self._arm_target
        if self.gripper is not None:
            if inp.toggle_gripper:
                self._closed = not self._closed
            q[self._gripper_index] = self.gripper[2] if self._closed else self.gripper[1]
        return q


class DeviceTakeover:
    """An operator's device taking over from a learner while it is held (HIL-SERL's interventions), on any transport.

    Called with the robot's state before each step (`RobotEnv(takeover=...)`): while the device is deflected (or its
    gripper button pressed) it returns the joint targets (J,) of end-effector teleoperation (`EeTeleopPolicy`, from
    the targets it gave last, so a held key moves at the set speed); once released, None (the learner acts again) and
    the next takeover starts from the measured joints.

    Args:
        read: returns the device's TeleopInput for this step (keyboard, gamepad, SpaceMouse, a script).
        chain: the arm's kinematic chain (`arm_chain(hw)` reads it from the hardware file's twin model).
        hw, dt, max_speed, gripper: as EeTeleopPolicy.
    """

    def __init__(self, read: Callable[[], TeleopInput], chain: dict, hw: Any, dt: float, *, max_speed: float = 0.1,
                 gripper: tuple[str, float, float] | None = None):
        self.read = read
        self.last_input = TeleopInput(np.zeros(3))
        self.teleop = EeTeleopPolicy(lambda: self.last_input, chain, hw, dt, max_speed=max_speed, gripper=gripper)
        self.held = False

    def __call__(self, state: Any) -> np.ndarray | None:
        self.last_input = inp = self.read()
        held = bool(np.any(np.asarray(inp.velocity) != 0.0) or inp.toggle_gripper)
        if not held:
            if self.held:
                self.teleop.reset()
            self.held = False
            return None
        self.held = True
        return self.teleop(state)


class PolicyTermsTeleop:
    """End-effector teleoperation written in an exported policy's terms (the Controller's PolicyStep protocol).

    Each tick the policy's observation is built from the state (`PolicyStep.observe`: histories advance as in
    training) and the operator's joint targets (`EeTeleopPolicy`) are executed as the policy's own raw actions
    (`ActionMap.actions_for`, then its action terms), so what the robot does is exactly what those actions do and a
    `RecordingRobot` given this as its policy records `observation.policy` and `action` beside the joint targets.

    Args:
        teleop: the operator's end-effector teleoperation.
        step: the exported policy's PolicyStep (its contract validated against the robot).

    Raises:
        ValueError: an action term that cannot express joint targets as actions (one line).
    """

    def __init__(self, teleop: EeTeleopPolicy, step: Any):
        self.teleop, self.step = teleop, step
        step.action_map.actions_for(np.asarray(step.policy.contract.default_joint_pos))  # refused now, not mid-episode
        self.kp, self.kd = step.kp, step.kd

    @property
    def last_input(self) -> TeleopInput:
        return self.teleop.last_input

    @property
    def last_obs(self) -> np.ndarray | None:
        return self.step.last_obs

    @property
    def last_action(self) -> np.ndarray:
        return self.step.last_action

    def reset(self) -> None:
        self.teleop.reset()
        self.step.reset()

    def __call__(self, state: Any) -> np.ndarray:
        self.step.observe(state)  # with the previous tick's action, as the policy would see it
        targets = self.teleop(state)  # (J,) robot order
        self.step.external = self.step.action_map.actions_for(targets[self.step.robot_index])
        return self.step(state)  # (J,) the targets of those actions; joints the policy does not drive hold


def arm_chain(hw: Any, ee_site: str = "ee") -> dict:
    """The kinematic chain to `ee_site` of the arm's model (hardware `transport.sim.model`), read once with mujoco: the
    robot side of teleoperation needs no twin running, only the model file."""
    from robo_rl.core.assets import find_asset
    from robo_rl.core.headless_gl import choose_headless_gl

    choose_headless_gl()  # before this process's first mujoco import: a twin's cameras may render later
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(find_asset(hw.transport["sim"]["model"], what="robot model")))
    return serial_chain(model, ee_site)


# ---------------------------------------------------------------------------------------------- devices
class KeyboardDevice:
    """The terminal's keys, read on a thread in cbreak mode (no Enter needed); call it once per tick."""

    def __init__(self, stream: Any = None):
        import termios  # POSIX only
        import tty

        self.stream = stream or sys.stdin
        if not self.stream.isatty():
            raise ValueError("keyboard teleoperation needs a terminal (standard input is not one)")
        self._fd = self.stream.fileno()
        self._saved = termios.tcgetattr(self._fd)
        tty.setcbreak(self._fd)
        self._last_seen: dict[str, float] = {}
        self._pressed: set[str] = set()
        self._lock = threading.Lock()
        self._running = True
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._running:
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if ready:  # the file descriptor, not the buffered stream: select cannot see a stream's buffer
                keys = os.read(self._fd, 64).decode(errors="ignore").lower()
                now = time.monotonic()
                with self._lock:
                    for key in keys:
                        self._last_seen[key] = now
                        self._pressed.add(key)

    def __call__(self) -> TeleopInput:
        now = time.monotonic()
        with self._lock:
            held = [k for k, t in self._last_seen.items() if now - t <= KEY_HOLD_S]
            pressed, self._pressed = self._pressed, set()
        return keyboard_input(held, pressed)

    def close(self) -> None:
        import termios  # POSIX only

        self._running = False
        self._thread.join(timeout=0.5)
        termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)


class EvdevGamepad:
    """A gamepad through Linux evdev (`pip install evdev`), read on a thread; call it once per tick."""

    def __init__(self, path: str | None = None):
        import evdev  # optional: pip install evdev

        self._evdev = evdev
        paths = [path] if path else evdev.list_devices()
        devices = [evdev.InputDevice(p) for p in paths]
        pads = [d for d in devices if evdev.ecodes.EV_ABS in d.capabilities()]
        if not pads:
            raise ValueError("no gamepad found (evdev devices with absolute axes); pass its /dev/input/event* path")
        self.device = pads[0]
        self._ranges = {evdev.ecodes.ABS[code] if isinstance(evdev.ecodes.ABS[code], str) else
                        evdev.ecodes.ABS[code][0]: (info.min, info.max)
                        for code, info in self.device.capabilities()[evdev.ecodes.EV_ABS]}
        self._axes: dict[str, float] = {}
        self._pressed: set[str] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        ecodes = self._evdev.ecodes
        for event in self.device.read_loop():
            with self._lock:
                if event.type == ecodes.EV_ABS:
                    name = ecodes.ABS[event.code]
                    name = name if isinstance(name, str) else name[0]
                    lo, hi = self._ranges.get(name, (-1, 1))
                    self._axes[name] = 2.0 * (event.value - lo) / max(1, hi - lo) - 1.0
                elif event.type == ecodes.EV_KEY and event.value == 1:
                    name = ecodes.BTN.get(event.code, ecodes.KEY.get(event.code, ""))
                    for n in (name if isinstance(name, list) else [name]):
                        self._pressed.add(n)

    def __call__(self) -> TeleopInput:
        with self._lock:
            axes, pressed, self._pressed = dict(self._axes), self._pressed, set()
        return gamepad_input(axes, pressed)


class SpaceMouseDevice:
    """A 3Dconnexion SpaceMouse through `pyspacemouse`; call it once per tick."""

    def __init__(self):
        import pyspacemouse  # optional: pip install pyspacemouse

        if not pyspacemouse.open():
            raise ValueError("no SpaceMouse found (pyspacemouse.open() failed)")
        self._sm = pyspacemouse
        self._previous: list[int] = []

    def __call__(self) -> TeleopInput:
        s = self._sm.read()
        buttons = list(getattr(s, "buttons", []))
        out = spacemouse_input(s.x, s.y, s.z, buttons, self._previous)
        self._previous = buttons
        return out


DEVICES = {"keyboard": KeyboardDevice, "gamepad": EvdevGamepad, "spacemouse": SpaceMouseDevice}


# ---------------------------------------------------------------------------------------------- recording
def record_teleop(hardware: str, out: str, read: Callable[[], Any], *, task: str = "teleoperation",
                  cameras: tuple[str, ...] = (), image_size: int = 96, max_speed: float = 0.1,
                  realtime: bool = True, max_ticks: int | None = None, ee_site: str = "ee",
                  status: Callable[[str], None] | None = None, transport: str = "sim", domain_id: int = 0,
                  policy: str | Path | None = None) -> dict[str, Any]:
    """Teleoperate `hardware` (end-effector velocity from `read`) through the registered transport `transport` (the
    twin "sim", in-process; a robot or `robo-rl twin` over "dds", in real time) and record every tick into `out`.

    RAMP and READY run first; POLICY (teleoperation) starts once READY: the hand holds still until the device moves.
    An input with `end_episode` closes the episode, `quit` (or `max_ticks` ticks of POLICY) ends the session. Every
    command goes through the deploy core's safety filter (and a Franka's jerk-limited setpoints). Cameras: the sim
    twin renders them on their own thread; over DDS they are the robot's camera topics (`<camera>/image/compressed`,
    `transport.dds.camera_topics`; `robo-rl twin --cameras`), each frame the newest with the state of its tick.
    With `policy` (an exported .onnx) the recording is in its terms (`PolicyTermsTeleop`): the features `deploy
    --record` writes (observation.policy, action, command.joint_position), so BC trains on it.

    Returns:
        The recorder's report plus "episodes".

    Raises:
        ValueError: an unknown transport, cameras on a transport that gives none, a policy whose contract does not fit
            the robot, a robot that does not report the hardware file's joints (one line; nothing sent).
    """
    entry = find_transport(transport)
    if not entry.rehearsal:
        realtime = True
    frames_from_robot = bool(cameras) and not entry.rehearsal  # the robot's camera topics, not a twin's renderer
    if frames_from_robot and "cameras" not in entry.options:
        raise ValueError(f"--cameras {' '.join(cameras)}: transport {transport} gives no camera frames")
    hw = load_hardware(hardware)
    step = kinematics = None
    if policy is not None:
        from robo_rl.deploy.ee_kinematics import make_ee_kinematics
        from robo_rl.deploy.policy import OnnxPolicy, PolicyStep  # onnxruntime: only to record in a policy's terms

        step = PolicyStep(OnnxPolicy(policy), hw)
        if abs(step.policy.contract.policy_dt * hw.control_rate_hz - 1.0) > 1e-6:
            raise ValueError(f"policy {policy}: it acts every {step.policy.contract.policy_dt:g} s, the robot's "
                             f"control rate is {hw.control_rate_hz:g} Hz")
        kinematics = make_ee_kinematics(hw, observes_ee(step))  # its ee_pos where the robot reports none
    dt = 1.0 / hw.control_rate_hz
    chain = arm_chain(hw, ee_site)
    # The gripper's finger: the hardware file's gripper joint, or the joint its model calls finger_*.
    fingers = [r for r, m in zip(hw.joint_names, hw.model_names, strict=True) if m.startswith("finger")]
    finger = hw.gripper.joint if hw.gripper is not None else (fingers[0] if fingers else None)
    gripper = None
    if finger is not None:
        i = hw.joint_names.index(finger)
        gripper = (finger, float(hw.joint_upper[i]), float(hw.joint_lower[i]))
    teleop = EeTeleopPolicy(read, chain, hw, dt, max_speed=max_speed, gripper=gripper)
    driver = teleop if step is None else PolicyTermsTeleop(teleop, step)
    robot = make_robot(transport, hw, dt, realtime=realtime, domain_id=domain_id,
                       needs_ee=step is not None and observes_ee(step) and kinematics is None,
                       cameras=tuple((c, image_size, image_size) for c in cameras) if frames_from_robot else ())
    sim = writer = controller = rec = None
    try:
        if entry.rehearsal:
            state = robot.read_state()
        else:  # a robot's first states may be late or stale; nothing is sent before its joints are checked
            state = wait_for_fresh_state(robot, 10.0, hw.safety.state_timeout_s, time.monotonic)
            check_reported_joints(state, hw)
            take_control(robot)
        if cameras and not frames_from_robot:
            sim = SimCameras(robot, list(cameras), image_size, image_size, hw.control_rate_hz)
        writer = DatasetWriter(out, fps=hw.control_rate_hz, robot_type=hw.robot, features=robot_features(
            hw.joint_names, {c: (image_size, image_size) for c in cameras}, hw.control_rate_hz,
            policy_dims(step.policy.contract) if step is not None else None))
        rec = RecordingRobot(robot, writer, task=task, recording=False, policy=step,
                             cameras={c: sim.camera(c) for c in cameras} if sim else None)
        if frames_from_robot:
            rec.cameras = {c: rec.state_camera(c) for c in cameras}
        start = np.empty(len(hw.joint_names))
        start[hw.index_of(state.joint_names)] = state.q
        clock = time.monotonic if realtime else (lambda: robot.time)
        controller = Controller(control_path(rec, hw, ee_kinematics=kinematics), hw, driver, start, clock=clock)
        episodes, ticks = 0, 0
        controller.request_ramp()
        for _ in paced_ticks(controller, clock, dt, realtime):
            if controller.mode is Mode.READY:
                controller.start_policy()
                rec.start()
            elif controller.mode is Mode.POLICY:
                ticks += 1
                inp = driver.last_input
                if inp.end_episode or inp.quit or (max_ticks is not None and ticks >= max_ticks):
                    rec.end_episode()
                    episodes += 1
                    if status:
                        status(f"episode {episodes} saved; {rec.report()}")
                    if inp.quit or (max_ticks is not None and ticks >= max_ticks):
                        break
            elif controller.mode in (Mode.DAMP, Mode.ESTOP):
                raise RuntimeError(f"teleoperation stopped: {controller.last_fault} ({controller.last_error})")
        return {**rec.report(), "episodes": episodes}
    finally:
        if rec is not None:
            rec.recording = False  # the shutdown's damping commands are no demonstration
        if controller is not None:
            controller.shutdown()
        if writer is not None:
            writer.close()
        if sim:
            sim.close()
        robot.close()
