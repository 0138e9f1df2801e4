"""Just enough of rclpy and the ROS 2 message packages for the nodes in ros_ws/src/robo_rl_ros to run here.

ROS 2 is not installable on this machine. This stand-in lets the node code itself run (parameters, lifecycle
callbacks, what is created and destroyed, topics, the signal-driven teardown) with every rclpy call recorded. It is
written from rclpy's documented API (Humble and Jazzy): what it cannot show is rclpy's real behaviour (QoS
matching, executors, the rmw) — the launch_testing tests in ros_ws/src/robo_rl_ros/test cover that where ROS 2 runs.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from enum import Enum
from pathlib import Path

PACKAGE_SRC = Path(__file__).resolve().parents[2] / "ros_ws" / "src" / "robo_rl_ros"
MESSAGES = {
    "builtin_interfaces.msg": ["Duration", "Time"],
    "diagnostic_msgs.msg": ["DiagnosticArray", "DiagnosticStatus", "KeyValue"],
    "geometry_msgs.msg": ["Point", "PointStamped", "Pose", "PoseStamped", "Quaternion", "Twist", "Vector3"],
    "sensor_msgs.msg": ["Imu", "JointState", "CompressedImage"],
    "std_msgs.msg": ["Bool", "Float32MultiArray", "Float64MultiArray", "Header", "MultiArrayDimension",
                     "MultiArrayLayout", "String"],
    "trajectory_msgs.msg": ["JointTrajectory", "JointTrajectoryPoint"],
    "lifecycle_msgs.msg": ["State"],
    "rcl_interfaces.msg": ["ParameterDescriptor"],
    "unitree_go.msg": ["LowCmd", "MotorCmd", "BmsCmd", "LowState", "IMUState", "MotorState", "BmsState"],
    "franka_msgs.msg": ["GraspEpsilon"],
}
ACTIONS = {"franka_msgs.action": ["Move", "Grasp"]}
"""Action types: a class whose `Goal` is a message class (rclpy generates Goal, Result and Feedback)."""


class Message:
    """A ROS message: keyword arguments become attributes."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__})"


def message_class(module: str, name: str) -> type:
    return type(name, (Message,), {"__module__": f"{module}._{name.lower()}"})


class Ros:
    """The recorded world: entities by kind, everything published, and one ordered log of what happened."""

    def __init__(self):
        self.lock = threading.Lock()
        self.log: list[str] = []  # "publish <topic>", "init", "shutdown", ...
        self.ok = False
        self.init_kwargs: dict | None = None
        self.overrides: dict[str, object] = {}  # parameter values set "by the launch"
        self.nodes: list = []
        self.spin_hook = None  # called by every executor.spin_once
        self.action_servers_ready = True  # what every ActionClient.server_is_ready answers

    def record(self, line: str) -> None:
        with self.lock:
            self.log.append(line)

    def subscriptions(self, topic: str | None = None) -> list:
        subs = [s for n in self.nodes for s in n.subscriptions]
        return subs if topic is None else [s for s in subs if s.topic == topic]

    def deliver(self, topic: str, msg) -> int:
        """Call every live subscription of `topic` with `msg`; returns how many there were."""
        subs = [s for s in self.subscriptions(topic) if not s.raw]
        for s in subs:
            s.callback(msg)
        return len(subs)

    def publishers(self, topic: str | None = None) -> list:
        pubs = [p for n in self.nodes for p in n.publishers]
        return pubs if topic is None else [p for p in pubs if p.topic == topic]


ROS = Ros()


class Publisher:
    def __init__(self, cls, topic, qos, lifecycle: bool):
        self.msg_type, self.topic, self.qos, self.lifecycle = cls, topic, qos, lifecycle
        self.activated = not lifecycle
        self.published: list = []
        self.dropped = 0

    def publish(self, msg) -> None:
        if not self.activated:  # rclpy's LifecyclePublisher drops (and logs) what an inactive node publishes
            self.dropped += 1
            return
        if not ROS.ok:
            raise RuntimeError(f"publish on {self.topic} after rclpy was shut down")
        self.published.append(msg)
        ROS.record(f"publish {self.topic}")


class Subscription:
    def __init__(self, cls, topic, callback, qos, callback_group=None, raw=False):
        self.msg_type, self.topic, self.callback, self.qos = cls, topic, callback, qos
        self.callback_group, self.raw = callback_group, raw


