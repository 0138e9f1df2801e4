"""The Go2 on the ROS 2 path: unitree_ros2's unitree_go/msg/LowCmd and LowState (their .msg texts, kept in
unitree_go_msg/) registered in `rosbags` serialize to the same CDR bytes as robo_rl's IDL structs, and the node's
field-copy adapter (robo_rl.deploy.transports.dds.unitree_ros) carries every value across, CRC included."""

import typing
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("cyclonedds", reason="needs cyclonedds (the dds extra)")
typesys = pytest.importorskip("rosbags.typesys", reason="needs rosbags (the dev extra)")

import cyclonedds.idl as idl  # noqa: E402
import cyclonedds.idl.types as idl_types  # noqa: E402

from robo_rl.deploy.hardware import load_hardware  # noqa: E402
from robo_rl.deploy.robot import JointCommand  # noqa: E402
from robo_rl.deploy.ros_messages import StateAssembler  # noqa: E402
from robo_rl.deploy.transports.dds import dds_types as dt  # noqa: E402
from robo_rl.deploy.transports.dds import unitree  # noqa: E402
from robo_rl.deploy.transports.dds import unitree_ros as ur  # noqa: E402
from tests.conftest import REPO  # noqa: E402

MSG_DIR = Path(__file__).parent / "unitree_go_msg"
GO2 = load_hardware(REPO / "hardware" / "go2.yaml")
STRUCTS = {"LowCmd": dt.LowCmd_, "MotorCmd": dt.MotorCmd_, "BmsCmd": dt.BmsCmd_, "LowState": dt.LowState_,
           "IMUState": dt.IMUState_, "MotorState": dt.MotorState_, "BmsState": dt.BmsState_}
IDL_TO_MSG = {"uint8": "uint8", "int8": "int8", "uint16": "uint16", "int16": "int16", "uint32": "uint32",
              "int32": "int32", "float32": "float32"}


def msg_fields(name: str) -> list[tuple[str, str]]:
    """(type, name) of each field of unitree_go_msg/<name>.msg."""
    lines = [line.split("#")[0].strip() for line in (MSG_DIR / f"{name}.msg").read_text().splitlines()]
    return [tuple(line.split()) for line in lines if line]


def idl_fields(cls) -> list[tuple[str, str]]:
    """(.msg-style type, name) of each field of our struct, uint8 where unitree_ros2 says int8 made signed."""
    out = []
    for name, tp in typing.get_type_hints(cls, include_extras=True).items():
        if isinstance(tp, type) and issubclass(tp, idl.IdlStruct):
            out.append((ur.ros_name(tp), name))
            continue
        meta = typing.get_args(tp)[1]
        if isinstance(meta, idl_types.array):
            sub = meta.subtype
            base = ur.ros_name(sub) if isinstance(sub, type) else IDL_TO_MSG[typing.get_args(sub)[1]]
            kind = f"{base}[{meta.length}]"
        else:
            kind = IDL_TO_MSG[meta]
        if name in ur.SIGNED_IN_ROS.get(cls.__name__, ()):
            kind = kind.replace("uint8", "int8")
        out.append((kind, name))
    return out


@pytest.fixture(scope="module")
def store():
    ts = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    types = {}
    for name in ur.MESSAGE_NAMES:
        types.update(typesys.get_types_from_msg((MSG_DIR / f"{name}.msg").read_text(), f"unitree_go/msg/{name}"))
    ts.register(types)
    return ts


def rosbags_classes(ts) -> dict:
    return {name: ts.types[f"unitree_go/msg/{name}"] for name in ur.MESSAGE_NAMES}


def namespace_classes() -> dict:
    return {name: (lambda **kw: SimpleNamespace(**kw)) for name in ur.MESSAGE_NAMES}


def filled(cls, rng: np.random.Generator):
    """Our struct with a random value in every field (within its type: uint8 up to 255, so the signed fields'
    two's complement is exercised)."""
    limits = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
              "uint32": (0, 2**32 - 1), "int32": (-2**31, 2**31 - 1)}

    def value(tp):
        if isinstance(tp, type) and issubclass(tp, idl.IdlStruct):
            return filled(tp, rng)
        meta = typing.get_args(tp)[1]
        if isinstance(meta, idl_types.array):
            return [value(meta.subtype) for _ in range(meta.length)]
        if meta == "float32":
            return float(np.float32(rng.normal()))
        lo, hi = limits[meta]
        return int(rng.integers(lo, hi, endpoint=True))

    return cls(**{name: value(tp) for name, tp in typing.get_type_hints(cls, include_extras=True).items()})


@pytest.mark.parametrize("name", ur.MESSAGE_NAMES)
def test_msg_field_lists_match_our_structs(name):
    assert msg_fields(name) == idl_fields(STRUCTS[name])


@pytest.mark.parametrize("cls", [dt.LowCmd_, dt.LowState_], ids=lambda c: c.__name__)
def test_cdr_bytes_equal_and_values_round_trip(store, cls):
    rng = np.random.default_rng(3)
    for _ in range(5):
        ours = filled(cls, rng)
        ours.crc = unitree.unitree_crc(ours)
        theirs = ur.to_ros(ours, rosbags_classes(store))
        ros_type = f"unitree_go/msg/{ur.ros_name(cls)}"
        cdr = bytes(store.serialize_cdr(theirs, ros_type))
        mine = ours.serialize()
        assert mine[: len(cdr)] == cdr and mine[len(cdr):] == b"\x00" * (len(mine) - len(cdr))
        back = ur.from_ros(store.deserialize_cdr(cdr, ros_type), cls)
        assert back.serialize() == mine and unitree.unitree_crc(back) == ours.crc


def test_the_node_sends_the_dds_paths_lowcmd_and_reads_lowstate(store):
    rng = np.random.default_rng(5)
    n = len(GO2.joint_names)
    cmd = JointCommand(GO2.joint_names, rng.normal(size=n), rng.normal(size=n), rng.uniform(0, 50, n),
                       rng.uniform(0, 2, n), rng.normal(size=n))
    for classes in (rosbags_classes(store), namespace_classes()):
        ros_cmd = ur.low_cmd_to_ros(cmd, GO2, classes)
        assert ur.low_cmd_from_ros(ros_cmd).serialize() == unitree.low_cmd_message(cmd, GO2).serialize()
        applied = unitree.read_low_cmd(ur.low_cmd_from_ros(ros_cmd), GO2)  # CRC verified, as the robot does
        np.testing.assert_allclose(applied.q, cmd.q.astype(np.float32))
    sdk_state = filled(dt.LowState_, rng)
    sdk_state.crc = unitree.unitree_crc(sdk_state)
    ros_state = ur.low_state_to_ros(sdk_state, namespace_classes())
    assert ros_state.motor_state[0].temperature == np.int8(np.uint8(sdk_state.motor_state[0].temperature))
    state = StateAssembler(GO2, needs_imu=True, needs_ee=False, clock=lambda: 7.0)
    ur.store_ros_low_state(state, ros_state, GO2)
    got = state.latest()
    assert got is not None and got.received == 7.0 and got.joint_names == GO2.joint_names
    np.testing.assert_array_equal(got.q, np.float32([m.q for m in sdk_state.motor_state[:n]]))
    ros_state.motor_state[0].q = 1.0  # corrupted on the way: the CRC no longer holds
    ur.store_ros_low_state(state, ros_state, GO2)
    assert state.rejected["lowstate"] == 1 and "CRC mismatch" in state.last_error
