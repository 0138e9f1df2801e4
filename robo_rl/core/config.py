"""Typed, validated configuration: defaults -> YAML -> command-line overrides -> one `validate`.

Every component has one frozen dataclass. Field constraints live in the field metadata
(`ge`, `gt`, `le`, `choices`, and `note`: why a value is not allowed) so validation is generic and
every error message has the same shape: ``config error: <path> = <value>: <what is allowed>``.
Every float must be finite. Constraints across sections (the minibatch size, hidden widths) are
checked once by `check_train_config`; `resume_changes` lists what a resume may not change.

This module imports no torch and no mujoco.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class UserError(Exception):
    """A user mistake (command line, config, files); the CLI prints it as one line and exits 2."""


class ConfigError(UserError, ValueError):
    """A user mistake in a config file or override; the CLI prints it as one line."""


MAX_NUM_ENVS = 1_000_000
"""Most parallel worlds (sim.num_envs; also `play --episodes`, one world per episode)."""
MAX_SEED = 2**31 - 1
"""Largest seed (torch, numpy and the envs all accept it)."""


def _f(default: Any = dataclasses.MISSING, **meta: Any) -> Any:
    """A dataclass field with validation metadata (ge, gt, le, choices, note)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """Batched physics."""

    backend: str = _f("mujoco_cpu", choices=("mujoco_cpu", "mujoco_warp"))
    """Physics backend: `mujoco_cpu` (float64, threads over `mujoco.rollout`) or `mujoco_warp` (MuJoCo Warp,
    float32, on a CUDA GPU or Warp's CPU device; needs the `gpu` extra)."""
    device: str = "cpu"
    """Where the worlds live and step: `cpu`, or `cuda` / `cuda:N` with `mujoco_warp`. The learner follows it
    (top-level `device: auto`)."""
    nconmax: int | None = _f(None, ge=1, le=100_000)
    """Contacts allocated per world by `mujoco_warp` (fixed buffers; None: the task's size, else MuJoCo Warp's
    default). `mujoco_cpu` grows its buffers as needed and ignores it."""
    njmax: int | None = _f(None, ge=1, le=100_000)
    """Constraint rows allocated per world by `mujoco_warp` (None: the task's size, else MuJoCo Warp's default)."""
    num_envs: int = _f(1024, ge=1, le=MAX_NUM_ENVS)
    """Number of parallel worlds."""
    num_threads: int = _f(0, ge=0, le=1024)
    """Worker threads for physics; 0 means one per CPU core."""


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """Gaussian actor-critic MLP."""

    actor_hidden_dims: tuple[int, ...] = _f((256, 128, 64))
    """Hidden layer widths of the actor."""
    critic_hidden_dims: tuple[int, ...] = _f((256, 128, 64))
    """Hidden layer widths of the critic."""
    activation: str = _f("elu", choices=("elu", "relu", "tanh", "silu"))
    """Hidden activation."""
    init_noise_std: float = _f(1.0, gt=0.0)
    """Initial standard deviation of the Gaussian policy."""
    noise_std_type: str = _f("scalar", choices=("scalar", "log"))
    """How the state-independent action std is learned: `scalar` learns σ itself (RSL-RL's default; kept
    >= 1e-6 by a clamp), `log` learns log σ. Under Adam σ falls by a roughly fixed amount per step in the
    first and by a fixed fraction in the second, so `scalar` narrows exploration faster late in training;
    on arm-reach it reached 1 cm in 139 and 157 iterations, `log` not within 200 (2 seeds, before the
    other parity changes; docs/benchmarks.md)."""
    obs_normalization: bool = True
    """Empirical running mean/std normalisation of actor and critic inputs."""
    obs_norm_eps: float = _f(1e-2, gt=0.0, le=1.0)
    """Added to the running std before dividing by it (RSL-RL: 1e-2). SB3's VecNormalize divides by
    sqrt(var + 1e-8), which 1e-4 matches to within 1e-4 of σ: a smaller value lets nearly constant inputs
    be amplified more."""
    obs_norm_clip: float = _f(0.0, ge=0.0)
    """Clip normalised inputs to +-this (0: no clipping; SB3's VecNormalize clip_obs: 10). Part of the
    normaliser, so it is baked into exported policies too."""


@dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """PPO hyper-parameters (defaults as in RSL-RL, see shared/REFERENCES.md)."""

    num_steps_per_env: int = _f(24, ge=1)
    """Rollout length T per iteration; the batch is T * num_envs samples."""
    num_learning_epochs: int = _f(5, ge=1)
    """Passes over the batch per iteration."""
    num_mini_batches: int = _f(4, ge=1)
    """Minibatches per epoch."""
    learning_rate: float = _f(1e-3, gt=0.0, le=1.0)
    """Adam learning rate (initial value when the schedule is adaptive)."""
    schedule: str = _f("adaptive", choices=("adaptive", "fixed"))
    """`adaptive`: scale the learning rate by 1.5 to keep the KL near `desired_kl`."""
    desired_kl: float = _f(0.01, gt=0.0)
    """Target KL divergence per minibatch for the adaptive schedule."""
    clip_param: float = _f(0.2, gt=0.0, le=1.0)
    """Surrogate and value clip range."""
    gamma: float = _f(0.99, gt=0.0, le=1.0)
    """Discount factor."""
    lam: float = _f(0.95, ge=0.0, le=1.0)
    """GAE lambda."""
    value_loss_coef: float = _f(1.0, ge=0.0)
    """Weight of the value loss."""
    entropy_coef: float = _f(0.01, ge=0.0)
    """Weight of the entropy bonus."""
    max_grad_norm: float = _f(1.0, gt=0.0)
    """Gradient-norm clip (see `grad_clip`)."""
    grad_clip: str = _f("separate", choices=("separate", "joint"))
    """`separate`: clip the actor's gradients (with its std) and the critic's each to `max_grad_norm`, as
    RSL-RL does; `joint`: clip the norm of all parameters' gradients together, as SB3 and cleanrl do (a
    large value gradient then also shrinks the policy step)."""
    adam_eps: float = _f(1e-8, gt=0.0, le=1.0)
    """Adam's epsilon (PyTorch default 1e-8, as RSL-RL; SB3's PPO uses 1e-5, which damps the steps of
    parameters whose gradients are below ~1e-5)."""
    reshuffle_minibatches: bool = False
    """Draw a new minibatch partition of the batch in every epoch, as SB3 and cleanrl do; off: one
    partition for all epochs, as RSL-RL does."""
    use_clipped_value_loss: bool = True
    """Clip the value update like the policy update."""
    normalize_advantage: bool = True
    """Normalise advantages to zero mean and unit std (where: `advantage_norm_per_minibatch`)."""
    advantage_norm_per_minibatch: bool = False
    """Normalise advantages within each minibatch, as SB3 and cleanrl do; off: once over the whole
    batch per iteration, as RSL-RL does by default."""
    normalize_reward: bool = False
    """Divide the rewards PPO learns from by a running std of each world's discounted return (reset at
    episode ends) and clip them to +-10, as SB3's VecNormalize(norm_reward=True) does; it keeps value
    targets O(1) for tasks whose returns reach hundreds (gymnasium's MuJoCo envs). Env rewards, logged
    returns and evaluations stay unscaled."""