class ActionClient:
    """rclpy.action.ActionClient: goals sent are kept (`goals`); the server is there while ROS.action_servers_ready."""

    def __init__(self, node, action_type, action_name, callback_group=None, **kw):
        self.node, self.action_type, self.action_name, self.callback_group = node, action_type, action_name, \
            callback_group
        self.goals: list = []
        node.action_clients.append(self)

    def server_is_ready(self) -> bool:
        return ROS.action_servers_ready

    def wait_for_server(self, timeout_sec=None) -> bool:
        return ROS.action_servers_ready

    def send_goal_async(self, goal, feedback_callback=None):
        if not ROS.ok:
            raise RuntimeError(f"send_goal on {self.action_name} after rclpy was shut down")
        self.goals.append(goal)
        ROS.record(f"send_goal {self.action_name}")
        return types.SimpleNamespace(done=lambda: False)

    def destroy(self) -> None:
        self.node.action_clients.remove(self)
        ROS.record(f"destroy action client {self.action_name}")


class Service:
    def __init__(self, srv_type, name, callback, callback_group=None):
        self.srv_type, self.srv_name, self.callback, self.callback_group = srv_type, name, callback, callback_group


class Timer:
    def __init__(self, period, callback, callback_group=None):
        self.period, self.callback, self.callback_group = period, callback, callback_group


class Logger:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def _add(self, level, text, **kw):
        self.lines.append((level, str(text)))

    def debug(self, text, **kw):
        self._add("debug", text)

    def info(self, text, **kw):
        self._add("info", text)

    def warning(self, text, **kw):
        self._add("warning", text)

    def warn(self, text, **kw):
        self._add("warning", text)

    def error(self, text, **kw):
        self._add("error", text)


class Clock:
    def now(self):
        return types.SimpleNamespace(nanoseconds=time.time_ns())


class Node:
    def __init__(self, node_name, **kwargs):
        self.node_name = node_name
        self.parameters: dict[str, object] = {}
        self.descriptors: dict[str, object] = {}
        self.parameter_callbacks: list = []
        self.publishers: list[Publisher] = []
        self.subscriptions: list[Subscription] = []
        self.services: list[Service] = []
        self.timers: list[Timer] = []
        self.action_clients: list[ActionClient] = []
        self.logger = Logger()
        self.destroyed = False
        ROS.nodes.append(self)

    # parameters
    def declare_parameter(self, name, value=None, descriptor=None, **kw):
        self.parameters[name] = ROS.overrides.get(name, value)
        self.descriptors[name] = descriptor

    def get_parameter(self, name):
        return types.SimpleNamespace(name=name, value=self.parameters[name])

    def add_on_set_parameters_callback(self, callback):
        self.parameter_callbacks.append(callback)

    def set_parameters(self, parameters):
        """rclpy's order: read-only descriptors refuse first, then the callbacks; all-or-nothing per call."""
        for p in parameters:
            d = self.descriptors.get(p.name)
            if d is not None and getattr(d, "read_only", False):
                return [SetParametersResult(successful=False, reason=f"Trying to set a read-only parameter: "
                                                                       f"{p.name}.")]
        for callback in self.parameter_callbacks:
            result = callback(parameters)
            if not result.successful:
                return [result]
        for p in parameters:
            self.parameters[p.name] = p.value
        return [SetParametersResult(successful=True, reason="")]

    # entities
    def create_publisher(self, cls, topic, qos, **kw):
        pub = Publisher(cls, topic, qos, lifecycle=False)
        self.publishers.append(pub)
        return pub

    def destroy_publisher(self, pub):
        self.publishers.remove(pub)
        return True

    def create_subscription(self, cls, topic, callback, qos, callback_group=None, raw=False, **kw):
        sub = Subscription(cls, topic, callback, qos, callback_group, raw)
        self.subscriptions.append(sub)
        return sub

    def destroy_subscription(self, sub):
        self.subscriptions.remove(sub)
        return True

    def create_service(self, srv_type, name, callback, callback_group=None, **kw):
        srv = Service(srv_type, name, callback, callback_group)
        self.services.append(srv)
        return srv

    def destroy_service(self, srv):
        self.services.remove(srv)
        return True

    def create_timer(self, period, callback, callback_group=None, **kw):
        timer = Timer(period, callback, callback_group)
        self.timers.append(timer)
        return timer

    def destroy_timer(self, timer):
        self.timers.remove(timer)
        return True

    def get_logger(self):
        return self.logger

    def get_clock(self):
        return Clock()

    def destroy_node(self):
        ROS.record(f"destroy_node {self.node_name}")
        self.destroyed = True
        self.publishers, self.subscriptions, self.services, self.timers = [], [], [], []
        return True


class TransitionCallbackReturn(Enum):
    SUCCESS = 0
    FAILURE = 1
    ERROR = 2


