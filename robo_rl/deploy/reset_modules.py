"""Reset modules: bring the robot to a start pose between episodes, through the safety filter.

Each module plans a joint-space path (waypoints, robot joint order) from the pose the robot holds now;
`run_reset` hands it to the Controller's READY mode as an interpolated trajectory, so every command
still passes `SafetyFilter.filter_command` (limits, rate limit, torque budget), then waits until the
measured pose is within tolerance, or fails with one line (ResetError) after the module's timeout.

- HomeReset: to the default pose (or a given home pose).
- WaypointReset: through scripted waypoints, e.g. lift, then move over, then lower.
- RandomReset: to a pose drawn uniformly around home within bounds (clipped inside the joint limits).
- OperatorConfirmedReset: optionally one of the above, then waits for the operator to confirm
  (a key, a topic, a service) that the scene is ready.

Numpy only; runs on the robot side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from robo_rl.deploy.controller import Controller
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.safety import name_index
from robo_rl.deploy.state_machine import Mode


class ResetError(RuntimeError):
    """A reset did not get the robot where it should go; the message is one line for the operator."""


@dataclass(frozen=True)
class ResetResult:
    """How a reset went."""

    name: str
    """Module name ("home", "waypoints", "random", "operator")."""
    duration_s: float
    """From start to success (s, controller clock)."""
    goal: np.ndarray
    """(J,) final pose aimed at, robot order."""
    max_error: float
    """Largest |q - goal| over the driven joints at success (rad)."""


# ---------------------------------------------------------------------------------------------- trajectories
def segment_durations(points: np.ndarray, max_speed: np.ndarray, min_duration: float) -> np.ndarray:
    """(K - 1,) time for each straight segment between (K, J) points so no joint exceeds max_speed (J,)."""
    steps = np.abs(np.diff(points, axis=0))  # (K - 1, J)
    return np.maximum((steps / max_speed).max(axis=1), min_duration)


def piecewise_linear(points: np.ndarray, durations: np.ndarray, t0: float) -> Callable[[float], np.ndarray]:
    """q(t) through (K, J) `points`, segment k taking durations[k] s, starting at t0; holds the last point.

    Linear in joint space: with the segment durations of `segment_durations` every joint's speed stays
    at or below its limit, and each waypoint is reached exactly.
    """
    pts = np.asarray(points, dtype=np.float64)
    knots = t0 + np.concatenate([[0.0], np.cumsum(durations)])  # (K,)

    def at(t: float) -> np.ndarray:
        if t >= knots[-1]:
            return pts[-1].copy()
        if t <= knots[0]:
            return pts[0].copy()
        k = int(np.searchsorted(knots, t, side="right")) - 1
        alpha = (t - knots[k]) / (knots[k + 1] - knots[k])
        return pts[k] + alpha * (pts[k + 1] - pts[k])

    return at


# ---------------------------------------------------------------------------------------------- modules
@dataclass(frozen=True, kw_only=True)
class ResetSettings:
    """What every motion reset shares."""

    timeout_s: float = 10.0
    """From start to success at most (s)."""
    tolerance: float = 0.05
    """Every driven joint within this of its goal (rad)."""
    speed_fraction: float = 0.2
    """Joint speed along the path as a fraction of the hardware velocity limits, in (0, 1]."""
    min_segment_s: float = 0.2
    """Shortest time for one segment (s), so tiny moves are not jerks."""

    def validate(self) -> None:
        for key, value, ok, allowed in (
            ("timeout_s", self.timeout_s, self.timeout_s > 0, "> 0"),
            ("tolerance", self.tolerance, self.tolerance > 0, "> 0"),
            ("speed_fraction", self.speed_fraction, 0 < self.speed_fraction <= 1, "in (0, 1]"),
            ("min_segment_s", self.min_segment_s, self.min_segment_s >= 0, ">= 0"),
        ):
            if not (np.isfinite(value) and ok):
                raise ValueError(f"reset {key} = {value!r}: must be {allowed}")


class ResetModule(Protocol):
    """What `run_reset` needs from a motion reset module."""

    name: str
    settings: ResetSettings
    """Timeout, tolerance and speed of the motion."""

    def plan(self, q_hold: np.ndarray, default_q: np.ndarray, hw: HardwareSpec) -> np.ndarray:
        """(K, J) waypoints after the current hold pose, robot order; the last is the goal (K >= 1)."""
        ...


def _inside_limits(name: str, q: np.ndarray, hw: HardwareSpec) -> np.ndarray:
    """q (J,) if every joint lies inside the limits less the filter's margin; ValueError naming the joint."""
    margin = hw.safety.joint_limit_margin
    lo, hi = hw.joint_lower + margin, hw.joint_upper - margin
    bad = np.flatnonzero(~np.isfinite(q) | (q < lo) | (q > hi))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}: {hw.joint_names[i]} = {q[i]:g} is outside [{lo[i]:g}, {hi[i]:g}] (joint limits "
                         f"less safety.joint_limit_margin): the safety filter would never let the robot get there")
    return q


