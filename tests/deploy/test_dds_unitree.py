"""Unitree low-level profile: LowState_ / LowCmd_ and the CRC, checked against the unitree-sdk2 package itself.

The unitree-sdk2 wheel (1.0.1) pins cyclonedds 0.10.2, so it is installed with `--no-deps` beside the
current cyclonedds (scripts/setup.sh does). Its pure-Python IDL modules work there; the package's own
`__init__` does not (it imports a `b2` module the wheel lacks) and its CRC's native library is not in
the wheel, so the test loads the IDL modules without the package `__init__` and uses the SDK's
pure-Python CRC path (the one it takes off Linux).
"""

import importlib.util
import platform
import sys
import types

import numpy as np
import pytest

pytest.importorskip("cyclonedds", reason="needs cyclonedds (the dds extra)")

from robo_rl.deploy.hardware import load_hardware  # noqa: E402
from robo_rl.deploy.robot import JointCommand, RobotState  # noqa: E402
from robo_rl.deploy.transports.dds import dds_types as dt  # noqa: E402
from robo_rl.deploy.transports.dds import unitree  # noqa: E402
from tests.conftest import REPO  # noqa: E402

GO2 = load_hardware(REPO / "hardware" / "go2.yaml")


@pytest.fixture(scope="module")
def sdk_package():
    """The installed unitree-sdk2's package path made importable without its broken package __init__."""
    spec = importlib.util.find_spec("unitree_sdk2py")
    if spec is None:
        pytest.skip("unitree-sdk2 not installed (pip install --no-deps unitree-sdk2==1.0.1, as scripts/setup.sh does)")
    saved = {k: v for k, v in sys.modules.items() if k == "unitree_sdk2py" or k.startswith("unitree_sdk2py.")}
    package = types.ModuleType("unitree_sdk2py")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["unitree_sdk2py"] = package
    yield
    for k in [k for k in sys.modules if k == "unitree_sdk2py" or k.startswith("unitree_sdk2py.")]:
        del sys.modules[k]
    sys.modules.update(saved)


@pytest.fixture(scope="module")
def sdk(sdk_package):
    """(LowCmd_, LowState_ factories, CRC) of the installed unitree-sdk2."""
    from unitree_sdk2py.idl.default import unitree_go_msg_dds__LowCmd_, unitree_go_msg_dds__LowState_

    system = platform.system
    platform.system = lambda: "Darwin"  # the SDK's pure-Python CRC (its Linux path needs a missing .so)
    try:
        from unitree_sdk2py.utils.crc import CRC

        crc = CRC()
    finally:
        platform.system = system
    return unitree_go_msg_dds__LowCmd_, unitree_go_msg_dds__LowState_, crc


def _fill(msg, rng: np.random.Generator):
    """Random values in every field of an IDL struct (in place), within each field's type.

    Unsigned 8- and 16-bit values stay below 2^7 / 2^15: the SDK's CRC packs some unsigned fields
    (temperatures, fan frequencies) with signed formats and fails above that.
    """
    import typing

    import cyclonedds.idl as idl
    import cyclonedds.idl.types as t

    def value(tp):
        meta = typing.get_args(tp)[1] if typing.get_origin(tp) is typing.Annotated else None
        if isinstance(meta, t.array):
            return [value(meta.subtype) for _ in range(meta.length)]
        if isinstance(tp, type) and issubclass(tp, idl.IdlStruct):
            sub = tp()
            _fill(sub, rng)
            return sub
        if meta == "float32":
            return float(np.float32(rng.normal()))
        bits = {"uint8": (0, 127), "int8": (-128, 127), "uint16": (0, 32767), "int16": (-32768, 32767),
                "uint32": (0, 2**32 - 1), "int32": (-(2**31), 2**31 - 1)}[meta]
        return int(rng.integers(bits[0], bits[1], endpoint=True))

    for name, tp in typing.get_type_hints(type(msg), include_extras=True).items():
        setattr(msg, name, value(tp))


def _copy_into(theirs, ours):
    """Copy every field of our struct into the SDK's struct of the same layout (recursively)."""
    import cyclonedds.idl as idl

    for name in typing_fields(ours):
        v = getattr(ours, name)
        if isinstance(v, idl.IdlStruct):
            _copy_into(getattr(theirs, name), v)
        elif isinstance(v, list) and v and isinstance(v[0], idl.IdlStruct):
            for a, b in zip(getattr(theirs, name), v, strict=True):
                _copy_into(a, b)
        else:
            setattr(theirs, name, v)


