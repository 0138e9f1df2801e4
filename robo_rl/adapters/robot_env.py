"""RobotEnv: a robot, through the deploy core, as a gymnasium env (the sim twin, the twin over DDS, a real robot).

What a learner on the robot sees. The env is the deploy core stepped by hand: `open_session` loads a policy
contract (an exported ONNX file: it fixes the observations, the actions and how they become joint targets) and
connects the robot through its transport; every `step`

    sets the learner's raw actions (A,) as the policy's `external` actions (or an operator's, while a takeover
    device is held),
    runs one control tick (state machine, the safety filter on the command, send; its clamps in info["safety"]),
    reads the robot's next state and builds the contract's observation from it (camera frames too),
    scores it with the reward modules (success / failure end the episode: a failure as `terminated`, a success as
    `terminated` when nothing more was to be earned (a classifier's one-off reward), as `truncated` when the reward
    would go on (goal_distance pays for staying at the goal), so a learner bootstraps through it),

and `reset` runs the reset module (home, random, operator) and starts a new episode (operator commands such as the
reach target or the velocity command are drawn from their trained ranges when `sample_commands`). A safety fault
(DAMP, ESTOP) ends the episode as a failure, with the reason in `info["fault"]`; so does a failure of a legged robot
(a fall: it damps, `info["fault"] == "fall"`). The next `reset` ramps again from DAMP (a legged robot lying on its
belly stands up through the ramp), refuses (RuntimeError, one line) when the robot is not upright (right it by hand)
and in a latched ESTOP, which only an operator releases.

Timing: on a rehearsal transport (`realtime=False`, the sim twin) each step advances one control period of
simulated time, as fast as the CPU allows. On a real-time transport the env keeps the control rate: `step` waits
for the next tick's deadline (a caller slower than one period makes late ticks, counted in
`controller.stats()["missed_ticks"]`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robo_rl.deploy.controller import SPIN_S, precise_sleep
from robo_rl.deploy.reset_modules import ResetError, run_reset
from robo_rl.deploy.robot import RobotState, take_control
from robo_rl.deploy.runtime import wait_for_fresh_state
from robo_rl.deploy.session import camera_options, open_session
from robo_rl.deploy.state_machine import Mode

ENV_ID = "robo_rl/Robot-v0"
"""`gymnasium.make(ENV_ID, policy_path=..., hardware_path=..., ...)` builds a RobotEnv (registered on import)."""
RAMP_TIMEOUT_S = 30.0
"""Longest a ramp to READY may take before `reset` gives up (robot time)."""


class RobotEnv(gym.Env):
    """A robot as a gymnasium env through the deploy core (see the module docstring).

    Args:
        policy_path: an exported policy whose contract the env follows (observations, actions, rate, gains).
        hardware_path: the robot's hardware file.
        transport: a registered transport (`sim`, `dds`, ...).
        realtime: False steps a rehearsal transport in simulated time; True keeps wall-clock control periods.
        rewards: reward modules scored on every next state (robo_rl.deploy.reward_modules.REWARD_MODULES).
        reset_module: run by `reset` (home, random, operator); None: none, the pose READY holds after the ramp
            starts each episode (a legged robot standing on its own gains, which a joint-space reset cannot pin).
        max_episode_steps: steps before an episode is truncated.
        sample_commands: draw each operator command (reach target, velocity command) uniformly from its trained
            range at every reset; False keeps them (set them with `set_command`).
        seed: seeds the command draws, the random reset and the twin's noise.
        session: further `open_session` arguments (latency_s, noise_std, domain_id, command_interface, scene, ...).
        takeover: an operator's device, as HIL-SERL's interventions: called with the state before every step, it
            returns joint targets (J,) in the robot's joint order while the operator holds it (None otherwise);
            those targets, written as the policy's actions (`ActionMap.actions_for`), are executed instead of the
            learner's, through the same action terms and safety filter. `info["intervention"]` flags the step and
            `info["action"]` is always the action executed: what a learner stores (and, flagged, in its demos).

    Observation: the contract's observation vector (O,) float32; for a policy that reads cameras, a Dict of `obs`
    and one (H, W, 3) uint8 frame per camera. Action: (A,) float32 within the contract's action clip (or
    [-1, 1] x the largest scale when it has none, as a tanh policy emits).
    """

    metadata = {"render_modes": []}
    """A robot (even its twin, whose state carries over from one episode to the next) is not reset to the same
    observation by the same seed: register it with `nondeterministic=True`."""

    def __init__(self, policy_path: str | Path, hardware_path: str | Path, transport: str = "sim", *,
                 realtime: bool = False, rewards: Sequence[str] = ("goal_distance",), reset_module: str | None = "home",
                 max_episode_steps: int = 150, sample_commands: bool = True, seed: int = 0,
                 session: Mapping[str, Any] | None = None,
                 takeover: Callable[[RobotState], np.ndarray | None] | None = None):
        if not (isinstance(max_episode_steps, int) and max_episode_steps > 0):
            raise ValueError(f"max_episode_steps = {max_episode_steps!r}: must be an integer > 0")
        self.runtime = open_session(policy_path, hardware_path, transport, realtime=realtime, seed=seed,
                                    rewards=tuple(rewards), reset_module=reset_module or "home",
                                    **dict(session or {}))
        self.reset_module = reset_module
        self.realtime = realtime
        self.takeover = takeover
        robot = self.runtime.robot
        try:
            if realtime:  # a live robot: its state first, then its own controller hands the motors over
                wait_for_fresh_state(robot, self.runtime.config.state_wait_s, self.runtime.hw.safety.state_timeout_s)
            take_control(robot)
        except BaseException:
            robot.close()
            raise
        if takeover is not None:  # refused now, not at the operator's first touch
            self.runtime.policy.action_map.actions_for(np.asarray(self.runtime.policy.policy.contract.default_joint_pos))
        self.max_episode_steps = max_episode_steps
        self.sample_commands = sample_commands
        self.np_random, _ = gym.utils.seeding.np_random(seed)  # the command draws; reset(seed=...) reseeds it
        policy = self.runtime.policy
        contract = policy.policy.contract
        clip = contract.action.clip if contract.action.clip is not None else float(max(contract.action.scale))
        self.action_space = gym.spaces.Box(-clip, clip, (contract.action_dim,), np.float32)
        obs_space = gym.spaces.Box(-np.inf, np.inf, (contract.obs_dim,), np.float32)
        self._cameras = camera_options(policy)["cameras"]  # ((name, height, width), ...)
        if self._cameras:
            self.observation_space = gym.spaces.Dict({"obs": obs_space, **{
                name: gym.spaces.Box(0, 255, (h, w, 3), np.uint8) for name, h, w in self._cameras}})
        else:
            self.observation_space = obs_space
        self._steps = 0
        self._episode_open = False
        self._next_tick = 0.0
        self._sleep = precise_sleep(min(SPIN_S, 0.25 * self.runtime.controller.period))  # as the deploy loop waits
        self.last_tick_at = float("nan")
        """When the newest real-time tick started (time.monotonic(), s): the actor's jitter is measured from it."""
        arguments = {"policy_path": str(policy_path), "hardware_path": str(hardware_path), "transport": transport,
                     "realtime": realtime, "rewards": tuple(rewards), "reset_module": reset_module,
                     "max_episode_steps": max_episode_steps, "sample_commands": sample_commands, "seed": seed,
                     "session": dict(session or {})}
        self.spec = gym.envs.registration.EnvSpec(ENV_ID, entry_point=f"{__name__}:RobotEnv", nondeterministic=True,
                                                  kwargs=arguments)

    # ------------------------------------------------------------------------------------------- gymnasium
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        c = self.runtime.controller
        if c.mode is Mode.ESTOP:
            raise RuntimeError("the e-stop is latched: an operator must release it (reset_estop) before the next "
                               "episode")
        if c.mode is Mode.POLICY:  # reset in the middle of an episode
            c.end_policy()
        if c.mode is Mode.READY:
            self._idle_tick()  # the safety checks on the newest state first: a robot that fell meanwhile damps
        if c.mode is Mode.DAMP:  # a fault (or a fall) ended the last episode: ramp again, standing a legged robot up
            self._await_fresh_state()  # after a stale-state fault a ramp on a state still old would fault at once
            c.reset()
        if c.mode is Mode.PASSIVE:
            c.request_ramp()
        if c.mode is not Mode.READY:
            self._tick_until_ready()
        name = None
        if self.reset_module is not None:
            try:
                name = run_reset(c, self.runtime.reset_module, step=self._idle_tick).name
            except ResetError as exc:
                raise RuntimeError(f"reset failed: {exc}") from None
        if self.sample_commands:
            for command, (low, high) in self.runtime.policy.commands.ranges.items():
                self.runtime.policy.set_command(command, self.np_random.uniform(low, high))
        self.runtime.tracker.reward.reset()
        c.start_policy()  # POLICY: the learner's actions drive the robot from the next tick on
        self._steps = 0
        self._episode_open = True
        obs = self._observe()
        return obs, {"reset": name, "commands": self._commands()}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict]:
        if not self._episode_open:
            raise RuntimeError("step before reset (or after the episode ended): call reset()")
        a = np.asarray(action, dtype=np.float32).reshape(self.action_space.shape)
        if not np.isfinite(a).all():
            raise ValueError(f"action {a.tolist()}: must be finite numbers")
        runtime, c = self.runtime, self.runtime.controller
        executed = np.clip(a, self.action_space.low, self.action_space.high)
        operator = self.takeover(c.robot.read_state()) if self.takeover is not None else None
        if operator is not None:  # (J,) robot order -> the policy's joints -> the policy's actions
            policy = runtime.policy
            executed = policy.action_map.actions_for(np.asarray(operator, dtype=np.float64)[policy.robot_index])
        runtime.policy.external = executed
        self._tick()
        self._steps += 1
        fault = (c.state_machine.fault_reason or c.mode.name.lower()) if c.mode in (Mode.DAMP, Mode.ESTOP) else None
        state = c.robot.read_state()  # what the controller reads: with the state estimates the hardware file asks for
        obs = self._observe(state)
        result = runtime.tracker.reward(state, runtime.policy.commands)
        # A success whose reward would go on (goal_distance) is no terminal state: it ends the episode as a truncation,
        # so a learner bootstraps through it instead of learning that reaching the goal forfeits the reward.
        terminated = result.terminal or fault is not None
        truncated = not terminated and (result.success or self._steps >= self.max_episode_steps)
        info = {"success": bool(result.success), "failure": bool(result.failure or fault is not None),
                "fault": fault, "safety": tuple(c.last_interventions), "terms": dict(result.terms),
                "intervention": operator is not None, "action": executed.copy()}
        if terminated or truncated:
            self._episode_open = False
            if c.mode is Mode.POLICY and info["failure"] and self.runtime.hw.kind == "legged":
                c.stop("fall")  # a legged robot that failed (fell): damp; the next reset stands it up again
                info["fault"] = "fall"
            elif c.mode is Mode.POLICY:
                c.end_policy()  # READY holds the pose until the next reset
        return obs, float(result.reward), bool(terminated), bool(truncated), info

    # ------------------------------------------------------------------------------------------- pauses
    def interrupt(self, how: str = "hold") -> None:
        """End the open episode with no outcome and keep the robot safe until the next `reset`: `hold` leaves POLICY
        for READY holding the last command's pose, `damp` goes to DAMP (the next `reset` ramps again). For a learner
        that cannot act now (an actor whose parameters went stale); `idle_step` keeps the control rate meanwhile."""
        if how not in ("hold", "damp"):
            raise ValueError(f"interrupt how = {how!r}: allowed values are hold, damp")
        c = self.runtime.controller
        self._episode_open = False
        if how == "damp" and c.mode not in (Mode.DAMP, Mode.ESTOP):
            c.stop()
        elif how == "hold" and c.mode is Mode.POLICY:
            c.end_policy()

    def idle_step(self) -> None:
        """One control tick without an action, on the control grid (READY holds, DAMP damps, PASSIVE stays limp).
        Between episodes only (ValueError while one is open: its actions come through `step`)."""
        if self._episode_open:
            raise ValueError("idle_step while an episode is open: step it, or interrupt() it first")
        c = self.runtime.controller
        if c.mode is Mode.POLICY:  # never let the template's own policy act between episodes
            c.end_policy()
        self._idle_tick()

    def close(self) -> None:
        runtime = getattr(self, "runtime", None)
        if runtime is not None and runtime.controller is not None:
            robot = runtime.robot
            runtime.cleanup()  # DAMP and a last damping command (once: a DDS robot refuses commands once closed)
            robot.close()
        self.runtime = None

    # ------------------------------------------------------------------------------------------- operator
    def set_command(self, name: str, value: object) -> np.ndarray:
        """Set an operator command (e.g. "target_pos", "velocity_command"); clamped into its trained range."""
        return self.runtime.policy.set_command(name, value)

    # ------------------------------------------------------------------------------------------- ticks
    def _now(self) -> float:
        return self.runtime.robot.time if not self.realtime else time.monotonic()

    def _tick(self) -> None:
        """One control tick; in real time on the absolute grid of control periods."""
        c = self.runtime.controller
        if self.realtime:
            now = time.monotonic()
            if now < self._next_tick:
                self._sleep(self._next_tick - now)
            self.last_tick_at = time.monotonic()
            self._next_tick = max(self._next_tick + c.period, self.last_tick_at)
        c.tick(self._now())

    def _idle_tick(self) -> None:
        """A tick without a learner's action (ramps, resets, READY holds)."""
        self._tick()

    def _await_fresh_state(self) -> None:
        """Damp (idle ticks) until the robot's state is fresh again, at most the runtime's state_wait_s; RuntimeError
        (one line) after that. A robot that stalled for a moment (its driver, a loaded host) is ramped again only
        once it reports again."""
        c, hw = self.runtime.controller, self.runtime.hw
        wait_s = self.runtime.config.state_wait_s
        end = self._now() + wait_s
        while True:
            try:
                age = self._now() - c.robot.read_state().received
            except Exception:  # no state at all yet
                age = float("inf")
            if age <= hw.safety.state_timeout_s:
                return
            if self._now() > end:
                raise RuntimeError(f"no fresh robot state within {wait_s:g} s (newest {age:.2f} s old): the robot "
                                   "stays damped")
            self._idle_tick()

    def _tick_until_ready(self) -> None:
        c = self.runtime.controller
        end = self._now() + RAMP_TIMEOUT_S
        while c.mode is not Mode.READY:
            if c.mode in (Mode.DAMP, Mode.ESTOP) or self._now() > end:
                fallen = c.state_machine.fault_reason == "imu_check"
                raise RuntimeError(f"the robot did not reach READY (mode {c.mode.name}"
                                   f"{', ' + c.last_error if c.last_error else ''})"
                                   f"{': it is not upright, right it by hand, then reset' if fallen else ''}")
            self._idle_tick()

    def _observe(self, state: Any = None) -> Any:
        state = state if state is not None else self.runtime.controller.robot.read_state()
        obs = np.asarray(self.runtime.policy.observe(state), dtype=np.float32)
        if not self._cameras:
            return obs
        return {"obs": obs, **{name: state.images[name] for name, _, _ in self._cameras}}

    def _commands(self) -> dict[str, list[float]]:
        return {k: [float(x) for x in v] for k, v in self.runtime.policy.commands.items()}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=f"{__name__}:RobotEnv", nondeterministic=True)
