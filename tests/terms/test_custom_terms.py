"""Acceptance: a new observation term and a new action term, each defined and registered here (nothing else
edited), carried through the whole stack: a task that uses them trains 2 iterations through the CLI, exports to
ONNX (contract validated against the registry), and runs on the MuJoCo twin through the deploy core.

Every consumer reaches the two terms only through the registries: the sim's observation and action managers,
the contract validator, the exporter's graph, the robot side's observation builder and action map. Bypass the
registry anywhere and this fails (the deploy side, for one, cannot compute `ee_height` or `joint_step` otherwise).
"""

import os

import numpy as np
import pytest
import torch

from robo_rl.cli.main import main
from robo_rl.core.contract import ActionTermSpec, ObsTerm
from robo_rl.deploy.observations import ObservationBuilder
from robo_rl.deploy.policy import OnnxPolicy
from robo_rl.deploy.session import open_session
from robo_rl.deploy.state_machine import Mode
from robo_rl.sim import TRAINING_ENV_DEFAULTS
from robo_rl.tasks.arm_reach import ArmReachConfig, ArmReachEnv
from robo_rl.tasks.task_registry import TASKS, TaskEntry, make_env
from robo_rl.terms import (
    ACTION_TERMS,
    OBSERVATION_TERMS,
    ActionTermRecord,
    ObservationTermRecord,
    validate_contract,
)
from tests.conftest import REPO
from tests.deploy.test_deploy_closed_loop import ramp_to_policy, run_ticks


# --------------------------------------------------------------------------- the new observation term
def ee_height(ee_pos, base_pos):
    """Height of the hand above the robot base, (N, 1) in the sim or (1,) on the robot: one function for both."""
    return (ee_pos - base_pos)[..., 2:]


EE_HEIGHT = ObservationTermRecord(name="ee_height", inputs=("ee_pos", "base_pos"), torch=ee_height, numpy=ee_height,
                                  dim=1)


# --------------------------------------------------------------------------- the new action term
def check_joint_step(spec, at):
    if len(spec.scale) != len(spec.joints):
        raise ValueError(f"{at}: scale has {len(spec.scale)} entries for {len(spec.joints)} joints")
    if not spec.params["max_step"] > 0:
        raise ValueError(f"{at}: params.max_step = {spec.params['max_step']!r}: must be > 0")


class JointStep:
    """Sim side: q* = q + clamp(scale * a, -max_step, max_step), from the measured joints (tensor methods)."""

    def __init__(self, spec, default):
        self.scale = default.new_tensor(spec.scale)  # (J_t,)
        self.max_step = float(spec.params["max_step"])

    def targets(self, action, q, prev_target):
        return q + (action * self.scale).clamp(-self.max_step, self.max_step)


def joint_step_numpy(spec, default):
    scale, max_step = np.asarray(spec.scale), float(spec.params["max_step"])
    return lambda a, q, prev: q + np.clip(a * scale, -max_step, max_step)


JOINT_STEP = ActionTermRecord(name="joint_step", params={"max_step": "largest joint change per step (rad)"},
                              check=check_joint_step, build_torch=JointStep, build_numpy=joint_step_numpy)


# --------------------------------------------------------------------------- a task that uses both
class ReachWithNewTerms(ArmReachEnv):
    """arm-reach observing the hand's height and stepping its joints from where they are."""

    policy_terms = (
        ObsTerm(name="joint_pos_rel", dim=7),
        ObsTerm(name="joint_vel", dim=7),
        ObsTerm(name="ee_height", dim=1, scale=2.0),
        ObsTerm(name="target_pos", dim=3),
        ObsTerm(name="last_action", dim=7),
    )

    def _action_term_specs(self):
        return (ActionTermSpec(kind="joint_step", joints=tuple(self.joint_names), scale=(0.1,) * 7,
                               params={"max_step": 0.05}),)


TASK = "arm-reach-new-terms"


