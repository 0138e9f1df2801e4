"""SIGINT / SIGTERM: the signal only requests the shutdown; the teardown stops the control loop and publishes the last
damping command while the (ROS) context is alive, and shuts the context down last (robo_rl.deploy.shutdown)."""

import os
import signal
import threading
import time

import numpy as np
import pytest

from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.runtime import PolicyRuntime, default_pose
from robo_rl.deploy.runtime_config import RuntimeConfig
from robo_rl.deploy.shutdown import TEARDOWN_ORDER, ShutdownRequest, run_teardown
from robo_rl.deploy.state_machine import Mode
from tests.conftest import REPO

pytestmark = pytest.mark.realtime  # the control loop runs on its own thread at 50 Hz (tests/workers.py)


class Context:
    """Stands in for rclpy's context: publishing after shutdown raises, as rclpy's publish does."""

    def __init__(self):
        self.alive = True
        self.log: list[str] = []

    def shutdown(self):
        self.log.append("context")
        self.alive = False


class PublishingRobot:
    """The policy's default pose, always fresh; `send_command` publishes into `context`."""

    def __init__(self, context: Context, names, q):
        self.context, self.names, self.q = context, tuple(names), np.asarray(q, dtype=np.float64)
        self.sent: list[tuple[JointCommand, str]] = []

    def read_state(self) -> RobotState:
        now = time.monotonic()
        return RobotState(stamp=now, received=now, joint_names=self.names, q=self.q.copy(), dq=np.zeros(len(self.q)))

    def send_command(self, command: JointCommand) -> None:
        if not self.context.alive:
            raise RuntimeError("publish on a shut-down context")
        self.sent.append((command, threading.current_thread().name))

    def close(self) -> None:
        pass


def test_signal_requests_and_teardown_sends_the_last_damping_command_on_a_live_context():
    cfg = RuntimeConfig(policy_path=str(REPO / "policies" / "panda_reach.onnx"),
                        hardware_config=str(REPO / "hardware" / "panda.yaml"), realtime_priority=0)
    rt = PolicyRuntime(cfg, log=lambda line: None)
    rt.configure()
    context = Context()
    robot = PublishingRobot(context, rt.hw.joint_names, default_pose(rt.policy, rt.hw))
    rt.activate(robot)
    deadline = time.monotonic() + 5.0
    while len(robot.sent) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rt.controller.mode in (Mode.RAMP, Mode.READY) and robot.sent[-1][0].kp.any()  # stiff: ramping

    request = ShutdownRequest()
    before = signal.getsignal(signal.SIGINT)
    restore = request.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C (or `ros2 launch` stopping) delivers
        assert request.wait(2.0) and request.signal_name == "SIGINT"
        with pytest.raises(KeyboardInterrupt, match="SIGTERM during the teardown"):
            request.handler(signal.SIGTERM, None)  # a second signal interrupts a hung teardown
    finally:
        restore()
    assert signal.getsignal(signal.SIGINT) is before

    order: list[str] = []

    def control():
        rt.deactivate()  # DAMP, loop stopped, one last damping command
        order.append("control")

    failures = run_teardown({"control": control, "executor": lambda: order.append("executor"),
                             "node": lambda: order.append("node"), "context": context.shutdown})
    assert failures == [] and order + context.log == list(TEARDOWN_ORDER)
    last, thread = robot.sent[-1]
    assert not last.kp.any() and thread == threading.current_thread().name  # damping, sent by the teardown itself
    assert not rt.active and rt.controller.mode is Mode.DAMP
    n = len(robot.sent)
    time.sleep(0.1)
    assert len(robot.sent) == n  # nothing after: the control thread no longer publishes into the dead context
    rt.cleanup()


def test_teardown_runs_every_step_even_when_one_fails():
    ran, lines = [], []

    def broken():
        ran.append("executor")
        raise RuntimeError("executor already gone")

    failures = run_teardown({"control": lambda: ran.append("control"), "executor": broken,
                             "node": lambda: ran.append("node"), "context": lambda: ran.append("context")},
                            log=lines.append)
    assert ran == list(TEARDOWN_ORDER)
    assert failures == ["executor: RuntimeError: executor already gone"] and lines == [f"teardown {failures[0]}"]
    with pytest.raises(ValueError, match="teardown steps .*: expected exactly control, executor, node, context"):
        run_teardown({"control": lambda: None})
