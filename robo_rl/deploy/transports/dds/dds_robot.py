"""DdsRobot: the RobotInterface over pip Cyclone DDS, wire-compatible with ROS 2 nodes (no ROS install).

Two profiles, chosen in the hardware file (`transport.dds.profile`):

- `ros2`: ROS 2 topic and type names (`rt/joint_states`, `sensor_msgs::msg::dds_::JointState_`), `@final`
  structs (plain CDR), ROS 2's QoS conventions (state: best effort, keep last 1; commands: reliable,
  keep last 1). State from `joint_states` (+ `imu` for legged robots, `ee_position` for arms whose
  policy observes it); commands on the topic of the chosen command interface (ros_interface). A gripper with a node
  of its own (hardware `gripper`, franka_gripper) reports on `<namespace>/joint_states` and takes Move / Grasp goals
  on `<namespace>/move_goal` / `grasp_goal` (robo_rl.deploy.gripper); its joint is left out of the arm's commands.
  Cameras a policy or reward classifier reads (`cameras`) arrive as sensor_msgs/CompressedImage on
  `<camera>/image/compressed` (or `transport.dds.camera_topics`), decoded on the listener thread and fitted to the
  size asked for (robo_rl.deploy.camera_frames); the state's `images` carry the newest frame of each.
- `unitree`: Unitree's low-level SDK topics `rt/lowstate` / `rt/lowcmd` with its message types and CRC,
  so a Go2 runs with no ROS at all. `take_control` first releases the onboard sport-mode controller through
  the motion switcher service (and `close` selects it again when the hardware file asks: `sport_mode: restore`).

All names come from `robo_rl.deploy.ros_interface`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from robo_rl.deploy import ros_commands as rc
from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.camera_frames import CameraFrames
from robo_rl.deploy.dds_settings import DdsSettings
from robo_rl.deploy.gripper import GripperCommander, GripperGoal, goal_message
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.transports.dds import dds_types as dt
from robo_rl.deploy.transports.dds import unitree
from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint, LatestSample
from robo_rl.deploy.transports.dds.motion_switcher import (
    MotionSwitcherClient,
    release_sport_mode,
    restore_sport_mode,
)


class DdsRobot:
    """RobotInterface over DDS (profile `ros2` or `unitree`), for a real robot or `robo-rl twin`.

    Args:
        hw: the robot.
        settings: topics, profile and command interface (`DdsSettings.from_hardware(hw)`).
        control_dt: control period (s); a joint_trajectory point is reached one period later.
        endpoint: the participant to use (shared with a DdsOperatorLink); one is made when None.
        needs_ee: wait for end-effector positions too (policies observing ee_pos).
        cameras: (name, height, width) of each camera whose frames the state carries (wait for them too).
    """

    def __init__(self, hw: HardwareSpec, settings: DdsSettings, *, control_dt: float,
                 endpoint: DdsEndpoint | None = None, domain_id: int = 0, needs_ee: bool = False,
                 cameras: tuple[tuple[str, int, int], ...] = ()):
        self.hw = hw
        self.settings = settings
        self.control_dt = control_dt
        self._own_endpoint = endpoint is None
        self.endpoint = endpoint or DdsEndpoint(domain_id)
        self.types = dt.dds_message_types()
        self._encode = rc.CommandEncoder(self.types, settings.command_interface, control_dt, hw.velocity_limits,
                                         hw.joint_names)
        legged = hw.kind == "legged"
        self.state = rm.StateAssembler(hw, needs_imu=legged, needs_ee=needs_ee and settings.profile == "ros2")
        self.sent = 0
        self.send_errors = 0
        self.released_mode = ""  # the sport mode take_control released ("" when none was active)
        self._switcher: MotionSwitcherClient | None = None
        topics = settings.state_topics()
        self.state_topic = topics["joints"]
        self.command_topic = settings.command_topic_name()
        # (reader, handler): each state reader's newest sample is taken when the controller reads the state.
        self._readers: list[tuple[LatestSample, Callable[[Any, float], None]]] = []
        ep = self.endpoint
        if settings.profile == "unitree":
            self._readers.append((ep.latest_reader(topics["joints"], dt.LowState_, names.SENSOR_QOS),
                                  self._on_low_state))
            self._writer = ep.writer(self.command_topic, dt.LowCmd_, names.COMMAND_QOS)
        else:
            self._readers.append((ep.latest_reader(topics["joints"], dt.JointState, names.SENSOR_QOS),
                                  self.state.on_joint_state))
            if legged:
                self._readers.append((ep.latest_reader(topics["imu"], dt.Imu, names.SENSOR_QOS), self.state.on_imu))
            if self.state.needs_ee:
                self._readers.append((ep.latest_reader(topics["ee"], dt.PointStamped, names.SENSOR_QOS),
                                      self.state.on_ee_position))
            struct = dt.ROS_STRUCTS[names.COMMAND_TOPICS[settings.command_interface].ros_type]
            self._writer = ep.writer(self.command_topic, struct, names.COMMAND_QOS)
        # A gripper with its own node: its state joins the arm's, its joint leaves the arm's commands for goals.
        self.gripper: GripperCommander | None = None
        self.gripper_goals: list[GripperGoal] = []  # every goal sent, oldest first
        self._gripper_writers: dict[str, Any] = {}
        if hw.gripper is not None and settings.profile == "ros2":
            self.gripper = GripperCommander.for_hardware(hw)
            state = ep.latest_reader(settings.gripper_topic("state"), dt.JointState, names.SENSOR_QOS)
            self._readers.append((state, self.state.on_gripper_state))
            for kind, struct in (("move", dt.Move_Goal), ("grasp", dt.Grasp_Goal)):
                self._gripper_writers[kind] = ep.writer(settings.gripper_topic(kind), struct, names.COMMAND_QOS)
        else:
            self.state.needs_gripper = False
        self._read_lock = threading.Lock()
        self.frames = CameraFrames(cameras, settings.camera_topic)
        for name, topic in self.frames.topics.items():
            ep.reader(topic, dt.CompressedImage, names.SENSOR_QOS,
                      lambda msg, received, name=name: self.frames.on_message(name, msg))

    def __str__(self) -> str:
        interface = f", {self.settings.command_interface}" if self.settings.profile == "ros2" else ""
        return (f"{self.state_topic} (DDS domain {self.endpoint.domain_id}); commands to {self.command_topic} "
                f"({self.settings.profile}{interface})")

    def _on_low_state(self, msg: dt.LowState_, received: float) -> None:
        unitree.store_low_state(self.state, msg, self.hw, received)

    def poll(self) -> None:
        """Take the newest sample of every state topic into the assembler (thread-safe)."""
        with self._read_lock:
            for latest, handler in self._readers:
                got = latest.take()
                if got is not None:
                    handler(*got)

    # RobotInterface
    def read_state(self) -> RobotState:
        self.poll()
        state = self.state.latest()
        if state is None:
            raise RuntimeError(f"no robot state received yet on {self.state_topic} (domain {self.endpoint.domain_id})")
        return self.frames.attach(state)

    def send_command(self, command: JointCommand) -> None:
        if self._writer is None:
            raise RuntimeError("DdsRobot is closed")
        if self.settings.profile == "unitree":
            msg = unitree.low_cmd_message(command, self.hw)
        else:
            if self.gripper is not None:
                command = self._send_gripper(command)
            msg = self._encode(command)
        self._writer.write(msg)
        self.sent += 1

    def _send_gripper(self, command: JointCommand) -> JointCommand:
        """Send the gripper the goal its joint's target calls for (if any); the command without that joint."""
        goal, arm = self.gripper.split(command)
        if goal is not None:
            self._gripper_writers[goal.kind].write(goal_message(dt.gripper_message_types(), goal))
            self.gripper_goals.append(goal)
        return arm

    def take_control(self) -> None:
        """unitree profile: release the onboard sport-mode controller (transport.dds.sport_mode); ValueError
        (one line) when it stays active. Called before the first command (robo_rl.deploy.robot.take_control)."""
        if self.settings.profile != "unitree" or self.settings.sport_mode == "none":
            return
        self._switcher = MotionSwitcherClient(self.endpoint)
        self.released_mode = release_sport_mode(self._switcher)

    def close(self) -> None:
        """Select the released sport mode again if the hardware file asks (`sport_mode: restore`), then drop this
        robot's readers and writer (and the endpoint if it made it); see DdsEndpoint.close."""
        if self._switcher is not None and self.released_mode and self.settings.sport_mode == "restore":
            restore_sport_mode(self._switcher, self.released_mode)
        self._switcher = None
        self._readers = []  # also breaks the cycle robot -> handler (a bound method) -> robot
        self._writer = None
        self._gripper_writers = {}
        if self._own_endpoint:
            self.endpoint.close()

    def wait_for_state(self, timeout_s: float, *, fresh_within_s: float, clock: Callable[[], float] = time.monotonic,
                       poll_s: float = 0.01) -> RobotState:
        """The first complete state received within `fresh_within_s` of now; ValueError after `timeout_s`."""
        end = clock() + timeout_s
        while True:
            self.poll()
            state = self.state.latest()
            missing = self.frames.missing()
            if state is not None and clock() - state.received <= fresh_within_s and not missing:
                return self.frames.attach(state)
            if clock() > end:
                if state is not None and missing:
                    bad = self.endpoint.last_callback_error
                    raise ValueError(f"no camera frames on {', '.join(missing)} (DDS domain {self.endpoint.domain_id}) "
                                     f"within {timeout_s:g} s{'; last rejected: ' + bad if bad else ''}; does the "
                                     "camera driver (or `robo-rl twin --cameras`) publish them?")
                got = dict(self.state.received_count) or "nothing"
                why = f"; last rejected message: {self.state.last_error}" if self.state.last_error else ""
                raise ValueError(f"no fresh robot state on {self.state_topic} (DDS domain {self.endpoint.domain_id}) "
                                 f"within {timeout_s:g} s (received: {got}{why}); is the robot or `robo-rl twin` "
                                 f"running on this domain?")
            time.sleep(poll_s)