@dataclass(frozen=True, kw_only=True)
class RunnerConfig:
    """Training loop, logging and checkpoints."""

    max_iterations: int = _f(500, ge=1)
    """Iterations (rollout + update) to run."""
    max_time_s: float = _f(0.0, ge=0.0)
    """Stop after this much wall-clock training time (0: no limit)."""
    save_interval: int = _f(50, ge=1)
    """Write a checkpoint every this many iterations (and always at the end)."""
    log_dir: str = "runs"
    """Folder that holds one sub-folder per run."""
    run_name: str = ""
    """Run folder name (one folder, no `/`); empty means `<task>_<date>_<time>`."""
    video_interval: int = _f(0, ge=0)
    """Record an evaluation video every this many iterations (0: only at the end if `video_at_end`)."""
    video_at_end: bool = False
    """Record an evaluation video when training ends."""
    video_episodes: int = _f(1, ge=1, le=16)
    """Episodes per evaluation video."""
    eval_episodes: int = _f(64, ge=0)
    """Deterministic evaluation episodes run after training and reported with the result (0: skip)."""
    progress_bar: bool = True
    """Print a progress line (steps/s, mean return, ETA) every iteration."""

    def validate(self) -> None:
        name = self.run_name
        if "/" in name or "\\" in name or name in (".", "..") or name != name.strip():
            raise ConfigError(
                f"config error: runner.run_name = {name!r}: must be a single folder name "
                "(no '/', not '.' or '..', no surrounding spaces)"
            )


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Everything a training run needs; written into every run directory and checkpoint."""

    task: str
    """Registered task name (`robo-rl tasks` lists them)."""
    algo_name: str = "ppo"
    """Learning algorithm: a name in the algorithm registry (`robo_rl.learn.algorithms.ALGORITHMS`: ppo, sac, and any
    added with `register_algorithm`); it decides the types of `algo` and `policy`."""
    seed: int = _f(0, ge=0, le=MAX_SEED)
    """Seed for torch, numpy and the environments."""
    device: str = "auto"
    """Torch device of the learner (networks, rollout storage or replay, action noise): `auto` follows
    `sim.device`; an explicit value must equal it, since env tensors and learner tensors meet every step."""
    sim: SimConfig = field(default_factory=SimConfig)
    env: Any = None
    """The task's own config dataclass (see the task module)."""
    algo: Any = field(default_factory=PPOConfig)
    """The algorithm's own config dataclass (PPOConfig for ppo; see the algorithm module)."""
    policy: Any = field(default_factory=PolicyConfig)
    """The config dataclass of the networks the algorithm trains (PolicyConfig for ppo)."""
    runner: RunnerConfig = field(default_factory=RunnerConfig)

    def to_dict(self) -> dict[str, Any]:
        return _to_plain(self)

    def hash(self) -> str:
        """Short stable hash of the resolved config (run identity in checkpoints and contracts)."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def builtin_algo_configs(name: str) -> tuple[type, type]:
    """(algo config class, policy config class) for `ppo`, the one algorithm known without the registry.

    `resolve_train_config` uses it when no registry lookup is passed (the registry, `robo_rl.learn.algorithms`,
    imports torch; this module must not).
    """
    if name != "ppo":
        raise ConfigError(f"config error: algo_name = {name!r}: allowed values are ppo "
                          "(pass algo_configs=robo_rl.learn.algorithms.algorithm_configs for the registered ones)")
    return PPOConfig, PolicyConfig

MAX_HIDDEN_WIDTH = 65536
"""Widest hidden layer accepted (a typo like 1000000 would exhaust memory, not train)."""

RESUMABLE_FIELDS = (
    "runner.max_iterations",
    "runner.max_time_s",
    "runner.save_interval",
    "runner.video_interval",
    "runner.video_at_end",
    "runner.video_episodes",
    "runner.eval_episodes",
    "runner.progress_bar",
)
"""Fields a resumed run may change: they change neither the learning problem nor any tensor's shape."""


def check_train_config(cfg: TrainConfig) -> None:
    """Constraints that span sections; ConfigError naming the field otherwise.

    An algorithm config adds its own by defining `check_sections(cfg)` (called last).
    """
    check_devices(cfg)
    for name in ("actor_hidden_dims", "critic_hidden_dims"):
        for i, width in enumerate(getattr(cfg.policy, name, ())):
            if not 1 <= width <= MAX_HIDDEN_WIDTH:
                raise ConfigError(
                    f"config error: policy.{name}[{i}] = {width!r}: hidden widths must be 1 .. {MAX_HIDDEN_WIDTH}"
                )
    algo = cfg.algo
    if hasattr(algo, "num_mini_batches") and hasattr(algo, "num_steps_per_env"):
        batch = algo.num_steps_per_env * cfg.sim.num_envs
        if algo.num_mini_batches > batch:
            raise ConfigError(
                f"config error: algo.num_mini_batches = {algo.num_mini_batches}: must be <= the batch size "
                f"algo.num_steps_per_env * sim.num_envs = {algo.num_steps_per_env} * {cfg.sim.num_envs} = {batch}"
            )
    check_sections = getattr(algo, "check_sections", None)
    if callable(check_sections):
        check_sections(cfg)


DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?")


