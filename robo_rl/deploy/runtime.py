"""PolicyRuntime: the one wiring of the deploy core, independent of how the robot and the operator are reached.

It loads and cross-checks the policy and the hardware file, builds the safety filter, state machine and
Controller over any RobotInterface, runs the loop on its own thread, and carries out operator actions with
the reset and reward modules. Every way of deploying is a thin shell over it: `robo_rl.deploy.session`
(`robo-rl deploy` on any registered transport: the sim twin's rehearsal, DDS; `open_session` for stepping
the controller by hand) and the rclpy lifecycle node in ros_ws (`robo_rl_ros.policy_node`), which turn
subscriptions, services and keys into its method calls.

Lifecycle (as a ROS 2 lifecycle node's):
    configure  load the ONNX policy and check its contract against the hardware file (nothing moves); build the
               state estimator the hardware file configures (robo_rl.deploy.estimation: base_lin_vel on legged robots)
               and the end effector's forward kinematics for a policy observing ee_pos (robo_rl.deploy.ee_kinematics)
    activate   needs fresh state from the robot, then starts the control loop on its own thread
               (absolute deadlines, not a ROS timer) and ramps to the default pose (RAMP -> READY)
    deactivate DAMP, a last damping command, loop stopped
    cleanup    forget the policy

Operator actions (services `~/start` ..., words on the operator topic, keys in the CLI):
    start        READY -> POLICY: the only way POLICY starts (never on its own once READY)
    stop         -> DAMP
    estop        -> ESTOP, latched (the e-stop topic's True)
    reset_estop  ESTOP -> PASSIVE -> RAMP (POLICY again needs `start`)
    reset        READY / POLICY: end the episode, run the reset module; DAMP: -> PASSIVE -> RAMP
    success, failure   operator labels for the operator reward module
    confirm      confirms an operator-confirmed reset

Inputs: `set_velocity_command` (cmd_vel; zeroed after `cmd_vel_timeout_s` without a new one),
`set_target` (target_pose) and `estop_message` (every e-stop message: True latches ESTOP; with `estop_timeout_s`
> 0 each one is also a heartbeat, robo_rl.deploy.estop_heartbeat). Outputs through callbacks: episode events
(JSON-able), and per POLICY tick the observation and the filtered command (recording); `diagnostics()` for
/diagnostics.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.deploy.controller import Controller
from robo_rl.deploy.ee_kinematics import EndEffectorKinematics, KinematicRobot, make_ee_kinematics
from robo_rl.deploy.estimation import BaseVelocityEstimator, EstimatingRobot, make_base_velocity_estimator
from robo_rl.deploy.estop_heartbeat import EstopHeartbeat
from robo_rl.deploy.hardware import HardwareSpec, load_hardware
from robo_rl.deploy.policy import OnnxPolicy, PolicyStep
from robo_rl.deploy.reset_modules import OperatorConfirmedReset, ResetError, make_reset, run_reset
from robo_rl.deploy.reward_modules import (
    EpisodeEvent,
    EpisodeTracker,
    OperatorLabelReward,
    RewardStep,
    make_reward,
)
from robo_rl.deploy.robot import JointCommand, RobotInterface, RobotState
from robo_rl.deploy.ros_interface import OPERATOR_REQUESTS
from robo_rl.deploy.runtime_config import RuntimeConfig
from robo_rl.deploy.smoothing import command_path
from robo_rl.deploy.state_machine import Mode

RUNTIME_REQUESTS = OPERATOR_REQUESTS + ("success", "failure", "confirm")
"""Every word `PolicyRuntime.request` understands."""


def load_for_deploy(policy_path: str | Path, hardware_path: str | Path, *,
                    commands: Mapping[str, object] | None = None, allow_unsafe_hardware: bool = False,
                    warn: Callable[[str], None] | None = None, instruction: str | None = None
                    ) -> tuple[HardwareSpec, PolicyStep]:
    """Load and cross-check hardware file, policy, operator commands and instruction (ValueError, one line); touches
    no robot. A policy that follows instructions (a VLA) needs `instruction`; any other refuses one."""
    hw = load_hardware(find_asset(hardware_path, what="hardware file"), allow_unsafe=allow_unsafe_hardware, warn=warn)
    onnx_policy = OnnxPolicy(find_asset(policy_path, what="policy file"))
    policy = PolicyStep(onnx_policy, hw, commands, warn=warn)  # validates the contract and the commands
    if instruction is not None:
        policy.set_instruction(instruction)
    elif policy.inputs.needs_instruction:
        trained = (onnx_policy.contract.extra.get("instructions") or [""])[0]
        raise ValueError("this policy follows an instruction: pass --instruction TEXT"
                         + (f" (e.g. {trained!r})" if trained else ""))
    return hw, policy


def default_pose(policy: PolicyStep, hw: HardwareSpec) -> np.ndarray:
    """(J,) pose RAMP moves to and READY holds: the policy's default; mid-range for joints it does not drive."""
    q = policy.default_q.copy()
    undriven = np.setdiff1d(np.arange(len(hw.joint_names)), policy.robot_index)
    q[undriven] = (hw.joint_lower[undriven] + hw.joint_upper[undriven]) / 2
    return q


