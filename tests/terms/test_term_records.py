"""The term registries: loadable on the robot (no torch, no mujoco), sizes from the task, one-line refusals."""

import subprocess
import sys

import pytest

from robo_rl.core.contract import ActionSpec, ActionTermSpec
from robo_rl.terms import ACTION_TERMS, OBSERVATION_TERMS, TermContext, validate_action
from tests.conftest import REPO


def test_terms_and_the_deploy_side_that_loops_over_them_load_without_torch_or_mujoco():
    code = (
        "import sys, robo_rl.terms, robo_rl.deploy.policy, robo_rl.deploy.observations, robo_rl.deploy.actions, "
        "robo_rl.deploy.operator_commands\n"
        "bad = sorted(m for m in ('torch', 'mujoco') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_sizes_come_from_the_context():
    context = TermContext(num_joints=12, action_dim=5)
    sizes = {name: record.expected_dim(context) for name, record in OBSERVATION_TERMS.items()}
    assert sizes["joint_pos_rel"] == sizes["joint_vel"] == 12 and sizes["last_action"] == 5
    assert sizes["projected_gravity"] == sizes["ee_pos"] == sizes["velocity_command"] == 3
    assert [n for n, r in OBSERVATION_TERMS.items() if r.command] == ["velocity_command", "target_pos"]


def test_every_action_kind_refuses_params_outside_its_schema_in_one_line():
    for kind, record in ACTION_TERMS.items():
        spec = ActionTermSpec(kind=kind, joints=("a",), scale=(1.0,), params={"surplus": 1})
        with pytest.raises(ValueError, match=rf"terms\[0\] \({kind}\): params must have exactly the keys") as err:
            validate_action(ActionSpec(terms=(spec,)), ("a",))
        assert "\n" not in str(err.value) and (not record.params or next(iter(record.params)) in str(err.value))


def test_a_term_name_is_registered_once():
    with pytest.raises(ValueError, match="observation term 'joint_vel' is already registered"):
        OBSERVATION_TERMS.register("joint_vel", OBSERVATION_TERMS.get("joint_vel"))
