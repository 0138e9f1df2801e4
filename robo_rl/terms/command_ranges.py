"""The operator-command ranges a policy was trained on, read from its contract's `extra` by each command term."""

from __future__ import annotations

from typing import Any

from robo_rl.core.contract import DeployContract, finite_number
from robo_rl.terms.records import OBSERVATION_TERMS

Range = tuple[tuple[float, ...], tuple[float, ...]]


def interval(extra: dict[str, Any], key: str) -> tuple[float, float]:
    """`extra[key]` as (low, high); ValueError naming the field unless it is [low, high], finite, low <= high."""
    v = extra.get(key)
    if not isinstance(v, (list, tuple)) or len(v) != 2 or not all(finite_number(x) for x in v) or v[0] > v[1]:
        raise ValueError(f"contract extra.{key} = {v!r}: must be [low, high], finite, low <= high")
    return float(v[0]), float(v[1])


def range_pair(extra: dict[str, Any], low_key: str, high_key: str, dim: int) -> Range:
    """(`extra[low_key]`, `extra[high_key]`) as `dim`-vectors; ValueError naming the field when malformed."""
    low, high = extra.get(low_key), extra.get(high_key)
    for key, v in ((low_key, low), (high_key, high)):
        if not isinstance(v, (list, tuple)) or len(v) != dim or not all(finite_number(x) for x in v):
            raise ValueError(f"contract extra.{key} = {v!r}: must be {dim} finite numbers")
    if any(lo > hi for lo, hi in zip(low, high, strict=True)):
        raise ValueError(f"contract extra.{low_key} = {list(low)} exceeds extra.{high_key} = {list(high)}")
    return tuple(float(x) for x in low), tuple(float(x) for x in high)


def command_ranges(contract: DeployContract) -> dict[str, Range]:
    """The operator-command ranges the policy was trained on, by observation term name.

    Each command term the policy observes reads its range from `contract.extra` (`command_range` of its record);
    a command term whose range the contract does not record is absent.

    Returns:
        {term: (low, high)}, low and high tuples of the term's size.

    Raises:
        ValueError: naming the `extra` field when a recorded range is malformed (non-finite, wrong size,
            low > high).
    """
    extra = contract.extra or {}
    out: dict[str, Range] = {}
    for t in contract.observation:
        record = OBSERVATION_TERMS.get(t.name) if t.name in OBSERVATION_TERMS else None
        if record is None or not record.command or record.command_range is None or t.name in out:
            continue
        found = record.command_range(extra)
        if found is not None:
            out[t.name] = found
    return out
