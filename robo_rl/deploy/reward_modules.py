"""Reward modules for real-world episodes, and the episode events they produce.

Robot side, numpy only. A module scores one control step from the robot's state (and the operator's
commands); modules compose by summing rewards, and the first success or failure of any module ends
the episode. `EpisodeTracker` turns that into events (start, success, failure, reset, intervention)
for recording and for an RL process on the other side of the wire.

The maths are small pure functions named like the sim-side terms (`reward_*` with a kernel suffix).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import RobotState
from robo_rl.deploy.safety import gravity_tilt
from robo_rl.deploy.success_classifier import OnnxClassifier, check_debounce, check_threshold


# ---------------------------------------------------------------------------------------------- pure terms
def goal_distance(position: np.ndarray, goal: np.ndarray) -> float:
    """Euclidean distance (m) between (3,) positions."""
    return float(np.linalg.norm(np.asarray(position, dtype=np.float64) - np.asarray(goal, dtype=np.float64)))


def reward_goal_distance_exp(distance: float, *, sigma: float) -> float:
    """exp(-d^2 / sigma^2): 1 at the goal, ~0.37 at d = sigma."""
    return float(np.exp(-(distance / sigma) ** 2))


def reward_joint_target_exp(q: np.ndarray, target: np.ndarray, *, sigma: float) -> float:
    """exp(-|q - q*|^2 / sigma^2) over the (J,) joints compared."""
    err = np.asarray(q, dtype=np.float64) - np.asarray(target, dtype=np.float64)
    return float(np.exp(-float(err @ err) / sigma**2))


def reward_velocity_tracking_exp(lin_vel_b: np.ndarray, ang_vel_b: np.ndarray, command: np.ndarray, *,
                                 sigma: float, yaw_weight: float = 0.5) -> float:
    """Legged velocity tracking: exp(-|v_xy* - v_xy|^2 / sigma) + yaw_weight exp(-(w_z* - w_z)^2 / sigma).

    Args:
        lin_vel_b: (3,) base linear velocity in the base frame (a state estimate).
        ang_vel_b: (3,) base angular velocity in the base frame (the gyro).
        command: (3,) velocity command (v_x, v_y, yaw rate).
        sigma: kernel width ((m/s)^2).
        yaw_weight: weight of the yaw-rate term.
    """
    lin_err = float(np.sum((np.asarray(command[:2]) - np.asarray(lin_vel_b[:2])) ** 2))
    yaw_err = float((command[2] - ang_vel_b[2]) ** 2)
    return float(np.exp(-lin_err / sigma) + yaw_weight * np.exp(-yaw_err / sigma))


def debounce_count(count: int, positive: bool) -> int:
    """Consecutive positive frames after this one: count + 1 if `positive`, else 0 (one negative frame resets)."""
    return count + 1 if positive else 0


# ---------------------------------------------------------------------------------------------- modules
@dataclass(frozen=True)
class RewardStep:
    """One step's outcome of a reward module (or of a composition)."""

    reward: float
    success: bool = False
    failure: bool = False
    terms: dict[str, float] = field(default_factory=dict)
    """Per-module rewards (and metrics such as the goal distance) for logging."""
    reward_continues: bool = False
    """A success that stops the episode although the reward would go on (goal_distance pays for staying at the goal):
    no terminal state, so a learner bootstraps through it (RobotEnv reports it as a truncation). False: a success is
    terminal (nothing more to earn: a classifier's one-off success reward)."""

    @property
    def done(self) -> bool:
        return self.success or self.failure

    @property
    def terminal(self) -> bool:
        """The episode reached a terminal state: a failure, or a success after which no reward would follow."""
        return self.failure or (self.success and not self.reward_continues)


class RewardModule(Protocol):
    """Scores one step; `reset` before each episode."""

    name: str

    def reset(self) -> None: ...

    def __call__(self, state: RobotState, commands: Mapping[str, np.ndarray]) -> RewardStep: ...


def _positive(name: str, value: float) -> float:
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} = {value!r}: must be a finite number > 0")
    return float(value)