@pytest.fixture
def new_terms(monkeypatch):
    with (OBSERVATION_TERMS.registered("ee_height", EE_HEIGHT), ACTION_TERMS.registered("joint_step", JOINT_STEP),
          TASKS.registered(TASK, TaskEntry(ReachWithNewTerms, ArmReachConfig))):
        for key, value in TRAINING_ENV_DEFAULTS.items():  # what `main` sets for training, undone afterwards
            if key not in os.environ:
                monkeypatch.setenv(key, value)
        yield


def test_sim_computes_the_new_terms_through_the_registry(new_terms):
    env = make_env(TASK, 4, seed=0)
    obs = env.reset(random_start=False)
    assert env.action_dim == 7 and env.obs_dims["policy"] == 7 + 7 + 1 + 3 + 7
    column = 14  # after joint_pos_rel and joint_vel
    torch.testing.assert_close(obs["policy"][:, column], 2.0 * env.ee_pos_w[:, 2])  # scale 2 applied
    q = env.q.clone()
    action = torch.ones(4, 7)
    torch.testing.assert_close(env.joint_targets(action), q + 0.05)  # 0.1 * 1 clamped to max_step
    validate_contract(env.contract)
    assert [t.name for t in env.contract.observation][2] == "ee_height"
    assert env.contract.action.kinds == ("joint_step",)
    env.close()


def test_unregistered_terms_are_refused_by_name(new_terms):
    env = make_env(TASK, 1)
    contract = env.contract
    env.close()
    OBSERVATION_TERMS.unregister("ee_height")  # as on a robot whose software lacks the term
    try:
        with pytest.raises(ValueError, match=r"observation\[2\] \('ee_height'\): unknown term name"):
            validate_contract(contract)
    finally:
        OBSERVATION_TERMS.register("ee_height", EE_HEIGHT)
    ACTION_TERMS.unregister("joint_step")
    try:
        with pytest.raises(ValueError, match=r"terms\[0\]: kind = 'joint_step': allowed values are"):
            validate_contract(contract)
    finally:
        ACTION_TERMS.register("joint_step", JOINT_STEP)


def test_new_terms_train_export_and_run_on_the_twin(new_terms, tmp_path):
    train = ["train", "--task", TASK, "--num-envs", "16", "--max-iterations", "2", "--seed", "3",
             "--set", "algo.num_steps_per_env=8", "--set", "runner.eval_episodes=0",
             "--set", f"runner.log_dir={tmp_path}", "--run-name", "run"]
    assert main(train) == 0
    out = tmp_path / "policy.onnx"
    assert main(["export", str(tmp_path / "run"), "--out", str(out)]) == 0

    policy = OnnxPolicy(out)  # the contract is validated against the registry on load
    contract = policy.contract
    assert [t.name for t in contract.observation][2] == "ee_height" and contract.action.kinds == ("joint_step",)
    _, graph_targets = policy(np.zeros(contract.obs_dim, np.float32))
    assert np.isnan(graph_targets).all()  # joint_step needs the measured joints: only the deploy side has them

    session = open_session(out, REPO / "hardware" / "panda.yaml", realtime=False)
    ramp_to_policy(session)
    start = session.robot.read_state()
    run_ticks(session, 50)
    step = session.policy
    assert session.controller.last_fault is None and session.controller.mode is Mode.POLICY
    state = session.robot.read_state()
    builder = ObservationBuilder(contract, step.hw)
    assert builder.terms(state, commands=step.commands, action=step.last_action, names=["ee_height"])[
        "ee_height"] == pytest.approx(state.ee_pos[2:])
    obs = step.last_obs  # (O,) the last policy input: finite, with the hand's height (scale 2) in its column
    assert np.isfinite(obs).all() and 0.0 < obs[14] < 2.0
    assert np.abs(state.q - start.q).max() > 1e-3  # the policy's joint steps moved the arm
