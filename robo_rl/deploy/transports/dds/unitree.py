"""Unitree's low-level DDS profile (`rt/lowstate`, `rt/lowcmd`): messages, CRC and conversions.

A Go2 (unitree_go LowState_ / LowCmd_) runs with no ROS at all: the deploy core reads LowState_ and
sends LowCmd_ with its CRC, as the vendor SDK does. Facts used (from the published unitree_sdk2 IDL and
its examples): the CRC is CRC-32 with polynomial 0x04C11DB7, initial value 0xFFFFFFFF, no reflection
and no final XOR (the "CRC-32/MPEG-2" parameters), computed over the message's C memory layout
(natural alignment, little endian) read as 32-bit words, every word but the last (the crc field
itself); a command carries head = (0xFE, 0xEF), level_flag = 0xFF (low-level) and motor mode 0x01
(servo) for driven motors; LowState_.tick counts milliseconds; the IMU quaternion is (w, x, y, z).
"""

from __future__ import annotations

import functools
import struct
import typing
import zlib
from typing import NamedTuple

import cyclonedds.idl as idl
import cyclonedds.idl.types as idl_types
import numpy as np

from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.ros_messages import StateAssembler
from robo_rl.deploy.transports.dds.dds_types import UNITREE_MOTORS, LowCmd_, LowState_, MotorCmd_

COMMAND_HEAD = (0xFE, 0xEF)
LOW_LEVEL_FLAG = 0xFF
SERVO_MODE = 0x01
TICK_S = 1e-3
"""LowState_.tick unit (s)."""
FOOT_FORCE_RANGE = (-(2**15), 2**15 - 1)
"""LowState_.foot_force is int16: what a twin's forces (N) are rounded and clipped into."""

_C_SCALARS = {"uint8": ("B", 1), "int8": ("b", 1), "uint16": ("H", 2), "int16": ("h", 2), "uint32": ("I", 4),
              "int32": ("i", 4), "float32": ("f", 4), "uint64": ("Q", 8), "int64": ("q", 8), "float64": ("d", 8)}


# ---------------------------------------------------------------------------------------------- CRC
def _reflect_byte(b: int) -> int:
    return int(f"{b:08b}"[::-1], 2)


_REFLECT = bytes(_reflect_byte(b) for b in range(256))


def crc32_mpeg2(data: bytes) -> int:
    """CRC-32/MPEG-2 of `data` (poly 0x04C11DB7, init 0xFFFFFFFF, MSB first, no final XOR).

    Computed with zlib's reflected CRC-32 on bit-reversed bytes (the two differ only by bit order and
    the final XOR), so it runs in C: a LowCmd_ takes microseconds, not the milliseconds a bit loop would.
    """
    reflected = zlib.crc32(data.translate(_REFLECT)) ^ 0xFFFFFFFF
    return int(f"{reflected:032b}"[::-1], 2)


def crc32_mpeg2_bitwise(data: bytes) -> int:
    """The same CRC one bit at a time: the reference the fast version is tested against."""
    crc = 0xFFFFFFFF
    for byte in data:
        for bit in range(7, -1, -1):
            top = (crc >> 31) ^ ((byte >> bit) & 1)
            crc = (crc << 1) & 0xFFFFFFFF
            if top:
                crc ^= 0x04C11DB7
    return crc


@functools.cache
def c_layout(cls: type) -> tuple[str, int, int]:
    """(struct format without byte order, size, alignment) of an IDL struct's C memory layout.

    Natural alignment: each scalar on a multiple of its size, a struct aligned to its widest member and
    padded at the end to that alignment, as a C compiler lays it out (the layout Unitree's CRC covers).
    """
    fmt, offset, align = [], 0, 1
    for tp in typing.get_type_hints(cls, include_extras=True).values():
        f, size, a = _field_layout(tp)
        pad = -offset % a
        fmt.append("x" * pad + f)
        offset += pad + size
        align = max(align, a)
    pad = -offset % align
    fmt.append("x" * pad)
    return "".join(fmt), offset + pad, align