class GoalDistanceReward:
    """Reach a goal: reward exp(-d^2 / sigma^2); success once d < threshold for `hold_steps` steps in a row.

    The goal is the operator's `target_pos` command (what a reaching policy is asked to reach) unless
    `goal` is given; the position is the state's end-effector position.
    """

    def __init__(self, *, threshold: float = 0.03, sigma: float = 0.1, hold_steps: int = 5,
                 goal: Sequence[float] | None = None, name: str = "goal_distance"):
        self.threshold = _positive("goal_distance threshold", threshold)
        self.sigma = _positive("goal_distance sigma", sigma)
        if hold_steps < 1:
            raise ValueError(f"goal_distance hold_steps = {hold_steps!r}: must be >= 1")
        self.hold_steps = int(hold_steps)
        self.goal = None if goal is None else np.asarray(goal, dtype=np.float64)
        self.name = name
        self._inside = 0

    def reset(self) -> None:
        self._inside = 0

    def __call__(self, state: RobotState, commands: Mapping[str, np.ndarray]) -> RewardStep:
        if state.ee_pos is None:
            raise ValueError("goal_distance reward needs the end-effector position (state.ee_pos)")
        goal = self.goal if self.goal is not None else commands.get("target_pos")
        if goal is None:
            raise ValueError("goal_distance reward needs a goal (the target_pos command or `goal`)")
        d = goal_distance(state.ee_pos, goal)
        self._inside = self._inside + 1 if d < self.threshold else 0
        r = reward_goal_distance_exp(d, sigma=self.sigma)
        return RewardStep(r, success=self._inside >= self.hold_steps, terms={self.name: r, "goal_distance_m": d},
                          reward_continues=True)


class JointTargetReward:
    """Reach a joint configuration: reward exp(-|q - q*|^2 / sigma^2); success when every |q - q*| < tolerance.

    Args:
        target: {joint name: position} (rad), named as the robot or its model names the joints; only these count.
        hw: the robot (joint order of states is mapped by name).
    """

    def __init__(self, target: Mapping[str, float], hw: HardwareSpec, *, sigma: float = 0.2,
                 tolerance: float = 0.05, name: str = "joint_target"):
        if not target:
            raise ValueError("joint_target reward: target is empty (give {joint name: position})")
        hw.index_of(list(target))  # ValueError naming unknown joints
        self.names = hw.robot_names(tuple(target))  # as the robot's states name them
        self.target = np.array([float(v) for v in target.values()])
        self.sigma = _positive("joint_target sigma", sigma)
        self.tolerance = _positive("joint_target tolerance", tolerance)
        self.name = name
        self._cache: tuple[tuple[str, ...], np.ndarray] | None = None

    def reset(self) -> None:
        pass

    def __call__(self, state: RobotState, commands: Mapping[str, np.ndarray]) -> RewardStep:
        if self._cache is None or self._cache[0] != state.joint_names:
            lookup = {n: i for i, n in enumerate(state.joint_names)}
            missing = [n for n in self.names if n not in lookup]
            if missing:
                raise ValueError(f"joint_target reward: state lacks joint(s) {', '.join(missing)}")
            self._cache = (state.joint_names, np.array([lookup[n] for n in self.names]))
        q = np.asarray(state.q, dtype=np.float64)[self._cache[1]]
        r = reward_joint_target_exp(q, self.target, sigma=self.sigma)
        worst = float(np.max(np.abs(q - self.target)))
        return RewardStep(r, success=worst < self.tolerance, terms={self.name: r, "joint_target_max_error": worst})


