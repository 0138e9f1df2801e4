"""Task instructions: texts that each name one goal, split into a `train` group and a `heldout` group.

A language-conditioned task (arm-pick-place-vision) gives every goal several phrasings. Training draws each
episode's phrasing from the `train` group; the `heldout` group is never seen in training and measures whether a
policy follows the meaning of an instruction rather than its exact words. The set travels in the deploy
contract (`to_extra` / `from_extra`), so the robot side, which imports no task code, turns an operator's text
into the index the policy was trained with (`index_of`) and refuses a text it does not know with one line.

Pure Python: the task side (torch) and the robot side (numpy) both import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SPLITS = ("train", "heldout")
"""The groups an instruction belongs to."""
SPLIT_CHOICES = (*SPLITS, "all")
"""What a task config may draw from: one group or both."""
EXTRA_KEYS = ("instructions", "instruction_goal", "instruction_heldout")
"""The deploy contract's `extra` keys of an instruction set: texts, each one's goal name, each one held out or not."""


@dataclass(frozen=True)
class InstructionSet:
    """Instruction texts in a fixed order; text i names goal `goals[i]` and belongs to group `splits[i]`.

    Attributes:
        texts: every instruction, unique; a policy's "text" observation is an index into it.
        goals: (I,) index into `goal_names` of the goal each text names.
        splits: (I,) "train" or "heldout".
        goal_names: the goals (e.g. cube colours), in goal-index order.
    """

    texts: tuple[str, ...]
    goals: tuple[int, ...]
    splits: tuple[str, ...]
    goal_names: tuple[str, ...]

    def __post_init__(self) -> None:
        n = len(self.texts)
        if n == 0:
            raise ValueError("instruction set texts = []: expected at least one instruction")
        if len(self.goals) != n or len(self.splits) != n:
            raise ValueError(f"instruction set: {n} texts but {len(self.goals)} goals and {len(self.splits)} splits")
        dupes = sorted({t for t in self.texts if self.texts.count(t) > 1})
        if dupes:
            raise ValueError(f"instruction set texts: {dupes[0]!r} appears more than once; texts must be unique")
        for i, (goal, split) in enumerate(zip(self.goals, self.splits, strict=True)):
            if not 0 <= goal < len(self.goal_names):
                raise ValueError(f"instruction set goals[{i}] = {goal}: expected 0..{len(self.goal_names) - 1}")
            if split not in SPLITS:
                raise ValueError(f"instruction set splits[{i}] = {split!r}: expected one of {list(SPLITS)}")

    @classmethod
    def from_templates(cls, goal_names: Sequence[str], train: Sequence[str], heldout: Sequence[str]) -> InstructionSet:
        """Every template filled in for every goal, template-major: text p * G + g is template p for goal g, the
        `train` templates first. Templates name the goal as `{goal}`: "put the {goal} cube on the green marker".

        Template-major keeps the first G texts (the first train template) in goal order, so for a one-template
        set the instruction index is the goal index.
        """
        texts, goals, splits = [], [], []
        for split, templates in (("train", train), ("heldout", heldout)):
            for template in templates:
                if "{goal}" not in template:
                    raise ValueError(f"instruction template {template!r}: must name the goal as {{goal}}")
                for g, name in enumerate(goal_names):
                    texts.append(template.format(goal=name))
                    goals.append(g)
                    splits.append(split)
        return cls(tuple(texts), tuple(goals), tuple(splits), tuple(goal_names))

    def goal_of(self, index: int) -> int:
        """The goal index that instruction `index` names."""
        return self.goals[self._check(index)]

    def split_of(self, index: int) -> str:
        """The group ("train" or "heldout") of instruction `index`."""
        return self.splits[self._check(index)]

    def index_of(self, text: str) -> int:
        """The index of the instruction whose text is exactly `text`.

        Raises:
            ValueError: one line naming `text` and a few of the instructions there are.
        """
        try:
            return self.texts.index(text)
        except ValueError:
            shown = ", ".join(repr(t) for t in self.texts[: min(3, len(self.goal_names))])
            raise ValueError(f"instruction {text!r} is not one of the {len(self.texts)} this policy knows "
                             f"(e.g. {shown}, ...)") from None

    def indices(self, split: str) -> tuple[int, ...]:
        """Indices of the instructions of `split` ("train", "heldout" or "all"), in order."""
        _check_split(split)
        return tuple(i for i, s in enumerate(self.splits) if split in ("all", s))

    def by_goal(self, split: str) -> tuple[tuple[int, ...], ...]:
        """(G, P) instruction indices of `split` per goal; every goal has the same number P of them.

        Raises:
            ValueError: a goal has no instruction in `split`, or goals have different numbers of them.
        """
        rows = tuple(tuple(i for i in self.indices(split) if self.goals[i] == g) for g in range(len(self.goal_names)))
        counts = sorted({len(r) for r in rows})
        if counts[0] == 0 or len(counts) > 1:
            raise ValueError(f"instruction set split {split!r}: phrasings per goal = {[len(r) for r in rows]}; "
                             "every goal needs the same number (at least 1)")
        return rows

    def to_extra(self) -> dict[str, Any]:
        """The set as deploy-contract `extra` entries (JSON values)."""
        return {"instructions": list(self.texts),
                "instruction_goal": [self.goal_names[g] for g in self.goals],
                "instruction_heldout": [s == "heldout" for s in self.splits]}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> InstructionSet:
        """The set a deploy contract's `extra` carries (see `to_extra`); goals are numbered in order of first
        appearance. ValueError naming a missing or malformed key."""
        for key in EXTRA_KEYS:
            if not isinstance(extra.get(key), list):
                raise ValueError(f"contract extra[{key!r}] = {extra.get(key)!r}: expected a list (the policy's "
                                 f"instruction set: {', '.join(EXTRA_KEYS)})")
        names = list(dict.fromkeys(extra["instruction_goal"]))
        splits = tuple("heldout" if h else "train" for h in extra["instruction_heldout"])
        return cls(tuple(extra["instructions"]), tuple(names.index(g) for g in extra["instruction_goal"]), splits,
                   tuple(names))

    def _check(self, index: int) -> int:
        index = int(index)  # a numpy or 0-d torch integer too
        if not 0 <= index < len(self.texts):
            raise ValueError(f"instruction index {index}: expected 0..{len(self.texts) - 1}")
        return index


def _check_split(split: str) -> None:
    if split not in SPLIT_CHOICES:
        raise ValueError(f"instruction split {split!r}: expected one of {list(SPLIT_CHOICES)}")