def pose_from(value: Sequence[float] | Mapping[str, float] | np.ndarray, base: np.ndarray, hw: HardwareSpec,
              what: str) -> np.ndarray:
    """A (J,) robot-order pose from a full array or a {joint name: position} mapping over `base`."""
    if isinstance(value, Mapping):
        q = base.astype(np.float64).copy()
        for joint, position in value.items():
            q[hw.index_of([joint])[0]] = float(position)  # ValueError naming an unknown joint
        return q
    q = np.asarray(value, dtype=np.float64)
    if q.shape != base.shape:
        raise ValueError(f"{what}: {q.size} positions for {base.size} joints (robot order, or a name -> value map)")
    return q.copy()


@dataclass(frozen=True, kw_only=True)
class HomeReset:
    """To the home pose: the controller's default pose, or `home` (robot order or {joint: q})."""

    settings: ResetSettings = ResetSettings()
    home: Sequence[float] | Mapping[str, float] | None = None
    name: str = "home"

    def plan(self, q_hold: np.ndarray, default_q: np.ndarray, hw: HardwareSpec) -> np.ndarray:
        goal = default_q if self.home is None else pose_from(self.home, default_q, hw, "home reset pose")
        return _inside_limits("home reset pose", np.asarray(goal, dtype=np.float64), hw)[None]


@dataclass(frozen=True, kw_only=True)
class WaypointReset:
    """Through scripted waypoints (each robot order or {joint: q} over the previous one), ending at the last."""

    waypoints: Sequence[Sequence[float] | Mapping[str, float]]
    settings: ResetSettings = ResetSettings()
    name: str = "waypoints"

    def plan(self, q_hold: np.ndarray, default_q: np.ndarray, hw: HardwareSpec) -> np.ndarray:
        if not self.waypoints:
            raise ValueError("waypoint reset: waypoints is empty (give at least one pose)")
        out, prev = [], np.asarray(q_hold, dtype=np.float64)
        for k, wp in enumerate(self.waypoints):
            prev = _inside_limits(f"waypoint {k}", pose_from(wp, prev, hw, f"waypoint {k}"), hw)
            out.append(prev)
        return np.stack(out)  # (K, J)


@dataclass(frozen=True, kw_only=True)
class RandomReset:
    """To home + uniform(low, high) per joint (rad, robot order), clipped inside the limits less the margin.

    `rng` is passed in (no hidden state): the same generator state gives the same pose.
    """

    low: Sequence[float]
    high: Sequence[float]
    rng: np.random.Generator
    settings: ResetSettings = ResetSettings()
    name: str = "random"

    def plan(self, q_hold: np.ndarray, default_q: np.ndarray, hw: HardwareSpec) -> np.ndarray:
        low, high = np.asarray(self.low, dtype=np.float64), np.asarray(self.high, dtype=np.float64)
        n = len(hw.joint_names)
        if low.shape != (n,) or high.shape != (n,):
            raise ValueError(f"random reset low / high: need {n} offsets each (robot order), got {low.size} and "
                             f"{high.size}")
        bad = np.flatnonzero(~np.isfinite(low) | ~np.isfinite(high) | (low > high))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"random reset bounds for {hw.joint_names[i]}: low {low[i]:g} must be finite and "
                             f"<= high {high[i]:g}")
        margin = hw.safety.joint_limit_margin
        goal = np.clip(default_q + self.rng.uniform(low, high), hw.joint_lower + margin, hw.joint_upper - margin)
        return goal[None]


class OperatorConfirmedReset:
    """Optionally a motion reset, then the operator's confirmation (the scene is reset) within `timeout_s`.

    Args:
        inner: motion to run first (HomeReset, ...), or None to only wait for the confirmation.
        timeout_s: how long to wait for the confirmation after the motion (s).
        name: module name.

    `confirm()` (thread-safe; a key, a topic or a service calls it) gives the confirmation. A
    confirmation given before the reset started does not count.
    """

    def __init__(self, inner: ResetModule | None = None, *, timeout_s: float = 60.0, name: str = "operator"):
        if not (np.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"operator reset timeout_s = {timeout_s!r}: must be > 0")
        self.inner = inner
        self.timeout_s = timeout_s
        self.name = name
        self._confirmed = threading.Event()

    def confirm(self) -> None:
        """The operator says the reset is done."""
        self._confirmed.set()

    def clear(self) -> None:
        """Forget an earlier confirmation (run_reset does this at its start)."""
        self._confirmed.clear()

    @property
    def confirmed(self) -> bool:
        return self._confirmed.is_set()