class VelocityTrackingReward:
    """Legged velocity tracking from state estimates (state.base_lin_vel, base frame; the gyro for yaw rate).

    No success (walking has no goal); failure when the base tilts beyond `fall_tilt_rad` (a fall), if set.
    """

    def __init__(self, *, sigma: float = 0.25, yaw_weight: float = 0.5, fall_tilt_rad: float | None = 1.0,
                 quaternion_order: str = "wxyz", name: str = "velocity_tracking"):
        self.sigma = _positive("velocity_tracking sigma", sigma)
        self.yaw_weight = float(yaw_weight)
        self.fall_tilt_rad = None if fall_tilt_rad is None else _positive("fall_tilt_rad", fall_tilt_rad)
        self.quaternion_order = quaternion_order
        self.name = name

    def reset(self) -> None:
        pass

    def __call__(self, state: RobotState, commands: Mapping[str, np.ndarray]) -> RewardStep:
        if state.base_lin_vel is None or state.imu_gyro is None:
            raise ValueError("velocity_tracking reward needs a base velocity estimate (state.base_lin_vel) and a gyro")
        command = commands.get("velocity_command")
        if command is None:
            raise ValueError("velocity_tracking reward needs the velocity_command")
        r = reward_velocity_tracking_exp(state.base_lin_vel, state.imu_gyro, np.asarray(command), sigma=self.sigma,
                                         yaw_weight=self.yaw_weight)
        fell = (self.fall_tilt_rad is not None and state.imu_quat is not None
                and gravity_tilt(state.imu_quat, self.quaternion_order) > self.fall_tilt_rad)
        return RewardStep(r, failure=fell, terms={self.name: r})


class OperatorLabelReward:
    """Success / failure labels from the operator (a key, a topic); the next step reports the label.

    `label("success")` / `label("failure")` are thread-safe. Reward: `success_reward` on a success label.
    """

    LABELS = ("success", "failure")

    def __init__(self, *, success_reward: float = 1.0, name: str = "operator_label"):
        self.success_reward = float(success_reward)
        self.name = name
        self._lock = threading.Lock()
        self._pending: str | None = None

    def label(self, outcome: str) -> None:
        if outcome not in self.LABELS:
            raise ValueError(f"label {outcome!r}: allowed values are {', '.join(self.LABELS)}")
        with self._lock:
            self._pending = outcome

    def reset(self) -> None:
        with self._lock:
            self._pending = None

    def __call__(self, state: RobotState, commands: Mapping[str, np.ndarray]) -> RewardStep:
        with self._lock:
            outcome, self._pending = self._pending, None
        r = self.success_reward if outcome == "success" else 0.0
        return RewardStep(r, success=outcome == "success", failure=outcome == "failure", terms={self.name: r})


class ClassifierReward:
    """Success from a learned classifier on a camera frame: reward `success_reward` and success once the success
    probability has reached `threshold` on `debounce` consecutive frames (a single positive frame is noise).

    Args:
        prob: one frame (H, W, 3) uint8 -> success probability (`OnnxClassifier.prob`; a stub in tests).
        camera: the RobotState.images key it reads.
        threshold, debounce: as in `robo_rl.deploy.success_classifier.ClassifierSpec`.
    """

    def __init__(self, prob: Callable[[np.ndarray], float], camera: str, *, threshold: float = 0.5,
                 debounce: int = 10, success_reward: float = 1.0, name: str = "classifier"):
        self.prob = prob
        self.camera = camera
        self.threshold = check_threshold(threshold)
        self.debounce = check_debounce(debounce)
        self.success_reward = float(success_reward)
        self.name = name
        self._positives = 0

    @classmethod
    def from_file(cls, path: str, *, threshold: float | None = None, debounce: int | None = None,
                  camera: str | None = None) -> ClassifierReward:
        """The module of a classifier file; threshold, debounce and camera default to the file's own."""
        model = OnnxClassifier(find_asset(path, what="reward classifier file"))
        spec = model.spec
        return cls(model.prob, camera or spec.camera, threshold=spec.threshold if threshold is None else threshold,
                   debounce=spec.debounce if debounce is None else debounce)

    def reset(self) -> None:
        self._positives = 0

    def __call__(self, state: RobotState, commands: Mapping[str, np.ndarray]) -> RewardStep:
        frame = state.images.get(self.camera)
        if frame is None:
            raise ValueError(f"classifier reward: the robot's state carries no frame of camera {self.camera!r} "
                             f"(cameras in the state: {', '.join(state.images) or 'none'})")
        p = self.prob(frame)
        self._positives = debounce_count(self._positives, p >= self.threshold)
        success = self._positives >= self.debounce
        r = self.success_reward if success else 0.0
        return RewardStep(r, success=success, terms={self.name: r, "classifier_prob": p})


