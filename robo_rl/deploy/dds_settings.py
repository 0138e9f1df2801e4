"""The `transport.dds` section of a hardware file, DDS domain ids, and the loopback network configuration.

Both ways of reaching a robot read the same section: the plain-DDS transport (`DdsSettings.state_topics`,
`command_topic_name`: DDS names) and the ROS 2 node in ros_ws (`DdsSettings.ros_topics`: ROS 2 names, see there
how `namespace` maps; `for_ros_node`: which profile an explicit command interface selects).

Networking: Cyclone DDS reads its configuration from CYCLONEDDS_URI when a domain is first joined in a
process. `loopback_config()` keeps all traffic on this machine (interface `lo`, no multicast, peer
localhost): what the tests and benchmarks use, and how to rehearse against the twin on one computer.
This module needs no cyclonedds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from robo_rl.deploy import ros_commands as rc
from robo_rl.deploy import ros_interface as names
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.ros_interface import TopicSpec

PROFILES = ("ros2", "unitree")
SPORT_MODE_POLICIES = ("release", "restore", "none")
"""transport.dds.sport_mode values (robo_rl.deploy.transports.dds.motion_switcher)."""
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
    camera_topics: dict[str, str] | None = None
    """Camera name -> its sensor_msgs/CompressedImage topic (default `<camera>/image/compressed`, in the namespace):
    the frames a policy or a reward classifier reads."""
    gripper_namespace: str = "panda_gripper"
    """The gripper node's name (hardware gripper.namespace; set from it, not a transport.dds key)."""
    sport_mode: str = "release"
    """unitree: the onboard sport-mode controller: `release` it through the motion switcher before control (refused,
    one line, when it stays active), `restore` (release, then select the same mode again at exit) or `none` (a robot
    or simulator bridge without a motion switcher)."""

    @classmethod
    def from_hardware(cls, hw: HardwareSpec, **overrides: Any) -> DdsSettings:
        """Settings from `hw.transport["dds"]`, then `overrides` (None values ignored); validated.

        Raises:
            ValueError: an unknown key or a bad value (one line naming it).
        """
        raw = dict(hw.transport.get("dds") or {})
        known = set(cls.__dataclass_fields__) - {"gripper_namespace"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"hardware {hw.robot!r}: unknown transport.dds key(s) {', '.join(unknown)}; "
                             f"valid keys: {', '.join(sorted(known))}")
        raw.update({k: v for k, v in overrides.items() if v is not None})
        if hw.gripper is not None:
            raw["gripper_namespace"] = hw.gripper.namespace
        settings = cls(**raw)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"transport.dds.profile {self.profile!r}: allowed values are {', '.join(PROFILES)}")
        rc.check_command_interface(self.command_interface)
        if self.sport_mode not in SPORT_MODE_POLICIES:
            raise ValueError(f"transport.dds.sport_mode {self.sport_mode!r}: allowed values are "
                             f"{', '.join(SPORT_MODE_POLICIES)}")
        if self.namespace and not self.namespace.startswith("/"):
            raise ValueError(f"transport.dds.namespace {self.namespace!r}: must be empty or start with '/'")
        if self.camera_topics is not None and not (isinstance(self.camera_topics, dict) and all(
                isinstance(k, str) and isinstance(v, str) and k and v for k, v in self.camera_topics.items())):
            raise ValueError(f"transport.dds.camera_topics {self.camera_topics!r}: a mapping of camera name to topic")

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

    def gripper_topic(self, role: str) -> str:
        """DDS name of the gripper's topic of `role` ("move", "grasp", "state"; ros_interface.GRIPPER_TOPICS), under
        the hardware's gripper.namespace, resolved in this namespace."""
        return names.gripper_topic(self.gripper_namespace, role).dds_name(self.namespace)

    def camera_topic(self, camera: str) -> str:
        """DDS name of camera `camera`'s CompressedImage topic (camera_topics, else `<camera>/image/compressed`)."""
        return names.dds_topic_name(self._camera_topic_name(camera), self.namespace)

    def _camera_topic_name(self, camera: str) -> str:
        """Camera `camera`'s topic as the hardware file names it (camera_topics), else `<camera>/image/compressed`."""
        return (self.camera_topics or {}).get(camera) or names.camera_topic(camera).name

    def _place_ros(self, topic: str) -> str:
        """A ROS 2 topic of the robot's, placed as `ros_topics` says: in `namespace` when set, else as written."""
        return names.resolve_topic(topic, self.namespace) if self.namespace else topic

    def topic(self, spec: TopicSpec) -> str:
        """DDS name of an operator / monitoring topic in this namespace."""
        return spec.dds_name(self.namespace)

    def ros_topics(self) -> dict[str, str]:
        """ROS 2 names of the robot's topics by role ("joints", "imu", "ee", "command"), as the rclpy node creates them.

        ros2 profile: with `namespace` empty a name stays as written, so a relative one (`joint_states`) resolves in
        the node's own namespace (the launch argument `namespace`), exactly as a plain-DDS deploy without a namespace
        finds `rt/joint_states`; with `namespace` set, relative names resolve in it and become absolute (the robot's
        topics stay where the robot publishes them, whatever namespace the node runs in). Absolute names stay as they
        are. unitree profile: the DDS names as ROS 2 names (`rt/lowstate` -> `/lowstate`, unitree_ros2's). The
        operator's and the node's own topics (estop, cmd_vel, `~/...`) always resolve in the node's namespace.
        """
        if self.profile == "unitree":
            return {"joints": names.ros_topic_name(self.state_topic or names.UNITREE_STATE_TOPIC),
                    "command": names.ros_topic_name(self.command_topic or names.UNITREE_COMMAND_TOPIC)}
        spec = names.COMMAND_TOPICS[self.command_interface]
        place = self._place_ros
        return {"joints": place(self.state_topic or names.JOINT_STATES.name),
                "imu": place(self.imu_topic or names.IMU_TOPIC.name),
                "ee": place(self.ee_topic or names.EE_POSITION.name),
                "command": place(self.command_topic or spec.name)}

    def ros_camera_topic(self, camera: str) -> str:
        """ROS 2 name of camera `camera`'s CompressedImage topic (camera_topics, else `<camera>/image/compressed`),
        placed as `ros_topics` places the robot's."""
        return self._place_ros(self._camera_topic_name(camera))

    def gripper_ros_names(self) -> dict[str, str]:
        """ROS 2 names of franka_gripper's state topic ("state") and its actions ("move", "grasp"), under the hardware's
        gripper.namespace, placed as `ros_topics` places the arm's (relative without a namespace)."""
        ns = self.gripper_namespace.rstrip("/")
        out = {"state": f"{ns}/{names.GRIPPER_TOPICS['state'][0]}",
               **{kind: f"{ns}/{action}" for kind, action in names.GRIPPER_ACTIONS.items()}}
        return {role: self._place_ros(name) for role, name in out.items()}


TOPIC_KEYS = ("state_topic", "imu_topic", "ee_topic", "command_topic")
"""The per-profile topic overrides of `transport.dds` (DDS names for `unitree`, ROS 2 names for `ros2`)."""


def for_ros_node(hw: HardwareSpec, command_interface: str | None) -> DdsSettings:
    """The `transport.dds` section as the ROS 2 node uses it.

    No command interface (the parameter left empty): the file's profile and interface (a Go2: `unitree`, lowcmd).
    An explicit one selects the `ros2` profile with it (a ros2_control controller or the twin node); the topic overrides
    written for another profile (a `unitree` file's `rt/lowstate`) are then dropped, its namespace kept.

    Raises:
        ValueError: a bad `transport.dds` section or command interface (one line).
    """
    if not command_interface:
        return DdsSettings.from_hardware(hw)
    settings = DdsSettings.from_hardware(hw, command_interface=command_interface)
    if settings.profile == "ros2":
        return settings
    others = {key: None for key in TOPIC_KEYS}
    return replace(settings, profile="ros2", **others)