def _field_layout(tp: object) -> tuple[str, int, int]:
    if isinstance(tp, type) and issubclass(tp, idl.IdlStruct):
        return c_layout(tp)
    meta = typing.get_args(tp)[1] if typing.get_origin(tp) is typing.Annotated else None
    if isinstance(meta, str) and meta in _C_SCALARS:
        code, size = _C_SCALARS[meta]
        return code, size, size
    if isinstance(meta, idl_types.array):
        f, size, a = _field_layout(meta.subtype)
        return f * meta.length, size * meta.length, a
    raise TypeError(f"no fixed C layout for field type {tp!r}")


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(typing.get_type_hints(cls))


def c_values(msg: idl.IdlStruct) -> list:
    """Every scalar of `msg` in declaration order (nested structs and arrays flattened)."""
    out: list = []
    _flatten(msg, out)
    return out


def _flatten(value: object, out: list) -> None:
    if isinstance(value, idl.IdlStruct):
        for name in _field_names(type(value)):
            _flatten(getattr(value, name), out)
    elif isinstance(value, (bytes, bytearray)):  # cyclonedds returns uint8 arrays as bytes
        out.extend(value)
    elif isinstance(value, (list, tuple)):
        if value and isinstance(value[0], (int, float)):
            out.extend(value)
        else:
            for v in value:
                _flatten(v, out)
    else:
        out.append(value)


def unitree_crc(msg: LowCmd_ | LowState_) -> int:
    """The CRC Unitree's firmware expects in `msg.crc` (the crc field itself is not covered)."""
    fmt, size, _ = c_layout(type(msg))
    packed = struct.pack("<" + fmt, *c_values(msg))  # C layout, little endian
    words = np.frombuffer(packed[: size - 4], dtype="<u4")  # every 32-bit word but the crc
    return crc32_mpeg2(words.astype(">u4").tobytes())  # each word fed most significant bit first


# ---------------------------------------------------------------------------------------------- conversions
def _check_joints(hw: HardwareSpec) -> int:
    n = len(hw.joint_names)
    if n > UNITREE_MOTORS:
        raise ValueError(f"hardware {hw.robot!r} has {n} joints; unitree_go messages hold {UNITREE_MOTORS} motors")
    return n


def low_cmd_message(cmd: JointCommand, hw: HardwareSpec) -> LowCmd_:
    """LowCmd_ of a (filtered) command in the robot's joint order (= the SDK's motor order), CRC set.

    Motor slots past the robot's joints stay zero (mode 0: disabled).
    """
    n = _check_joints(hw)
    if cmd.joint_names != hw.joint_names:
        raise ValueError("low_cmd_message needs a command in the hardware file's joint order (SafetyFilter output)")
    msg = LowCmd_(head=list(COMMAND_HEAD), level_flag=LOW_LEVEL_FLAG)
    for i in range(n):
        msg.motor_cmd[i] = MotorCmd_(mode=SERVO_MODE, q=float(cmd.q[i]), dq=float(cmd.dq[i]), tau=float(cmd.tau[i]),
                                     kp=float(cmd.kp[i]), kd=float(cmd.kd[i]))
    msg.crc = unitree_crc(msg)
    return msg


def read_low_cmd(msg: LowCmd_, hw: HardwareSpec) -> JointCommand:
    """The JointCommand a LowCmd_ asks for (what the twin applies).

    Raises:
        ValueError: wrong CRC, or a driven motor not in servo mode.
    """
    n = _check_joints(hw)
    if msg.crc != unitree_crc(msg):
        raise ValueError(f"lowcmd CRC mismatch (got {msg.crc:#010x}, computed {unitree_crc(msg):#010x})")
    motors = msg.motor_cmd[:n]
    off = [hw.joint_names[i] for i, m in enumerate(motors) if m.mode != SERVO_MODE]
    if off:
        raise ValueError(f"lowcmd: motor(s) {', '.join(off)} not in servo mode {SERVO_MODE:#04x}")
    arr = np.array([(m.q, m.dq, m.kp, m.kd, m.tau) for m in motors], dtype=np.float64)  # (J, 5)
    return JointCommand(hw.joint_names, arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), arr[:, 3].copy(),
                        arr[:, 4].copy())


