"""Isaac Lab and mjlab environments behind our VecEnv contract: task names `isaaclab:<id>` and `mjlab:<id>`.

Both frameworks share one manager-based API (mjlab is the Isaac Lab API on MuJoCo Warp), so one adapter
serves both, duck-typed: it calls the env's methods and reads its managers, and never imports their classes
outside `make_framework_env`.

- **Creation** through each framework's own registry, with N worlds, the device and the seed:
  mjlab's `load_env_cfg(id)` and `ManagerBasedRlEnv`; Isaac Lab's `parse_env_cfg` and `gymnasium.make`
  (with Isaac Sim started headless first, as its scripts do).
- **Observations:** group `policy` (Isaac Lab) or `actor` (mjlab) becomes our "policy", `critic` our
  "critic" (the policy group when there is none); other groups are not passed on. The framework's tensors
  are passed through as they are: the adapter adds no copy.
- **Steps:** actions are clipped to +-`env.action_clip` (0: the framework's own `clip_actions`, usually
  none). `truncated` is a time-out that is not also a termination; a finite-horizon task's time-outs are
  terminations. Neither framework returns the observation before an auto-reset, so `info["final_obs"]` is
  the post-reset observation (a warning says so once): time-out bootstrapping then uses the value of the
  next episode's first state. With `env.terminal_obs` (mjlab only) the env steps without auto-reset and
  the adapter resets the ended worlds itself after reading their last observation: exact bootstrapping.
- **Logs:** the framework's `extras["log"]` (episode reward sums, metrics) goes to `info["log"]`, with our
  Episode/return, Episode/length and Episode/terminated when episodes end.
- **Deploy contract** (`contract`), read from the managers: joint names and default pose of the entity
  `robot`, the joint-position action terms' scale and offset, the policy group's terms mapped onto our
  observation term registry (`robo_rl.terms.OBSERVATION_TERMS`) with their dims, scales, clips and history, step and
  physics dt, PD gains and torque limits of the actuators, the velocity-command ranges. A task with a term
  our deploy side cannot compute trains but cannot be exported (one-line error naming the term).
- **Checkpoints:** neither framework can save its simulator state, so a resumed run starts new episodes
  in every world (as `gym:<id>` tasks do); networks, optimisers and our RNGs resume exactly.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError, UserError, _f
from robo_rl.core.contract import ActionSpec, ActionTermSpec, DeployContract, ObsTerm
from robo_rl.terms import OBSERVATION_TERMS, TermContext, validate_contract

FRAMEWORKS = {"mjlab": "mjlab:", "isaaclab": "isaaclab:"}
"""Framework name -> task-name prefix."""

INSTALL_HINT = {
    "mjlab": "build its virtual environment with `bash scripts/setup_mjlab.sh` and run `.venv-mjlab/bin/robo-rl`",
    "isaaclab": "install Isaac Lab 3 (Python 3.12, a CUDA GPU; see docs/isaaclab.md) and robo_rl into its Python",
}

POLICY_GROUPS = ("policy", "actor")
"""Observation groups that become our "policy" group (Isaac Lab's name, then mjlab's)."""

# Observation term functions -> our vocabulary. Terms computed by a generic function (mjlab's
# `builtin_sensor`) map by the term's own name when that name is in the vocabulary.
JOINT_POSITION_ACTIONS = ("JointPositionAction",)
"""Action term classes whose targets are default (or offset) + scale * action: what the deploy side runs."""


@dataclass(frozen=True, kw_only=True)
class ExternalTaskConfig:
    """An Isaac Lab or mjlab environment as a task (task names `isaaclab:<id>`, `mjlab:<id>`)."""

    id: str = ""
    """The framework's task id, e.g. `Mjlab-Velocity-Flat-Unitree-Go1`; set from the task name and must equal it."""
    action_clip: float = _f(0.0, ge=0.0)
    """Raw actions are clipped to +-action_clip; 0 uses the framework's `clip_actions` (none for most tasks:
    SAC then needs `policy.action_bound`)."""
    episode_length_s: float = _f(0.0, ge=0.0)
    """Episode time limit in seconds; 0 keeps the task's own."""
    terminal_obs: bool = False
    """mjlab only: step without auto-reset and reset ended worlds right after, so `info["final_obs"]` holds the
    true last observation of each ended episode (exact time-out bootstrapping), at the cost of one more forward
    pass on steps where episodes end. Off: `final_obs` is the post-reset observation (see the module docstring)."""
    robot: str = ""
    """The deploy contract's robot name (matched against the hardware file); "" uses the last word of the id,
    lower-cased (`...-Unitree-Go1` -> `go1`)."""

    framework: ClassVar[str] = ""
    """`mjlab` or `isaaclab`, set by the task name's prefix."""
    task_id: ClassVar[str] = ""
    """The id of the task this config class belongs to."""

    def validate(self) -> None:
        if self.task_id and self.id != self.task_id:
            prefix = FRAMEWORKS[self.framework]
            raise ConfigError(f"config error: env.id = {self.id!r}: must be {self.task_id!r}, the id of task "
                              f"'{prefix}{self.task_id}' (choose another env with --task {prefix}<id>)")

    @property
    def robot_name(self) -> str:
        return self.robot or self.id.rsplit("-", 1)[-1].lower()


