"""The config of a training run (`TrainConfig`: task, algorithm, sim, networks, loop), how it is resolved from
YAML and overrides, the checks across its sections, and what a resume may change.

Each section's dataclass lives with its component (`SimConfig` in `robo_rl.sim.sim_config`, an algorithm's config
and its policy config in the algorithm's module, the task's config in the task's module); the algorithm and
task registries say which classes `algo`, `policy` and `env` have. `RunnerConfig` (the training loop's own
section) is here because every runner reads it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from robo_rl.core.config import MAX_SEED, ConfigError, _f, apply_overrides, build, changed_paths, to_plain
from robo_rl.learn.algorithm_registry import ALGORITHMS, algorithm_configs
from robo_rl.sim.backend import BACKENDS
from robo_rl.sim.sim_config import SimConfig


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
    algo_name: str = field(default_factory=lambda: ALGORITHMS.default)
    """Learning algorithm: a name in the algorithm registry (`robo_rl.learn.algorithm_registry.ALGORITHMS`; the
    default is the entry registered with `default=True`); it decides the types of `algo` and `policy`."""
    seed: int = _f(0, ge=0, le=MAX_SEED)
    """Seed for torch, numpy and the environments."""
    device: str = "auto"
    """Torch device of the learner (networks, rollout storage or replay, action noise): `auto` follows
    `sim.device`; an explicit value must equal it, since env tensors and learner tensors meet every step."""
    sim: SimConfig = field(default_factory=SimConfig)
    env: Any = None
    """The task's own config dataclass (see the task module)."""
    algo: Any = None
    """The algorithm's own config dataclass (its registry entry's `config_cls`; see the algorithm module)."""
    policy: Any = None
    """The config dataclass of the networks the algorithm trains (its registry entry's `policy_config_cls`)."""
    runner: RunnerConfig = field(default_factory=RunnerConfig)

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    def hash(self) -> str:
        """Short stable hash of the resolved config (run identity in checkpoints and contracts)."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


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
    "algo.precision",
)
"""Fields a resumed run may change: they change neither the learning problem nor any tensor's shape (`algo.precision`
changes the arithmetic only: a run resumed in another precision continues, but not bit for bit as it would have)."""


def check_train_config(cfg: TrainConfig) -> None:
    """Constraints that span sections; ConfigError naming the field otherwise.

    An algorithm config adds its own by defining `check_sections(cfg)` (called last).
    """
    if cfg.sim.backend not in BACKENDS:
        raise ConfigError(BACKENDS.unknown_message(cfg.sim.backend))
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


def resume_changes(old: TrainConfig, new: TrainConfig) -> list[str]:
    """`path (old -> new)` for every field outside RESUMABLE_FIELDS that differs between two configs."""
    return changed_paths(old.to_dict(), new.to_dict(), RESUMABLE_FIELDS)


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
            for unknown names. Default: the algorithm registry's (`algorithm_configs`).
    """
    tree = apply_overrides(raw, overrides)
    if "task" not in tree or not tree["task"]:
        raise ConfigError("config error: task is not set; pass --task NAME (see `robo-rl tasks`)")
    env_raw = tree.pop("env", None)
    algo_raw = tree.pop("algo", None)
    policy_raw = tree.pop("policy", None)
    cfg = build(TrainConfig, tree)
    env_cls = env_config_cls(cfg.task) if env_config_cls else None
    env = build(env_cls, env_raw, "env") if env_cls else env_raw
    algo_cls, policy_cls = (algo_configs or algorithm_configs)(cfg.algo_name)
    algo = build(algo_cls, algo_raw, "algo")
    policy = build(policy_cls, policy_raw, "policy")
    cfg = dataclasses.replace(cfg, env=env, algo=algo, policy=policy)
    check_train_config(cfg)
    return cfg
