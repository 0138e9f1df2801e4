"""A real robot's description (`hardware/<robot>.yaml`): joints as the robot reports them, limits,
gains, rates and safety margins. Loaded and validated before anything connects to the robot."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml


@dataclass(frozen=True, kw_only=True)
class SafetyConfig:
    """Margins of the SafetyFilter and the state machine.

    Each field states its safe range (also in its metadata, `safe_range`); `load_hardware` refuses a file
    with a value outside it (unless called with `allow_unsafe=True`, which accepts it with a loud warning
    line per field).
    """

    joint_limit_margin: float | tuple[float, ...] = field(default=0.05, metadata={"safe_range": (0.0, 0.2, True)})
    """Position targets are clamped this far (rad; m for a prismatic joint) inside the joint limits: one number
    for every joint, or a list with one per joint (a gripper's 0.04 m stroke needs a smaller margin than
    an arm joint). Safe range [0, 0.2] for each."""
    max_position_step: float = field(default=0.25, metadata={"safe_range": (0.0, 0.5, False)})
    """Largest change of a position target between two ticks (rad); the filter also keeps every step
    within velocity_limit * control period. Safe range (0, 0.5]."""
    state_timeout_s: float = field(default=0.1, metadata={"safe_range": (0.0, 0.5, False)})
    """State older than this (by header stamp or by receive time) trips the watchdog -> DAMP.
    Safe range (0, 0.5] s."""
    max_tilt_rad: float | None = field(default=None, metadata={"safe_range": (0.0, 1.5, False)})
    """Legged robots: roll or pitch beyond this -> DAMP, and the IMU must point down within it before
    RAMP. Required for `kind: legged` (safe range (0, 1.5] rad); ignored for arms (None allowed)."""
    ramp_time_s: float = field(default=2.0, metadata={"safe_range": (0.5, 10.0, True)})
    """RAMP: time to move position and gains from the current pose to the default pose.
    Safe range [0.5, 10] s."""
    damping_kd: float = field(default=1.0, metadata={"safe_range": (0.0, math.inf, False)})
    """DAMP: joint damping (N m s/rad) with zero stiffness. Safe range (0, min(kd_max)]."""
    torque_margin: float = field(default=1.0, metadata={"safe_range": (0.0, 1.0, False)})
    """Torque check: |kp (q* - q) + kd (dq* - dq) + tau_ff| at the measured state stays within
    torque_margin * torque limit. Safe range (0, 1]."""
    overspeed_factor: float = field(default=1.2, metadata={"safe_range": (1.0, 1.5, True)})
    """A measured |dq| above overspeed_factor * velocity limit is a state fault ("overspeed") -> DAMP;
    the tolerance covers encoder noise and short transients. Safe range [1, 1.5]."""


@dataclass(frozen=True, kw_only=True)
class BaseVelocityConfig:
    """The base linear-velocity estimator of a legged robot (`robo_rl.deploy.estimation.BaseVelocityEstimator`):
    a Kalman filter on the base velocity, predicted with the accelerometer and corrected by the leg kinematics
    of every foot in stance. Every value is a finite number > 0; the defaults are tuned on the Go2 twin
    (tests/deploy/test_estimation.py)."""

    contact_threshold_n: float = 20.0
    """A foot is in stance (and measures the base velocity) while its reported force exceeds this (N; the Go2's
    foot_force as the robot reports it: check the threshold against a standing robot's readings)."""
    accel_noise: float = 0.2
    """Process noise: white-noise density of the accelerometer-integrated velocity (m/s^2 per sqrt(Hz)); the
    velocity's variance grows by accel_noise^2 * dt per prediction. Raise it for a noisy or biased IMU."""
    leg_velocity_noise: float = 0.1
    """Measurement noise: standard deviation of one stance foot's kinematic base velocity (m/s): joint velocity
    noise, small slips."""
    outlier_gate: float = 7.8
    """A stance foot whose measurement lies further than this squared Mahalanobis distance from the prediction is
    slipping, landing or lifting off, and is ignored (7.8: the 95 % point of a chi-square with 3 degrees of
    freedom)."""
    outlier_timeout_s: float = 0.1
    """When every stance foot has been ignored for this long (s), the filter starts afresh from the legs (the
    prediction, not the legs, went wrong)."""
    initial_velocity_std: float = 1.0
    """Standard deviation of the first estimate (m/s) when no foot is in stance at the first reading."""
    max_dt_s: float = 0.1
    """A gap between two state stamps is clipped to this (s) before it is integrated (a stall is the watchdog's
    business; the estimate must not jump)."""


@dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """The robot-side controller the commands reach (the hardware file's optional `controller`); without the section:
    a driver that applies each command's gains and target as they come (the sim twin, pd_targets, Unitree's motors).

    A Franka arm through franka_ros2 is the other kind: libfranka takes a setpoint every millisecond, checks its
    velocity, acceleration and jerk (a violation aborts the motion: a reflex), and the robot's own joint impedance
    controller tracks it with its own stiffness (docs/deploy.md, Franka).
    """

    gains: str = "command"
    """`command`: the controller applies each command's kp / kd (in POLICY the contract's, bounded by kp_max /
    kd_max); `robot`: it tracks positions with its own stiffness, the hardware file's kp / kd (a Franka's joint
    impedance): the contract's training gains cannot be sent, and every command carries the hardware's."""
    setpoint_rate_hz: float | None = None
    """The controller takes setpoints at this rate (Hz; libfranka: 1000) and checks their derivatives: every policy
    tick is sent as setpoint_rate_hz / control_rate_hz jerk-limited setpoints (robo_rl.deploy.smoothing), a whole
    number. None: one target per tick."""
    acceleration_limits: np.ndarray | None = None
    """(J,) largest |joint acceleration| of the setpoints (rad/s^2; m/s^2 for a prismatic joint); with
    setpoint_rate_hz."""
    jerk_limits: np.ndarray | None = None
    """(J,) largest |joint jerk| of the setpoints (rad/s^3); with setpoint_rate_hz."""


CONTROLLER_GAINS = ("command", "robot")


@dataclass(frozen=True, kw_only=True)
class GripperConfig:
    """A gripper with a controller of its own (the hardware file's optional `gripper`): the Franka Hand through
    franka_gripper, which takes Move and Grasp goals (franka_msgs/action) instead of a joint target every tick.

    The policy drives `joint` like any joint (a finger's position, m; the hand's width is twice it); the deploy core
    sends franka_gripper a goal when the target turns to close (Grasp) or to open (Move) (robo_rl.deploy.gripper).
    """

    joint: str
    """The joint of joint_names the policy drives (one finger, m)."""
    namespace: str = "panda_gripper"
    """franka_gripper's node (franka_ros2 names it <arm_id>_gripper): its goals and state are <namespace>/...."""
    speed: float = 0.1
    """Finger speed of every goal (m/s; franka_gripper's default_speed; the Franka Hand's maximum)."""
    force: float = 20.0
    """Grasping force (N)."""
    epsilon_inner: float = 0.005
    """Grasp tolerance below the commanded width (m; franka_gripper's default): libfranka counts a grasp as made
    when the fingers stop between width - epsilon_inner and width + epsilon_outer."""
    epsilon_outer: float = 0.08
    """Grasp tolerance above the commanded width (m): the hand's whole stroke, since a grasp is commanded to the
    closed width and stops wherever the object is."""


@dataclass(frozen=True, kw_only=True)
class EstimatorConfig:
    """State estimators the deploy core runs on the robot side (the hardware file's optional `estimator`)."""

    base_velocity: BaseVelocityConfig | None = None
    """Legged robots with `feet`: fill `RobotState.base_lin_vel` when the robot does not report it; None: off."""


def safe_range(key: str) -> tuple[float, float, bool]:
    """(low, high, low included) of SafetyConfig field `key`; high is always included."""
    return SafetyConfig.__dataclass_fields__[key].metadata["safe_range"]


def _range_text(low: float, high: float, closed: bool) -> str:
    return f"{'[' if closed else '('}{low:g}, {high:g}]"


@dataclass(frozen=True, kw_only=True)
class HardwareSpec:
    """One robot. Arrays are in the robot's own joint order (`joint_names`)."""

    robot: str
    kind: str
    """`legged` (floating base, IMU) or `arm` (fixed base)."""
    joint_names: tuple[str, ...]
    """The joints as the robot reports them (its joint_states names, e.g. franka_ros2's fr3_joint1)."""
    joint_lower: np.ndarray
    joint_upper: np.ndarray
    velocity_limits: np.ndarray
    torque_limits: np.ndarray
    kp: np.ndarray
    """Stiffness used to hold and ramp (POLICY uses the contract's gains); 0 <= kp <= kp_max."""
    kd: np.ndarray
    """Damping used to hold and ramp; 0 <= kd <= kd_max."""
    kp_max: np.ndarray
    """Largest stiffness the robot accepts per joint (N m/rad): policies asking for more are refused at
    load, and the SafetyFilter clips every command's kp to it."""
    kd_max: np.ndarray
    """Largest damping the robot accepts per joint (N m s/rad); as kp_max."""
    control_rate_hz: float
    """Rate of the policy loop; must match the contract's 1 / policy_dt."""
    quaternion_order: str = "wxyz"
    """Order in which the robot reports its IMU quaternion."""
    feet: tuple[str, ...] | None = None
    """Legged robots: the feet in the order the robot reports their contact forces (`RobotState.foot_force`), as
    leg prefixes of the model's names (`<foot>_foot_site`, `<foot>_foot_touch`); None for arms."""
    model_joint_names: tuple[str, ...] | None = None
    """The same joints as the robot's MJCF (transport.sim.model) names them, in joint_names order, when the robot
    names them otherwise (franka_ros2's fr3_joint1 is the model's joint1): policies trained on the model name its
    joints so; the deploy core maps them onto joint_names, and the twin finds its joints by these names. None: the
    model uses joint_names."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    """Optional state estimators (legged robots only)."""
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    """The robot-side controller the commands reach (gains, setpoint rate and limits)."""
    gripper: GripperConfig | None = None
    """A gripper with its own controller (franka_gripper), or None: every joint is the controller's."""
    transport: dict[str, Any] = field(default_factory=dict)
    """Transport settings (topics, interfaces); read by the transport that is chosen."""

    @property
    def model_names(self) -> tuple[str, ...]:
        """The joints as the robot's model names them (model_joint_names, else joint_names), robot order."""
        return self.model_joint_names or self.joint_names

    def robot_names(self, names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
        """`names` with every model name (model_joint_names) replaced by the robot's name of that joint; others
        unchanged."""
        to_robot = dict(zip(self.model_names, self.joint_names, strict=True))
        return tuple(to_robot.get(n, n) for n in names)

    def index_of(self, names: tuple[str, ...] | list[str]) -> np.ndarray:
        """Positions of `names` (the robot's names or the model's) in this robot's joint order; ValueError naming a
        missing joint."""
        names = self.robot_names(names)
        lookup = {n: i for i, n in enumerate(self.joint_names)}
        missing = [n for n in names if n not in lookup]
        if missing:
            raise ValueError(
                f"joint(s) {', '.join(missing)} not in hardware {self.robot!r} (joints: {', '.join(self.joint_names)})"
            )
        return np.array([lookup[n] for n in names], dtype=np.int64)


_KINDS = ("legged", "arm")
_QUAT_ORDERS = ("wxyz", "xyzw")


def _vector(raw: dict[str, Any], key: str, n: int, path: str, *, positive: bool = False,
            nonnegative: bool = False) -> np.ndarray:
    value = raw.get(key)
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(f"{path}: {key} must be a list of {n} numbers (one per joint)")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: {key} must hold numbers only") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{path}: {key} holds a non-finite value")
    if positive and np.any(arr <= 0):
        raise ValueError(f"{path}: {key} = {value}: every entry must be > 0")
    if nonnegative and np.any(arr < 0):
        raise ValueError(f"{path}: {key} = {value}: every entry must be >= 0")
    return arr


def _feet(raw: dict[str, Any], kind: str, path: Path) -> tuple[str, ...] | None:
    """The `feet` list: None when absent; ValueError (one line) when malformed or on an arm."""
    feet = raw.get("feet")
    if feet is None:
        return None
    if kind != "legged":
        raise ValueError(f"{path}: feet is for kind: legged robots, not kind: {kind}")
    if not isinstance(feet, list) or not feet or not all(isinstance(f, str) and f for f in feet):
        raise ValueError(f"{path}: feet must be a non-empty list of names (e.g. [FR, FL, RR, RL])")
    dupes = sorted({f for f in feet if feet.count(f) > 1})
    if dupes:
        raise ValueError(f"{path}: feet lists {', '.join(dupes)} more than once")
    return tuple(feet)


def _estimator(raw: dict[str, Any], kind: str, feet: tuple[str, ...] | None, path: Path) -> EstimatorConfig:
    """The `estimator` section; ValueError (one line) naming the bad key or value."""
    section = raw.get("estimator")
    if section is None:
        return EstimatorConfig()
    if not isinstance(section, dict):
        raise ValueError(f"{path}: estimator must be a mapping (e.g. {{base_velocity: {{contact_threshold_n: 20}}}})")
    unknown = sorted(set(section) - set(EstimatorConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{path}: unknown estimator key(s) {', '.join(unknown)}; valid keys: "
                         f"{', '.join(EstimatorConfig.__dataclass_fields__)}")
    base = section.get("base_velocity")
    if base is None:
        return EstimatorConfig()
    if kind != "legged" or feet is None:
        raise ValueError(f"{path}: estimator.base_velocity needs a legged robot with feet (kind: legged and a "
                         f"feet list)")
    if not isinstance(base, dict):
        raise ValueError(f"{path}: estimator.base_velocity must be a mapping ({{}} for the defaults)")
    known = BaseVelocityConfig.__dataclass_fields__
    unknown = sorted(set(base) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown estimator.base_velocity key(s) {', '.join(unknown)}; valid keys: "
                         f"{', '.join(known)}")
    for key, value in base.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"{path}: estimator.base_velocity.{key} = {value!r}: must be a finite number > 0")
    return EstimatorConfig(base_velocity=BaseVelocityConfig(**{k: float(v) for k, v in base.items()}))


def _model_joint_names(raw: dict[str, Any], names: list[str], path: Path) -> tuple[str, ...] | None:
    """The `model_joint_names` map: None when absent; ValueError (one line) when malformed or ambiguous."""
    model = raw.get("model_joint_names")
    if model is None:
        return None
    if not isinstance(model, list) or len(model) != len(names) or not all(isinstance(m, str) and m for m in model):
        raise ValueError(f"{path}: model_joint_names must be a list of {len(names)} names, the model's name of each "
                         f"entry of joint_names")
    dupes = sorted({m for m in model if model.count(m) > 1})
    if dupes:
        raise ValueError(f"{path}: model_joint_names lists {', '.join(dupes)} more than once")
    crossed = [m for i, m in enumerate(model) if m in names and names.index(m) != i]
    if crossed:
        raise ValueError(f"{path}: model_joint_names {', '.join(crossed)} name other joints of joint_names: a name "
                         f"must mean one joint")
    return tuple(model)


def _controller(raw: dict[str, Any], n: int, rate: float, path: Path) -> ControllerConfig:
    """The `controller` section; ValueError (one line) naming the bad key or value."""
    section = raw.get("controller")
    if section is None:
        return ControllerConfig()
    known = ControllerConfig.__dataclass_fields__
    if not isinstance(section, dict):
        raise ValueError(f"{path}: controller must be a mapping (keys: {', '.join(known)})")
    unknown = sorted(set(section) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown controller key(s) {', '.join(unknown)}; valid keys: {', '.join(known)}")
    gains = section.get("gains", "command")
    if gains not in CONTROLLER_GAINS:
        raise ValueError(f"{path}: controller.gains = {gains!r}: allowed values are {', '.join(CONTROLLER_GAINS)}")
    setpoint_rate = section.get("setpoint_rate_hz")
    limits = {k: section.get(k) for k in ("acceleration_limits", "jerk_limits")}
    if setpoint_rate is None:
        given = [k for k, v in limits.items() if v is not None]
        if given:
            raise ValueError(f"{path}: controller.{given[0]} needs controller.setpoint_rate_hz (the rate it holds at)")
        return ControllerConfig(gains=gains)
    check_setpoint_rate(setpoint_rate, rate, f"{path}: controller.setpoint_rate_hz")
    arrays = {k: _vector(section, k, n, f"{path}: controller", positive=True) for k in limits}  # (J,) each
    return ControllerConfig(gains=gains, setpoint_rate_hz=float(setpoint_rate), **arrays)


def _gripper(raw: dict[str, Any], names: tuple[str, ...], model_names: tuple[str, ...] | None, kind: str,
             path: Path) -> GripperConfig | None:
    """The `gripper` section (its joint named as the robot or as the model names it); ValueError (one line)."""
    section = raw.get("gripper")
    if section is None:
        return None
    known = GripperConfig.__dataclass_fields__
    if kind != "arm" or not isinstance(section, dict):
        raise ValueError(f"{path}: gripper must be a mapping (keys: {', '.join(known)}) on a kind: arm robot")
    unknown = sorted(set(section) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown gripper key(s) {', '.join(unknown)}; valid keys: {', '.join(known)}")
    joint = section.get("joint")
    to_robot = dict(zip(model_names or names, names, strict=True))
    if not isinstance(joint, str) or to_robot.get(joint, joint) not in names:
        raise ValueError(f"{path}: gripper.joint = {joint!r}: must be one of joint_names (the finger the policy "
                         f"drives)")
    namespace = section.get("namespace", GripperConfig.namespace)
    if not isinstance(namespace, str) or not namespace or namespace.startswith("~"):
        raise ValueError(f"{path}: gripper.namespace = {namespace!r}: must be a ROS name (e.g. panda_gripper)")
    numbers = {}
    for key in ("speed", "force", "epsilon_inner", "epsilon_outer"):
        value = section.get(key, getattr(GripperConfig, key))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
                or (value == 0 and key in ("speed", "force")):
            raise ValueError(f"{path}: gripper.{key} = {value!r}: must be a finite number "
                             f"{'> 0' if key in ('speed', 'force') else '>= 0'}")
        numbers[key] = float(value)
    return GripperConfig(joint=to_robot.get(joint, joint), namespace=namespace, **numbers)


def check_setpoint_rate(setpoint_rate_hz: object, policy_rate_hz: float, what: str) -> None:
    """ValueError (one line) unless the controller's setpoint rate is a number that is a whole multiple (>= 1) of the
    policy rate: each policy tick becomes setpoint_rate_hz / policy_rate_hz setpoints."""
    if (isinstance(setpoint_rate_hz, bool) or not isinstance(setpoint_rate_hz, (int, float))
            or not 0 < setpoint_rate_hz <= 100_000):
        raise ValueError(f"{what} = {setpoint_rate_hz!r}: must be a number in (0, 100000] (Hz)")
    ratio = setpoint_rate_hz / policy_rate_hz
    if ratio < 1 - 1e-9 or abs(ratio - round(ratio)) > 1e-6 * ratio:
        raise ValueError(f"{what} = {setpoint_rate_hz:g} Hz cannot take a {policy_rate_hz:g} Hz policy: a tick would "
                         f"be {ratio:.4g} setpoints, not a whole number >= 1")


def _check_safety(safety: SafetyConfig, kind: str, kd_max: np.ndarray, path: Path, allow_unsafe: bool,
                  warn: Callable[[str], None]) -> None:
    """Refuse (or, with allow_unsafe, loudly accept) safety values outside their safe range."""
    for key, value in vars(safety).items():
        if key == "joint_limit_margin" and isinstance(value, tuple):  # per joint: each entry in the safe range
            for i, v in enumerate(value):
                _check_safety_value(f"{key}[{i}]", v, safe_range(key), path, allow_unsafe, warn)
            continue
        if value is None:
            if key == "max_tilt_rad" and kind == "legged":
                raise ValueError(f"{path}: safety.max_tilt_rad is missing: a legged robot needs the attitude "
                                 f"guard (safe range {_range_text(*safe_range(key))} rad)")
            continue
        low, high, closed = safe_range(key)
        if key == "damping_kd":
            high = float(kd_max.min())
        _check_safety_value(key, value, (low, high, closed), path, allow_unsafe, warn)


def _check_safety_value(key: str, value: float, bounds: tuple[float, float, bool], path: Path, allow_unsafe: bool,
                        warn: Callable[[str], None]) -> None:
    """Refuse (or, with allow_unsafe, loudly accept) one safety value outside its safe range."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{path}: safety.{key} = {value!r}: must be a non-negative number")
    low, high, closed = bounds
    inside = (value >= low if closed else value > low) and value <= high
    if not inside:
        text = f"{path}: safety.{key} = {value!r} is outside its safe range {_range_text(low, high, closed)}"
        if not allow_unsafe:
            raise ValueError(text + " (load_hardware(..., allow_unsafe=True) overrides, for experts)")
        warn(f"WARNING: UNSAFE HARDWARE OVERRIDE: {text}; accepted because allow_unsafe is set")


def _print_warning(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_hardware(path: str | Path, *, allow_unsafe: bool = False,
                  warn: Callable[[str], None] | None = None) -> HardwareSpec:
    """Read and validate `hardware/<robot>.yaml` before anything connects to the robot.

    Refuses (ValueError, one line naming the field): unknown keys, malformed joint arrays, non-finite
    numbers, limits not positive, gains negative or above kp_max / kd_max, a legged robot without
    `safety.max_tilt_rad`, any safety value outside the safe range its SafetyConfig field states, `feet` on an
    arm or malformed, an `estimator` section that is malformed or (base_velocity) on a robot without feet, a
    `model_joint_names` map that is malformed or names one joint twice, a `controller` section that is malformed
    or whose setpoint rate is not a whole multiple of control_rate_hz, and a malformed `gripper` section.

    Args:
        path: the YAML file.
        allow_unsafe: accept safety values outside their safe range (experts only); each is reported
            through `warn` as a line starting "WARNING: UNSAFE HARDWARE OVERRIDE".
        warn: where warning lines go (default: stderr).
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"hardware file {str(p)!r} does not exist")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError:
        raise ValueError(f"hardware file {p} is not valid YAML") from None
    if not isinstance(raw, dict):
        raise ValueError(f"hardware file {p}: top level must be a mapping")
    known = set(HardwareSpec.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{p}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}")

    names = raw.get("joint_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{p}: joint_names must be a non-empty list of names")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{p}: joint_names lists {', '.join(dupes)} more than once")
    n = len(names)
    kind = raw.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"{p}: kind = {kind!r}: allowed values are {', '.join(_KINDS)}")
    quat = raw.get("quaternion_order", "wxyz")
    if quat not in _QUAT_ORDERS:
        raise ValueError(f"{p}: quaternion_order = {quat!r}: allowed values are {', '.join(_QUAT_ORDERS)}")
    rate = raw.get("control_rate_hz")
    if not isinstance(rate, (int, float)) or not 0 < rate <= 10_000 or isinstance(rate, bool):
        raise ValueError(f"{p}: control_rate_hz = {rate!r}: must be a number in (0, 10000]")
    safety_raw = raw.get("safety") or {}
    if not isinstance(safety_raw, dict):
        raise ValueError(f"{p}: safety must be a mapping")
    unknown = sorted(set(safety_raw) - set(SafetyConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{p}: unknown safety key(s) {', '.join(unknown)}")
    margin = safety_raw.get("joint_limit_margin")
    if isinstance(margin, list):
        if len(margin) != n:
            raise ValueError(f"{p}: safety.joint_limit_margin must be one number or a list of {n} (one per joint)")
        safety_raw = {**safety_raw, "joint_limit_margin": tuple(margin)}
    safety = SafetyConfig(**safety_raw)
    kp_max = _vector(raw, "kp_max", n, str(p), positive=True)
    kd_max = _vector(raw, "kd_max", n, str(p), positive=True)
    _check_safety(safety, kind, kd_max, p, allow_unsafe, warn or _print_warning)
    feet = _feet(raw, kind, p)
    estimator = _estimator(raw, kind, feet, p)
    model_names = _model_joint_names(raw, names, p)
    controller = _controller(raw, n, float(rate), p)
    gripper = _gripper(raw, tuple(names), model_names, kind, p)

    spec = HardwareSpec(
        robot=str(raw.get("robot", p.stem)),
        kind=kind,
        joint_names=tuple(names),
        joint_lower=_vector(raw, "joint_lower", n, str(p)),
        joint_upper=_vector(raw, "joint_upper", n, str(p)),
        velocity_limits=_vector(raw, "velocity_limits", n, str(p), positive=True),
        torque_limits=_vector(raw, "torque_limits", n, str(p), positive=True),
        kp=_vector(raw, "kp", n, str(p), nonnegative=True),
        kd=_vector(raw, "kd", n, str(p), nonnegative=True),
        kp_max=kp_max,
        kd_max=kd_max,
        control_rate_hz=float(rate),
        quaternion_order=quat,
        feet=feet,
        model_joint_names=model_names,
        safety=safety,
        estimator=estimator,
        controller=controller,
        gripper=gripper,
        transport=dict(raw.get("transport") or {}),
    )
    bad = [spec.joint_names[i] for i in np.flatnonzero(spec.joint_lower >= spec.joint_upper)]
    if bad:
        raise ValueError(f"{p}: joint_lower must be below joint_upper for {', '.join(bad)}")
    for key, limit in (("kp", "kp_max"), ("kd", "kd_max")):
        values, bound = getattr(spec, key), getattr(spec, limit)
        over = np.flatnonzero(values > bound)
        if over.size:
            i = int(over[0])
            raise ValueError(f"{p}: {key} for {spec.joint_names[i]} = {values[i]:g} exceeds {limit} = {bound[i]:g}")
    return spec