def check_devices(cfg: TrainConfig) -> None:
    """sim.device names a device its backend runs on, and the learner's device matches it."""
    sim = cfg.sim.device
    if not DEVICE_PATTERN.fullmatch(sim):
        raise ConfigError(f"config error: sim.device = {sim!r}: allowed values are cpu, cuda, cuda:N")
    if sim != "cpu" and cfg.sim.backend == "mujoco_cpu":
        raise ConfigError(f"config error: sim.device = {sim!r}: the mujoco_cpu backend runs on the cpu only; "
                          "set sim.backend=mujoco_warp to simulate on a GPU")
    if cfg.device not in ("auto", sim):
        raise ConfigError(f"config error: device = {cfg.device!r}: the learner must be on sim.device ({sim!r}), "
                          "where the env's tensors are; use device=auto")


def learner_device(cfg: TrainConfig) -> str:
    """The torch device of the learner: sim.device unless given explicitly (they must agree)."""
    return cfg.sim.device if cfg.device == "auto" else cfg.device


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> {dotted path: leaf value}."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, _join(prefix, str(key))))
    return out


def resume_changes(old: TrainConfig, new: TrainConfig) -> list[str]:
    """`path (old -> new)` for every field outside RESUMABLE_FIELDS that differs between two configs."""
    a, b = flatten(old.to_dict()), flatten(new.to_dict())

    def shown(tree: dict[str, Any], path: str) -> str:
        return repr(tree[path]) if path in tree else "unset"

    return [
        f"{path} ({shown(a, path)} -> {shown(b, path)})"
        for path in sorted(a.keys() | b.keys())
        if path not in RESUMABLE_FIELDS and (path in a, a.get(path)) != (path in b, b.get(path))
    ]


# ----------------------------------------------------------------------------------------------
# Generic construction and validation
# ----------------------------------------------------------------------------------------------