class LifecycleNode(Node):
    def create_lifecycle_publisher(self, cls, topic, qos, **kw):
        pub = Publisher(cls, topic, qos, lifecycle=True)
        self.publishers.append(pub)
        return pub

    def destroy_lifecycle_publisher(self, pub):
        return self.destroy_publisher(pub)

    def on_activate(self, state):
        for p in self.publishers:
            if p.lifecycle:
                p.activated = True
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state):
        for p in self.publishers:
            if p.lifecycle:
                p.activated = False
        return TransitionCallbackReturn.SUCCESS


class SetParametersResult:
    def __init__(self, successful=False, reason=""):
        self.successful, self.reason = successful, reason


class SignalHandlerOptions(Enum):
    NO = 0
    SIGINT = 1
    SIGTERM = 2
    ALL = 3


class ReentrantCallbackGroup:
    pass


class MutuallyExclusiveCallbackGroup:
    pass


class MultiThreadedExecutor:
    def __init__(self, num_threads=None):
        self.nodes: list = []
        self.is_shut_down = False

    def add_node(self, node):
        self.nodes.append(node)

    def spin_once(self, timeout_sec=None):
        if ROS.spin_hook is not None:
            ROS.spin_hook(self)
        time.sleep(timeout_sec or 0.0)

    def shutdown(self, timeout_sec=None):
        ROS.record("executor shutdown")
        self.is_shut_down = True
        return True


class QoSProfile:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class ReliabilityPolicy(Enum):
    RELIABLE = 1
    BEST_EFFORT = 2


class HistoryPolicy(Enum):
    KEEP_LAST = 1


def _init(args=None, signal_handler_options=None, **kw):
    ROS.init_kwargs = {"args": args, "signal_handler_options": signal_handler_options, **kw}
    ROS.ok = True
    ROS.record("init")


def _shutdown(**kw):
    if not ROS.ok:
        raise RuntimeError("rclpy.shutdown() called twice")
    ROS.ok = False
    ROS.record("shutdown")


def modules() -> dict[str, types.ModuleType]:
    """The stand-in modules by name (rclpy, its submodules, the message packages)."""
    out: dict[str, types.ModuleType] = {}

    def module(name: str, **attrs) -> types.ModuleType:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        out[name] = m
        return m

    module("rclpy", init=_init, ok=lambda **kw: ROS.ok, shutdown=_shutdown)
    module("rclpy.signals", SignalHandlerOptions=SignalHandlerOptions)
    module("rclpy.executors", MultiThreadedExecutor=MultiThreadedExecutor)
    module("rclpy.qos", QoSProfile=QoSProfile, ReliabilityPolicy=ReliabilityPolicy, HistoryPolicy=HistoryPolicy)
    module("rclpy.callback_groups", ReentrantCallbackGroup=ReentrantCallbackGroup,
           MutuallyExclusiveCallbackGroup=MutuallyExclusiveCallbackGroup)
    module("rclpy.node", Node=Node)
    module("rclpy.action", ActionClient=ActionClient)
    module("rclpy.lifecycle", Node=LifecycleNode, TransitionCallbackReturn=TransitionCallbackReturn)
    module("std_srvs.srv", Trigger=type("Trigger", (), {}))
    for package, names in MESSAGES.items():
        module(package, **{n: message_class(package, n) for n in names})
    for package, names in ACTIONS.items():
        module(package, **{n: type(n, (), {"Goal": message_class(package, f"{n}_Goal")}) for n in names})
    out["rcl_interfaces.msg"].SetParametersResult = SetParametersResult
    for name in list(out):  # parent packages
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent not in out:
                module(parent)
            setattr(out[parent], parts[i], out[".".join(parts[: i + 1])])
    return out


def install(monkeypatch) -> Ros:
    """Put the stand-ins into sys.modules and the package's source on sys.path (undone by monkeypatch); a fresh
    recorded world."""
    global ROS
    ROS = Ros()
    for name, m in modules().items():
        monkeypatch.setitem(sys.modules, name, m)
    monkeypatch.syspath_prepend(str(PACKAGE_SRC))
    for name in [n for n in sys.modules if n == "robo_rl_ros" or n.startswith("robo_rl_ros.")]:
        monkeypatch.delitem(sys.modules, name)
    return ROS


def uninstall() -> None:
    """Forget the package's modules imported against the stand-ins (call after monkeypatch undid the rest)."""
    for name in [n for n in sys.modules if n == "robo_rl_ros" or n.startswith("robo_rl_ros.")]:
        del sys.modules[name]
