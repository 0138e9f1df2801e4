"""Shared by the launch_testing tests (not a test module): a test node that calls services, listens to commands and
/diagnostics and publishes the e-stop heartbeat, and finding a launched node's process. Needs rclpy."""

import threading
import time
from pathlib import Path

import rclpy
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from robo_rl_ros.messages import CLASSES, qos
from std_srvs.srv import Trigger

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm

POLICY = f"/{names.POLICY_NODE}"


class Operator:
    """The operator's side of the sim twin: lifecycle transitions, services, /diagnostics, the commands on the wire,
    and an e-stop heartbeat (std_msgs/Bool false at 10 Hz from its own thread, as an operator's station sends it)."""

    def __init__(self, node, command_interface: str = "pd_targets"):
        self.node = node
        spec = names.COMMAND_TOPICS[command_interface]
        self.commands: list = []
        self.modes: list = []
        node.create_subscription(CLASSES[spec.ros_type], spec.name, self.commands.append, qos(spec.qos))
        node.create_subscription(CLASSES[names.DIAGNOSTIC_ARRAY], names.DIAGNOSTICS.name,
                                 lambda m: self.modes.append(rm.read_diagnostics(m).get("mode")),
                                 qos(names.DIAGNOSTICS.qos))
        self.estop = node.create_publisher(CLASSES[names.BOOL], names.ESTOP.name, qos(names.ESTOP.qos))
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(0.1):
            self.estop.publish(CLASSES[names.BOOL](data=False))

    def close(self) -> None:
        self._stop.set()
        self._heartbeat.join(timeout=1.0)

    def spin_until(self, condition, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.05)
            if condition():
                return
        raise AssertionError(f"timed out waiting for {what}")

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.05)

    def call(self, srv_type, name: str, request):
        client = self.node.create_client(srv_type, name)
        if not client.wait_for_service(timeout_sec=30.0):
            raise AssertionError(f"no service {name}")
        future = client.call_async(request)
        self.spin_until(future.done, 30.0, name)
        return future.result()

    def transition(self, transition_id: int) -> bool:
        return self.call(ChangeState, f"{POLICY}/change_state",
                         ChangeState.Request(transition=Transition(id=transition_id))).success

    def trigger(self, service: str) -> bool:
        return self.call(Trigger, f"{POLICY}/{service}", Trigger.Request()).success

    def mode(self) -> str | None:
        return self.modes[-1] if self.modes else None

    def kp_rows(self) -> list:
        """The kp row of every pd_targets command heard so far (PASSIVE and the start of RAMP send kp = 0 too)."""
        return [rm.read_multi_array(c)[1][2] for c in self.commands]

    def bring_up_to_policy(self) -> None:
        """configure, activate, READY, ~/start, POLICY, and stiff policy commands on the wire."""
        for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            if not self.transition(transition):
                raise AssertionError(f"lifecycle transition {transition} failed")
        self.spin_until(lambda: self.mode() == "READY", 30.0, "READY")
        if not self.trigger("start"):
            raise AssertionError("~/start refused in READY")
        self.spin_until(lambda: self.mode() == "POLICY", 10.0, "POLICY")
        n = len(self.commands)
        self.spin_until(lambda: len(self.commands) > n + 25, 5.0, "policy commands")


def child_pid(executable: str) -> int:
    """The pid of this process's child running `executable` (launch_testing starts the launch in the test process)."""
    me = str(Path("/proc/self").resolve().name)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = stat.rsplit(")", 1)[1].split()[1]
        if ppid == me and any(Path(arg.decode()).name == executable for arg in cmdline if arg):
            return int(proc.name)
    raise AssertionError(f"no child process runs {executable}")
