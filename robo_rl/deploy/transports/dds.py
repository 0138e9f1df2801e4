"""DdsRobot: the RobotInterface over pip Cyclone DDS, wire-compatible with ROS 2 nodes (no ROS install).

Two profiles, chosen in the hardware file (`transport.dds.profile`):

- `ros2`: ROS 2 topic and type names (`rt/joint_states`, `sensor_msgs::msg::dds_::JointState_`), `@final`
  structs (plain CDR), ROS 2's QoS conventions (state: best effort, keep last 1; commands: reliable,
  keep last 1). State from `joint_states` (+ `imu` for legged robots, `ee_position` for arms whose
  policy observes it); commands on the topic of the chosen command interface (ros_interface).
- `unitree`: Unitree's low-level SDK topics `rt/lowstate` / `rt/lowcmd` with its message types and CRC,
  so a Go2 runs with no ROS at all.

`DdsTwinServer` serves any RobotInterface (the MuJoCo twin) on the same topics; `DdsOperatorLink`
carries the operator's side (e-stop, operator requests, cmd_vel, target_pose) and publishes diagnostics
and episode events. All names come from `robo_rl.deploy.ros_interface`.

Networking: Cyclone DDS reads its configuration from CYCLONEDDS_URI when a domain is first joined in a
process. `loopback_config()` keeps all traffic on this machine (interface `lo`, no multicast, peer
localhost): what the tests and benchmarks use, and how to rehearse against the twin on one computer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from cyclonedds.core import Listener
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotInterface, RobotState
from robo_rl.deploy.ros_interface import QosSpec, TopicSpec
from robo_rl.deploy.transports import dds_types as dt
from robo_rl.deploy.transports import unitree

PROFILES = ("ros2", "unitree")
MAX_DOMAIN_ID = 232
"""Largest DDS domain id whose ports fit in 16 bits (7400 + 250 * id + offsets)."""


def loopback_config(max_participants: int = 20) -> str:
    """A CYCLONEDDS_URI value that keeps DDS on the loopback interface: no multicast, peer localhost.

    Discovery then probes `max_participants` participant indices on localhost per domain.
    """
    return ("<CycloneDDS><Domain id=\"any\"><General><Interfaces><NetworkInterface name=\"lo\"/></Interfaces>"
            "<AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex>"
            f"<MaxAutoParticipantIndex>{int(max_participants)}</MaxAutoParticipantIndex>"
            "<Peers><Peer address=\"localhost\"/></Peers></Discovery></Domain></CycloneDDS>")


def check_domain_id(domain_id: int) -> int:
    """`domain_id` if it is an int in [0, MAX_DOMAIN_ID]; ValueError otherwise."""
    if isinstance(domain_id, bool) or not isinstance(domain_id, int) or not 0 <= domain_id <= MAX_DOMAIN_ID:
        raise ValueError(f"domain_id {domain_id!r}: must be an integer in [0, {MAX_DOMAIN_ID}]")
    return domain_id


# ---------------------------------------------------------------------------------------------- settings
@dataclass(frozen=True, kw_only=True)
class DdsSettings:
    """The `transport.dds` section of a hardware file (every key optional)."""

    profile: str = "ros2"
    """`ros2` (ROS 2 topics and types) or `unitree` (rt/lowstate, rt/lowcmd with CRC)."""
    namespace: str = ""
    """ROS 2 namespace the topics resolve in ("" or "/name"); ros2 profile."""
    command_interface: str = "pd_targets"
    """ros2 profile: forward_position, joint_trajectory or pd_targets (see ros_interface.COMMAND_TOPICS)."""
    state_topic: str | None = None
    """ros2: joint state topic (default joint_states); unitree: the DDS topic (default rt/lowstate)."""
    imu_topic: str | None = None
    """ros2: IMU topic (default imu), legged robots."""
    ee_topic: str | None = None
    """ros2: end-effector position topic (default ee_position), used when the policy observes ee_pos."""
    command_topic: str | None = None
    """ros2: command topic (default: the command interface's); unitree: the DDS topic (default rt/lowcmd)."""

    @classmethod
    def from_hardware(cls, hw: HardwareSpec, **overrides: Any) -> DdsSettings:
        """Settings from `hw.transport["dds"]`, then `overrides` (None values ignored); validated.

        Raises:
            ValueError: an unknown key or a bad value (one line naming it).
        """
        raw = dict(hw.transport.get("dds") or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"hardware {hw.robot!r}: unknown transport.dds key(s) {', '.join(unknown)}; "
                             f"valid keys: {', '.join(sorted(known))}")
        raw.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**raw)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"transport.dds.profile {self.profile!r}: allowed values are {', '.join(PROFILES)}")
        rm.check_command_interface(self.command_interface)
        if self.namespace and not self.namespace.startswith("/"):
            raise ValueError(f"transport.dds.namespace {self.namespace!r}: must be empty or start with '/'")

    def state_topics(self) -> dict[str, str]:
        """DDS names of the state topics by role ("joints", "imu", "ee")."""
        if self.profile == "unitree":
            return {"joints": self.state_topic or names.UNITREE_STATE_TOPIC}
        return {
            "joints": names.dds_topic_name(self.state_topic or names.JOINT_STATES.name, self.namespace),
            "imu": names.dds_topic_name(self.imu_topic or names.IMU_TOPIC.name, self.namespace),
            "ee": names.dds_topic_name(self.ee_topic or names.EE_POSITION.name, self.namespace),
        }

    def command_topic_name(self) -> str:
        if self.profile == "unitree":
            return self.command_topic or names.UNITREE_COMMAND_TOPIC
        spec = names.COMMAND_TOPICS[self.command_interface]
        return names.dds_topic_name(self.command_topic or spec.name, self.namespace)

    def topic(self, spec: TopicSpec) -> str:
        """DDS name of an operator / monitoring topic in this namespace."""
        return spec.dds_name(self.namespace)


