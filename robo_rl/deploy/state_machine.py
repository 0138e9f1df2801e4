"""Operating modes of the robot side: PASSIVE -> RAMP -> READY -> POLICY -> DAMP / ESTOP.

Pure logic with time passed in (no clock inside), so every transition can be tested exactly.
POLICY is only ever entered by an explicit `start_policy` (and left for READY by `end_policy` when an
episode ends); leaving DAMP or ESTOP needs an explicit `reset`. Faults and stops never raise: they are
the safe direction.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

import numpy as np


class Mode(enum.Enum):
    """What the controller sends in each mode."""

    PASSIVE = "passive"
    """Zero torque (kp = kd = 0): the robot is limp, as at power-on."""
    RAMP = "ramp"
    """Soft start: position and gains move from the captured pose to the default pose."""
    READY = "ready"
    """Hold the default pose with the hardware gains; waits for an explicit start."""
    POLICY = "policy"
    """The policy's targets with the policy's gains."""
    DAMP = "damp"
    """Zero stiffness, damping only (after stop or a fault)."""
    ESTOP = "estop"
    """Latched emergency stop: damping only until reset."""


@dataclass(frozen=True)
class Transition:
    """One mode change, for status display and tests."""

    mode: Mode
    """Mode entered."""
    time: float
    """When (s, the caller's clock)."""
    reason: str
    """Why: the request ("ramp", "start", "stop", "reset", "estop") or the fault name."""


def ramp_command(
    q_start: np.ndarray, q_default: np.ndarray, kp_target: np.ndarray, kd_target: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Soft-start command: blend from the pose held at ramp start to the default pose.

    Position moves linearly from `q_start` to `q_default` and the gains rise linearly from 0 to their
    targets, so alpha = 0 equals the zero-torque PASSIVE command and alpha = 1 the READY hold
    (Booster / unitree deploy practice, over about 2 s).

    Args:
        q_start: (J,) measured pose when RAMP began.
        q_default: (J,) default pose.
        kp_target, kd_target: (J,) gains reached at the end of the ramp.
        alpha: ramp progress in [0, 1].

    Returns:
        (q, kp, kd), each (J,).
    """
    if not 0.0 <= alpha <= 1.0:  # also rejects NaN
        raise ValueError(f"ramp alpha = {alpha!r}: must be in [0, 1]")
    q = q_start + alpha * (q_default - q_start)  # (J,)
    return q, alpha * kp_target, alpha * kd_target


class StateMachine:
    """Mode logic of the deploy loop.

    Args:
        ramp_time_s: how long RAMP lasts before READY (hw.safety.ramp_time_s).
        now: creation time; recorded as the first transition into PASSIVE.
        history: how many transitions to keep.
    """

    def __init__(self, ramp_time_s: float, now: float = 0.0, history: int = 1000):
        if not ramp_time_s >= 0.0:
            raise ValueError(f"ramp_time_s = {ramp_time_s!r}: must be a non-negative number")
        self.ramp_time_s = float(ramp_time_s)
        self._mode = Mode.PASSIVE
        self._ramp_start = now
        self._fault: str | None = None
        self._history: deque[Transition] = deque([Transition(Mode.PASSIVE, now, "start")], maxlen=history)

    @property
    def mode(self) -> Mode:
        """Current mode."""
        return self._mode

    @property
    def fault_reason(self) -> str | None:
        """Reason of the fault that led to the current DAMP, or None."""
        return self._fault

    @property
    def transitions(self) -> tuple[Transition, ...]:
        """Recorded transitions, oldest first."""
        return tuple(self._history)

    def _enter(self, mode: Mode, now: float, reason: str) -> None:
        self._mode = mode
        self._history.append(Transition(mode, now, reason))

    def update(self, now: float) -> Mode:
        """Advance time-driven transitions (RAMP -> READY once ramp_time_s has passed); returns the mode."""
        if self._mode is Mode.RAMP and now - self._ramp_start >= self.ramp_time_s:
            self._enter(Mode.READY, now, "ramp_done")
        return self._mode

    def ramp_alpha(self, now: float) -> float:
        """Progress of the current ramp in [0, 1] (1 outside RAMP)."""
        if self._mode is not Mode.RAMP or self.ramp_time_s == 0.0:
            return 1.0
        return min(1.0, max(0.0, (now - self._ramp_start) / self.ramp_time_s))

    def request_ramp(self, now: float) -> None:
        """PASSIVE -> RAMP; ValueError from any other mode."""
        if self._mode is not Mode.PASSIVE:
            raise ValueError(f"ramp requested in mode {self._mode.name}: only allowed from PASSIVE")
        self._ramp_start = now
        self._enter(Mode.RAMP, now, "ramp")

    def hold_ramp(self, now: float) -> None:
        """In RAMP: restart the ramp clock at `now` (the ramp waits, e.g. for the base to be still)."""
        if self._mode is Mode.RAMP:
            self._ramp_start = now

    def start_policy(self, now: float) -> None:
        """READY -> POLICY; ValueError from any other mode (POLICY is never entered on its own)."""
        if self._mode is not Mode.READY:
            raise ValueError(f"start_policy in mode {self._mode.name}: only allowed from READY")
        self._enter(Mode.POLICY, now, "start")

    def end_policy(self, now: float, reason: str = "episode_end") -> None:
        """POLICY -> READY (an episode ended: hold, then reset or start again); ValueError from any other mode."""
        if self._mode is not Mode.POLICY:
            raise ValueError(f"end_policy in mode {self._mode.name}: only allowed from POLICY")
        self._enter(Mode.READY, now, reason)

    def stop(self, now: float, reason: str = "stop") -> bool:
        """Any mode except ESTOP -> DAMP; returns True when the mode changed."""
        if self._mode in (Mode.DAMP, Mode.ESTOP):
            return False
        self._fault = None
        self._enter(Mode.DAMP, now, reason)
        return True

    def fault(self, reason: str, now: float) -> bool:
        """A safety fault: -> DAMP recording `reason` (kept while in DAMP; ESTOP stays); True when the mode changed."""
        if self._mode in (Mode.DAMP, Mode.ESTOP):
            return False
        self._fault = reason
        self._enter(Mode.DAMP, now, reason)
        return True

    def estop(self, now: float, reason: str = "estop") -> bool:
        """Any mode -> ESTOP (latched until `reset`); True when the mode changed."""
        if self._mode is Mode.ESTOP:
            return False
        self._enter(Mode.ESTOP, now, reason)
        return True

    def reset(self, now: float) -> None:
        """DAMP or ESTOP -> PASSIVE (an explicit operator action); ValueError from any other mode."""
        if self._mode not in (Mode.DAMP, Mode.ESTOP):
            raise ValueError(f"reset in mode {self._mode.name}: only allowed from DAMP or ESTOP")
        self._fault = None
        self._enter(Mode.PASSIVE, now, "reset")
