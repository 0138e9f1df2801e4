"""Action terms: the contract's vocabulary and checks, torch terms against their numpy twins, the IK's maths."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from robo_rl.core.contract import ActionSpec, ActionTermSpec, DeployContract
from robo_rl.deploy.actions import ActionMap
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.policy import check_action_terms, validate_contract
from robo_rl.tasks.action_manager import make_term
from robo_rl.tasks.arm_pick_place import ArmPickPlaceConfig
from robo_rl.tasks.task_registry import make_env
from robo_rl.terms import validate_contract as validate_terms
from robo_rl.terms.ee_delta_torch import yaw_of
from robo_rl.terms.joint_position import joint_position_spec
from tests.conftest import REPO


@pytest.fixture(scope="module")
def pick_contract():
    env = make_env("arm-pick-place", 1)
    contract = env.contract
    env.close()
    return contract


def test_version_1_contract_reads_as_one_offset_term():
    """A committed policy carries a version-1 contract (go2_walk: one kind and scale for every joint)."""
    raw = json.loads((REPO / "policies" / "go2_walk.json").read_text())
    assert raw["version"] == 1 and "terms" not in raw["action"]
    contract = DeployContract.from_json(json.dumps(raw))
    validate_terms(contract)
    (term,) = contract.action.terms
    assert term.kind == "joint_position_offset" and term.joints == tuple(raw["joint_names"])
    assert list(term.scale) == raw["action"]["scale"] and contract.action.clip == raw["action"]["clip"]
    assert contract.version == 2 and DeployContract.from_json(contract.to_json()) == contract
    raw["action"]["kind"] = "ee_delta"
    with pytest.raises(ValueError, match="version 1 with action.kind 'ee_delta' cannot be read"):
        DeployContract.from_json(json.dumps(raw))
    raw["version"] = 3
    with pytest.raises(ValueError, match=r"version 3 is not supported \(this build reads 1, 2\)"):
        DeployContract.from_json(json.dumps(raw))


def test_pick_place_contract_round_trips_and_matches_its_robot(pick_contract):
    c = pick_contract
    assert c.version == 2 and c.action.kinds == ("ee_delta", "gripper")
    assert c.action_dim == 4 and len(c.joint_names) == 8
    assert c.action.terms[0].joints == c.joint_names[:7] and c.action.terms[1].joints == ("finger_joint1",)
    assert DeployContract.from_json(c.to_json()) == c
    validate_contract(c, load_hardware(REPO / "hardware" / "panda_gripper.yaml"))
    with pytest.raises(ValueError, match="finger_joint1 are not on robot 'panda'"):
        validate_contract(c, load_hardware(REPO / "hardware" / "panda.yaml"))


def with_term(contract, i, **change):
    terms = list(contract.action.terms)
    terms[i] = dataclasses.replace(terms[i], **change)
    return dataclasses.replace(contract, action=dataclasses.replace(contract.action, terms=tuple(terms)))


def with_params(contract, i, **params):
    return with_term(contract, i, params={**contract.action.terms[i].params, **params})


@pytest.mark.parametrize("edit, message", [
    (lambda c: with_term(c, 1, kind="suction"), r"terms\[1\]: kind = 'suction': allowed values are"),
    (lambda c: with_term(c, 1, joints=("joint7",)), r"terms\[1\] \(gripper\): joint 'joint7' is already driven"),
    (lambda c: with_term(c, 1, joints=("finger_joint2",)), "joint 'finger_joint2' is not in the contract"),
    (lambda c: dataclasses.replace(c, action=ActionSpec(terms=c.action.terms[:1], clip=1.0)),
     r"joint\(s\) finger_joint1 are driven by no action term"),
    (lambda c: with_term(c, 0, scale=(0.02, 0.02)), r"terms\[0\] \(ee_delta\): scale has 2 entries; expected 3"),
    (lambda c: with_params(c, 0, damping=0.0), r"params.damping = 0.0: must be a finite number > 0"),
    (lambda c: with_params(c, 0, yaw=1), r"params.yaw = 1: must be true or false"),
    (lambda c: with_term(c, 0, params={"damping": 0.05}), "params must have exactly the keys chain, damping"),
    (lambda c: with_params(c, 0, chain={**c.action.terms[0].params["chain"], "links": []}),
     "params.chain: root must be a body name and links a non-empty list"),
    (lambda c: with_params(c, 1, open=0.0), "params.open = 0.0, params.closed = 0.0: must be two different"),
    (lambda c: with_term(c, 1, scale=(-1.0,)), "a gripper term drives one joint with one column of scale > 0"),
])
def test_malformed_action_terms_are_refused_in_one_line(pick_contract, edit, message):
    with pytest.raises(ValueError, match=message) as err:
        validate_terms(edit(pick_contract))
    assert "\n" not in str(err.value)


def test_chain_must_move_the_terms_joints(pick_contract):
    chain = json.loads(json.dumps(pick_contract.action.terms[0].params["chain"]))
    chain["links"][6]["joint"] = "joint77"
    with pytest.raises(ValueError, match=r"params.chain moves joints .*'joint77'.* but the term drives"):
        validate_terms(with_params(pick_contract, 0, chain=chain))


def test_robot_refuses_what_it_cannot_do(pick_contract):
    hw = load_hardware(REPO / "hardware" / "panda_gripper.yaml")
    with pytest.raises(ValueError, match=r"terms\[0\] \(ee_delta\): end-effector actions need a fixed-base arm"):
        check_action_terms(pick_contract, dataclasses.replace(hw, kind="legged"))
    with pytest.raises(ValueError, match=r"params.open = 0.05 for finger_joint1 is outside .* \[0, 0.04\]"):
        check_action_terms(with_params(pick_contract, 1, open=0.05), hw)


def recorded_states(env, steps, gen):
    """(q (N, J), previous targets (N, J), actions (N, A)) at states the env visits under random actions."""
    env.reset()
    out = []
    for t in range(steps):
        action = torch.randn(env.num_envs, env.action_dim, generator=gen).clamp(-1, 1)
        prev = env.backend.ctrl[:, env._act_columns].to(torch.float32)
        if t % 5 == 4:
            out.append((env.q.clone(), prev.clone(), action))
        env.step(action)
    return out


@pytest.mark.parametrize("yaw", [0.0, 0.3])
def test_torch_terms_and_numpy_twins_give_the_same_targets(yaw):
    """The sim's batched terms and the deploy side's ActionMap, fed the same joints, targets and actions."""
    env = make_env("arm-pick-place", 6, cfg=ArmPickPlaceConfig(ee_yaw_scale=yaw), seed=1)
    assert env.action_dim == (5 if yaw else 4)
    action_map = ActionMap(env.contract)
    worst, moved = 0.0, 0.0
    for q, prev, action in recorded_states(env, 40, torch.Generator().manual_seed(0)):
        env.q = q  # the terms read the measured joints from env.q
        env.backend.ctrl[:, env._act_columns] = prev.double()
        sim = env._action_targets(action)  # (N, J)
        for i in range(env.num_envs):
            action_map._prev = prev[i].double().numpy()
            deploy = action_map(action[i].numpy(), q[i].numpy())
            worst = max(worst, float(np.abs(deploy - sim[i].numpy()).max()))
        moved = max(moved, float((sim - q).abs().max()))
    env.close()
    assert moved > 0.01  # the targets really differ from the measured joints
    assert worst < 2e-5, worst  # float32 (training) against float64 (robot)


def test_ee_delta_steps_the_tcp_and_keeps_the_hand_down():
    env = make_env("arm-pick-place", 8, cfg=ArmPickPlaceConfig(ee_yaw_scale=0.1, init_joint_noise=0.0), seed=2)
    env.reset()
    term = env.action_terms[0]
    q = env.q[:, :7].clone()  # the home pose: the hand points down, no orientation error to correct
    pos, rot = term.chain.forward(q)
    gen = torch.Generator().manual_seed(3)
    action = 0.3 * (2 * torch.rand(8, 4, generator=gen) - 1)  # small steps (6 mm, 0.03 rad): below the step limit
    q_new = term.targets(action, q, None)
    new_pos, new_rot = term.chain.forward(q_new)
    torch.testing.assert_close(new_pos - pos, action[:, :3] * env.cfg.action_scale, atol=3e-4, rtol=0)
    down = torch.tensor([0.0, 0.0, -1.0])
    assert torch.all(new_rot[:, :, 2] @ down > 0.999)  # the hand still points down
    turned = torch.remainder(yaw_of(new_rot) - yaw_of(rot) + torch.pi, 2 * torch.pi) - torch.pi
    torch.testing.assert_close(turned, action[:, 3] * 0.1, atol=1e-3, rtol=0)
    big = term.targets(torch.ones(8, 4), q, None)
    assert torch.all((big - q).abs().amax(-1) <= env.cfg.max_joint_step + 1e-6)  # the step limit holds
    env.close()


def test_gripper_target_moves_at_the_hand_speed():
    env = make_env("arm-pick-place", 2, seed=0)
    env.reset(random_start=False)
    step = env.cfg.gripper_speed * env.dt
    targets = []
    for _ in range(30):
        env.step(torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, -1.0]]))  # world 0 closes, world 1 stays open
        targets.append(env.backend.ctrl[:, 7].clone())
    targets = torch.stack(targets)  # (T, N)
    expected = (0.04 - step * torch.arange(1, 31, dtype=torch.float64)).clamp(min=0.0)
    torch.testing.assert_close(targets[:, 0], expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(targets[:, 1], torch.full((30,), 0.04, dtype=torch.float64), atol=1e-7, rtol=0)
    assert env.q[0, 7] < 0.005 and env.q[1, 7] > 0.039  # the fingers followed (nothing between them)
    env.close()


def test_joint_position_term_spans_the_joint_range():
    lower, upper = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 0.04])
    spec = joint_position_spec(("a", "b"), lower, upper)
    term = make_term(spec, torch.zeros(2))
    out = term.targets(torch.tensor([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]]), torch.zeros(3, 2), None)
    torch.testing.assert_close(out, torch.tensor([[-1.0, 0.0], [0.0, 0.02], [1.0, 0.04]]))
    contract_term = ActionTermSpec(**json.loads(json.dumps(dataclasses.asdict(spec))))
    assert contract_term.params == spec.params


def test_graph_targets_of_mixed_terms_in_contract_joint_order(pick_contract):
    """A gripper term listed first and joint offsets for the arm: the graph's joint_targets come back in contract
    joint order, finite for the offsets, NaN for the gripper; onnxruntime agrees with torch."""
    import onnxruntime as ort

    from robo_rl.export.onnx_export import ExportedPolicy, onnx_bytes
    from robo_rl.learn.networks.actor_critic import ActorCritic, PolicyConfig
    from robo_rl.terms.joint_position_offset import joint_position_offset_spec

    arm = joint_position_offset_spec(pick_contract.joint_names[:7], 0.25)
    terms = (pick_contract.action.terms[1], arm)  # columns: gripper (1), then the arm (7)
    contract = dataclasses.replace(pick_contract, action=ActionSpec(terms=terms, clip=2.0))
    contract = dataclasses.replace(contract, observation=tuple(
        dataclasses.replace(t, dim=8) if t.name == "last_action" else t for t in contract.observation))
    validate_terms(contract)
    torch.manual_seed(0)
    policy = ActorCritic(contract.obs_dim, contract.obs_dim, 8, PolicyConfig(actor_hidden_dims=(16,)))
    module = ExportedPolicy(policy, contract).eval()
    obs = torch.randn(5, contract.obs_dim)
    with torch.no_grad():
        actions, targets = module(obs)  # (5, 8), (5, 8)
    default = torch.tensor(contract.default_joint_pos[:7])
    torch.testing.assert_close(targets[:, :7], default + 0.25 * actions[:, 1:])
    assert torch.isnan(targets[:, 7]).all()
    session = ort.InferenceSession(onnx_bytes(module, obs[:2]), providers=["CPUExecutionProvider"])
    got_actions, got_targets = session.run(None, {"obs": obs.numpy()})
    np.testing.assert_allclose(got_actions, actions.numpy(), atol=1e-5)
    np.testing.assert_allclose(got_targets, targets.numpy(), atol=1e-5)  # NaN where torch has NaN
    deploy = ActionMap(contract)(got_actions[0], np.asarray(contract.default_joint_pos))
    np.testing.assert_allclose(deploy[:7], got_targets[0, :7], atol=1e-6)  # the robot side computes the same
