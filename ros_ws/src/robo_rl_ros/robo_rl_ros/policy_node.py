"""policy_node: a rclpy lifecycle node, thin over robo_rl.deploy.runtime.PolicyRuntime (the deploy core's one
wiring path, which `robo-rl deploy` on the sim twin and over DDS runs too): it turns parameters, subscriptions,
services and timers into PolicyRuntime calls; the robot is reached through RosRobot (rclpy topics).

Parameters (robo_rl.deploy.ros_interface.PARAMETERS, with descriptors): policy_path, hardware_config and
command_interface (read-only: set by the launch; command_interface empty = the hardware file's transport.dds, a Go2's
unitree lowcmd), dry_run (default true: `ros2 run` alone sends nothing), cmd_vel_timeout_s, diagnostics_period_s,
reset_module, realtime_priority, estop_timeout_s. All are read at configure: a change while configured is refused with
the reason (robo_rl.deploy.ros_parameters), never accepted and ignored.

    configure   loads the ONNX policy and checks its contract against the hardware file
    activate    needs fresh state and a live e-stop heartbeat (estop_timeout_s > 0), releases a Go2's sport mode
                (unless dry_run), then ramps to the default pose (the control loop runs on its own thread with
                absolute deadlines, not on a rclpy timer)
    ~/start     READY -> POLICY (the only way the policy gets to drive the robot)
    ~/stop      -> DAMP;  estop (std_msgs/Bool True) -> latched ESTOP until ~/reset_estop; no estop message for
                estop_timeout_s -> ESTOP as well (the e-stop publisher is gone)
    ~/reset     runs the reset module (READY / POLICY), or leaves DAMP
Subscriptions: the robot's topics (RosRobot: from the hardware file), cmd_vel (zeroed after a timeout), target_pose,
estop, robo_rl/operator (the same words as the services, plus success / failure labels and confirm).
Publications (lifecycle publishers, made in configure, destroyed in cleanup): /diagnostics, ~/observation, ~/action,
~/policy_step (observation, raw actions and the outcome the reward modules of parameter `rewards` scored that tick,
for the recorder), ~/episode_events. SIGINT / SIGTERM: DAMP, the last damping command, then rclpy goes down
(messages.run_node).
"""

from __future__ import annotations

import sys

from lifecycle_msgs.msg import State
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.lifecycle import Node as LifecycleNode
from rclpy.lifecycle import TransitionCallbackReturn
from std_srvs.srv import Trigger

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy import ros_parameters as params
from robo_rl.deploy.dds_settings import for_ros_node
from robo_rl.deploy.robot import take_control
from robo_rl.deploy.runtime import PolicyRuntime, needs_reported_ee, wait_for_fresh_state
from robo_rl.deploy.session import camera_options
from robo_rl_ros.messages import CLASSES, message_types, qos, run_node
from robo_rl_ros.ros_robot import RosRobot

SERVICES = {
    names.START_SERVICE: "start",
    names.STOP_SERVICE: "stop",
    names.RESET_ESTOP_SERVICE: "reset_estop",
    names.RESET_SERVICE: "reset",
}
PUBLISHERS = {
    "diagnostics": names.DIAGNOSTICS,
    "observation": names.OBSERVATION,
    "action": names.ACTION,
    "policy_step": names.POLICY_STEP,
    "events": names.EPISODE_EVENTS,
}
"""The node's own lifecycle publishers (they publish only while the node is active)."""