def external_task_entry(framework: str, env_id: str) -> tuple[type, type]:
    """(env class, config class) of task `<framework>:<env_id>`; ConfigError for an empty id."""
    if not env_id:
        raise ConfigError(f"task '{FRAMEWORKS[framework]}': expected {FRAMEWORKS[framework]}<task id>, e.g. "
                          "mjlab:Mjlab-Velocity-Flat-Unitree-Go1")
    cfg_cls = dataclasses.make_dataclass(
        "ExternalTaskConfig",
        [("id", str, dataclasses.field(default=env_id))],
        bases=(ExternalTaskConfig,),
        namespace={"task_id": env_id, "framework": framework, "__doc__": ExternalTaskConfig.__doc__},
        frozen=True,
        kw_only=True,
    )
    return IsaacLabVecEnv, cfg_cls


def _import_framework(framework: str, task: str) -> None:
    """UserError (one line, with the install hint) when the framework is not importable here."""
    import importlib.util

    module = "mjlab" if framework == "mjlab" else "isaaclab"
    if importlib.util.find_spec(module) is None:
        raise UserError(f"task {task!r} needs {framework}, which is not installed in this Python; "
                        f"{INSTALL_HINT[framework]}")


def make_framework_env(cfg: ExternalTaskConfig, num_envs: int, device: str, seed: int) -> tuple[Any, Any]:
    """(env, clip_actions) of `cfg.id` from the framework's registry: `num_envs` worlds on `device`, seeded."""
    task = f"{FRAMEWORKS[cfg.framework]}{cfg.id}"
    _import_framework(cfg.framework, task)
    if cfg.framework == "mjlab":
        import warp as wp

        from robo_rl.sim.mjmodel import configure_warp

        configure_warp(wp, "mjlab")  # kernels cached in an ignored folder, before mjlab compiles any
        import mjlab.tasks  # noqa: F401  (registers the tasks)
        from mjlab.envs import ManagerBasedRlEnv
        from mjlab.tasks.registry import list_tasks, load_env_cfg, load_rl_cfg

        if cfg.id not in list_tasks():
            raise ConfigError(f"unknown mjlab task {cfg.id!r} in task {task!r}; mjlab's tasks: "
                              f"{', '.join(list_tasks())}")
        env_cfg = load_env_cfg(cfg.id)
        env_cfg.scene.num_envs = num_envs
        env_cfg.seed = seed
        if cfg.episode_length_s:
            env_cfg.episode_length_s = cfg.episode_length_s
        if cfg.terminal_obs:
            env_cfg.auto_reset = False  # we reset ended worlds ourselves, after reading their last observation
        env = ManagerBasedRlEnv(cfg=env_cfg, device=str(device), render_mode="rgb_array")
        return env, load_rl_cfg(cfg.id).clip_actions
    return _make_isaaclab_env(cfg, num_envs, device, seed, task)  # pragma: no cover - needs Isaac Lab and a GPU