def observes_ee(policy: PolicyStep) -> bool:
    """True when the policy observes the end-effector position (the robot reports it, or the forward kinematics)."""
    return any(t.name == "ee_pos" for t in policy.policy.contract.observation)


def needs_reported_ee(runtime: PolicyRuntime) -> bool:
    """True when the robot itself must report the end-effector position: the policy observes it and no forward
    kinematics computes it (a transport then waits for it)."""
    return observes_ee(runtime.policy) and runtime.ee_kinematics is None


def control_path(robot: RobotInterface, hw: HardwareSpec, *, estimator: BaseVelocityEstimator | None = None,
                 ee_kinematics: EndEffectorKinematics | None = None, dry_run: bool = False,
                 warn: Callable[[str], None] | None = None) -> RobotInterface:
    """The robot as a Controller drives it: commands as jerk-limited setpoints where the controller needs them
    (`command_path`), states with the base-velocity estimate (`EstimatingRobot`) and the forward kinematics' ee_pos
    (`KinematicRobot`) when given, commands kept instead of sent in a dry run (`DryRunRobot`)."""
    target = command_path(robot, hw, 1.0 / hw.control_rate_hz)
    if estimator is not None:
        target = EstimatingRobot(target, estimator, warn=warn)
    if ee_kinematics is not None:
        target = KinematicRobot(target, ee_kinematics)
    return DryRunRobot(target) if dry_run else target


class DryRunRobot:
    """Passes the robot's state through and keeps the commands instead of sending them."""

    def __init__(self, robot: RobotInterface):
        self.robot = robot
        self.last_command: JointCommand | None = None
        self.withheld = 0

    def read_state(self) -> RobotState:
        return self.robot.read_state()

    def send_command(self, command: JointCommand) -> None:
        self.last_command = command
        self.withheld += 1

    def close(self) -> None:
        self.robot.close()


def check_reported_joints(state: RobotState, hw: HardwareSpec) -> None:
    """ValueError (one line) unless the robot reports every joint of the hardware file by its name: before anything
    is sent, since the safety filter would otherwise damp the unmapped robot from the first tick."""
    missing = [n for n in hw.joint_names if n not in state.joint_names]
    if not missing:
        return
    reported = ", ".join(state.joint_names) or "no joints"
    which = "none of" if len(missing) == len(hw.joint_names) else f"not {', '.join(missing)} of"
    hint = ("" if hw.model_joint_names is None else "; model_joint_names maps them onto the model's")
    raise ValueError(f"the robot reports joints {reported}: {which} hardware {hw.robot!r} joint_names (they must be "
                     f"the robot's own names{hint})")


def wait_for_fresh_state(robot: RobotInterface, timeout_s: float, fresh_within_s: float,
                         clock: Callable[[], float] = time.monotonic) -> RobotState:
    """Poll `robot.read_state` until a state received within `fresh_within_s` arrives; ValueError after timeout_s."""
    wait = getattr(robot, "wait_for_state", None)
    if wait is not None:  # transports that can say what they wait for (topic, domain)
        return wait(timeout_s, fresh_within_s=fresh_within_s, clock=clock)
    end = clock() + timeout_s
    last_error = "no state"
    while clock() <= end:
        try:
            state = robot.read_state()
            if clock() - state.received <= fresh_within_s:
                return state
            last_error = f"newest state is {clock() - state.received:.3g} s old"
        except Exception as exc:  # a transport may raise until its first message
            last_error = str(exc)
        time.sleep(0.01)
    raise ValueError(f"no fresh robot state within {timeout_s:g} s ({last_error})")


