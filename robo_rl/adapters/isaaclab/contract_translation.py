"""The deploy contract of an Isaac Lab-API env, read from its managers: joint names and default pose of the entity
`robot`, the joint-position action terms' scale and offset, the policy group's terms mapped onto our observation
term registry (`robo_rl.terms.OBSERVATION_TERMS`, see `vocabulary_name`) with their dims, scales, clips and history,
step and physics dt, PD gains and torque limits of the actuators, the velocity-command ranges. A term the deploy side
cannot compute is one line naming it.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from robo_rl.core.config import UserError
from robo_rl.core.contract import ActionSpec, ActionTermSpec, DeployContract, ObsTerm
from robo_rl.terms import OBSERVATION_TERMS, TermContext, validate_contract

JOINT_POSITION_ACTIONS = ("JointPositionAction",)
"""Action term classes whose targets are default (or offset) + scale * action: what the deploy side runs."""



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
    import mujoco  # mjlab's MuJoCo (its own virtual environment)

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
