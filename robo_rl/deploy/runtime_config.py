"""The settings of a deploy run on a real transport: the policy node's ROS parameters and `robo-rl deploy`'s options,
one dataclass (`RuntimeConfig`) that `PolicyRuntime` runs with, validated in one place."""

from __future__ import annotations

import math
from dataclasses import dataclass

from robo_rl.deploy.controller import REALTIME_PRIORITY, check_realtime_priority
from robo_rl.deploy.estop_heartbeat import check_estop_timeout
from robo_rl.deploy.reset_modules import RESET_MODULES
from robo_rl.deploy.reward_modules import parse_reward_spec
from robo_rl.deploy.ros_interface import COMMAND_INTERFACES


@dataclass(frozen=True, kw_only=True)
class RuntimeConfig:
    """Settings of the policy node (its ROS parameters) and of `robo-rl deploy` on a real transport."""

    policy_path: str
    """Exported policy (policies/<name>.onnx), found like every asset (path, $ROBO_RL_DATA, checkout, install)."""
    hardware_config: str
    """Robot description (hardware/<robot>.yaml): the one source of joint names, limits and gains."""
    command_interface: str | None = "forward_position"
    """How commands reach the robot: forward_position, joint_trajectory or pd_targets (ros_interface); None: the
    transport's default (the hardware file's)."""
    dry_run: bool = False
    """Run everything (state, policy, filter, recording) but send no command to the robot."""
    cmd_vel_timeout_s: float = 0.5
    """A velocity command older than this (s) is replaced by zero (stand still)."""
    diagnostics_period_s: float = 1.0
    """Period of /diagnostics (s)."""
    state_wait_s: float = 5.0
    """activate waits this long (s) for a fresh robot state before it fails."""
    reset_module: str = "home"
    """What `reset` runs: home, random or operator (resets.RESET_MODULES)."""
    rewards: tuple[str, ...] = ()
    """Reward modules scored every POLICY tick, summed (reward_modules.REWARD_MODULES; a classifier as
    `classifier:<model.onnx>`, see parse_reward_spec); () for none."""
    end_episode_on_done: bool = True
    """On the first success or failure, leave POLICY for READY (holding the pose) until `reset` / `start`."""
    allow_unsafe_hardware: bool = False
    """Accept hardware safety values outside their safe range (loud warnings; experts only)."""
    realtime_priority: int = REALTIME_PRIORITY
    """SCHED_FIFO priority (1-99) of the control thread; 0: normal scheduling. Needs root, CAP_SYS_NICE or an
    rtprio limit; without it the loop runs at normal priority and says so once."""
    estop_timeout_s: float = 0.0
    """E-stop heartbeat deadline (s): activate refuses until an e-stop message (True or False) arrived, and none for
    this long latches ESTOP. 0: no heartbeat expected (the e-stop topic, a key or a word still latch ESTOP)."""

    def validate(self) -> None:
        """ValueError (one line) for a bad field."""
        if self.command_interface is not None and self.command_interface not in COMMAND_INTERFACES:
            raise ValueError(f"command_interface {self.command_interface!r}: allowed values are "
                             f"{', '.join(COMMAND_INTERFACES)}")
        for key in ("cmd_vel_timeout_s", "diagnostics_period_s", "state_wait_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)
                                                                                      and value > 0):
                raise ValueError(f"{key} = {value!r}: must be a finite number > 0 (s)")
        check_realtime_priority(self.realtime_priority)
        check_estop_timeout(self.estop_timeout_s)
        if self.reset_module not in RESET_MODULES:
            raise ValueError(f"reset_module {self.reset_module!r}: allowed values are {', '.join(RESET_MODULES)}")
        for spec in self.rewards:
            try:
                parse_reward_spec(spec)
            except ValueError as exc:
                raise ValueError(f"rewards: {exc}") from None
