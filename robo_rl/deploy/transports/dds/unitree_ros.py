"""Unitree's low-level messages on the ROS 2 path: unitree_ros2's `unitree_go/msg/LowState` / `LowCmd` <-> our structs.

The CRC and the conversions (`unitree.low_cmd_message`, `unitree.read_low_state`) work on the IDL structs of
dds_types. unitree_ros2's `unitree_go` interface package declares the same messages, with the same field names, order
and sizes (so the same CDR bytes, checked with `rosbags` in tests/ros_ws/test_unitree_go_messages.py); the rclpy node
copies each message field by field with `to_ros` / `from_ros`. One difference: unitree_ros2 declares a few fields
`int8` where the SDK's IDL has `uint8` (SIGNED_IN_ROS: temperatures): the bytes are the same, the values are copied
through two's complement, so the CRC still holds.

`classes` maps a message's name ("LowCmd", "MotorCmd", ...) to whatever builds it with keyword arguments: rclpy's
generated classes (`unitree_go.msg`), rosbags' dataclasses, or SimpleNamespace in a test. Needs cyclonedds (the IDL
structs): the node imports this module only for the `unitree` profile.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Mapping
from typing import Any

import cyclonedds.idl as idl
import cyclonedds.idl.types as idl_types
import numpy as np

from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand
from robo_rl.deploy.ros_messages import StateAssembler
from robo_rl.deploy.transports.dds import unitree
from robo_rl.deploy.transports.dds.dds_types import LowCmd_, LowState_

SIGNED_IN_ROS = {
    "IMUState_": frozenset({"temperature"}),
    "MotorState_": frozenset({"temperature"}),
    "BmsState_": frozenset({"bq_ntc", "mcu_ntc"}),
    "LowState_": frozenset({"temperature_ntc1", "temperature_ntc2"}),
}
"""Fields unitree_ros2 declares int8 where the SDK's IDL (our structs) has uint8, by struct."""
MESSAGE_NAMES = ("LowCmd", "MotorCmd", "BmsCmd", "LowState", "IMUState", "MotorState", "BmsState")
"""The unitree_go messages LowCmd and LowState are made of (what `classes` must hold)."""


def ros_name(cls: type) -> str:
    """unitree_go message name of an IDL struct: MotorCmd_ -> "MotorCmd"."""
    return cls.__name__.rstrip("_")


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, (kind, detail)) of every field of an IDL struct, in order; kinds: struct, structs, scalars, scalar."""
    out = []
    for name, tp in typing.get_type_hints(cls, include_extras=True).items():
        if isinstance(tp, type) and issubclass(tp, idl.IdlStruct):
            out.append((name, ("struct", tp)))
            continue
        meta = typing.get_args(tp)[1] if typing.get_origin(tp) is typing.Annotated else None
        if isinstance(meta, idl_types.array):
            sub = meta.subtype
            if isinstance(sub, type) and issubclass(sub, idl.IdlStruct):
                out.append((name, ("structs", sub)))
            else:
                out.append((name, ("scalars", typing.get_args(sub)[1])))
        elif isinstance(meta, str):
            out.append((name, ("scalar", meta)))
        else:
            raise TypeError(f"{cls.__name__}.{name}: no unitree_go field for type {tp!r}")
    return tuple(out)


def _to_signed(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.uint8).view(np.int8)


def to_ros(msg: idl.IdlStruct, classes: Mapping[str, Callable[..., Any]]) -> Any:
    """The unitree_go message of one of our structs (nested ones too), built with `classes`; numeric arrays as numpy
    arrays of the ROS field's type (what rclpy and rosbags take)."""
    signed = SIGNED_IN_ROS.get(type(msg).__name__, frozenset())
    fields: dict[str, Any] = {}
    for name, (kind, detail) in _fields(type(msg)):
        value = getattr(msg, name)
        if kind == "struct":
            fields[name] = to_ros(value, classes)
        elif kind == "structs":
            fields[name] = [to_ros(v, classes) for v in value]
        elif kind == "scalars":
            arr = np.array(list(value), dtype=detail)
            fields[name] = _to_signed(arr) if name in signed else arr
        else:
            fields[name] = int(_to_signed(np.array([value]))[0]) if name in signed else value
    return classes[ros_name(type(msg))](**fields)


def from_ros(msg: Any, cls: type[idl.IdlStruct]) -> idl.IdlStruct:
    """Our struct `cls` of a unitree_go message (any binding: read by field name)."""
    signed = SIGNED_IN_ROS.get(cls.__name__, frozenset())
    fields: dict[str, Any] = {}
    for name, (kind, detail) in _fields(cls):
        value = getattr(msg, name)
        if kind == "struct":
            fields[name] = from_ros(value, detail)
        elif kind == "structs":
            fields[name] = [from_ros(v, detail) for v in value]
        elif kind == "scalars":
            arr = np.asarray(value)
            arr = arr.astype(np.int8).view(np.uint8) if name in signed else arr.astype(detail)
            fields[name] = arr.tolist()
        elif name in signed:
            fields[name] = int(value) & 0xFF
        else:
            fields[name] = float(value) if detail.startswith("float") else int(value)
    return cls(**fields)


def low_cmd_to_ros(cmd: JointCommand, hw: HardwareSpec, classes: Mapping[str, Callable[..., Any]]) -> Any:
    """unitree_go/msg/LowCmd of a (filtered) command in the robot's joint order, CRC set (`unitree.low_cmd_message`)."""
    return to_ros(unitree.low_cmd_message(cmd, hw), classes)


def store_ros_low_state(state: StateAssembler, msg: Any, hw: HardwareSpec, received: float | None = None) -> None:
    """A unitree_go/msg/LowState into `state` (CRC checked: a bad one is counted as rejected, see
    `unitree.store_low_state`)."""
    unitree.store_low_state(state, from_ros(msg, LowState_), hw, received)


def low_state_to_ros(msg: LowState_, classes: Mapping[str, Callable[..., Any]]) -> Any:
    """unitree_go/msg/LowState of our struct (what a twin node publishes)."""
    return to_ros(msg, classes)


def low_cmd_from_ros(msg: Any) -> LowCmd_:
    """Our LowCmd_ of a unitree_go/msg/LowCmd (`unitree.read_low_cmd` checks its CRC)."""
    return from_ros(msg, LowCmd_)
