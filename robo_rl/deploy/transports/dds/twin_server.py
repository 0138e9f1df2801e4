"""DdsTwinServer: any RobotInterface (the MuJoCo twin) served on DDS the way the real robot would be."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.deploy import ros_commands as rc
from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.camera_frames import compressed_image_message
from robo_rl.deploy.dds_settings import DdsSettings, check_domain_id
from robo_rl.deploy.hardware import HardwareSpec, load_hardware
from robo_rl.deploy.robot import ConnectOptions, JointCommand, RobotInterface
from robo_rl.deploy.transports.dds import dds_types as dt
from robo_rl.deploy.transports.dds import unitree
from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint
from robo_rl.deploy.transports.dds.franka_gripper import GripperTwin
from robo_rl.deploy.transports.dds.motion_switcher import MotionSwitcherService
from robo_rl.deploy.transports.sim import connect_twin


class DdsTwinServer:
    """Serves a RobotInterface (the MuJoCo twin) on DDS the way the real robot would.

    Publishes its state at `rate_hz` and applies every command received (decoded by the profile and
    command interface; a malformed command, or one with a wrong CRC, is dropped and counted). Until the
    first command the twin's drivers stay passive, like a robot at power-on.

    Args:
        robot: the twin (SimRobot with realtime=True).
        hw: its hardware description.
        settings: the same DdsSettings the deploy side uses.
        endpoint: the participant.
        rate_hz: state publishing rate.
        base_twist: optional callable returning the ground-truth base (linear, angular) velocity in the base
            frame, published on `twin/base_twist` for evaluation (legged twins).
        sport_mode: unitree profile: serve the motion switcher as a Go2 does, with this sport mode active at
            start ("normal", "ai", "advanced"), "released", or "locked" (normal, refusing every release); while
            a sport mode is active the twin ignores low-level commands (counted in `ignored`), as the onboard
            controller would fight them. None: no motion switcher (a simulator bridge without one).
        publish_ee: ros2 profile, arms: publish the end-effector position (ee_position); False as franka_ros2, which
            publishes none (the deploy core then computes it from the joints).
    """

    def __init__(self, robot: RobotInterface, hw: HardwareSpec, settings: DdsSettings, endpoint: DdsEndpoint, *,
                 rate_hz: float = 200.0, base_twist: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
                 sport_mode: str | None = None, publish_ee: bool = True):
        if not (np.isfinite(rate_hz) and 0 < rate_hz <= 2000):
            raise ValueError(f"twin rate_hz = {rate_hz!r}: must be in (0, 2000]")
        self.robot = robot
        self.hw = hw
        self.settings = settings
        self.endpoint = endpoint
        self.period = 1.0 / rate_hz
        self.types = dt.dds_message_types()
        self.commands = 0
        self.rejected = 0
        self.last_error: str | None = None
        self.published = 0
        self.ignored = 0
        self._base_twist = base_twist
        self.motion_switcher: MotionSwitcherService | None = None
        if sport_mode is not None:
            if settings.profile != "unitree":
                raise ValueError("--sport-mode: only a twin on the unitree profile serves the motion switcher")
            mode = {"released": "", "locked": "normal"}.get(sport_mode, sport_mode)
            self.motion_switcher = MotionSwitcherService(endpoint, mode, locked=sport_mode == "locked")
        topics = settings.state_topics()
        if settings.profile == "unitree":
            self._state_writers = {"low": endpoint.writer(topics["joints"], dt.LowState_, names.SENSOR_QOS)}
            endpoint.reader(settings.command_topic_name(), dt.LowCmd_, names.COMMAND_QOS, self._on_low_cmd)
        else:
            self._state_writers = {"joints": endpoint.writer(topics["joints"], dt.JointState, names.SENSOR_QOS)}
            if hw.kind == "legged":
                self._state_writers["imu"] = endpoint.writer(topics["imu"], dt.Imu, names.SENSOR_QOS)
            elif publish_ee:
                self._state_writers["ee"] = endpoint.writer(topics["ee"], dt.PointStamped, names.SENSOR_QOS)
            struct = dt.ROS_STRUCTS[names.COMMAND_TOPICS[settings.command_interface].ros_type]
            endpoint.reader(settings.command_topic_name(), struct, names.COMMAND_QOS, self._on_command)
        self._twist_writer = (endpoint.writer(settings.topic(names.TWIN_BASE_TWIST), dt.Twist, names.SENSOR_QOS)
                              if base_twist is not None else None)
        # A gripper with its own node (franka_gripper): its joint is reported and commanded there, not with the arm.
        self.gripper = (GripperTwin(robot, hw, settings, endpoint)
                        if hw.gripper is not None and settings.profile == "ros2" else None)

    def _reject(self, exc: Exception) -> None:
        self.rejected += 1
        self.last_error = str(exc)

    def _on_command(self, msg: Any, received: float) -> None:
        try:
            cmd = rc.decode_command(msg, self.settings.command_interface, self.hw)
        except ValueError as exc:
            self._reject(exc)
            return
        if self.settings.command_interface == "joint_trajectory":  # a trajectory controller drives its joints only
            named = np.isin(self.hw.joint_names, self.hw.robot_names([str(j) for j in msg.joint_names]))
            if not named.all():
                cmd = rc.command_subset(cmd, np.flatnonzero(named))
        self._apply(cmd)

    def _on_low_cmd(self, msg: dt.LowCmd_, received: float) -> None:
        if self.motion_switcher is not None and self.motion_switcher.active:
            self.ignored += 1
            return
        try:
            cmd = unitree.read_low_cmd(msg, self.hw)
        except ValueError as exc:
            self._reject(exc)
            return
        self._apply(cmd)

    def _apply(self, cmd: JointCommand) -> None:
        if not (np.isfinite(cmd.q).all() and np.isfinite(cmd.kp).all() and np.isfinite(cmd.kd).all()):
            self._reject(ValueError("command holds NaN or Inf"))
            return
        self.robot.send_command(cmd)
        self.commands += 1

    def publish_state(self) -> None:
        state = self.robot.read_state()
        t = self.types
        if self.settings.profile == "unitree":
            self._state_writers["low"].write(unitree.low_state_message(state, self.hw))
        else:
            arm = state
            if self.gripper is not None:
                self.gripper.step(state, self.period)
                self.gripper.publish(state)
                keep = [i for i, n in enumerate(state.joint_names) if n != self.gripper.joint]
                arm = dataclasses.replace(state, joint_names=tuple(state.joint_names[i] for i in keep),
                                          q=np.asarray(state.q)[keep], dq=np.asarray(state.dq)[keep],
                                          tau=None if state.tau is None else np.asarray(state.tau)[keep])
            for role, msg in rm.twin_state_messages(t, arm, self.hw).items():
                if role in self._state_writers:
                    self._state_writers[role].write(msg)
        if self._twist_writer is not None:
            lin, ang = self._base_twist()
            self._twist_writer.write(rm.twist_message(t, lin, ang))
        self.published += 1

    def serve(self, stop: threading.Event, duration_s: float | None = None) -> None:
        """Publish on the absolute grid t0 + k * period until `stop` is set or `duration_s` has passed."""
        t0 = time.monotonic()
        k = 0
        while not stop.is_set():
            now = time.monotonic()
            if duration_s is not None and now - t0 >= duration_s:
                return
            self.publish_state()
            k = max(k + 1, int((time.monotonic() - t0) / self.period))
            delay = t0 + k * self.period - time.monotonic()
            if delay > 0:
                stop.wait(delay)


class TwinCameraPublisher:
    """The twin's cameras on DDS as a camera driver publishes them: each camera's frame of the twin's current pose as a
    PNG sensor_msgs/CompressedImage (lossless: a reader gets the pixels the twin drew) on its topic
    (`DdsSettings.camera_topic`) at `rate_hz`, on a thread of its own, so drawing never holds up the state's rate.

    Args:
        robot: the twin, connected with these cameras (its states' `images`).
        settings, endpoint: as DdsTwinServer's.
        cameras: the camera names.
        rate_hz: frames per second per camera.
    """

    def __init__(self, robot: RobotInterface, settings: DdsSettings, endpoint: DdsEndpoint, cameras: tuple[str, ...],
                 rate_hz: float = 30.0):
        if not (np.isfinite(rate_hz) and 0 < rate_hz <= 200):
            raise ValueError(f"camera rate_hz = {rate_hz!r}: must be in (0, 200]")
        self.robot, self.period = robot, 1.0 / rate_hz
        self.types = dt.dds_message_types()
        self.writers = {c: endpoint.writer(settings.camera_topic(c), dt.CompressedImage, names.SENSOR_QOS)
                        for c in cameras}
        self.published = 0

    def publish(self) -> None:
        state = self.robot.read_state()
        for camera, writer in self.writers.items():
            writer.write(compressed_image_message(self.types, dt.CompressedImage, state.images[camera], state.stamp,
                                                  camera))
        self.published += 1

    def serve(self, stop: threading.Event) -> None:
        t0, k = time.monotonic(), 0
        while not stop.is_set():
            self.publish()
            k = max(k + 1, int((time.monotonic() - t0) / self.period))
            stop.wait(max(0.0, t0 + k * self.period - time.monotonic()))


def serve_twin(hardware_path: str, *, domain_id: int, rate_hz: float, duration_s: float | None,
               command_interface: str | None = None, physics_dt: float | None = None, latency_s: float = 0.0,
               noise_std: float = 0.0, seed: int = 0, sport_mode: str | None = "normal", publish_ee: bool = True,
               cameras: tuple[str, ...] = (), image_size: int = 96, camera_rate_hz: float = 30.0,
               out: TextIO = sys.stdout) -> int:
    """Serve the MuJoCo twin of `hardware_path` on DDS until `duration_s` or Ctrl-C; returns commands applied.

    `sport_mode` (unitree profile; see DdsTwinServer) is ignored on the ros2 profile, whose robots have none;
    `publish_ee` False publishes no end-effector position (as franka_ros2); `cameras` (model cameras) are published as
    `image_size` x `image_size` frames at `camera_rate_hz` (TwinCameraPublisher).
    """
    hw = load_hardware(find_asset(hardware_path, what="hardware file"))
    settings = DdsSettings.from_hardware(hw, command_interface=command_interface)
    if settings.profile != "unitree":
        sport_mode = None
    if not 8 <= int(image_size) <= 1024:
        raise ValueError(f"--image-size {image_size!r}: must be in [8, 1024]")
    robot = connect_twin(hw, ConnectOptions(control_dt=1.0 / hw.control_rate_hz, realtime=True, physics_dt=physics_dt,
                                            latency_s=latency_s, noise_std=noise_std, seed=seed,
                                            cameras=tuple((c, int(image_size), int(image_size)) for c in cameras)))
    try:
        endpoint = DdsEndpoint(check_domain_id(domain_id))
    except BaseException:
        robot.close()
        raise
    stop = threading.Event()
    try:
        server = DdsTwinServer(robot, hw, settings, endpoint, rate_hz=rate_hz,
                               base_twist=robot.base_twist if robot.floating else None, sport_mode=sport_mode,
                               publish_ee=publish_ee)
        frames = TwinCameraPublisher(robot, settings, endpoint, tuple(cameras), camera_rate_hz) if cameras else None
    except BaseException:
        robot.close()
        endpoint.close()
        raise
    drawing = None
    try:
        topics = settings.state_topics()
        sport = f", sport mode {sport_mode}" if sport_mode is not None else ""  # at start (deploy may release it now)
        ee = "" if publish_ee or hw.kind != "arm" else ", no end-effector position"
        shown = "" if frames is None else (f", cameras {', '.join(settings.camera_topic(c) for c in cameras)} at "
                                           f"{camera_rate_hz:g} Hz")
        print(f"twin of {hw.robot} on DDS domain {domain_id}: state on {topics['joints']} at {rate_hz:g} Hz{ee}, "
              f"commands on {settings.command_topic_name()}{sport}{shown}; Ctrl-C stops", file=out, flush=True)
        if frames is not None:
            drawing = threading.Thread(target=frames.serve, args=(stop,), name="robo_rl-twin-frames", daemon=True)
            drawing.start()
        server.serve(stop, duration_s)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if drawing is not None:
            drawing.join(timeout=5.0)
        robot.close()
        endpoint.close()
    ignored = f", {server.ignored} ignored while the sport mode was active" if server.ignored else ""
    print(f"twin stopped: {server.commands} commands applied, {server.rejected} rejected"
          f"{' (last: ' + server.last_error + ')' if server.last_error else ''}{ignored}", file=out, flush=True)
    return server.commands
