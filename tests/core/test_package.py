import subprocess
import sys

from tests.conftest import REPO


def test_import_robo_rl_does_not_import_torch_or_mujoco():
    code = (
        "import sys, robo_rl, robo_rl.core.config, robo_rl.core.contract, robo_rl.core.instructions; "
        "print('torch' in sys.modules, 'mujoco' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_tasks_command_lists_groups_and_action_terms(cli):
    result = cli("tasks")
    assert result.returncode == 0
    blocks = {}  # task -> its indented lines
    for line in result.stdout.splitlines():
        if not line.startswith(" "):
            blocks[line] = []
        else:
            blocks[list(blocks)[-1]].append(" ".join(line.split()))

    def sizes(task):
        return [line.split(":")[0] for line in blocks[task] if ":" in line]

    assert sizes("arm-reach") == ["policy obs 27", "critic obs 27", "actions 7"]
    assert sizes("quadruped-walk-flat") == ["policy obs 45", "critic obs 48", "actions 12"]
    assert "actions 4: ee_delta 3 + gripper 1" in blocks["arm-pick-place"]  # 3 end-effector steps + 1 gripper
    vision = blocks["arm-pick-place-vision"]
    assert "image obs : 3x64x64 uint8 from camera 'scene'" in vision
    # 3 cube colours x (6 train + 3 held-out phrasings); the held-out ones are drawn only when asked for
    assert any(line.startswith("text obs : instruction index of 27 ") and line.endswith("9 held out of training)")
               for line in vision)
    import robo_rl.adapters  # noqa: F401  (registers the prefixes, as the command does)
    from robo_rl.tasks.task_registry import TASKS

    assert {"gym:", "mjlab:", "isaaclab:"} <= set(TASKS.prefixes())
    for prefix, what in TASKS.prefixes().items():  # each prefix family with its help line from its registration
        assert blocks[f"{prefix}<{what}>"] == [" ".join(TASKS.prefix_help(prefix).split())], prefix
    assert "gym:<gymnasium id>" in blocks
    assert "bash scripts/setup_mjlab.sh" in blocks["mjlab:<id>"][0]  # the setup hint of mjlab's venv