def _make_isaaclab_env(cfg: ExternalTaskConfig, num_envs: int, device: str, seed: int,
                       task: str) -> tuple[Any, Any]:  # pragma: no cover - needs Isaac Lab 3 and a GPU
    """Isaac Lab: start Isaac Sim headless (once per process), then make the task as its train scripts do."""
    from isaaclab.app import AppLauncher

    global _ISAAC_APP
    if _ISAAC_APP is None:
        _ISAAC_APP = AppLauncher(headless=True, device=str(device)).app
    import gymnasium
    import isaaclab_tasks  # noqa: F401  (registers the tasks)
    from isaaclab_tasks.utils import parse_env_cfg

    if cfg.id not in gymnasium.registry:
        raise ConfigError(f"unknown Isaac Lab task {cfg.id!r} in task {task!r}")
    if cfg.terminal_obs:
        raise ConfigError(f"config error: env.terminal_obs = true: task {task!r} is an Isaac Lab task, which always "
                          "resets inside step; terminal observations need mjlab")
    env_cfg = parse_env_cfg(cfg.id, device=str(device), num_envs=num_envs)
    env_cfg.seed = seed
    if cfg.episode_length_s:
        env_cfg.episode_length_s = cfg.episode_length_s
    env = gymnasium.make(cfg.id, cfg=env_cfg, render_mode="rgb_array")
    entry = gymnasium.spec(cfg.id).kwargs.get("rsl_rl_cfg_entry_point")
    clip = getattr(_load_entry(entry), "clip_actions", None) if entry else None
    return env, clip


_ISAAC_APP: Any = None


def _load_entry(entry: Any) -> Any:  # pragma: no cover - Isaac Lab only
    if isinstance(entry, str):
        import importlib

        module, _, name = entry.partition(":")
        entry = getattr(importlib.import_module(module), name)
    return entry() if callable(entry) else entry