# ---------------------------------------------------------------------------------------------- endpoint
def _qos(spec: QosSpec) -> Qos:
    reliability = (Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100)) if spec.reliable
                   else Policy.Reliability.BestEffort)
    # XCDR1 (plain CDR) only: what ROS 2's rmw layers send and expect.
    return Qos(reliability, Policy.History.KeepLast(spec.depth),
               Policy.DataRepresentation(use_cdrv0_representation=True, use_xcdrv2_representation=False))


class DdsEndpoint:
    """One DomainParticipant and the readers and writers made on it; `close` deletes them all.

    Readers deliver every sample to a callback from Cyclone DDS's listener thread, with the receive time
    (time.monotonic()) taken as the sample is taken.
    """

    def __init__(self, domain_id: int = 0):
        self.domain_id = check_domain_id(domain_id)
        self._participant: DomainParticipant | None = DomainParticipant(domain_id)
        self._topics: dict[str, Topic] = {}
        self._entities: list[Any] = []
        self._latest: list[LatestSample] = []
        self._slots: list[list[Callable[[Any, float], None]]] = []
        self.callback_errors = 0
        self.last_callback_error: str | None = None

    def _topic(self, name: str, struct: type) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = Topic(self._participant, name, struct)
        elif topic.data_type is not struct:
            raise ValueError(f"DDS topic {name!r} already carries {topic.data_type.__name__}, not {struct.__name__}")
        return topic

    def writer(self, name: str, struct: type, qos: QosSpec) -> DataWriter:
        w = DataWriter(self._participant, self._topic(name, struct), qos=_qos(qos))
        self._entities.append(w)
        return w

    def reader(self, name: str, struct: type, qos: QosSpec, on_sample: Callable[[Any, float], None]) -> DataReader:
        """A reader calling on_sample(sample, received) for every sample, from the listener thread."""

        slot = [on_sample]  # emptied by close(): see there

        def on_data_available(reader: DataReader) -> None:
            for sample in reader.take(N=64):
                if not slot:
                    return
                try:
                    slot[0](sample, time.monotonic())
                except Exception as exc:  # a bad sample must not kill the listener thread; counted instead
                    self.callback_errors += 1
                    self.last_callback_error = f"{name}: {type(exc).__name__}: {exc}"

        self._slots.append(slot)
        listener = Listener(on_data_available=on_data_available)
        r = DataReader(self._participant, self._topic(name, struct), qos=_qos(qos), listener=listener)
        self._entities.append((r, listener))
        return r

    def latest_reader(self, name: str, struct: type, qos: QosSpec) -> LatestSample:
        """A reader whose newest sample is taken (and deserialized) only when asked for: `LatestSample.take`.

        Its listener only notes the arrival time, so a robot publishing at 500 Hz costs the control process
        one deserialization per control tick instead of one per message.
        """
        latest = LatestSample()
        listener = Listener(on_data_available=lambda reader: latest.arrived(time.monotonic()))
        latest.reader = DataReader(self._participant, self._topic(name, struct), qos=_qos(qos), listener=listener)
        self._entities.append((latest.reader, listener))
        self._latest.append(latest)
        return latest

    def close(self) -> None:
        """Delete the participant and everything on it (idempotent).

        By reference counting, readers and writers first, the participant last. Nothing holding an entity
        may stay reachable only through a reference cycle (cyclonedds's Listener is one): the garbage
        collector clears the weak registry entries of such objects before their finaliser runs, and
        cyclonedds's finaliser then skips the DDS delete, leaving the participant and its threads running.
        So the callbacks are taken out of the listeners here, and the objects using this endpoint
        (DdsRobot, DdsOperatorLink, DdsTwinServer) must be dropped by the caller too.
        """
        for slot in self._slots:
            slot.clear()  # the callbacks (and what they hold: writers, the participant) leave the listeners
        self._slots.clear()
        for latest in self._latest:
            latest.reader = None  # breaks reader -> listener -> latest -> reader
        self._latest.clear()
        self._entities.clear()
        self._topics.clear()
        self._participant = None


