"""A task's action terms: where each one's raw action columns and joints are, and the joint targets they give.

The task declares its terms as contract specs (`ActionTermSpec`, built with the `*_spec` helpers of each term's
module in `robo_rl.terms`); each is built once by its kind's torch builder from the term registry, with its
constants as tensors, and on every step maps its raw action columns (N, dim) and its joints' state to targets
(N, J_t). The robot side builds the numpy twins of the same specs (`robo_rl.deploy.actions.ActionMap`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError
from robo_rl.core.contract import ActionSpec, ActionTermSpec
from robo_rl.terms import ACTION_TERMS, validate_action


def make_term(spec: ActionTermSpec, default: Tensor) -> Any:
    """The sim term of a spec (its kind's `build_torch`); `default` (J_t,) is the default pose of its joints, and
    its dtype and device are the term's."""
    return ACTION_TERMS.get(spec.kind).build_torch(spec, default)


def as_slice(index: Tensor) -> slice | Tensor:
    """`index` as a slice when it is a run of consecutive integers, else unchanged."""
    start = int(index[0])
    if torch.equal(index, torch.arange(start, start + len(index))):
        return slice(start, start + len(index))
    return index


class ActionManager:
    """The action terms of a task, in raw-action column order.

    Args:
        specs: the terms (validated here against `joint_names` and the registry; ConfigError naming the field).
        joint_names: the task's joints, in the order of its joint targets (N, J).
        default_joint_pos: (J,) their default pose (float32; the terms' dtype and device).
        act_columns: (J,) each joint's actuator column in the backend's ctrl (where previous targets are read).

    Attributes:
        specs, terms: the specs and their sim terms; dim: raw action columns A.
    """

    def __init__(self, specs: tuple[ActionTermSpec, ...], joint_names: tuple[str, ...], default_joint_pos: Tensor,
                 act_columns: Tensor):
        try:
            validate_action(ActionSpec(terms=specs), tuple(joint_names))
        except ValueError as exc:
            raise ConfigError(f"config error: {exc}") from None
        self.specs = specs
        self.num_joints = len(joint_names)
        self._act_columns = act_columns  # (J,)
        index = {n: i for i, n in enumerate(joint_names)}
        self.layout: list[tuple[Any, bool, slice, slice | Tensor]] = []  # (term, uses prev. target, columns, joints)
        start = 0
        for spec in specs:
            joints = as_slice(torch.tensor([index[j] for j in spec.joints]))  # (J_t,) positions in joint_names
            uses_prev = ACTION_TERMS.get(spec.kind).uses_previous_target
            self.layout.append((make_term(spec, default_joint_pos[joints]), uses_prev, slice(start, start + spec.dim),
                                joints))
            start += spec.dim
        self.terms = tuple(term for term, _, _, _ in self.layout)
        self.dim = start
        first = self.layout[0][3]
        whole = isinstance(first, slice) and first == slice(0, self.num_joints)
        single = len(self.layout) == 1 and whole and not self.layout[0][1]
        self._single_term = self.terms[0] if single else None  # one stateless term over every joint: no copies

    def targets(self, action: Tensor, q: Tensor, ctrl: Tensor) -> Tensor:
        """Joint position targets (N, J) of clipped raw actions (N, A), measured joints q (N, J) and the actuators'
        current targets ctrl (N, nu): each term maps its own columns."""
        if self._single_term is not None:
            return self._single_term.targets(action, q, None)
        out = torch.empty(action.shape[0], self.num_joints)  # (N, J)
        for term, uses_prev, cols, joints in self.layout:
            prev = None
            if uses_prev:  # e.g. the gripper moves on from the targets it was last given
                prev = ctrl[:, self._act_columns[joints]].to(torch.float32)  # (N, J_t)
            out[:, joints] = term.targets(action[:, cols], q[:, joints], prev)
        return out
