"""The instruction set: goal and split of each text, text -> index with one-line errors, the contract round trip."""

import pytest

from robo_rl.core.instructions import InstructionSet


def small() -> InstructionSet:
    return InstructionSet.from_templates(["red", "blue"], train=["put the {goal} cube down", "move {goal}"],
                                         heldout=["grab the {goal} one"])


def test_templates_fill_in_every_goal_template_major():
    s = small()
    assert s.texts == ("put the red cube down", "put the blue cube down", "move red", "move blue", "grab the red one",
                       "grab the blue one")
    assert [s.goal_of(i) for i in range(6)] == [0, 1, 0, 1, 0, 1]
    assert [s.split_of(i) for i in range(6)] == ["train"] * 4 + ["heldout"] * 2
    assert s.indices("train") == (0, 1, 2, 3) and s.indices("heldout") == (4, 5) and s.indices("all") == tuple(range(6))
    assert s.by_goal("train") == ((0, 2), (1, 3)) and s.by_goal("heldout") == ((4,), (5,))
    assert s.index_of("move blue") == 3


def test_unknown_text_index_or_split_is_one_line_naming_it():
    s = small()
    with pytest.raises(ValueError, match=r"^instruction 'move green' is not one of the 6 this policy knows \(e.g. "
                                         r"'put the red cube down', 'put the blue cube down', \.\.\.\)$"):
        s.index_of("move green")
    with pytest.raises(ValueError, match=r"^instruction index 6: expected 0\.\.5$"):
        s.goal_of(6)
    with pytest.raises(ValueError, match=r"^instruction index -1: expected 0\.\.5$"):
        s.split_of(-1)
    with pytest.raises(ValueError, match=r"^instruction split 'test': expected one of \['train', 'heldout', 'all'\]$"):
        s.indices("test")
    with pytest.raises(ValueError, match="must name the goal as {goal}"):
        InstructionSet.from_templates(["red"], train=["put the cube down"], heldout=[])
    with pytest.raises(ValueError, match="'move red' appears more than once"):
        InstructionSet.from_templates(["red"], train=["move {goal}", "move {goal}"], heldout=[])
    with pytest.raises(ValueError, match=r"split 'heldout': phrasings per goal = \[0\]"):
        InstructionSet.from_templates(["red"], train=["move {goal}"], heldout=[]).by_goal("heldout")


def test_the_contract_extra_round_trips_and_a_missing_key_is_named():
    s = small()
    extra = s.to_extra()
    assert extra == {"instructions": list(s.texts), "instruction_goal": ["red", "blue"] * 3,
                     "instruction_heldout": [False] * 4 + [True] * 2}
    assert InstructionSet.from_extra(extra) == s
    with pytest.raises(ValueError, match=r"^contract extra\['instruction_heldout'\] = None: expected a list"):
        InstructionSet.from_extra({"instructions": [], "instruction_goal": []})

