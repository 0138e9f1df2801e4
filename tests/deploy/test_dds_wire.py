"""Wire format: what the DDS transport publishes equals ROS 2's CDR serialization (rosbags), byte for byte.

The same adapter functions (robo_rl.deploy.ros_messages) build each message twice, once with our Cyclone
DDS structs and once with rosbags' ROS 2 message classes; the bytes handed to the DDS writer must equal
rosbags' serialization. The reverse direction (ROS 2 bytes -> our structs -> adapters) is checked too,
and the names and QoS of ros_interface against ROS 2's conventions.
"""

import numpy as np
import pytest

pytest.importorskip("cyclonedds", reason="needs cyclonedds (the dds extra)")
rosbags_typesys = pytest.importorskip("rosbags.typesys", reason="needs rosbags (the dev extra)")

import cyclonedds.pub  # noqa: E402

from robo_rl.demos.rosbag_format import message_types  # noqa: E402
from robo_rl.deploy import ros_commands as rc  # noqa: E402
from robo_rl.deploy import ros_interface as names  # noqa: E402
from robo_rl.deploy import ros_messages as rm  # noqa: E402
from robo_rl.deploy.hardware import load_hardware  # noqa: E402
from robo_rl.deploy.robot import JointCommand  # noqa: E402
from robo_rl.deploy.transports.dds import dds_types as dt  # noqa: E402
from tests.conftest import REPO  # noqa: E402

STORES = [rosbags_typesys.Stores.ROS2_HUMBLE, rosbags_typesys.Stores.ROS2_JAZZY]
RNG = np.random.default_rng(7)
GO2 = load_hardware(REPO / "hardware" / "go2.yaml")


def rosbags_types(store) -> tuple[rm.MessageTypes, object]:
    ts = rosbags_typesys.get_typestore(store)
    return message_types(ts), ts


def _command(n: int) -> JointCommand:
    return JointCommand(tuple(f"j{i}" for i in range(n)), RNG.normal(size=n), RNG.normal(size=n),
                        RNG.uniform(0, 50, n), RNG.uniform(0, 2, n), RNG.normal(size=n))


def messages(types: rm.MessageTypes, seed: int) -> dict[str, object]:
    """One message of every type the deploy side uses, contents drawn from `seed` (identical per binding)."""
    rng = np.random.default_rng(seed)
    n = 12
    cmd = JointCommand(tuple(f"leg_{i}_joint" for i in range(n)), rng.normal(size=n), rng.normal(size=n),
                       rng.uniform(0, 50, n), rng.uniform(0, 2, n), rng.normal(size=n))
    stamp = float(rng.uniform(0, 1e6))
    quat = rng.normal(size=4)
    return {
        names.JOINT_STATE: rm.joint_state_message(types, cmd.joint_names, cmd.q, cmd.dq, cmd.tau, stamp),
        names.IMU: rm.imu_message(types, quat / np.linalg.norm(quat), rng.normal(size=3), stamp),
        names.TWIST: rm.twist_message(types, rng.normal(size=3), rng.normal(size=3)),
        names.POINT_STAMPED: rm.point_stamped_message(types, rng.normal(size=3), stamp, "panda_link0"),
        names.POSE_STAMPED: rm.pose_stamped_message(types, rng.normal(size=3), quat, stamp),
        names.FLOAT64_MULTI_ARRAY: rc.encode_command(types, "pd_targets", cmd, 0.02),
        names.FLOAT32_MULTI_ARRAY: rm.multi_array_message(types, rng.normal(size=45), ("obs",), float32=True),
        names.JOINT_TRAJECTORY: rc.encode_command(types, "joint_trajectory", cmd, 0.02),
        names.BOOL: rm.bool_message(types, True),
        names.STRING: rm.string_message(types, "start"),
        names.DIAGNOSTIC_ARRAY: rm.diagnostic_array_message(types, stamp, "robo_rl_policy", "warn", "DAMP (stale)",
                                                            {"mode": "DAMP", "ticks": 17, "period_p99_ms": 20.3}),
    }


@pytest.fixture
def captured_writes(monkeypatch):
    """The bytes DataWriter.write hands to the DDS layer, in order (the writer is not really called)."""
    out: list[bytes] = []

    def capture(ref, data):
        out.append(bytes(data))
        return 0

    monkeypatch.setattr(cyclonedds.pub, "ddspy_write", capture)
    return out