# ---------------------------------------------------------------------------------------------- running
def measured_q(controller: Controller) -> np.ndarray:
    """(J,) measured joint positions in robot order, read from the robot without touching the filter's
    buffers (the control thread owns those); NaN where the state has no finite value."""
    state = controller.robot.read_state()
    idx = name_index(tuple(state.joint_names), controller.hw.joint_names)
    q = np.asarray(state.q, dtype=np.float64)
    q = q.copy() if idx is None else q[idx]
    q[~np.isfinite(q)] = np.nan
    return q


def _wait_for(condition: Callable[[], bool], controller: Controller, step: Callable[[], None], timeout_s: float,
              name: str, describe: Callable[[], str]) -> float:
    """Call `step` until `condition()`; the controller must stay in READY; returns the time it took."""
    clock = controller.clock
    start = clock()
    while True:
        mode = controller.mode
        if mode is not Mode.READY:
            reason = controller.state_machine.fault_reason or mode.name.lower()
            raise ResetError(f"reset {name!r} interrupted: the robot went to {mode.name} ({reason})")
        if condition():
            return clock() - start
        if clock() - start > timeout_s:
            raise ResetError(f"reset {name!r} failed after its {timeout_s:g} s timeout: {describe()}")
        step()


def run_reset(controller: Controller, module: ResetModule | OperatorConfirmedReset, *,
              step: Callable[[], None] | None = None) -> ResetResult:
    """Run one reset module on a controller in READY (or POLICY: the episode is ended first).

    Args:
        controller: the running controller.
        module: the reset to run.
        step: lets one control period pass. Default: sleep one period (the controller runs in its own
            thread); tests in simulated time pass `lambda: controller.tick(robot.time)`.

    Returns:
        ResetResult; READY then holds the goal pose.

    Raises:
        ResetError: not READY / POLICY, the robot left READY meanwhile (fault, e-stop), the pose was not
            reached within the module's timeout, or the operator did not confirm in time. One line.
        ValueError: the module's configuration does not fit the robot (one line).
    """
    step = step or (lambda: time.sleep(controller.period))
    if controller.mode is Mode.POLICY:
        controller.end_policy()
    if controller.mode is not Mode.READY:
        raise ResetError(f"reset {module.name!r} needs READY or POLICY, the robot is in {controller.mode.name}")
    hw = controller.hw
    clock = controller.clock
    start = clock()
    inner = module.inner if isinstance(module, OperatorConfirmedReset) else module
    if isinstance(module, OperatorConfirmedReset):
        module.clear()
    q_hold = controller.ready_target(start)
    goal = q_hold
    max_error = 0.0
    if inner is not None:
        points = inner.plan(q_hold, controller.default_q, hw)  # (K, J)
        goal = points[-1]
        settings = inner.settings
        settings.validate()
        path = np.vstack([q_hold[None], points])  # (K + 1, J)
        durations = segment_durations(path, settings.speed_fraction * hw.velocity_limits, settings.min_segment_s)
        controller.hold(piecewise_linear(path, durations, start))
        end_of_path = start + float(durations.sum())
        errors = np.zeros(len(hw.joint_names))

        def arrived() -> bool:
            np.abs(measured_q(controller) - goal, out=errors)
            return clock() >= end_of_path and float(errors.max()) <= settings.tolerance

        def describe() -> str:
            i = int(np.argmax(errors))
            return (f"{hw.joint_names[i]} is {errors[i]:.3g} rad from its goal (tolerance {settings.tolerance:g} "
                    f"rad; is the path blocked or the timeout too short for the move?)")

        _wait_for(arrived, controller, step, settings.timeout_s, module.name, describe)
        max_error = float(errors.max())
    if isinstance(module, OperatorConfirmedReset):
        _wait_for(lambda: module.confirmed, controller, step, module.timeout_s, module.name,
                  lambda: "the operator did not confirm the reset")
    return ResetResult(module.name, clock() - start, np.asarray(goal).copy(), max_error)


RESET_MODULES = ("home", "random", "operator")
"""Reset modules the policy node and the deploy command build by name (`make_reset`)."""


def make_reset(name: str, hw: HardwareSpec, *, seed: int = 0, settings: ResetSettings | None = None,
               random_range: float = 0.1) -> ResetModule | OperatorConfirmedReset:
    """A reset module by name: "home", "random" (+-random_range rad around home) or "operator" (home, then confirm).

    Raises:
        ValueError: an unknown name (the allowed ones listed).
    """
    settings = settings or ResetSettings()
    settings.validate()
    n = len(hw.joint_names)
    if name == "home":
        return HomeReset(settings=settings)
    if name == "random":
        return RandomReset(low=[-random_range] * n, high=[random_range] * n, rng=np.random.default_rng(seed),
                           settings=settings)
    if name == "operator":
        return OperatorConfirmedReset(HomeReset(settings=settings))
    raise ValueError(f"reset_module {name!r}: allowed values are {', '.join(RESET_MODULES)}")