class ComposedReward:
    """Several modules as one: rewards summed, success / failure if any module reports it."""

    def __init__(self, modules: Sequence[RewardModule]):
        names = [m.name for m in modules]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"reward modules named {', '.join(dupes)} more than once")
        self.modules = tuple(modules)
        self.name = "+".join(names) or "none"

    def reset(self) -> None:
        for m in self.modules:
            m.reset()

    def __call__(self, state: RobotState, commands: Mapping[str, np.ndarray]) -> RewardStep:
        steps = [m(state, commands) for m in self.modules]
        terms: dict[str, float] = {}
        for s in steps:
            terms.update(s.terms)
        succeeded = [s for s in steps if s.success]
        return RewardStep(sum(s.reward for s in steps), success=bool(succeeded),
                          failure=any(s.failure for s in steps), terms=terms,
                          reward_continues=bool(succeeded) and all(s.reward_continues for s in succeeded))


REWARD_MODULES = ("goal_distance", "velocity_tracking", "operator", "classifier")
"""Reward modules the policy node and the deploy command build by name (`make_reward`); `classifier` is given with
its model file: `classifier:<model.onnx>[,threshold=T][,debounce=N][,camera=C]`; `goal_distance` may set its kernel
and success: `goal_distance:sigma=S,threshold=T,hold_steps=N` (`parse_reward_spec`)."""
CLASSIFIER_OPTIONS = ("threshold", "debounce", "camera")
GOAL_DISTANCE_OPTIONS = ("sigma", "threshold", "hold_steps")


def parse_reward_spec(spec: str) -> tuple[str, dict[str, str]]:
    """A reward as given on the command line or in RuntimeConfig.rewards -> (module name, options).

    `goal_distance` -> ("goal_distance", {}); `goal_distance:sigma=0.05` -> ("goal_distance", {"sigma": "0.05"});
    `classifier:m.onnx,threshold=0.7` -> ("classifier", {"path": "m.onnx", "threshold": "0.7"}). ValueError (one line)
    for an unknown name, a classifier without its file, or a bad option.
    """
    name, sep, rest = str(spec).partition(":")
    if name not in REWARD_MODULES:
        raise ValueError(f"reward {spec!r}: allowed values are {', '.join(REWARD_MODULES)} (classifier as "
                         "classifier:<model.onnx>)")
    if name == "goal_distance":
        options = _options(spec, rest.split(",") if sep else [], GOAL_DISTANCE_OPTIONS)
        try:
            GoalDistanceReward(**goal_distance_settings(options))
        except ValueError as exc:
            raise ValueError(f"reward {spec!r}: {exc}") from None
        return name, options
    if name != "classifier":
        if sep:
            raise ValueError(f"reward {spec!r}: {name} takes no options")
        return name, {}
    path, *pairs = rest.split(",")
    if not path:
        raise ValueError(f"reward {spec!r}: name the model file, classifier:<model.onnx>[,threshold=T][,debounce=N]"
                         "[,camera=C]")
    options = {"path": path, **_options(spec, pairs, CLASSIFIER_OPTIONS)}
    try:
        if "threshold" in options:
            check_threshold(float(options["threshold"]))
        if "debounce" in options:
            check_debounce(int(options["debounce"]))
    except ValueError as exc:
        raise ValueError(f"reward {spec!r}: {exc}") from None
    return name, options


def _options(spec: str, pairs: Sequence[str], allowed: Sequence[str]) -> dict[str, str]:
    """{key: value} of a reward spec's `key=value` options; ValueError (one line) for one that is not allowed."""
    options = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in allowed or not value:
            raise ValueError(f"reward {spec!r}: option {pair!r}: expected key=value with key one of "
                             f"{', '.join(allowed)}")
        options[key] = value
    return options


def goal_distance_settings(options: Mapping[str, str]) -> dict[str, float | int]:
    """GoalDistanceReward's keyword arguments of a spec's options (strings); ValueError (one line) for a bad one."""
    out: dict[str, float | int] = {}
    for key, value in options.items():
        try:
            out[key] = int(value) if key == "hold_steps" else float(value)
        except ValueError:
            raise ValueError(f"goal_distance {key} = {value!r}: not a number") from None
    return out