@pytest.mark.parametrize("store", STORES, ids=lambda s: s.name)
def test_published_bytes_equal_ros2_cdr(store, captured_writes, dds_domain):
    """Each message type, written through the transport's own DataWriter (plain CDR, QoS of its topic)."""
    from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint

    ros_types, ts = rosbags_types(store)
    ours = messages(dt.dds_message_types(), seed=3)
    theirs = messages(ros_types, seed=3)
    endpoint = DdsEndpoint(dds_domain)
    try:
        for ros_type in names.MESSAGE_TYPES:
            struct = dt.ROS_STRUCTS[ros_type]
            writer = endpoint.writer(f"rt/wire_test/{ros_type.replace('/', '_')}", struct, names.COMMAND_QOS)
            writer.write(ours[ros_type])
            sent = captured_writes[-1]
            expected = bytes(ts.serialize_cdr(theirs[ros_type], ros_type))
            assert expected[:4] == b"\x00\x01\x00\x00", ros_type  # CDR little endian (XCDR1), what ROS 2 sends
            # The writer pads the stream to a multiple of 4 bytes with zeros, as every CDR stream on the wire is.
            assert sent[: len(expected)] == expected, ros_type
            assert sent[len(expected):] == b"\x00" * (len(sent) - len(expected)) and len(sent) % 4 == 0, ros_type
    finally:
        endpoint.close()


@pytest.mark.parametrize("ros_type", names.MESSAGE_TYPES)
def test_ros2_bytes_read_back_through_our_structs(ros_type):
    """ROS 2's serialization deserializes into our struct and reads back to the same values."""
    ros_types, ts = rosbags_types(STORES[0])
    theirs = messages(ros_types, seed=11)[ros_type]
    ours = messages(dt.dds_message_types(), seed=11)[ros_type]
    back = dt.ROS_STRUCTS[ros_type].deserialize(bytes(ts.serialize_cdr(theirs, ros_type)))
    assert back == ours
    assert back.serialize() == bytes(ts.serialize_cdr(theirs, ros_type))


def test_type_and_topic_names_follow_ros2():
    for ros_type, struct in dt.ROS_STRUCTS.items():
        dds_name = names.dds_type_name(ros_type)
        assert struct.__idl_typename__.replace(".", "::") == dds_name
        pkg, _, name = ros_type.split("/")
        assert dds_name == f"{pkg}::msg::dds_::{name}_"
    assert set(dt.ROS_STRUCTS) == set(names.MESSAGE_TYPES)
    assert names.JOINT_STATES.dds_name() == "rt/joint_states"
    assert names.JOINT_STATES.dds_name("/go2") == "rt/go2/joint_states"
    assert names.ACTION.dds_name() == "rt/robo_rl_policy/action"
    assert names.DIAGNOSTICS.dds_name("/go2") == "rt/diagnostics"
    assert names.JOINT_STATES.dds_type == "sensor_msgs::msg::dds_::JointState_"
    assert names.SENSOR_QOS == names.QosSpec(reliable=False, depth=1)
    assert names.COMMAND_QOS == names.QosSpec(reliable=True, depth=1)
    for spec in names.COMMAND_TOPICS.values():
        assert spec.qos == names.COMMAND_QOS
    with pytest.raises(ValueError, match="expected 'package/msg/Name'"):
        names.dds_type_name("JointState")
    with pytest.raises(ValueError, match="must start with '/'"):
        names.dds_topic_name("imu", "go2")


# ---------------------------------------------------------------------------------------------- adapters
def test_joint_state_adapter_maps_by_name_and_refuses_short_arrays():
    types, _ = rosbags_types(STORES[0])
    names_ = ("b", "a")
    msg = rm.joint_state_message(types, names_, np.array([1.0, 2.0]), np.array([0.1, 0.2]), None, 12.5)
    got_names, q, dq, tau, stamp = rm.read_joint_state(msg)
    assert got_names == names_ and q.tolist() == [1.0, 2.0] and dq.tolist() == [0.1, 0.2]
    assert tau is None and stamp == 12.5
    short = rm.joint_state_message(types, names_, np.array([1.0, 2.0]), np.zeros(0), None, 0.0)
    with pytest.raises(ValueError, match="2 positions and 0 velocities for 2 names"):
        rm.read_joint_state(short)


