"""E-stop heartbeat: no e-stop message within the deadline latches ESTOP; none at start refuses to activate."""

import numpy as np
import pytest

from robo_rl.deploy.estop_heartbeat import EstopHeartbeat, check_estop_timeout
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.runtime import PolicyRuntime, default_pose
from robo_rl.deploy.runtime_config import RuntimeConfig
from robo_rl.deploy.state_machine import Mode
from tests.conftest import REPO


class Clock:
    def __init__(self, t: float = 50.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class StillRobot:
    """Reports the policy's default pose, always fresh (by `clock`); records what it is sent."""

    def __init__(self, clock, names, q):
        self.clock, self.names, self.q = clock, tuple(names), np.asarray(q, dtype=np.float64)
        self.sent: list[JointCommand] = []

    def read_state(self) -> RobotState:
        now = self.clock()
        return RobotState(stamp=now, received=now, joint_names=self.names, q=self.q.copy(), dq=np.zeros(len(self.q)))

    def send_command(self, command: JointCommand) -> None:
        self.sent.append(command)

    def close(self) -> None:
        pass


def runtime(clock=None, **config) -> tuple[PolicyRuntime, StillRobot]:
    cfg = RuntimeConfig(policy_path=str(REPO / "policies" / "panda_reach.onnx"),
                        hardware_config=str(REPO / "hardware" / "panda.yaml"), realtime_priority=0, **config)
    rt = PolicyRuntime(cfg, log=lambda line: None, **({"clock": clock} if clock is not None else {}))
    rt.configure()
    robot = StillRobot(clock or (lambda: __import__("time").monotonic()), rt.hw.joint_names,
                       default_pose(rt.policy, rt.hw))
    return rt, robot


def test_heartbeat_deadline():
    hb = EstopHeartbeat(0.5)
    assert hb.missing(10.0).startswith("no e-stop heartbeat: nothing received on estop")
    hb.beat(10.0)
    assert hb.missing(10.5) is None
    assert hb.missing(10.6) == "e-stop heartbeat lost: nothing on estop for 0.60 s (deadline 0.5 s)"
    hb.beat(9.0)  # a late-delivered older message does not move the last beat back
    assert hb.missing(10.4) is None and hb.beats == 2


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True, "0.5"])
def test_bad_timeout_is_one_line(bad):
    with pytest.raises(ValueError, match=r"estop_timeout_s = .*: must be a finite number >= 0"):
        check_estop_timeout(bad)
    with pytest.raises(ValueError, match="estop_timeout_s"):
        RuntimeConfig(policy_path="p", hardware_config="h", estop_timeout_s=bad).validate()


def test_activate_refuses_without_heartbeat_and_sends_nothing():
    rt, robot = runtime(estop_timeout_s=0.5, state_wait_s=0.2)
    with pytest.raises(ValueError, match=r"^no e-stop heartbeat: nothing received on estop .*; refusing to activate$"):
        rt.activate(robot)
    assert not rt.active and robot.sent == []
    rt.cleanup()


def test_activate_starts_once_the_heartbeat_is_alive():
    import threading

    rt, robot = runtime(estop_timeout_s=0.5, state_wait_s=2.0)
    stop = threading.Event()

    def publisher():  # a live e-stop publisher: a beat every 50 ms (activate's start-up can outlast one deadline)
        while not stop.is_set():
            rt.estop_message(False)
            stop.wait(0.05)

    beating = threading.Thread(target=publisher, daemon=True)
    beating.start()
    try:
        rt.activate(robot)
        assert rt.active and rt.diagnostics()[2]["estop_heartbeat"] == "ok"
    finally:
        stop.set()
        beating.join()
        rt.cleanup()
    assert not rt.active


def test_lost_heartbeat_latches_estop_until_it_returns():
    clock = Clock()
    rt, robot = runtime(clock, estop_timeout_s=0.5)
    rt.estop_message(False)  # configure-time beat, as the node's subscription delivers it
    c = rt.attach(robot)
    c.request_ramp()
    for _ in range(10):  # 0.2 s of ticks with beats every tick: no ESTOP
        clock.t += 0.02
        rt.estop_message(False)
        c.tick(clock.t)
    assert c.mode is not Mode.ESTOP
    n = len(robot.sent)
    for _ in range(30):  # the e-stop publisher went away
        clock.t += 0.02
        c.tick(clock.t)
    assert c.mode is Mode.ESTOP and c.state_machine.transitions[-1].reason == "estop_heartbeat"
    assert rt.diagnostics()[2]["last_error"].startswith("e-stop heartbeat lost: nothing on estop for")
    lost_at = next(i for i, cmd in enumerate(robot.sent[n:]) if not cmd.kp.any())
    assert lost_at * 0.02 <= 0.5 + 2 * 0.02  # damping within the deadline plus one tick
    assert all(not cmd.kp.any() for cmd in robot.sent[n + lost_at:])
    ok, why = rt.request("reset_estop")
    assert not ok and why.startswith("reset_estop: e-stop heartbeat lost: nothing on estop for")
    rt.estop_message(False)  # the publisher is back: the operator may release it
    assert rt.request("reset_estop")[0] and c.mode is Mode.RAMP


def test_true_latches_estop_and_no_timeout_means_no_heartbeat():
    clock = Clock()
    rt, robot = runtime(clock)  # estop_timeout_s = 0: nothing expected
    assert rt.heartbeat is None and rt.diagnostics()[2] == {"mode": "INACTIVE"}
    c = rt.attach(robot)
    c.request_ramp()
    for _ in range(100):
        clock.t += 0.02
        c.tick(clock.t)
    assert c.mode is not Mode.ESTOP
    rt.estop_message(True)
    assert c.mode is Mode.ESTOP and rt.diagnostics()[2]["estop_heartbeat"] == "off"