def _to_plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [_to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    return obj


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Convert a YAML / command-line value to the annotated type, or raise ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], path)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"config error: {path} = {value!r}: expected true or false")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"config error: {path} = {value!r}: expected an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ConfigError(f"config error: {path} = {value!r}: expected an integer")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"config error: {path} = {value!r}: expected a number")
        number = None
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"config error: {path} = {value!r}: expected a number")
        if not math.isfinite(number):
            raise ConfigError(f"config error: {path} = {value!r}: must be a finite number")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config error: {path} = {value!r}: expected a string")
    if origin is tuple:
        (elem, *_rest) = typing.get_args(tp)
        if isinstance(value, str):
            value = _yaml_value(value, path)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config error: {path} = {value!r}: expected a list of {_type_name(elem)}")
        return tuple(_coerce(v, elem, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        key_t, val_t = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"config error: {path} = {value!r}: expected a mapping")
        return {str(k): _coerce(v, val_t, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    return value


def _check_meta(value: Any, meta: typing.Mapping[str, Any], path: str) -> None:
    if value is None:
        return
    values = value if isinstance(value, tuple) else (value,)
    for v in values:
        if "choices" in meta and v not in meta["choices"]:
            allowed = ", ".join(map(str, meta["choices"]))
            note = f" ({meta['note']})" if "note" in meta else ""
            raise ConfigError(f"config error: {path} = {v!r}: allowed values are {allowed}{note}")
        if "ge" in meta and not v >= meta["ge"]:
            raise ConfigError(f"config error: {path} = {v!r}: must be >= {meta['ge']}")
        if "gt" in meta and not v > meta["gt"]:
            raise ConfigError(f"config error: {path} = {v!r}: must be > {meta['gt']}")
        if "le" in meta and not v <= meta["le"]:
            raise ConfigError(f"config error: {path} = {v!r}: must be <= {meta['le']}")


def build(cls: type, raw: Any, path: str = "") -> Any:
    """Build dataclass `cls` from a (possibly partial) mapping, validating every field.

    Args:
        cls: a frozen dataclass type.
        raw: mapping of field name -> raw value (None or {} gives the defaults).
        path: dotted prefix used in error messages.
    """
    if raw is None:
        raw = {}
    if dataclasses.is_dataclass(raw):
        raw = _to_plain(raw)
    if not isinstance(raw, dict):
        raise ConfigError(f"config error: {path or 'config'} = {raw!r}: expected a mapping")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            where = f"'{path}'" if path else "the top level"
            raise ConfigError(
                f"config error: unknown key '{_join(path, key)}'; valid keys in {where}: {', '.join(fields)}"
            )
    kwargs = {}
    for name, f in fields.items():
        if name not in raw:
            continue
        given = raw[name]
        has_factory = f.default_factory is not dataclasses.MISSING
        if dataclasses.is_dataclass(hints[name]) and isinstance(given, dict) and has_factory:
            # a partial section overrides the field's own default (which may differ from its class's defaults)
            given = {**_to_plain(f.default_factory()), **given}
        value = _coerce(given, hints[name], _join(path, name))
        if typing.get_origin(hints[name]) is dict and f.default_factory is not dataclasses.MISSING:
            value = {**f.default_factory(), **value}  # a partial mapping overrides single entries
        _check_meta(value, f.metadata, _join(path, name))
        kwargs[name] = value
    try:
        obj = cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"config error: {path or cls.__name__}: {exc}") from None
    for name, f in fields.items():  # defaults are checked too (cheap, catches bad task defaults)
        _check_meta(getattr(obj, name), f.metadata, _join(path, name))
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate()
    return obj


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _yaml_value(text: str, where: str) -> Any:
    """A value written in YAML (`3e-4`, `[64, 64]`, `true`); ConfigError naming `where` if it does not parse."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"config error: {where} = {text!r}: not a valid YAML value ({problem})") from None


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"config error: override {text!r}: expected KEY=VALUE, e.g. algo.learning_rate=3e-4")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"config error: override {text!r}: empty key")
    return key.split("."), _yaml_value(value, f"override {key}") if value.strip() else ""


def set_in(tree: dict[str, Any], keys: list[str], value: Any) -> None:
    node = tree
    for k in keys[:-1]:
        child = node.get(k)
        if child is None:
            child = node[k] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"config error: override {'.'.join(keys)}: '{k}' is not a section")
        node = child
    node[keys[-1]] = value


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config error: config file {str(p)!r} is a directory; expected a YAML file")
    if not p.is_file():
        raise ConfigError(f"config error: config file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except (UnicodeDecodeError, OSError) as exc:
        why = type(exc).__name__
        raise ConfigError(f"config error: config file {str(p)!r} cannot be read as text ({why})") from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        raise ConfigError(f"config error: {p} is not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config error: {p}: top level must be a mapping")
    return data


def resolve_train_config(
    raw: dict[str, Any],
    overrides: list[str] = (),
    env_config_cls: typing.Callable[[str], type] | None = None,
    algo_configs: typing.Callable[[str], tuple[type, type]] | None = None,
) -> TrainConfig:
    """Merge a raw mapping with `key=value` overrides and build a validated TrainConfig.

    Args:
        raw: mapping as loaded from YAML (may be empty).
        overrides: `section.field=value` strings applied in order.
        env_config_cls: maps a task name to its config dataclass (raises ConfigError for unknown names).
        algo_configs: maps `algo_name` to its (algo config, policy config) dataclasses, raising ConfigError
            for unknown names; `robo_rl.learn.algorithms.algorithm_configs` for the registry. Default: ppo only.
    """
    tree = json.loads(json.dumps(raw))  # deep copy of plain data
    for text in overrides:
        keys, value = parse_override(text)
        set_in(tree, keys, value)
    if "task" not in tree or not tree["task"]:
        raise ConfigError("config error: task is not set; pass --task NAME (see `robo-rl tasks`)")
    env_raw = tree.pop("env", None)
    algo_raw = tree.pop("algo", None)
    policy_raw = tree.pop("policy", None)
    cfg = build(TrainConfig, tree)
    env_cls = env_config_cls(cfg.task) if env_config_cls else None
    env = build(env_cls, env_raw, "env") if env_cls else env_raw
    algo_cls, policy_cls = (algo_configs or builtin_algo_configs)(cfg.algo_name)
    algo = build(algo_cls, algo_raw, "algo")
    policy = build(policy_cls, policy_raw, "policy")
    cfg = dataclasses.replace(cfg, env=env, algo=algo, policy=policy)
    check_train_config(cfg)
    return cfg