class PolicyNode(LifecycleNode):
    def __init__(self):
        super().__init__(names.POLICY_NODE)
        for name, default in names.PARAMETERS.items():
            self.declare_parameter(name, default, ParameterDescriptor(**params.descriptor_fields(name)))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.types = message_types()
        self.runtime: PolicyRuntime | None = None
        self.robot: RosRobot | None = None
        self._pubs: dict = {}
        self._entities: list = []
        self._diagnostics_timer = None
        self._active = False

    # ------------------------------------------------------------------------------------------- parameters
    def _values(self) -> dict:
        return {name: self.get_parameter(name).value for name in names.PARAMETERS}

    def _on_set_parameters(self, parameters) -> SetParametersResult:
        state = params.lifecycle_state(self.runtime is not None, self._active)
        why = params.refuse_change({p.name: p.value for p in parameters}, self._values(), state)
        if why is not None:
            self.get_logger().warning(f"parameter change refused: {why}")
        return SetParametersResult(successful=why is None, reason=why or "")

    # ------------------------------------------------------------------------------------------- lifecycle
    def on_configure(self, state: State) -> TransitionCallbackReturn:
        log = self.get_logger()
        try:
            config = params.runtime_config(self._values())
            runtime = PolicyRuntime(config, on_event=self._publish_event, on_record=self._publish_record,
                                    log=log.info, warn=log.warning)
            runtime.configure()
            settings = for_ros_node(runtime.hw, config.command_interface)
            robot = RosRobot(self, runtime.hw, settings, runtime.policy.policy.contract.policy_dt,
                             needs_reported_ee(runtime),  # franka_ros2 sends no ee_position: forward kinematics
                             camera_options(runtime.policy, config.rewards)["cameras"])  # the policy's, classifiers'
        except ValueError as exc:
            log.error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.runtime, self.robot = runtime, robot
        self._pubs = {role: self.create_lifecycle_publisher(CLASSES[spec.ros_type], spec.name, qos(spec.qos))
                      for role, spec in PUBLISHERS.items()}
        group = ReentrantCallbackGroup()
        sub = self.create_subscription
        self._entities = [
            sub(CLASSES[names.BOOL], names.ESTOP.name, lambda m: runtime.estop_message(bool(m.data)),
                qos(names.ESTOP.qos), callback_group=group),
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
        if config.estop_timeout_s == 0:
            log.warning("estop_timeout_s is 0: no e-stop heartbeat expected; losing the e-stop publisher goes "
                        "unnoticed")
        log.info(f"configured: {config.policy_path} on {runtime.hw.robot}, {robot}"
                 f"{', DRY RUN: no command is sent' if config.dry_run else ''}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: State) -> TransitionCallbackReturn:
        runtime = self.runtime
        try:
            if not runtime.config.dry_run:  # a Go2's sport mode: released once the robot answers, before any command
                wait_for_fresh_state(self.robot, runtime.config.state_wait_s, runtime.hw.safety.state_timeout_s)
                runtime.wait_for_heartbeat(runtime.config.state_wait_s)  # nothing handed over without an e-stop
                take_control(self.robot)
            runtime.activate(self.robot)
        except ValueError as exc:
            self.get_logger().error(f"activate failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self._active = True
        self.get_logger().info("active: ramping to the default pose; call ~/start once READY")
        return super().on_activate(state)

    def on_deactivate(self, state: State) -> TransitionCallbackReturn:
        self.stop_control()  # the last events still go out on the active publishers
        self._active = False
        return super().on_deactivate(state)

    def on_cleanup(self, state: State) -> TransitionCallbackReturn:
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: State) -> TransitionCallbackReturn:
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def stop_control(self) -> None:
        """DAMP, the control thread stopped, one last damping command (the teardown's "control" step)."""
        if self.runtime is not None:
            self.runtime.deactivate()

    def _teardown(self) -> None:
        """Everything configure made, destroyed: a later configure makes each of them once again."""
        self.stop_control()
        self._active = False
        if self.runtime is not None:
            self.runtime.cleanup()
        if self._diagnostics_timer is not None:
            self.destroy_timer(self._diagnostics_timer)
            self._diagnostics_timer = None
        if self.robot is not None:
            self.robot.close()
        for entity in self._entities:
            (self.destroy_service if hasattr(entity, "srv_type") else self.destroy_subscription)(entity)
        for publisher in self._pubs.values():
            self.destroy_lifecycle_publisher(publisher)
        self._entities, self._pubs = [], {}
        self.runtime = self.robot = None

    # ------------------------------------------------------------------------------------------- callbacks
    def _trigger(self, word: str):
        def handle(request, response):
            response.success, response.message = self.runtime.request(word)
            return response

        return handle

    def _publish_event(self, event) -> None:  # control thread
        self._pubs["events"].publish(rm.string_message(self.types, event.to_json()))

    def _publish_record(self, observation, action, command, outcome) -> None:  # control thread, every POLICY tick
        if observation is not None:
            self._pubs["observation"].publish(rm.multi_array_message(self.types, observation, ("obs",), float32=True))
            self._pubs["policy_step"].publish(rm.policy_step_message(self.types, observation, action, outcome))
        rows = [command.q, command.dq, command.kp, command.kd, command.tau]
        self._pubs["action"].publish(rm.multi_array_message(self.types, rows, ("command", "joints")))

    def _publish_diagnostics(self) -> None:
        if not self._active or self.runtime is None:  # a lifecycle publisher publishes only while active
            return
        level, message, values = self.runtime.diagnostics()
        now = self.get_clock().now().nanoseconds * 1e-9
        self._pubs["diagnostics"].publish(rm.diagnostic_array_message(self.types, now, names.POLICY_NODE, level,
                                                                      message, values))


def main(args=None) -> None:
    sys.exit(run_node(names.POLICY_NODE, PolicyNode, lambda node: node.stop_control(), args))


if __name__ == "__main__":
    main()
