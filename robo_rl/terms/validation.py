"""A deploy contract checked against the term registries: every observation term known and of its size, every
action term of a known kind with exactly its parameters."""

from __future__ import annotations

from robo_rl.core.contract import ActionSpec, DeployContract, validate_action_structure
from robo_rl.terms.records import ACTION_TERMS, OBSERVATION_TERMS, TermContext


def validate_contract(contract: DeployContract) -> None:
    """`contract.validate()` (its structure), then its observation and action terms against the registries.

    Raises:
        ValueError: one line naming the field: a term name outside the registry (input terms such as
            `image:<camera>` belong to `contract.inputs`), a dim other than the term's size, an action term of an
            unknown kind, with other params than its schema's or params its kind refuses.
    """
    contract.validate()
    validate_action(contract.action, contract.joint_names)
    context = TermContext(num_joints=len(contract.joint_names), action_dim=contract.action.dim)
    for i, t in enumerate(contract.observation):
        where = f"contract observation[{i}] ({t.name!r})"
        if t.name not in OBSERVATION_TERMS:
            raise ValueError(f"{where}: unknown term name; allowed: {', '.join(OBSERVATION_TERMS.names())}")
        expected = OBSERVATION_TERMS.get(t.name).expected_dim(context)
        if expected is not None and t.dim != expected:
            raise ValueError(f"{where}: dim = {t.dim}: the term has {expected} entries")


def validate_action(action: ActionSpec, joint_names: tuple[str, ...]) -> None:
    """Check the action terms against the contract's joints and their kinds; ValueError (one line) naming the term
    and field.

    Structure first (`validate_action_structure`: joints driven once each, finite scales), then per term: a
    registered kind, exactly the params of its schema, and its kind's own checks (scale size, param values).
    """
    validate_action_structure(action, joint_names)
    for i, term in enumerate(action.terms):
        at = f"contract action.terms[{i}]"
        if term.kind not in ACTION_TERMS:
            raise ValueError(f"{at}: kind = {term.kind!r}: allowed values are {', '.join(ACTION_TERMS.names())}")
        record = ACTION_TERMS.get(term.kind)
        at = f"{at} ({term.kind})"
        if sorted(term.params) != sorted(record.params):
            keys = ", ".join(record.params) or "none"
            raise ValueError(f"{at}: params must have exactly the keys {keys} (got "
                             f"{', '.join(sorted(term.params)) or 'none'})")
        record.check(term, at)
