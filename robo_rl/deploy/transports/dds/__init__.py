"""The `dds` transport: pip Cyclone DDS, wire-compatible with ROS 2 nodes (no ROS install), for a real robot or
`robo-rl twin`.

One concern per module: `endpoint` (participant, readers, writers, QoS), `robot` (DdsRobot, the RobotInterface),
`operator` (the operator's topics), `twin_server` (the MuJoCo twin served on the robot's topics),
`dds_types` (the IDL structs) and `unitree` (Unitree's lowstate / lowcmd profile with its CRC: a profile of
this transport, chosen by the hardware file's `transport.dds.profile`, not a transport of its own). The hardware
file's `transport.dds` section, domain ids and the loopback configuration are in `robo_rl.deploy.dds_settings`
(no cyclonedds needed there: the ROS 2 node reads the same section).

Importing this package registers the transport (and imports cyclonedds): the deploy core does so only when
`dds` is chosen.
"""

from __future__ import annotations

from robo_rl.deploy.dds_settings import DdsSettings, check_domain_id
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import TRANSPORTS, ConnectOptions, Transport
from robo_rl.deploy.transports.dds.dds_robot import DdsRobot
from robo_rl.deploy.transports.dds.operator import DdsOperatorLink, OperatorHandler
from robo_rl.deploy.transports.dds.twin_server import serve_twin


def connect_dds(hw: HardwareSpec, options: ConnectOptions) -> DdsRobot:
    """A DdsRobot on its own participant (profile and topics from the hardware file); ValueError (one line)."""
    if not options.realtime:
        raise ValueError("transport dds runs in real time only (realtime=False is for the sim transport)")
    settings = DdsSettings.from_hardware(hw, command_interface=options.command_interface)
    if hw.controller.setpoint_rate_hz is not None and settings.command_interface != "joint_trajectory":
        raise ValueError(f"hardware {hw.robot!r}: its controller takes {hw.controller.setpoint_rate_hz:g} Hz setpoints "
                         f"(controller.setpoint_rate_hz), which command_interface {settings.command_interface} cannot "
                         "carry (one target per tick); use joint_trajectory")
    return DdsRobot(hw, settings, control_dt=options.control_dt, domain_id=check_domain_id(options.domain_id),
                    needs_ee=options.needs_ee, cameras=options.cameras)


def operator_link(robot: DdsRobot, handler: OperatorHandler) -> DdsOperatorLink:
    """The operator's topics on the robot's participant (closed with it)."""
    return DdsOperatorLink(robot.endpoint, robot.settings, handler)


TRANSPORTS.register("dds", Transport(connect=connect_dds, operator_link=operator_link, serve_twin=serve_twin,
                                     options=frozenset({"domain_id", "command_interface", "cameras"}),
                                     help="a real robot or `robo-rl twin` over DDS (ROS 2 wire format or Unitree's "
                                          "lowstate / lowcmd)"))
