"""The robot's setpoint controller in simulation: targets reach the actuators as the robot would receive them.

A robot whose controller takes jerk-limited setpoints (a Franka: hardware `controller.setpoint_rate_hz`, 1 kHz) does not
step to a policy's target at the tick: the deploy core sends it `rate / policy rate` setpoints that follow the target
within libfranka's limits (`robo_rl.deploy.smoothing`), and the arm lags behind its target by that interpolation. A
policy trained on targets that step at the tick drives such an arm into a limit cycle around its goal (the reach
policy wandered 5-26 mm around its targets on the Franka's command path, against 5 mm without it). Training through
the same interpolator removes the difference: `SetpointPath` runs the deploy core's `JerkLimitedInterpolator` for every
world at once and gives each physics substep the setpoint the robot plays then, with its velocity as the servo's lead
(kp q* + kd dq* = kp (q* + kd / kp dq*)), exactly as the twin (`robo_rl.deploy.transports.sim`) plays them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from robo_rl.core.assets import find_asset
from robo_rl.core.config import ConfigError
from robo_rl.deploy.hardware import check_setpoint_rate, load_hardware
from robo_rl.deploy.smoothing import JerkLimitedInterpolator, SetpointLimits


class SetpointPath:
    """Per-substep actuator targets (decimation, N, J) of the tick targets (N, J), through a robot's setpoint stream.

    Args:
        hardware: the hardware file (path as a config gives it) whose controller takes setpoints.
        joint_names: the task's joints (the model's names), in its target order: the hardware's joints, any order.
        physics_dt, decimation: the task's physics step (s) and physics steps per policy step.
        lead: (J,) kd / kp of the joints' servos (the velocity of a setpoint enters as kd / kp * dq).
        num_envs: N worlds.

    Raises:
        ConfigError: one line: the file is missing or malformed, its controller takes no setpoints, its joints are not
            the task's, or the policy or physics period is not a whole number of setpoint periods.
    """

    def __init__(self, hardware: str, joint_names: tuple[str, ...], *, physics_dt: float, decimation: int,
                 lead: np.ndarray, num_envs: int):
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
        self.limits = SetpointLimits(lower=limits.lower[order], upper=limits.upper[order],
                                     velocity=limits.velocity[order], acceleration=limits.acceleration[order],
                                     jerk=limits.jerk[order])  # (J,) each, task order
        self.rate_hz = rate
        self.interpolator = JerkLimitedInterpolator(self.limits, rate)
        self.steps = round(physics_dt * decimation * rate)  # setpoints per policy step
        per_substep = round(physics_dt * rate)
        # The twin's playback (SimRobot._play): substep k starts at k * physics_dt and holds the setpoint reached then.
        self.played = np.array([max(k * per_substep, 1) - 1 for k in range(decimation)])  # (decimation,)
        self.lead = np.asarray(lead, dtype=np.float64)  # (J,)
        self.num_envs = num_envs

    def restart(self, ids: Tensor, q: Tensor) -> None:
        """Worlds `ids` (K,) rest at q (K, J): the setpoint stream starts from the reset pose."""
        q64 = q.detach().to("cpu", torch.float64).numpy()
        if not self.interpolator.started:
            start = np.repeat(np.clip(q64[:1], self.limits.lower, self.limits.upper), self.num_envs, axis=0)
            self.interpolator.start(start)  # (N, J); every world is restarted at its own pose before it steps
        self.interpolator.restart(ids.cpu().numpy(), q64)

    def substep_targets(self, target: Tensor) -> Tensor:
        """(decimation, N, J) actuator targets of one policy step towards `target` (N, J): the setpoint played in
        each substep plus its velocity lead; on target's dtype and device."""
        points = self.interpolator.advance(target.detach().to("cpu", torch.float64).numpy(), self.steps)
        ctrl = points.q[self.played] + self.lead * points.dq[self.played]  # (decimation, N, J)
        return torch.from_numpy(ctrl).to(target.device, target.dtype)

    def state(self) -> Tensor:
        """(3, N, J) float64: the last setpoint's q, v, a of every world (a run resumes bit-for-bit)."""
        i = self.interpolator
        if not i.started:  # before the first reset: nothing to continue
            return torch.zeros(0, dtype=torch.float64)
        return torch.from_numpy(np.stack([i.q, i.v, i.a]).copy())

    def load_state(self, state: Tensor) -> None:
        """Continue from `state()`."""
        if state.numel() == 0:
            return
        q, v, a = state.to("cpu", torch.float64).numpy().copy()
        self.interpolator.start(q)
        self.interpolator.v, self.interpolator.a = v, a

