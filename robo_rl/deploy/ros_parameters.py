"""The policy node's parameters without rclpy: their descriptors, the RuntimeConfig they make, and the changes a
running node accepts.

Every parameter is read once, at configure. A change while the node is configured (inactive or active) would do
nothing until the next configure, so the node's set-parameters callback refuses it with the reason instead of
accepting it silently (`ros2 param set /robo_rl_policy dry_run false` on an active node used to "succeed" and change
nothing); to change one: cleanup, set, configure. `hardware_config` and `command_interface` are read-only for the
node's life (ros_interface.READ_ONLY_PARAMETERS). Values are checked with RuntimeConfig's own validation, one line.
Names and defaults: robo_rl.deploy.ros_interface (PARAMETERS, PARAMETER_DESCRIPTIONS).
"""

from __future__ import annotations

from collections.abc import Mapping

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy.reset_modules import RESET_MODULES
from robo_rl.deploy.runtime_config import RuntimeConfig

LIFECYCLE_STATES = ("unconfigured", "inactive", "active", "finalized")
"""Primary lifecycle states (lifecycle_msgs/State labels)."""
ALLOWED_VALUES = {
    "command_interface": ("",) + names.COMMAND_INTERFACES,
    "reset_module": tuple(RESET_MODULES),
}
"""Parameters with a closed set of values (shown in their descriptors)."""


def descriptor_fields(name: str) -> dict[str, object]:
    """Keyword arguments of the rcl_interfaces/ParameterDescriptor of parameter `name` (ValueError if unknown)."""
    if name not in names.PARAMETERS:
        known = ", ".join(names.PARAMETERS)
        raise ValueError(f"parameter {name!r}: not a parameter of the policy node; known: {known}")
    allowed = ALLOWED_VALUES.get(name)
    constraints = "one of: " + ", ".join(repr(v) for v in allowed) if allowed else ""
    return {"description": names.PARAMETER_DESCRIPTIONS[name], "read_only": name in names.READ_ONLY_PARAMETERS,
            "additional_constraints": constraints}


def runtime_config(values: Mapping[str, object]) -> RuntimeConfig:
    """The RuntimeConfig of the node's parameter values (missing ones: the defaults); not yet validated.

    An empty `command_interface` means the hardware file's (`transport.dds`): None in RuntimeConfig.
    """
    v = {**names.PARAMETERS, **values}
    return RuntimeConfig(policy_path=v["policy_path"], hardware_config=v["hardware_config"],
                         command_interface=v["command_interface"] or None, dry_run=v["dry_run"],
                         cmd_vel_timeout_s=v["cmd_vel_timeout_s"], diagnostics_period_s=v["diagnostics_period_s"],
                         reset_module=v["reset_module"], rewards=split_reward_specs(v["rewards"]),
                         realtime_priority=v["realtime_priority"],
                         estop_timeout_s=v["estop_timeout_s"])


def split_reward_specs(text: object) -> tuple[str, ...]:
    """The `rewards` parameter ("spec;spec", spaces allowed; a spec's own options are comma-separated) as specs."""
    if not isinstance(text, str):
        raise TypeError(f"rewards = {text!r}: expected a string of ';'-separated reward specs")
    return tuple(part.strip() for part in text.split(";") if part.strip())


def lifecycle_state(configured: bool, active: bool) -> str:
    """The lifecycle state label of a node that is (or not) configured and active."""
    return "active" if active else "inactive" if configured else "unconfigured"


def refuse_change(changes: Mapping[str, object], current: Mapping[str, object], state: str) -> str | None:
    """None when the node accepts setting `changes` ({name: value}) in lifecycle `state`, else the one-line reason.

    Args:
        changes: the parameters being set, with their new values.
        current: every parameter's current value.
        state: the node's lifecycle state (LIFECYCLE_STATES).
    """
    ours = {k: v for k, v in changes.items() if k in names.PARAMETERS}  # use_sim_time & co. are rclpy's business
    if not ours:
        return None
    fixed = [k for k in ours if k in names.READ_ONLY_PARAMETERS]
    if fixed:
        return f"{', '.join(fixed)}: read-only, set by the launch (relaunch the node to change it)"
    if state != "unconfigured":
        return (f"{', '.join(ours)}: read at configure, so setting it while {state} would have no effect; cleanup "
                f"(ros2 lifecycle set /{names.POLICY_NODE} cleanup), set it, then configure again")
    try:
        runtime_config({**current, **ours}).validate()
    except ValueError as exc:
        return str(exc)
    except TypeError as exc:  # a value of another type than the parameter's
        return f"{', '.join(ours)}: {exc}"
    return None