def typing_fields(msg) -> list[str]:
    import typing

    return list(typing.get_type_hints(type(msg)))


def test_crc_is_crc32_mpeg2():
    assert unitree.crc32_mpeg2(b"123456789") == 0x0376E6E7  # the published check value of CRC-32/MPEG-2
    rng = np.random.default_rng(0)
    for size in (0, 1, 4, 37, 808):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert unitree.crc32_mpeg2(data) == unitree.crc32_mpeg2_bitwise(data)


def test_c_layout_sizes_match_the_sdk():
    assert unitree.c_layout(dt.LowCmd_)[1] == 812  # the SDK's documented packed sizes
    assert unitree.c_layout(dt.LowState_)[1] == 1180
    assert unitree.c_layout(dt.MotorState_)[1] == 48 and unitree.c_layout(dt.IMUState_)[1] == 56


@pytest.mark.parametrize("which", ["LowCmd_", "LowState_"])
def test_messages_and_crc_equal_the_sdk(sdk, which):
    """Random contents: same CDR bytes as the SDK's own IDL types, same CRC as the SDK computes."""
    low_cmd, low_state, crc = sdk
    make_theirs = {"LowCmd_": low_cmd, "LowState_": low_state}[which]
    ours_cls = {"LowCmd_": dt.LowCmd_, "LowState_": dt.LowState_}[which]
    rng = np.random.default_rng(5)
    for _ in range(5):
        ours = ours_cls()
        _fill(ours, rng)
        theirs = make_theirs()
        _copy_into(theirs, ours)
        assert type(theirs).__idl_typename__ == ours_cls.__idl_typename__
        assert theirs.serialize() == ours.serialize()
        assert unitree.unitree_crc(ours) == crc.Crc(theirs)


def test_command_round_trip_and_crc_guard():
    n = len(GO2.joint_names)
    rng = np.random.default_rng(1)
    cmd = JointCommand(GO2.joint_names, rng.normal(size=n), rng.normal(size=n), rng.uniform(0, 80, n),
                       rng.uniform(0, 5, n), rng.normal(size=n))
    msg = unitree.low_cmd_message(cmd, GO2)
    assert msg.head == [0xFE, 0xEF] and msg.level_flag == 0xFF
    assert [m.mode for m in msg.motor_cmd] == [0x01] * n + [0] * (20 - n)
    wire = dt.LowCmd_.deserialize(msg.serialize())  # through CDR, as the twin receives it
    back = unitree.read_low_cmd(wire, GO2)
    for field in ("q", "dq", "kp", "kd", "tau"):
        np.testing.assert_allclose(getattr(back, field), getattr(cmd, field).astype(np.float32), rtol=0, atol=0)
    wire.motor_cmd[3].kp += 1.0  # a corrupted message must never be applied
    with pytest.raises(ValueError, match="lowcmd CRC mismatch"):
        unitree.read_low_cmd(wire, GO2)


def test_state_round_trip():
    n = len(GO2.joint_names)
    rng = np.random.default_rng(2)
    quat = rng.normal(size=4)
    state = RobotState(stamp=12.345, received=0.0, joint_names=GO2.joint_names, q=rng.normal(size=n),
                       dq=rng.normal(size=n), tau=rng.normal(size=n), imu_quat=quat / np.linalg.norm(quat),
                       imu_gyro=rng.normal(size=3), imu_acc=rng.normal(size=3) + [0, 0, 9.81],
                       foot_force=np.array([61.4, 0.2, -3.6, 1e6]))
    wire = dt.LowState_.deserialize(unitree.low_state_message(state, GO2).serialize())
    got = unitree.read_low_state(wire, GO2)
    np.testing.assert_allclose(got.q, state.q, atol=1e-6)
    np.testing.assert_allclose(got.quat, state.imu_quat, atol=1e-6)
    np.testing.assert_allclose(got.gyro, state.imu_gyro, atol=1e-6)
    np.testing.assert_allclose(got.acc, state.imu_acc, atol=1e-5)
    np.testing.assert_array_equal(got.foot_force, [61, 0, -4, 32767])  # whole newtons, clipped to int16
    assert got.stamp == pytest.approx(12.345)
    wire.tick += 1
    with pytest.raises(ValueError, match="lowstate CRC mismatch"):
        unitree.read_low_state(wire, GO2)


