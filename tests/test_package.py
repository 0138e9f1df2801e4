import subprocess
import sys

from tests.conftest import REPO


def test_import_robo_rl_does_not_import_torch_or_mujoco():
    code = (
        "import sys, robo_rl, robo_rl.config, robo_rl.contract; "
        "print('torch' in sys.modules, 'mujoco' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_tasks_command_lists_sizes(cli):
    result = cli("tasks")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    arm = next(line for line in lines if line.startswith("arm-reach"))
    quad = next(line for line in lines if line.startswith("quadruped-walk-flat"))
    assert arm.split()[1:4] == ["27", "27", "7"]
    assert quad.split()[1:4] == ["45", "48", "12"]
    pick = next(line for line in lines if line.startswith("arm-pick-place"))
    assert pick.split()[1:4] == ["29", "32", "4"]  # actions: 3 end-effector steps + 1 gripper, for 8 joints
