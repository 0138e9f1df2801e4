"""policy_node: a rclpy lifecycle node, thin over robo_rl.deploy.runtime.PolicyRuntime (the deploy core's one
wiring path, which `robo-rl deploy` on the sim twin and over DDS runs too): it turns parameters, subscriptions,
services and timers into PolicyRuntime calls; the robot is reached through RosRobot (rclpy topics).

Parameters (robo_rl.deploy.ros_interface.PARAMETERS): policy_path, hardware_config, command_interface
(forward_position, joint_trajectory, pd_targets), dry_run, cmd_vel_timeout_s, diagnostics_period_s,
reset_module, realtime_priority (SCHED_FIFO priority of the control thread; 0: normal scheduling).

    configure   loads the ONNX policy and checks its contract against the hardware file
    activate    needs fresh state, then ramps to the default pose (the control loop runs on its own
                thread with absolute deadlines, not on a rclpy timer)
    ~/start     READY -> POLICY (the only way the policy gets to drive the robot)
    ~/stop      -> DAMP;  estop (std_msgs/Bool True) -> latched ESTOP until ~/reset_estop
    ~/reset     runs the reset module (READY / POLICY), or leaves DAMP
Subscriptions: joint_states (mapped by name), imu, cmd_vel (zeroed after a timeout), target_pose, estop,
robo_rl/operator (the same words as the services, plus success / failure labels and confirm).
Publications: /diagnostics, ~/observation, ~/action, ~/episode_events.
"""

from __future__ import annotations

import rclpy
from lifecycle_msgs.msg import State
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import Node as LifecycleNode
from rclpy.lifecycle import TransitionCallbackReturn
from std_srvs.srv import Trigger

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.runtime import PolicyRuntime, RuntimeConfig, observes_ee
from robo_rl_ros.messages import CLASSES, message_types, qos
from robo_rl_ros.ros_robot import RosRobot

SERVICES = {
    names.START_SERVICE: "start",
    names.STOP_SERVICE: "stop",
    names.RESET_ESTOP_SERVICE: "reset_estop",
    names.RESET_SERVICE: "reset",
}


class PolicyNode(LifecycleNode):
    def __init__(self):
        super().__init__(names.POLICY_NODE)
        for name, default in names.PARAMETERS.items():
            self.declare_parameter(name, default)
        self.types = message_types()
        self.runtime: PolicyRuntime | None = None
        self.robot: RosRobot | None = None
        self._entities: list = []
        self._diagnostics_timer = None

    # ------------------------------------------------------------------------------------------- lifecycle
    def _config(self) -> RuntimeConfig:
        p = {name: self.get_parameter(name).value for name in names.PARAMETERS}
        return RuntimeConfig(policy_path=p["policy_path"], hardware_config=p["hardware_config"],
                             command_interface=p["command_interface"], dry_run=bool(p["dry_run"]),
                             cmd_vel_timeout_s=float(p["cmd_vel_timeout_s"]),
                             diagnostics_period_s=float(p["diagnostics_period_s"]), reset_module=p["reset_module"],
                             realtime_priority=int(p["realtime_priority"]))

    def on_configure(self, state: State) -> TransitionCallbackReturn:
        log = self.get_logger()
        try:
            config = self._config()
            runtime = PolicyRuntime(config, on_event=self._publish_event, on_record=self._publish_record,
                                    log=log.info)
            runtime.configure(warn=log.warning)
        except ValueError as exc:
            log.error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.runtime = runtime
        contract = runtime.policy.policy.contract
        self.robot = RosRobot(self, runtime.hw, config.command_interface, contract.policy_dt,
                              observes_ee(runtime.policy))
        group = ReentrantCallbackGroup()
        pub = self.create_publisher
        self._diagnostics = pub(CLASSES[names.DIAGNOSTIC_ARRAY], names.DIAGNOSTICS.name, qos(names.DIAGNOSTICS.qos))
        self._observation = pub(CLASSES[names.FLOAT32_MULTI_ARRAY], names.OBSERVATION.name, qos(names.OBSERVATION.qos))
        self._action = pub(CLASSES[names.FLOAT64_MULTI_ARRAY], names.ACTION.name, qos(names.ACTION.qos))
        self._events = pub(CLASSES[names.STRING], names.EPISODE_EVENTS.name, qos(names.EPISODE_EVENTS.qos))
        sub = self.create_subscription
        self._entities += [
            sub(CLASSES[names.BOOL], names.ESTOP.name, self._on_estop, qos(names.ESTOP.qos), callback_group=group),
            sub(CLASSES[names.TWIST], names.CMD_VEL.name,
                lambda m: runtime.set_velocity_command(rm.velocity_command(m)), qos(names.CMD_VEL.qos),
                callback_group=group),
            sub(CLASSES[names.POSE_STAMPED], names.TARGET_POSE.name, lambda m: runtime.set_target(rm.read_point(m)),
                qos(names.TARGET_POSE.qos), callback_group=group),
            sub(CLASSES[names.STRING], names.OPERATOR.name, lambda m: runtime.request(str(m.data).strip()),
                qos(names.OPERATOR.qos), callback_group=group),
        ]
        for service, word in SERVICES.items():
            self._entities.append(self.create_service(Trigger, service, self._trigger(word), callback_group=group))
        self._diagnostics_timer = self.create_timer(config.diagnostics_period_s, self._publish_diagnostics)
        log.info(f"configured: {config.policy_path} on {runtime.hw.robot} ({config.command_interface}"
                 f"{', DRY RUN: no command is sent' if config.dry_run else ''})")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        try:
            self.runtime.activate(self.robot)
        except ValueError as exc:
            self.get_logger().error(f"activate failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info("active: ramping to the default pose; call ~/start once READY")
        return super().on_activate(state)

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        self.runtime.deactivate()
        return super().on_deactivate(state)

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def _teardown(self) -> None:
        if self.runtime is not None:
            self.runtime.cleanup()
        if self._diagnostics_timer is not None:
            self.destroy_timer(self._diagnostics_timer)
            self._diagnostics_timer = None
        if self.robot is not None:
            self.robot.close()
        for entity in self._entities:
            (self.destroy_service if hasattr(entity, "srv_type") else self.destroy_subscription)(entity)
        self._entities = []
        self.runtime = self.robot = None

    # ------------------------------------------------------------------------------------------- callbacks
    def _trigger(self, word: str):
        def handle(request, response):
            response.success, response.message = self.runtime.request(word)
            return response

        return handle

    def _on_estop(self, msg) -> None:
        if msg.data and self.runtime is not None and self.runtime.controller is not None:
            self.runtime.request("estop")

    def _publish_event(self, event) -> None:  # control thread
        self._events.publish(rm.string_message(self.types, event.to_json()))

    def _publish_record(self, observation, command) -> None:  # control thread, every POLICY tick
        if observation is not None:
            self._observation.publish(rm.multi_array_message(self.types, observation, ("obs",), float32=True))
        rows = [command.q, command.dq, command.kp, command.kd, command.tau]
        self._action.publish(rm.multi_array_message(self.types, rows, ("command", "joints")))

    def _publish_diagnostics(self) -> None:
        level, message, values = self.runtime.diagnostics()
        now = self.get_clock().now().nanoseconds * 1e-9
        self._diagnostics.publish(rm.diagnostic_array_message(self.types, now, names.POLICY_NODE, level, message,
                                                              values))


def main(args=None) -> None:
    rclpy.init(args=args)
    node = PolicyNode()
    executor = MultiThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node._teardown()  # DAMP and a last damping command before the process ends
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


if __name__ == "__main__":
    main()