RecordSink = Callable[[np.ndarray | None, np.ndarray, JointCommand, RewardStep | None], None]
"""Receives each POLICY tick's (observation (O,) or None, raw actions (A,), filtered command, the tick's scored step or
None): see PolicyRuntime's `on_record`."""


@dataclass
class _Inputs:
    """Operator inputs with their receive times (guarded by PolicyRuntime's lock)."""

    velocity_received: float | None = None
    messages: list[str] = field(default_factory=list)


class PolicyRuntime:
    """The policy node's logic over any RobotInterface (see the module docstring).

    Args:
        config: the node's parameters.
        on_event: receives every EpisodeEvent (publish on ~/episode_events); control thread: be quick.
        on_record: receives (observation (O,) or None, raw actions (A,), filtered command, outcome) every POLICY tick
            (~/observation, ~/policy_step, ~/action), after the reward modules scored the tick: `outcome` is that
            RewardStep (the outcome of the command sent one tick earlier; the first of an episode scores its start)
            or None (no episode running); control thread: be quick.
        log: receives one line per operator action result and per problem (default: print).
        warn: receives warning lines (loading, the controller's); default: `log`.
        clock: monotonic time source (s), shared with the Controller.
    """

    def __init__(self, config: RuntimeConfig, *, on_event: Callable[[EpisodeEvent], None] | None = None,
                 on_record: RecordSink | None = None,
                 log: Callable[[str], None] | None = None, warn: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        config.validate()
        self.config = config
        self._event_sinks = [on_event] if on_event is not None else []
        self._record_sinks = [on_record] if on_record is not None else []
        self._step_sinks: list[Callable[[RewardStep], None]] = []
        self._log = log or (lambda line: print(line, flush=True))
        self._warn = warn or self._log
        self._clock = clock
        self._lock = threading.Lock()  # operator inputs
        self._episode_lock = threading.RLock()  # tracker and events: control thread vs operator threads
        self._inputs = _Inputs()
        self.hw: HardwareSpec | None = None
        self.policy: PolicyStep | None = None
        self.controller: Controller | None = None
        self.robot: RobotInterface | None = None
        self.tracker: EpisodeTracker | None = None
        self.reset_module = None
        self.estimator: BaseVelocityEstimator | None = None
        self.heartbeat = EstopHeartbeat(config.estop_timeout_s) if config.estop_timeout_s > 0 else None
        self._heartbeat_lost = False  # said once per loss
        self._deactivated = False  # the last damping command went out (deactivate runs once per attach)
        self.ee_kinematics: EndEffectorKinematics | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.events: list[EpisodeEvent] = []  # the last events, for status and tests (bounded)

    # ------------------------------------------------------------------------------------------- lifecycle
    @property
    def configured(self) -> bool:
        return self.policy is not None

    @property
    def active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def configure(self, commands: Mapping[str, object] | None = None,
                  warn: Callable[[str], None] | None = None, instruction: str | None = None) -> None:
        """Load the policy and check its contract against the hardware file (ValueError, one line); `instruction`:
        the text a VLA policy follows (`load_for_deploy`)."""
        c = self.config
        self.hw, self.policy = load_for_deploy(c.policy_path, c.hardware_config, commands=commands,
                                               allow_unsafe_hardware=c.allow_unsafe_hardware, warn=warn or self._warn,
                                               instruction=instruction)
        self.reset_module = make_reset(c.reset_module, self.hw)
        self.tracker = EpisodeTracker(make_reward(c.rewards, self.hw), self._emit)
        self.estimator = make_base_velocity_estimator(self.hw, warn or self._warn)  # None unless the file has one
        self.ee_kinematics = make_ee_kinematics(self.hw, observes_ee(self.policy), warn or self._warn)

    def activate(self, robot: RobotInterface) -> RobotState:
        """Wait for fresh state, then run the loop on its own thread and ramp to the default pose.

        Returns the first fresh state. Raises ValueError (not configured, no fresh state in time, the robot does not
        report the hardware file's joints by name: `check_reported_joints`); nothing has been sent then.
        """
        if not self.configured:
            raise ValueError("activate before configure: no policy loaded")
        if self.active:
            raise ValueError("already active")
        # Collect the start-up garbage now (imports, loading): a full collection triggered in the first ticks
        # pauses every thread, the twin's physics included, for tens of ms (a stale-state fault on a busy host).
        # Before the wait for fresh state, never after it: in a big process the collection itself outlasts the
        # state timeout, and the first tick would find the state it waited for already stale.
        gc.collect()
        end = self._clock() + self.config.state_wait_s
        first = wait_for_fresh_state(robot, self.config.state_wait_s, self.hw.safety.state_timeout_s, self._clock)
        check_reported_joints(first, self.hw)  # joints named otherwise than the robot names them: nothing is sent
        self.policy.inputs.check_cameras(first.images)  # a camera the policy reads, missing or of another size
        self.wait_for_heartbeat(max(0.0, end - self._clock()))
        c = self.attach(robot)
        c.request_ramp()
        self._stop.clear()
        self._thread = threading.Thread(target=c.run, kwargs={"stop_event": self._stop}, daemon=True,
                                        name="robo_rl-control")
        self._thread.start()
        return first

    def wait_for_heartbeat(self, timeout_s: float) -> None:
        """Return once the e-stop heartbeat is alive (or none is expected); ValueError (one line) after `timeout_s`.
        `activate` checks it; a transport that hands the motors over first (a Go2's sport mode) checks it before."""
        if self.heartbeat is None:
            return
        end = self._clock() + timeout_s
        while (missing := self.heartbeat.missing(self._clock())) is not None:
            if self._clock() >= end:
                raise ValueError(f"{missing}; refusing to activate")
            time.sleep(0.01)
        self._heartbeat_lost = False

    def attach(self, robot: RobotInterface) -> Controller:
        """Build the Controller (safety filter, state machine, loop) over `robot`, in PASSIVE, not running.

        `activate` runs it on its own thread; `open_session` hands it out to be stepped by hand. With a base
        velocity estimator configured (hardware `estimator.base_velocity`) the controller reads the robot through
        an `EstimatingRobot` (a fresh estimate), so every state it sees carries base_lin_vel, on every transport;
        `self.robot` stays the robot as connected.
        """
        if not self.configured:
            raise ValueError("attach before configure: no policy loaded")
        hw = self.hw
        self.robot = robot
        target = control_path(robot, hw, estimator=self.estimator, ee_kinematics=self.ee_kinematics,
                              dry_run=self.config.dry_run, warn=self._warn)
        c = Controller(target, hw, self.policy, default_pose(self.policy, hw), clock=self._clock,
                       realtime_priority=self.config.realtime_priority if self._clock is time.monotonic else 0)
        c.on_tick = self._on_tick
        c.on_warning = self._warn
        self.controller = c
        self._deactivated = False
        return c

    def subscribe(self, *, on_event: Callable[[EpisodeEvent], None] | None = None,
                  on_record: RecordSink | None = None,
                  on_step: Callable[[RewardStep], None] | None = None) -> None:
        """Add a receiver of episode events, of the per-POLICY-tick record (see the class docstring) and / or of
        each step the reward modules score (control thread, after the tick's command was sent and the step's
        success / failure event emitted): the step scores the state read this tick, so it is the outcome of the
        command sent one tick earlier (the first one of an episode scores its starting state)."""
        if on_event is not None:
            self._event_sinks.append(on_event)
        if on_record is not None:
            self._record_sinks.append(on_record)
        if on_step is not None:
            self._step_sinks.append(on_step)

    def deactivate(self) -> None:
        """DAMP, stop the loop, send one last damping command (what Ctrl-C does); once per `attach`, so a later
        cleanup (after a signal's teardown shut the middleware down) sends nothing more."""
        c = self.controller
        if c is None or self._deactivated:
            return
        c.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._deactivated = True
        c.shutdown()
        self._thread = None

    def cleanup(self) -> None:
        """Deactivate if needed and forget the policy."""
        self.deactivate()
        self.controller = self.robot = self.policy = self.hw = self.tracker = self.estimator = None
        self.ee_kinematics = None

    # ------------------------------------------------------------------------------------------- operator
    def request(self, word: str) -> tuple[bool, str]:
        """Carry out one operator word (RUNTIME_REQUESTS); returns (accepted, one line why)."""
        actions = {"start": self.start, "stop": self.stop, "estop": self.estop, "reset_estop": self.reset_estop,
                   "reset": self.reset, "success": lambda: self.label("success"),
                   "failure": lambda: self.label("failure"), "confirm": self.confirm}
        if word not in actions:
            return False, f"unknown request {word!r}; allowed: {', '.join(RUNTIME_REQUESTS)}"
        if self.controller is None:
            return False, f"{word}: the node is not active"
        ok, message = actions[word]()
        self._log(("" if ok else "refused: ") + message)
        return ok, message

    def start(self) -> tuple[bool, str]:
        c = self.controller
        if c.mode is not Mode.READY:
            return False, f"start in mode {c.mode.name}: only allowed from READY"
        c.start_policy()
        with self._episode_lock:
            self.tracker.start(self._clock())
        return True, "POLICY started"

    def stop(self) -> tuple[bool, str]:
        c = self.controller
        before = c.mode
        c.stop()
        self._end_episode("operator_stop")
        return True, f"{before.name} -> {c.mode.name}"

    def estop(self) -> tuple[bool, str]:
        """Latch the e-stop (thread-safe, immediate: the next command sent is the damping command)."""
        self.controller.estop()
        self._end_episode("estop")
        return True, "ESTOP latched (reset_estop releases it)"

    def reset_estop(self) -> tuple[bool, str]:
        c = self.controller
        if c.mode is not Mode.ESTOP:
            return False, f"reset_estop in mode {c.mode.name}: only allowed in ESTOP"
        missing = self.heartbeat.missing(self._clock()) if self.heartbeat is not None else None
        if missing is not None:
            return False, f"reset_estop: {missing}"
        self._heartbeat_lost = False
        c.reset()
        c.request_ramp()
        return True, "ESTOP released: PASSIVE -> RAMP (start again once READY)"

    def reset(self) -> tuple[bool, str]:
        """DAMP: -> PASSIVE -> RAMP. READY / POLICY: end the episode and run the reset module (blocking)."""
        c = self.controller
        if c.mode is Mode.DAMP:
            c.reset()
            c.request_ramp()
            return True, "DAMP -> PASSIVE -> RAMP"
        if c.mode not in (Mode.READY, Mode.POLICY):
            return False, f"reset in mode {c.mode.name}: allowed in READY, POLICY or DAMP"
        if c.mode is Mode.POLICY:
            self._end_episode("reset")
        try:
            result = run_reset(c, self.reset_module)
        except (ResetError, ValueError) as exc:
            return False, str(exc)
        with self._episode_lock:
            self.tracker.reset_done(self._clock(), {"module": result.name, "duration_s": result.duration_s,
                                                    "max_error": result.max_error})
        return True, f"reset {result.name!r} done in {result.duration_s:.2f} s (max error {result.max_error:.3g} rad)"

    def label(self, outcome: str) -> tuple[bool, str]:
        modules = [m for m in self.tracker.reward.modules if isinstance(m, OperatorLabelReward)]
        if not modules:
            return False, f"{outcome}: no operator reward module (add 'operator' to rewards)"
        for m in modules:
            m.label(outcome)
        return True, f"labelled {outcome}"

    def confirm(self) -> tuple[bool, str]:
        if not isinstance(self.reset_module, OperatorConfirmedReset):
            return False, "confirm: the reset module is not operator-confirmed"
        self.reset_module.confirm()
        return True, "reset confirmed"

    def estop_message(self, pressed: bool, received: float | None = None) -> None:
        """One message on the e-stop topic: a heartbeat (with `estop_timeout_s` > 0); True also latches ESTOP."""
        if self.heartbeat is not None:
            self.heartbeat.beat(self._clock() if received is None else received)
        if pressed and self.controller is not None:
            self.request("estop")

    def set_velocity_command(self, command: np.ndarray, received: float | None = None) -> None:
        """cmd_vel: (3,) (v_x, v_y, yaw rate); ignored if the policy takes none; zeroed after the timeout."""
        if self.policy is None or "velocity_command" not in self.policy.commands:
            return
        self.policy.set_command("velocity_command", command)
        with self._lock:
            self._inputs.velocity_received = self._clock() if received is None else received

    def set_target(self, position: np.ndarray) -> None:
        """target_pose: (3,) end-effector target in the base frame; ignored if the policy takes none."""
        if self.policy is None or "target_pos" not in self.policy.commands:
            return
        self.policy.set_command("target_pos", position)

    # ------------------------------------------------------------------------------------------- control thread
    def _emit(self, event: EpisodeEvent) -> None:
        """Called by the tracker, under the episode lock."""
        self.events.append(event)
        del self.events[:-1000]
        for sink in self._event_sinks:
            sink(event)

    def _end_episode(self, why: str) -> None:
        with self._episode_lock:
            if self.tracker is not None and self.tracker.active:
                self.tracker.intervention(why, self._clock(), ends_episode=True)

    def _on_tick(self, now: float, state: RobotState | None, command: JointCommand) -> None:
        """After every tick (control thread, controller lock held)."""
        with self._lock:
            received = self._inputs.velocity_received
            stale = received is not None and now - received > self.config.cmd_vel_timeout_s
            if stale:
                self._inputs.velocity_received = None
        if stale:
            self.policy.set_command("velocity_command", np.zeros(3))
        c = self.controller
        if self.heartbeat is not None and c.mode is not Mode.ESTOP:
            missing = self.heartbeat.missing(now)
            if missing is not None:  # the next command sent is the damping command
                c.estop("estop_heartbeat")
                c.last_error = missing
                if not self._heartbeat_lost:
                    self._heartbeat_lost = True
                    self._warn(f"ESTOP: {missing}")
        mode = c.mode
        result = self._score(mode, state, now)
        if mode is Mode.POLICY:
            for sink in self._record_sinks:
                sink(self.policy.last_obs, self.policy.last_action, command, result)

    def _score(self, mode: Mode, state: RobotState | None, now: float) -> RewardStep | None:
        """The episode's bookkeeping of one tick: interventions, and in POLICY the reward modules' step (handed to the
        step sinks; a success or failure ends POLICY when configured). Returns that step, or None."""
        c = self.controller
        with self._episode_lock:
            tracker = self.tracker
            if not tracker.active:
                return None
            if mode is Mode.POLICY:
                for what in c.last_interventions:
                    tracker.intervention(what, now)
                if state is not None:
                    result = tracker.step(state, self.policy.commands, now)
                    if result is not None:
                        for sink in self._step_sinks:
                            sink(result)
                        if result.done and self.config.end_episode_on_done:
                            c.end_policy()
                    return result
            elif mode in (Mode.DAMP, Mode.ESTOP):
                tracker.intervention(c.state_machine.fault_reason or mode.name.lower(), now, ends_episode=True)
        return None

    # ------------------------------------------------------------------------------------------- reporting
    def diagnostics(self) -> tuple[str, str, dict[str, object]]:
        """(level "ok" / "warn" / "error", one-line message, key-values) for /diagnostics."""
        c = self.controller
        if c is None:
            return "stale", "inactive", {"mode": "INACTIVE"}
        s = c.stats()
        mode = c.mode
        values: dict[str, object] = {
            "mode": mode.name,
            "fault": c.state_machine.fault_reason or "",
            "last_error": c.last_error or "",
            "ticks": int(s["ticks"]),
            "missed_ticks": int(s["missed_ticks"]),
            "period_p50_ms": round(s["period_p50"] * 1e3, 3),
            "period_p99_ms": round(s["period_p99"] * 1e3, 3),
            "period_max_ms": round(s["period_max"] * 1e3, 3),
            "lateness_p99_ms": round(s["lateness_p99"] * 1e3, 3),
            "dry_run": self.config.dry_run,
            "command_interface": self.config.command_interface or "default",
            "episode": self.tracker.episode if self.tracker else 0,
            "hook_errors": c.hook_errors,
            "realtime_priority": c.realtime_priority if c.realtime_note is None else 0,
            "estop_heartbeat": "off" if self.heartbeat is None else self.heartbeat.missing(self._clock()) or "ok",
        }
        values.update({f"interventions.{k}": v for k, v in sorted(c.intervention_counts.items())})
        for key, value in self.policy.commands.items():
            values[f"command.{key}"] = [round(float(v), 4) for v in value]
        if mode is Mode.ESTOP:
            return "error", "ESTOP latched", values
        if mode is Mode.DAMP:
            return "warn", f"DAMP ({values['fault'] or 'stop'})", values
        return "ok", mode.name, values

    def status_line(self) -> str:
        c = self.controller
        return "inactive" if c is None else c.status_line()