# ---------------------------------------------------------------------------------------------- motion switcher
def test_motion_switcher_requests_equal_the_sdk_clients(sdk_package):
    """Topic names, type names and request bytes as the SDK's own RPC client makes them (ClientBase._CallBase:
    identity (id, api_id), lease 0, priority 0, a reply wanted, JSON parameter)."""
    from unitree_sdk2py.core.channel_name import ChannelType, GetClientChannelName, GetServerChannelName
    from unitree_sdk2py.idl.unitree_api.msg import dds_ as api

    from robo_rl.deploy.transports.dds import motion_switcher as ms

    assert ms.REQUEST_TOPIC == GetClientChannelName("motion_switcher", ChannelType.SEND)
    assert ms.RESPONSE_TOPIC == GetClientChannelName("motion_switcher", ChannelType.RECV)
    assert ms.REQUEST_TOPIC == GetServerChannelName("motion_switcher", ChannelType.RECV)
    for api_id, parameter, sdk_parameter in ((ms.API_CHECK_MODE, {}, "{}"), (ms.API_RELEASE_MODE, {}, "{}"),
                                             (ms.API_SELECT_MODE, {"name": "normal"}, '{"name": "normal"}')):
        request_id = 1_234_567_890_123
        ours = ms.request_message(api_id, parameter, request_id)
        header = api.RequestHeader_(api.RequestIdentity_(request_id, api_id), api.RequestLease_(0),
                                    api.RequestPolicy_(0, False))
        theirs = api.Request_(header, sdk_parameter, [])
        assert type(theirs).__idl_typename__ == type(ours).__idl_typename__
        assert theirs.serialize() == ours.serialize()
    answer = dt.Response_(data='{"form": "0", "name": "normal"}', binary=[1, 2])
    answer.header.identity.id, answer.header.identity.api_id, answer.header.status.code = 7, 1001, 7008
    sdk_answer = api.Response_(api.ResponseHeader_(api.RequestIdentity_(7, 1001), api.ResponseStatus_(7008)),
                               '{"form": "0", "name": "normal"}', [1, 2])
    assert type(sdk_answer).__idl_typename__ == type(answer).__idl_typename__
    assert sdk_answer.serialize() == answer.serialize()


def test_release_select_and_refusals_against_the_twins_service(dds_domain):
    from robo_rl.deploy.transports.dds import motion_switcher as ms
    from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint

    robot_side, twin_side = DdsEndpoint(dds_domain), DdsEndpoint(dds_domain)
    try:
        service = ms.MotionSwitcherService(twin_side, "normal")
        client = ms.MotionSwitcherClient(robot_side, timeout_s=5.0)
        assert client.check_mode() == "normal" and service.active
        assert ms.release_sport_mode(client, settle_s=0.0) == "normal"
        assert client.check_mode() == "" and not service.active
        assert ms.release_sport_mode(client, settle_s=0.0) == ""  # nothing to release: nothing asked
        assert client.select("normal") == ms.OK and service.mode == "normal"
        assert client.select("dance") == ms.ERR_UNSUPPORTED_MODE and service.mode == "normal"
        service.locked = True
        with pytest.raises(ValueError, match=r"^the robot's sport mode 'normal' is still active after 3 release "
                                             r"requests \(motion switcher code 7008\)"):
            ms.release_sport_mode(client, settle_s=0.0)
    finally:
        robot_side.close()
        twin_side.close()
    robot_side, twin_side = DdsEndpoint(dds_domain), DdsEndpoint(dds_domain)
    try:  # an answer lost (the service drops its first request): the client sends the request again
        class DropsFirst(ms.MotionSwitcherService):
            dropped = 0

            def _on_request(self, msg, received):
                if not self.dropped:
                    self.dropped += 1
                    return
                super()._on_request(msg, received)

        service = DropsFirst(twin_side, "normal")
        client = ms.MotionSwitcherClient(robot_side, timeout_s=5.0)
        assert client.check_mode() == "normal" and service.dropped == 1 and service.requests == 1
    finally:
        robot_side.close()
        twin_side.close()
    lonely = DdsEndpoint(dds_domain)
    try:  # no service on the network
        with pytest.raises(ValueError, match="^cannot release the robot's sport mode: no motion switcher service"):
            ms.release_sport_mode(ms.MotionSwitcherClient(lonely, timeout_s=0.5), settle_s=0.0)
    finally:
        lonely.close()