class IsaacLabVecEnv:
    """An Isaac Lab-API environment (Isaac Lab 3 or mjlab) presented as our VecEnv (DESIGN.md §1).

    Args:
        cfg: the task's ExternalTaskConfig (its `id` names the framework's task).
        num_envs: number of worlds N.
        seed: the framework env's seed.
        num_threads, backend, nconmax, njmax: accepted for the common env signature; the framework brings its
            own simulator (mjlab: MuJoCo Warp; Isaac Lab: PhysX or Newton) and its own buffer sizes.
        device: the framework's device ("cpu" runs mjlab on Warp's CPU device; "cuda:0").

    Raises:
        UserError: the framework is not installed in this Python (with how to install it).
        ConfigError: the id is not one of the framework's tasks, or the env has no policy observation group.
    """

    def __init__(self, cfg: ExternalTaskConfig, num_envs: int, *, seed: int = 0, num_threads: int = 0,
                 backend: str = "mujoco_cpu", device: str = "cpu", nconmax: int | None = None,
                 njmax: int | None = None):
        cfg.validate()
        self.cfg = cfg
        self.task = f"{FRAMEWORKS[cfg.framework]}{cfg.id}"
        self.env, framework_clip = make_framework_env(cfg, num_envs, str(device), seed)
        u = self.unwrapped
        self.num_envs = int(u.num_envs)
        self.device = torch.device(u.device)
        groups = dict(u.observation_manager.group_obs_dim)
        self._policy_group = next((g for g in POLICY_GROUPS if g in groups), None)
        if self._policy_group is None:
            self.close()
            raise ConfigError(f"task {self.task!r} has no observation group {' or '.join(POLICY_GROUPS)} "
                              f"(groups: {', '.join(groups)}); the policy's observations must be one of them")
        self._critic_group = "critic" if "critic" in groups else self._policy_group
        for g in {self._policy_group, self._critic_group}:
            if len(groups[g]) != 1:
                self.close()
                raise ConfigError(f"task {self.task!r}: observation group {g!r} has shape {groups[g]}; our "
                                  "policies need one flat vector (concatenate_terms=True, flattened history)")
        self.obs_dims = {"policy": int(groups[self._policy_group][0]), "critic": int(groups[self._critic_group][0])}
        self.action_dim = int(u.action_manager.total_action_dim)
        clip = cfg.action_clip or framework_clip
        self.action_clip: float | None = float(clip) if clip else None
        self.dt = float(u.step_dt)
        self.max_episode_length = int(u.max_episode_length)
        self.finite_horizon = bool(getattr(u.cfg, "is_finite_horizon", False))
        self._episode_return = torch.zeros(self.num_envs, device=self.device)  # (N,)
        self._episode_length = torch.zeros(self.num_envs, device=self.device)  # (N,) steps
        self._obs: dict[str, Tensor] | None = None
        self._seeded = False
        self._warned_final_obs = False

    @property
    def unwrapped(self) -> Any:
        """The framework's own env (below any gymnasium wrappers)."""
        return getattr(self.env, "unwrapped", self.env)

    # ------------------------------------------------------------------ VecEnv API
    def _groups(self, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The framework's observation dict as ours: the same tensors under "policy" and "critic"."""
        return {"policy": obs[self._policy_group], "critic": obs[self._critic_group]}

    def reset(self, seed: int | None = None, *, random_start: bool = True) -> dict[str, Tensor]:
        """Reset every world (seeded with `seed` if given).

        `random_start`: spread the episode clocks uniformly over the time limit, as rsl_rl's
        `init_at_random_ep_len`, so that time-outs do not all happen at once.
        """
        obs, _ = self.env.reset(seed=seed) if seed is not None else self.env.reset()
        self._seeded = True
        u = self.unwrapped
        if random_start and self.max_episode_length > 1:
            u.episode_length_buf[:] = torch.randint_like(u.episode_length_buf, high=self.max_episode_length)
        self._episode_return.zero_()
        self._episode_length.zero_()
        self._obs = self._groups(obs)
        return self._obs

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """Apply actions (N, A), clipped to +-action_clip; ended worlds are reset inside by the framework.

        info holds "final_obs" (the ended worlds' last observations with `env.terminal_obs`, else the post-reset
        ones: see the module docstring), "log" (the
        framework's extras["log"] as floats, plus our Episode/* means over the episodes that ended) and
        "episode" ({"ids": (K,), "return": (K,), "length": (K,)}, empty if none ended).
        """
        if tuple(actions.shape) != (self.num_envs, self.action_dim):
            raise ValueError(f"actions have shape {tuple(actions.shape)}; expected {(self.num_envs, self.action_dim)}")
        actions = actions.to(self.device, torch.float32)
        if self.action_clip is not None:
            actions = actions.clamp(-self.action_clip, self.action_clip)
        obs, reward, terminated, truncated, extras = self.env.step(actions)
        terminated, truncated = terminated.to(torch.bool), truncated.to(torch.bool)
        if self.finite_horizon:  # the time limit is part of the task: nothing to bootstrap
            terminated, truncated = terminated | truncated, torch.zeros_like(truncated)
        truncated = truncated & ~terminated
        log = _floats(extras.get("log", {}))
        done = terminated | truncated
        ended = done.nonzero().squeeze(-1)  # (K,)
        if self.cfg.terminal_obs:  # obs are the ended worlds' last observations: keep them, then reset those worlds
            final = self._groups(obs)
            self._obs = final
            if ended.numel():
                reset_obs, reset_extras = self.env.reset(env_ids=ended)
                log.update(_floats(reset_extras.get("log", {})))  # the episode sums, logged when worlds reset
                # the reset rows from the reset; the others as the step observed them (a reset recomputes every
                # world's terms, with new noise)
                self._obs = {k: torch.where(done[:, None], v, final[k]) for k, v in self._groups(reset_obs).items()}
        else:
            self._obs = self._groups(obs)
            final = self._final_obs(extras)
        info: dict[str, Any] = {"final_obs": final, "log": log, "episode": {}}
        self._episode_return += reward
        self._episode_length += 1
        if ended.numel():
            returns, lengths = self._episode_return[ended], self._episode_length[ended]
            info["episode"] = {"ids": ended, "return": returns, "length": lengths}  # indexing copied them
            info["log"].update({
                "Episode/return": returns.mean().item(),
                "Episode/length": lengths.mean().item(),
                "Episode/length_s": lengths.mean().item() * self.dt,
                "Episode/terminated": terminated[ended].float().mean().item(),
            })
            self._episode_return[ended] = 0.0
            self._episode_length[ended] = 0.0
        return self._obs, reward, terminated, truncated, info

    def _final_obs(self, extras: dict[str, Any]) -> dict[str, Tensor]:
        """The observations before auto-reset where the framework provides them, else the current ones."""
        final = extras.get("final_obs") or extras.get("final_observation")
        if isinstance(final, dict) and self._policy_group in final:
            return self._groups(final)
        if not self._warned_final_obs:
            self._warned_final_obs = True
            warnings.warn(f"task {self.task!r}: the framework does not return the observation before an auto-reset; "
                          "time-out bootstrapping uses the post-reset observation", stacklevel=3)
        return self._obs

    def get_observations(self) -> dict[str, Tensor]:
        """The observations of the last `reset` or `step`."""
        if self._obs is None:
            return self.reset()
        return self._obs

    @property
    def contract(self) -> DeployContract:
        """The deploy contract read from the env's managers (see `framework_contract`)."""
        return framework_contract(self.unwrapped, robot=self.cfg.robot_name, task=self.task,
                                  policy_group=self._policy_group, action_clip=self.action_clip)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Only the seeding flag: neither framework can save its simulator state (see `load_state_dict`)."""
        return {"seeded": self._seeded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start a new episode in every world: the episodes of the interrupted run cannot be restored."""
        self.reset(seed=None)
        self._seeded = bool(state["seeded"])

    def render(self, world: int = 0, *, width: int = 320, height: int = 240) -> Any:
        """RGB frame (H, W, 3) uint8 from the framework's renderer (its own resolution and world choice)."""
        frame = self.env.render()
        if frame is None:
            raise UserError(f"task {self.task!r} cannot render frames (its env has no rgb_array render mode)")
        return frame if not isinstance(frame, Tensor) else frame.cpu().numpy()

    def close(self) -> None:
        self.env.close()


def _floats(log: dict[str, Any]) -> dict[str, float]:
    """A framework log dict (tensors or numbers) as plain floats."""
    return {k: float(v.float().mean().item() if isinstance(v, Tensor) else v) for k, v in log.items()}


# ---------------------------------------------------------------------- deploy contract
def _values(x: Any, n: int) -> list[float]:
    """A scalar, (n,) or (N, n) tensor or sequence as n floats (the first world's row)."""
    if isinstance(x, Tensor):
        x = x.detach().cpu()
        x = x[0] if x.ndim == 2 else x
        x = x.tolist() if x.ndim else [float(x)] * n
    elif isinstance(x, (int, float)):
        x = [float(x)] * n
    return [float(v) for v in x]


def _one_scale(scale: Any, where: str) -> float:
    """An observation term's scale as one number (ours is per term); ContractError-style ValueError otherwise."""
    if scale is None:
        return 1.0
    values = _values(scale, 1) if not isinstance(scale, (list, tuple)) else [float(v) for v in scale]
    if max(values) - min(values) > 1e-9 * max(1.0, abs(values[0])):
        raise ValueError(f"{where}: scale {values} differs per dimension; the deploy contract has one scale per term")
    return float(values[0])


def _symmetric_clip(clip: Any, where: str) -> float | None:
    """(low, high) with low == -high as high; None for no clip or an infinite one."""
    if clip is None:
        return None
    low, high = float(clip[0]), float(clip[1])
    if math.isinf(high) and math.isinf(low):
        return None
    if not math.isclose(-low, high):
        raise ValueError(f"{where}: clip ({low:g}, {high:g}) is not symmetric; the deploy contract clips to +-c")
    return high


def vocabulary_name(term_name: str, func_name: str, dim: int, num_joints: int) -> str | None:
    """Our registered name of a framework observation term, or None when the deploy side has no equivalent.

    A registered term whose record lists `func_name` among its `framework_names`, else one registered under the
    framework term's own name (a generic function, e.g. mjlab's builtin_sensor); either way the size must be the
    term's (a per-joint term over a subset of the joints, or a command other than a 3-D twist, has none).
    """
    found = [name for name, r in OBSERVATION_TERMS.items() if func_name in r.framework_names]
    if not found and term_name in OBSERVATION_TERMS:
        found = [term_name]
    if not found:
        return None
    record = OBSERVATION_TERMS.get(found[0])
    if record.numpy is None:
        return None  # simulation only: the deploy side does not compute it
    expected = record.expected_dim(TermContext(num_joints=num_joints, action_dim=None))
    return found[0] if expected is None or dim == expected else None


def _term_cfg(om: Any, group: str, name: str) -> Any:
    """The config of observation term `name` of `group` (mjlab's `get_term_cfg`, else the manager's term list)."""
    if callable(getattr(om, "get_term_cfg", None)):
        return om.get_term_cfg(group, name)
    return om._group_obs_term_cfgs[group][list(om.active_terms[group]).index(name)]  # pragma: no cover - Isaac Lab


def _func_name(func: Any) -> str:
    return getattr(func, "__name__", type(func).__name__)


def observation_terms(u: Any, group: str, num_joints: int, where: str) -> tuple[ObsTerm, ...]:
    """The policy group's terms as contract terms, in order (ValueError naming a term without an equivalent)."""
    om = u.observation_manager
    names = list(om.active_terms[group])
    dims = om.group_obs_term_dim[group]
    group_cfg = om.cfg[group] if isinstance(om.cfg, dict) else getattr(om.cfg, group, None)
    group_history = getattr(group_cfg, "history_length", None)
    terms = []
    for name, shape in zip(names, dims, strict=True):
        tcfg = _term_cfg(om, group, name)
        at = f"{where}: observation term {name!r}"
        history = int(group_history if group_history is not None else (tcfg.history_length or 0)) or 1
        dim = int(math.prod(shape)) // history if getattr(tcfg, "flatten_history_dim", True) else -1
        vocab = vocabulary_name(name, _func_name(tcfg.func), dim, num_joints)
        if vocab is None or dim <= 0:
            raise ValueError(f"{at} ({_func_name(tcfg.func)}, {dim} values) has no deploy-side equivalent in "
                             f"robo_rl's vocabulary ({', '.join(OBSERVATION_TERMS.names())}); the task trains but "
                             "cannot be exported for deployment")
        terms.append(ObsTerm(name=vocab, dim=dim, scale=_one_scale(tcfg.scale, at),
                             clip=_symmetric_clip(tcfg.clip, at), history=history))
    return tuple(terms)


def action_terms(u: Any, joint_names: list[str], default: list[float], where: str) -> tuple[ActionTermSpec, ...]:
    """The action manager's terms as contract terms (only joint-position terms can be deployed)."""
    am = u.action_manager
    out = []
    for name in am.active_terms:
        term = am.get_term(name)
        kind = type(term).__name__
        if kind not in JOINT_POSITION_ACTIONS:
            raise ValueError(f"{where}: action term {name!r} is a {kind}; the deploy side runs joint-position "
                             "actions only, so the task trains but cannot be exported for deployment")
        joints = list(getattr(term, "_target_names", None) or term._joint_names)
        n = len(joints)
        scale = _values(term._scale, n)
        offset = _values(term._offset, n)
        defaults = [default[joint_names.index(j)] for j in joints]
        if getattr(term.cfg, "use_default_offset", False) and all(
                math.isclose(o, d, abs_tol=1e-6) for o, d in zip(offset, defaults, strict=True)):
            out.append(ActionTermSpec(kind="joint_position_offset", joints=tuple(joints), scale=tuple(scale)))
        else:
            out.append(ActionTermSpec(kind="joint_position", joints=tuple(joints), scale=tuple(scale),
                                      params={"offset": offset}))
    return tuple(out)


def actuator_gains(u: Any, robot: Any, joint_names: list[str]) -> tuple[list[float], list[float], list[float]]:
    """(kp, kd, torque limits) per joint, from the framework's actuator data.

    Isaac Lab keeps them in the articulation data (`joint_stiffness`, `joint_damping`, `joint_effort_limits`);
    mjlab in the compiled MuJoCo model's position actuators (kp = gainprm[0], kd = -biasprm[2], limits
    from forcerange), found by the joint each actuator drives.
    """
    data = robot.data
    if hasattr(data, "joint_stiffness"):  # pragma: no cover - Isaac Lab
        n = len(joint_names)
        limits = getattr(data, "joint_effort_limits", None)  # Isaac Lab 2.1+; joint_effort_limit before
        return (_values(data.joint_stiffness, n), _values(data.joint_damping, n),
                _values(limits if limits is not None else data.joint_effort_limit, n))
    import mujoco

    m = u.sim.mj_model
    by_joint = {}
    for a in range(m.nu):
        if m.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT:
            name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, int(m.actuator_trnid[a, 0]))
            by_joint[name.split("/")[-1]] = a
    missing = [j for j in joint_names if j not in by_joint]
    if missing:
        raise ValueError(f"joint(s) {', '.join(missing)} have no joint actuator in the model")
    ids = [by_joint[j] for j in joint_names]
    kp = [float(m.actuator_gainprm[a, 0]) for a in ids]
    kd = [float(-m.actuator_biasprm[a, 2]) for a in ids]
    limits = []
    for a, j in zip(ids, joint_names, strict=True):
        if not m.actuator_forcelimited[a]:
            raise ValueError(f"the actuator of joint {j} has no force limit; the deploy contract needs torque limits")
        limits.append(float(max(abs(m.actuator_forcerange[a, 0]), abs(m.actuator_forcerange[a, 1]))))
    return kp, kd, limits