class LatestSample:
    """The newest sample of a keep-last-1 reader and when it arrived (see DdsEndpoint.latest_reader)."""

    def __init__(self):
        self.reader: DataReader | None = None
        self._arrived = 0.0
        self.count = 0

    def arrived(self, when: float) -> None:
        self._arrived = when
        self.count += 1

    def take(self) -> tuple[Any, float] | None:
        """(newest sample, its arrival time on time.monotonic()) if one came since the last take, else None."""
        reader = self.reader
        if reader is None:  # the endpoint was closed
            return None
        samples = reader.take(N=1)
        if not samples:
            return None
        return samples[-1], self._arrived


# ---------------------------------------------------------------------------------------------- robot
class DdsRobot:
    """RobotInterface over DDS (profile `ros2` or `unitree`), for a real robot or `robo-rl twin`.

    Args:
        hw: the robot.
        settings: topics, profile and command interface (`DdsSettings.from_hardware(hw)`).
        control_dt: control period (s); a joint_trajectory point is reached one period later.
        endpoint: the participant to use (shared with a DdsOperatorLink); one is made when None.
        needs_ee: wait for end-effector positions too (policies observing ee_pos).
    """

    def __init__(self, hw: HardwareSpec, settings: DdsSettings, *, control_dt: float,
                 endpoint: DdsEndpoint | None = None, domain_id: int = 0, needs_ee: bool = False):
        self.hw = hw
        self.settings = settings
        self.control_dt = control_dt
        self._own_endpoint = endpoint is None
        self.endpoint = endpoint or DdsEndpoint(domain_id)
        self.types = dt.dds_message_types()
        legged = hw.kind == "legged"
        self.state = rm.StateAssembler(hw, needs_imu=legged, needs_ee=needs_ee and settings.profile == "ros2")
        self.sent = 0
        self.send_errors = 0
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
        self._read_lock = threading.Lock()

    def _on_low_state(self, msg: dt.LowState_, received: float) -> None:
        try:
            q, dq, tau, quat, gyro, stamp = unitree.read_low_state(msg, self.hw)
        except ValueError as exc:
            self.state._reject("lowstate", exc)
            return
        if self.hw.quaternion_order == "xyzw":
            quat = np.array([quat[1], quat[2], quat[3], quat[0]])
        self.state.set_joints(self.hw.joint_names, q, dq, tau, stamp, received)
        self.state.set_imu(quat, gyro, received)

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
        return state

    def send_command(self, command: JointCommand) -> None:
        if self._writer is None:
            raise RuntimeError("DdsRobot is closed")
        if self.settings.profile == "unitree":
            msg = unitree.low_cmd_message(command, self.hw)
        else:
            msg = rm.encode_command(self.types, self.settings.command_interface, command, self.control_dt)
        self._writer.write(msg)
        self.sent += 1

    def close(self) -> None:
        """Drop this robot's readers and writer (and the endpoint if it made it); see DdsEndpoint.close."""
        self._readers = []  # also breaks the cycle robot -> handler (a bound method) -> robot
        self._writer = None
        if self._own_endpoint:
            self.endpoint.close()

    def wait_for_state(self, timeout_s: float, *, fresh_within_s: float, clock: Callable[[], float] = time.monotonic,
                       poll_s: float = 0.01) -> RobotState:
        """The first complete state received within `fresh_within_s` of now; ValueError after `timeout_s`."""
        end = clock() + timeout_s
        while True:
            self.poll()
            state = self.state.latest()
            if state is not None and clock() - state.received <= fresh_within_s:
                return state
            if clock() > end:
                got = dict(self.state.received_count) or "nothing"
                why = f"; last rejected message: {self.state.last_error}" if self.state.last_error else ""
                raise ValueError(f"no fresh robot state on {self.state_topic} (DDS domain {self.endpoint.domain_id}) "
                                 f"within {timeout_s:g} s (received: {got}{why}); is the robot or `robo-rl twin` "
                                 f"running on this domain?")
            time.sleep(poll_s)