def low_state_message(state: RobotState, hw: HardwareSpec) -> LowState_:
    """LowState_ of a twin's state (joints in hardware order, IMU in wxyz), tick from its stamp, CRC set.

    The accelerometer goes into imu_state.accelerometer and the foot forces (hardware `feet` order, the SDK's)
    into foot_force, rounded to whole newtons and clipped to int16, when the state has them.
    """
    n = _check_joints(hw)
    msg = LowState_(head=list(COMMAND_HEAD), level_flag=LOW_LEVEL_FLAG)
    tau = state.tau if state.tau is not None else np.zeros(n)
    for i in range(n):
        m = msg.motor_state[i]
        m.mode, m.q, m.dq, m.tau_est = SERVO_MODE, float(state.q[i]), float(state.dq[i]), float(tau[i])
        m.q_raw, m.dq_raw = m.q, m.dq
    if state.imu_quat is not None:
        msg.imu_state.quaternion = [float(v) for v in state.imu_quat]
    if state.imu_gyro is not None:
        msg.imu_state.gyroscope = [float(v) for v in state.imu_gyro]
    if state.imu_acc is not None:
        msg.imu_state.accelerometer = [float(v) for v in state.imu_acc]
    if state.foot_force is not None:
        force = np.clip(np.rint(np.asarray(state.foot_force, dtype=np.float64)), *FOOT_FORCE_RANGE)
        if len(force) > len(msg.foot_force):
            raise ValueError(f"{len(force)} foot forces; unitree_go LowState_ holds {len(msg.foot_force)}")
        msg.foot_force[:len(force)] = [int(v) for v in force]
    msg.tick = int(round(state.stamp / TICK_S)) % 2**32
    msg.crc = unitree_crc(msg)
    return msg


class LowStateReading(NamedTuple):
    """What a LowState_ reports, joints in hardware order."""

    q: np.ndarray
    """(J,) joint positions (rad)."""
    dq: np.ndarray
    """(J,) joint velocities (rad/s)."""
    tau: np.ndarray
    """(J,) estimated joint torques (N m)."""
    quat: np.ndarray
    """(4,) IMU quaternion (w, x, y, z)."""
    gyro: np.ndarray
    """(3,) base angular velocity (rad/s), base frame."""
    acc: np.ndarray
    """(3,) accelerometer (m/s^2), base frame."""
    foot_force: np.ndarray
    """(4,) foot contact forces in the SDK's foot order (FR, FL, RR, RL), as the robot reports them."""
    stamp: float
    """tick in seconds."""


def read_low_state(msg: LowState_, hw: HardwareSpec) -> LowStateReading:
    """The joints (hardware order), IMU, foot forces and stamp of a LowState_.

    Raises:
        ValueError: wrong CRC (a corrupted or foreign message must not reach the controller).
    """
    n = _check_joints(hw)
    crc = unitree_crc(msg)
    if msg.crc != crc:
        raise ValueError(f"lowstate CRC mismatch (got {msg.crc:#010x}, computed {crc:#010x})")
    arr = np.array([(m.q, m.dq, m.tau_est) for m in msg.motor_state[:n]], dtype=np.float64)  # (J, 3)
    quat = np.array(msg.imu_state.quaternion, dtype=np.float64)
    gyro = np.array(msg.imu_state.gyroscope, dtype=np.float64)
    acc = np.array(msg.imu_state.accelerometer, dtype=np.float64)
    foot_force = np.array(msg.foot_force, dtype=np.float64)
    return LowStateReading(arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), quat, gyro, acc, foot_force,
                           msg.tick * TICK_S)


def store_low_state(state: StateAssembler, msg: LowState_, hw: HardwareSpec, received: float | None = None) -> None:
    """A LowState_ into a StateAssembler: joints (hardware order), IMU (in the hardware's quaternion order, with the
    accelerometer) and foot forces. A wrong CRC is counted in `state.rejected["lowstate"]`, nothing stored."""
    try:
        q, dq, tau, quat, gyro, acc, foot_force, stamp = read_low_state(msg, hw)
    except ValueError as exc:
        state._reject("lowstate", exc)
        return
    if hw.quaternion_order == "xyzw":
        quat = np.array([quat[1], quat[2], quat[3], quat[0]])
    state.set_joints(hw.joint_names, q, dq, tau, stamp, received)
    state.set_imu(quat, gyro, received, acc=acc)
    state.set_foot_force(foot_force)
