"""The robot's setpoint controller in simulation: targets reach the actuators as the robot would receive them.

A robot whose controller takes jerk-limited setpoints (a Franka: hardware `controller.setpoint_rate_hz`, 1 kHz) does not
step to a policy's target at the tick: the deploy core sends it `rate / policy rate` setpoints that follow the target
within libfranka's limits (`robo_rl.deploy.smoothing`), and the arm lags behind its target by that interpolation. A
policy trained on targets that step at the tick drives such an arm into a limit cycle around its goal (the reach
policy wandered 5-26 mm around its targets on the Franka's command path, against 5 mm without it). Training through
the same interpolator removes the difference: `SetpointPath` runs the deploy core's `JerkLimitedInterpolator` for every
world at once and gives each physics substep the setpoint the robot plays then, with its velocity as the servo's lead
(kp q* + kd dq* = kp (q* + kd / kp dq*)), exactly as the twin (`robo_rl.deploy.transports.sim`) plays them. A gripper
with a controller of its own (hardware `gripper`: the Franka Hand through franka_gripper) is not in the stream: its
target reaches its actuator at the tick, as `SmoothingRobot` keeps it in every setpoint. The targets are first clamped
to the robot's limits with the safety filter's margin, as the deploy core's filter sends them (for a setpoint controller
that clamp is all it changes of a policy's target: `SafetyFilter.filter_command`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import Tensor

from robo_rl.core.assets import find_asset
from robo_rl.core.config import ConfigError
from robo_rl.deploy.hardware import check_setpoint_rate, load_hardware
from robo_rl.deploy.safety import target_bounds
from robo_rl.deploy.smoothing import JerkLimitedInterpolator, SetpointLimits


class SetpointPath:
    """Per-substep actuator targets (decimation, N, J) of the tick targets (N, J), through a robot's setpoint stream.

    Args:
        hardware: the hardware file (path as a config gives it) whose controller takes setpoints.
        joint_names: the task's joints (the model's names), in its target order: the hardware's joints, any order.
        physics_dt, decimation: the task's physics step (s) and physics steps per policy step.
        lead: (J,) kd / kp of the joints' servos (the velocity of a setpoint enters as kd / kp * dq).
        default_q: (J,) the pose every world's stream rests at until its first reset.
        num_envs: N worlds.

    Raises:
        ConfigError: one line: the file is missing or malformed, its controller takes no setpoints, its joints are not
            the task's, or the policy or physics period is not a whole number of setpoint periods.
    """

    def __init__(self, hardware: str, joint_names: tuple[str, ...], *, physics_dt: float, decimation: int,
                 lead: np.ndarray, default_q: np.ndarray, num_envs: int):
        field = "env.setpoint_controller"
        try:
            hw = load_hardware(find_asset(hardware, what="hardware file"))
            limits = SetpointLimits.from_hardware(hw)
            rate = float(hw.controller.setpoint_rate_hz)
            what = f"{hardware!r} controller.setpoint_rate_hz"
            check_setpoint_rate(rate, 1.0 / (physics_dt * decimation), what)
            check_setpoint_rate(rate, 1.0 / physics_dt, f"{what} (played per physics step of {physics_dt:g} s)")
            order = hw.index_of(joint_names)  # (J,) hardware position of each task joint
        except ValueError as exc:
            raise ConfigError(f"config error: {field}: {exc}") from None
        if len(order) != len(hw.joint_names):
            raise ConfigError(f"config error: {field} {hardware!r} has {len(hw.joint_names)} joints; the task "
                              f"moves {len(order)}: the setpoints need every joint of the robot")
        # (J,) each, in the task's joint order
        self.limits = SetpointLimits(**{f.name: getattr(limits, f.name)[order] for f in dataclasses.fields(limits)})
        self.rate_hz = rate
        lo, hi = target_bounds(hw)
        self.lo, self.hi = lo[order], hi[order]  # (J,) the targets the safety filter sends
        self.interpolator = JerkLimitedInterpolator(self.limits, rate)
        self.interpolator.start(np.repeat(np.asarray(default_q, np.float64)[None], num_envs, axis=0))  # (N, J)
        self.steps = round(physics_dt * decimation * rate)  # setpoints per policy step
        per_substep = round(physics_dt * rate)
        # The twin's playback (SimRobot._play): substep k starts at k * physics_dt and holds the setpoint reached then.
        self.played = np.array([max(k * per_substep, 1) - 1 for k in range(decimation)])  # (decimation,)
        self.lead = np.asarray(lead, dtype=np.float64)  # (J,)
        # The gripper's column (franka_gripper moves it, not the 1 kHz stream): its tick target, no lead.
        gripper = -1 if hw.gripper is None else int(hw.index_of([hw.gripper.joint])[0])
        self.own_controller = np.flatnonzero(order == gripper)  # (G,) task columns outside the stream: 0 or 1
        self.lead[self.own_controller] = 0.0

    def restart(self, ids: Tensor, q: Tensor) -> None:
        """Worlds `ids` (K,) rest at q (K, J): the setpoint stream starts from the reset pose."""
        self.interpolator.restart(ids.cpu().numpy(), q.detach().to("cpu", torch.float64).numpy())

    def substep_targets(self, target: Tensor) -> Tensor:
        """(decimation, N, J) float64 actuator targets (CPU) of one policy step towards `target` (N, J), clamped as the
        safety filter clamps it: the setpoint played in each substep plus its velocity lead."""
        goal = np.clip(target.detach().to("cpu", torch.float64).numpy(), self.lo, self.hi)  # (N, J)
        points = self.interpolator.advance(goal, self.steps)
        out = points.q[self.played] + self.lead * points.dq[self.played]  # (decimation, N, J)
        out[:, :, self.own_controller] = goal[:, self.own_controller]
        return torch.from_numpy(out)

    def state(self) -> Tensor:
        """(3, N, J) float64: the last setpoint's q, v, a of every world (a run resumes bit-for-bit)."""
        i = self.interpolator
        return torch.from_numpy(np.stack([i.q, i.v, i.a]))

    def load_state(self, state: Tensor) -> None:
        """Continue from `state()`."""
        i = self.interpolator
        i.q, i.v, i.a = state.to("cpu", torch.float64).numpy().copy()