# ---------------------------------------------------------------------------------------------- operator side
class OperatorHandler:
    """What the operator link calls (PolicyRuntime implements it)."""

    def estop(self) -> None: ...

    def request(self, word: str) -> None: ...

    def set_velocity_command(self, command: np.ndarray, received: float) -> None: ...

    def set_target(self, position: np.ndarray) -> None: ...


class DdsOperatorLink:
    """The operator's topics over DDS: e-stop, operator requests, cmd_vel, target_pose in; diagnostics,
    episode events, observation and action out (names from ros_interface, resolved in the namespace).

    The e-stop is handled at once on the listener thread; operator words are queued for the caller
    (`requests()`), because some (reset) take seconds.
    """

    def __init__(self, endpoint: DdsEndpoint, settings: DdsSettings, handler: OperatorHandler):
        self.endpoint = endpoint
        self.handler = handler
        self.types = dt.dds_message_types()
        self._queue: list[str] = []
        self._lock = threading.Lock()
        self.rejected = 0
        t = settings.topic
        endpoint.reader(t(names.ESTOP), dt.Bool, names.ESTOP.qos, self._on_estop)
        endpoint.reader(t(names.OPERATOR), dt.String, names.OPERATOR.qos, self._on_operator)
        endpoint.reader(t(names.CMD_VEL), dt.Twist, names.CMD_VEL.qos, self._on_cmd_vel)
        endpoint.reader(t(names.TARGET_POSE), dt.PoseStamped, names.TARGET_POSE.qos, self._on_target)
        self._diagnostics = endpoint.writer(t(names.DIAGNOSTICS), dt.DiagnosticArray, names.DIAGNOSTICS.qos)
        self._events = endpoint.writer(t(names.EPISODE_EVENTS), dt.String, names.EPISODE_EVENTS.qos)
        self._observation = endpoint.writer(t(names.OBSERVATION), dt.Float32MultiArray, names.OBSERVATION.qos)
        self._action = endpoint.writer(t(names.ACTION), dt.Float64MultiArray, names.ACTION.qos)

    def _on_estop(self, msg: dt.Bool, received: float) -> None:
        if msg.data:
            self.handler.estop()

    def _on_operator(self, msg: dt.String, received: float) -> None:
        with self._lock:
            self._queue.append(str(msg.data).strip())

    def _on_cmd_vel(self, msg: dt.Twist, received: float) -> None:
        self.handler.set_velocity_command(rm.velocity_command(msg), received)

    def _on_target(self, msg: dt.PoseStamped, received: float) -> None:
        self.handler.set_target(rm.read_point(msg))

    def requests(self) -> list[str]:
        """Operator words received since the last call, oldest first."""
        with self._lock:
            out, self._queue = self._queue, []
        return out

    def publish_diagnostics(self, stamp: float, level: str, message: str, values: Mapping[str, object]) -> None:
        self._diagnostics.write(rm.diagnostic_array_message(self.types, stamp, names.POLICY_NODE, level, message,
                                                            values))

    def publish_event(self, text: str) -> None:
        self._events.write(rm.string_message(self.types, text))

    def publish_record(self, observation: np.ndarray | None, command: JointCommand) -> None:
        if observation is not None:
            self._observation.write(rm.multi_array_message(self.types, observation, ("obs",), float32=True))
        rows = np.stack([command.q, command.dq, command.kp, command.kd, command.tau])  # (5, J)
        self._action.write(rm.multi_array_message(self.types, rows, ("command", "joints")))