def test_state_assembler_combines_parts_and_reports_the_oldest_receive_time():
    types, _ = rosbags_types(STORES[0])
    asm = rm.StateAssembler(GO2, needs_imu=True, needs_ee=False)
    names_ = tuple(reversed(GO2.joint_names))  # any order: the safety filter maps by name
    js = rm.joint_state_message(types, names_, np.arange(12.0), np.zeros(12), np.ones(12), 3.0)
    asm.on_joint_state(js, received=10.0)
    assert asm.latest() is None  # the IMU has not arrived yet
    asm.on_imu(rm.imu_message(types, np.array([1.0, 0, 0, 0]), np.array([0.1, 0.2, 0.3]), 3.0), received=9.5)
    state = asm.latest()
    assert state.joint_names == names_ and state.q.tolist() == list(np.arange(12.0))
    assert state.received == 9.5 and state.stamp == 3.0  # the IMU is the older part
    assert state.imu_quat.tolist() == [1.0, 0, 0, 0] and state.imu_gyro.tolist() == [0.1, 0.2, 0.3]
    bad = rm.joint_state_message(types, names_, np.arange(11.0), np.zeros(12), None, 4.0)
    asm.on_joint_state(bad, received=11.0)
    assert asm.rejected["joint_states"] == 1 and asm.latest().stamp == 3.0  # the bad message changed nothing


@pytest.mark.parametrize("interface", names.COMMAND_INTERFACES)
def test_command_encoding_round_trips_through_ros2_bytes(interface):
    """encode (rosbags classes) -> ROS 2 CDR -> our struct -> decode gives back what a driver must apply."""
    ros_types, ts = rosbags_types(STORES[1])
    hw = GO2
    n = len(hw.joint_names)
    cmd = JointCommand(hw.joint_names, RNG.normal(size=n), RNG.normal(size=n), RNG.uniform(0, 50, n),
                       RNG.uniform(0, 2, n), RNG.normal(size=n))
    msg = rc.encode_command(ros_types, interface, cmd, 0.02)
    ros_type = names.COMMAND_TOPICS[interface].ros_type
    ours = dt.ROS_STRUCTS[ros_type].deserialize(bytes(ts.serialize_cdr(msg, ros_type)))
    back = rc.decode_command(ours, interface, hw)
    np.testing.assert_array_equal(back.q, cmd.q)
    if interface == "pd_targets":  # the only interface that carries gains and torque
        for field in ("dq", "kp", "kd", "tau"):
            np.testing.assert_array_equal(getattr(back, field), getattr(cmd, field))
    else:  # position interfaces: the driver's own gains (the hardware file's)
        np.testing.assert_array_equal(back.kp, hw.kp)
        np.testing.assert_array_equal(back.kd, hw.kd)
    if interface == "joint_trajectory":  # the point moves on at the command's dq; the twin's loop brakes to rest
        assert msg.points[0].time_from_start.nanosec == 20_000_000
        np.testing.assert_array_equal(np.asarray(ours.points[0].velocities), cmd.dq)
        np.testing.assert_array_equal(back.dq, 0.0)


def test_decode_refuses_commands_that_do_not_fit_the_robot():
    types = dt.dds_message_types()
    with pytest.raises(ValueError, match=r"pd_targets: shape \(5, 11\), expected \(5, 12\)"):
        rc.decode_command(rm.multi_array_message(types, np.zeros((5, 11)), ("command", "joints")), "pd_targets", GO2)
    with pytest.raises(ValueError, match="forward_position: 3 values for 12 joints"):
        rc.decode_command(rm.multi_array_message(types, np.zeros(3), ("joints",)), "forward_position", GO2)
    with pytest.raises(ValueError, match="command_interface 'effort': allowed values are"):
        rc.decode_command(None, "effort", GO2)


def test_time_fields_follow_ros2_convention():
    assert rm.time_fields(1.5) == (1, 500_000_000)
    assert rm.time_fields(-0.25) == (-1, 750_000_000)  # nanosec always in [0, 1e9)
    with pytest.raises(ValueError, match="must be finite"):
        rm.time_fields(float("nan"))