def reward_cameras(names: Sequence[str]) -> tuple[tuple[str, int, int], ...]:
    """(camera, height, width) each classifier among the rewards `names` reads (its file's spec; `camera=` option
    first): the frames a transport must bring for them."""
    out = []
    for spec in names:
        name, options = parse_reward_spec(spec)
        if name == "classifier":
            model_spec = OnnxClassifier(find_asset(options["path"], what="reward classifier file")).spec
            out.append((options.get("camera") or model_spec.camera, model_spec.height, model_spec.width))
    return tuple(out)


def make_reward(names: Sequence[str], hw: HardwareSpec) -> ComposedReward:
    """The composition of the reward modules given in `names` (`parse_reward_spec`; defaults for their settings)."""
    modules: list[RewardModule] = []
    for spec in names:
        name, options = parse_reward_spec(spec)
        if name == "goal_distance":
            modules.append(GoalDistanceReward(**goal_distance_settings(options)))
        elif name == "velocity_tracking":
            modules.append(VelocityTrackingReward(fall_tilt_rad=hw.safety.max_tilt_rad,
                                                  quaternion_order=hw.quaternion_order))
        elif name == "operator":
            modules.append(OperatorLabelReward())
        else:
            threshold, debounce = options.get("threshold"), options.get("debounce")
            modules.append(ClassifierReward.from_file(
                options["path"], threshold=None if threshold is None else float(threshold),
                debounce=None if debounce is None else int(debounce), camera=options.get("camera")))
    return ComposedReward(modules)


# ---------------------------------------------------------------------------------------------- episodes
EPISODE_EVENT_KINDS = ("start", "success", "failure", "reset", "intervention")


@dataclass(frozen=True)
class EpisodeEvent:
    """Something that happened to an episode."""

    kind: str
    """One of EPISODE_EVENT_KINDS."""
    episode: int
    """Episode number (counts starts, from 1; 0 before the first)."""
    time: float
    """When (s, controller clock)."""
    detail: dict = field(default_factory=dict)
    """Kind-specific: the reward terms at success / failure, the reset's result, what intervened."""

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "episode": self.episode, "time": self.time, **self.detail},
                          sort_keys=True, default=float)


class EpisodeTracker:
    """Runs the reward modules each POLICY step and emits episode events.

    Args:
        reward: the (composed) reward; ComposedReward([]) for none.
        emit: receives every event (publishing, logging); called from the control thread, keep it quick.

    The first success or failure ends the episode: later outcomes are ignored until the next `start`.
    """

    def __init__(self, reward: ComposedReward, emit: Callable[[EpisodeEvent], None]):
        self.reward = reward
        self.emit = emit
        self.episode = 0
        self.active = False
        self.total_reward = 0.0
        self._seen_interventions: set[str] = set()

    def start(self, now: float) -> None:
        self.episode += 1
        self.active = True
        self.total_reward = 0.0
        self._seen_interventions.clear()
        self.reward.reset()
        self.emit(EpisodeEvent("start", self.episode, now))

    def step(self, state: RobotState, commands: Mapping[str, np.ndarray], now: float) -> RewardStep | None:
        """Score one step of an active episode; emits success / failure once. None when no episode runs."""
        if not self.active:
            return None
        result = self.reward(state, commands)
        self.total_reward += result.reward
        if result.done:
            self.active = False
            kind = "success" if result.success else "failure"
            self.emit(EpisodeEvent(kind, self.episode, now, {"return": self.total_reward, **result.terms}))
        return result

    def intervention(self, what: str, now: float, *, ends_episode: bool = False) -> None:
        """Something other than the policy decided the robot's command (operator stop, e-stop, a fault,
        a safety-filter limit); each kind is reported once per episode."""
        if what in self._seen_interventions and not ends_episode:
            return
        self._seen_interventions.add(what)
        self.emit(EpisodeEvent("intervention", self.episode, now, {"what": what, "ends_episode": ends_episode}))
        if ends_episode:
            self.active = False

    def reset_done(self, now: float, detail: Mapping[str, object]) -> None:
        self.emit(EpisodeEvent("reset", self.episode, now, dict(detail)))