# ---------------------------------------------------------------------------------------------- twin server
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
    """

    def __init__(self, robot: RobotInterface, hw: HardwareSpec, settings: DdsSettings, endpoint: DdsEndpoint, *,
                 rate_hz: float = 200.0, base_twist: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None):
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
        self._base_twist = base_twist
        topics = settings.state_topics()
        if settings.profile == "unitree":
            self._state_writers = {"low": endpoint.writer(topics["joints"], dt.LowState_, names.SENSOR_QOS)}
            endpoint.reader(settings.command_topic_name(), dt.LowCmd_, names.COMMAND_QOS, self._on_low_cmd)
        else:
            self._state_writers = {"joints": endpoint.writer(topics["joints"], dt.JointState, names.SENSOR_QOS)}
            if hw.kind == "legged":
                self._state_writers["imu"] = endpoint.writer(topics["imu"], dt.Imu, names.SENSOR_QOS)
            else:
                self._state_writers["ee"] = endpoint.writer(topics["ee"], dt.PointStamped, names.SENSOR_QOS)
            struct = dt.ROS_STRUCTS[names.COMMAND_TOPICS[settings.command_interface].ros_type]
            endpoint.reader(settings.command_topic_name(), struct, names.COMMAND_QOS, self._on_command)
        self._twist_writer = (endpoint.writer(settings.topic(names.TWIN_BASE_TWIST), dt.Twist, names.SENSOR_QOS)
                              if base_twist is not None else None)

    def _reject(self, exc: Exception) -> None:
        self.rejected += 1
        self.last_error = str(exc)

    def _on_command(self, msg: Any, received: float) -> None:
        try:
            cmd = rm.decode_command(msg, self.settings.command_interface, self.hw)
        except ValueError as exc:
            self._reject(exc)
            return
        self._apply(cmd)

    def _on_low_cmd(self, msg: dt.LowCmd_, received: float) -> None:
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
            for role, msg in rm.twin_state_messages(t, state, self.hw).items():
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
