"""Operator commands (velocity command, reach target): checked against the ranges the policy was trained on.

One place validates every operator input, whether it comes from the command line, a keyboard thread or
a ROS topic: `OperatorCommands.__setitem__` (what `PolicyStep.set_command` and
`session.policy.commands[name] = value` call). Non-finite or misshapen input raises ValueError and
changes nothing; input outside the trained range is clamped into it, with one warning line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, MutableMapping

import numpy as np

from robo_rl.core.contract import DeployContract
from robo_rl.terms import OBSERVATION_TERMS
from robo_rl.terms.command_ranges import command_ranges


def _fmt(a: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:g}" for v in a) + "]"


def check_command(name: str, value: object, dim: int,
                  bounds: tuple[tuple[float, ...], tuple[float, ...]] | None) -> tuple[np.ndarray, str | None]:
    """Validate one operator command and clamp it to its trained range.

    Args:
        name: observation term name (e.g. "velocity_command").
        value: the operator's input, `dim` numbers.
        dim: the term's size.
        bounds: (low, high) trained range, each `dim` numbers, or None when the contract records none.

    Returns:
        ((dim,) float64 command to use, one-line warning when it was clamped, else None).

    Raises:
        ValueError: naming the command when the value is not `dim` finite numbers.
    """
    try:
        arr = np.array(value, dtype=np.float64).reshape(-1)  # fresh copy: the caller's array stays theirs
    except (TypeError, ValueError):
        raise ValueError(f"{name} = {value!r}: must be {dim} finite numbers") from None
    if arr.shape != (dim,):
        raise ValueError(f"{name} = {value!r}: must be {dim} finite numbers, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} = {_fmt(arr)}: non-finite input refused (must be {dim} finite numbers)")
    if bounds is None:
        return arr, None
    low, high = np.asarray(bounds[0]), np.asarray(bounds[1])  # (dim,) each
    clamped = np.clip(arr, low, high)
    if np.array_equal(clamped, arr):
        return arr, None
    return clamped, (f"{name} {_fmt(arr)} is outside the range the policy was trained on "
                     f"(low {_fmt(low)}, high {_fmt(high)}); clamped to {_fmt(clamped)}")


def _print_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


class OperatorCommands(MutableMapping):
    """The operator inputs of one policy, by observation term name; every assignment is checked.

    Args:
        contract: the policy's contract (which command terms it observes, their trained ranges).
        warn: receives one line per clamped input (default: printed to stderr).

    Starts neutral: stand still (zero velocity, clamped into the trained range) and the centre of the
    trained target box. Assigning a name the policy does not observe, a non-finite or misshapen value
    raises ValueError (the old value stays); a value outside the trained range is clamped and warned.
    """

    def __init__(self, contract: DeployContract, warn: Callable[[str], None] | None = None):
        records = {t.name: OBSERVATION_TERMS.get(t.name) for t in contract.observation if t.name in OBSERVATION_TERMS}
        self._dims = {t.name: t.dim for t in contract.observation if t.name in records and records[t.name].command}
        self._ranges = command_ranges(contract)  # ValueError on a malformed recorded range
        self._warn = warn or _print_warning
        self._values: dict[str, np.ndarray] = {}
        for name in self._dims:
            trained = self._ranges.get(name)
            start = records[name].command_neutral
            neutral = np.zeros(self._dims[name]) if start is None else np.asarray(start(trained), dtype=np.float64)
            self._values[name] = neutral

    @property
    def ranges(self) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """Trained (low, high) range of each command term the contract records."""
        return dict(self._ranges)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._values[name]

    def __setitem__(self, name: str, value: object) -> None:
        if name not in self._dims:
            inputs = ", ".join(self._dims) or "none"
            raise ValueError(f"operator command {name!r}: this policy does not take it (its inputs: {inputs})")
        arr, warning = check_command(name, value, self._dims[name], self._ranges.get(name))
        if warning is not None:
            self._warn(warning)
        self._values[name] = arr

    def __delitem__(self, name: str) -> None:
        raise ValueError(f"operator command {name!r} cannot be removed (the policy observes it); set it instead")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"OperatorCommands({ {k: v.tolist() for k, v in self._values.items()} })"