def command_extra(u: Any, group: str) -> dict[str, Any]:
    """The velocity command's ranges (lin_vel_x, lin_vel_y, ang_vel_z), read by `contract.command_ranges`."""
    om = u.observation_manager
    for name in om.active_terms[group]:
        tcfg = _term_cfg(om, group, name)
        if _func_name(tcfg.func) != "generated_commands":
            continue
        command = u.command_manager.get_term(tcfg.params["command_name"])
        ranges = getattr(command.cfg, "ranges", None)
        if all(hasattr(ranges, k) for k in ("lin_vel_x", "lin_vel_y", "ang_vel_z")):
            return {k: [float(v) for v in getattr(ranges, k)] for k in ("lin_vel_x", "lin_vel_y", "ang_vel_z")}
    return {}


def framework_contract(u: Any, *, robot: str, task: str, policy_group: str,
                       action_clip: float | None) -> DeployContract:
    """The deploy contract of an Isaac Lab-API env `u` (its entity "robot", action and observation managers).

    Raises:
        UserError: one line naming what the deploy side cannot run (a non-joint-position action, an
            observation term outside our vocabulary, a per-dimension scale, an asymmetric clip).
    """
    where = f"task {task!r}"
    try:
        try:
            entity = u.scene["robot"]
        except KeyError:
            raise ValueError("the scene has no entity 'robot', whose joints the deploy contract describes") from None
        joint_names = [j.split("/")[-1] for j in entity.joint_names]
        default = _values(entity.data.default_joint_pos, len(joint_names))
        kp, kd, limits = actuator_gains(u, entity, joint_names)
        contract = DeployContract(
            robot=robot,
            joint_names=tuple(joint_names),
            default_joint_pos=tuple(default),
            kp=tuple(kp),
            kd=tuple(kd),
            torque_limits=tuple(limits),
            action=ActionSpec(terms=action_terms(u, joint_names, default, where), clip=action_clip),
            observation=observation_terms(u, policy_group, len(joint_names), where),
            policy_dt=float(u.step_dt),
            physics_dt=float(u.physics_dt),
            extra={"framework_task": task, **command_extra(u, policy_group)},
        )
        validate_contract(contract)
    except ValueError as exc:
        raise UserError(f"{exc}" if str(exc).startswith(where) else f"{where}: {exc}") from None
    return contract
