"""Every registered term: the sim's torch function and the robot's numpy function agree on the same states.

Observation terms are fed the sources of states the tasks visit under random actions; action terms the measured
joints and previous targets of those states, with the specs the tasks build. Each term is compared within the
tolerance its record states (float32 sim against float64 robot). The loop is over the registries: a term that no
recorded case can feed fails the coverage check, so a new term comes with a case here.
"""

import numpy as np
import pytest
import torch

from robo_rl.tasks.action_manager import make_term
from robo_rl.tasks.arm_pick_place import ArmPickPlaceConfig
from robo_rl.tasks.task_registry import make_env
from robo_rl.terms import ACTION_TERMS, OBSERVATION_TERMS
from robo_rl.terms.joint_position import joint_position_spec

OBS_TASKS = ("quadruped-walk-flat", "arm-pick-place")
"""Between them, their sources feed every deployable built-in observation term."""


def visited_sources(name, steps=30, every=6):
    """The env's observation sources (torch, batched) at states it visits under random actions, and the env."""
    env = make_env(name, 4, seed=5)
    env.reset()
    gen = torch.Generator().manual_seed(1)
    out = []
    for t in range(steps):
        env.step(torch.randn(4, env.action_dim, generator=gen).clamp(-1, 1))
        if t % every == every - 1:
            out.append({k: v.clone() for k, v in env._obs_sources().items()})
    env.close()
    return out


@pytest.fixture(scope="module")
def recorded_sources():
    return {name: visited_sources(name) for name in OBS_TASKS}


def test_every_observation_term_matches_its_numpy_twin(recorded_sources):
    compared = set()
    for name, record in OBSERVATION_TERMS.items():
        if record.numpy is None:  # simulation only (a critic's privileged term): nothing runs on the robot
            continue
        for states in recorded_sources.values():
            for sources in states:
                if not all(k in sources for k in record.inputs):
                    continue
                sim = record.torch(*(sources[k] for k in record.inputs)).to(torch.float32)  # (N, dim)
                for i in range(sim.shape[0]):
                    args = [np.asarray(_row(sources[k], i), dtype=np.float64) for k in record.inputs]
                    robot = np.asarray(record.numpy(*args))
                    assert robot.shape == tuple(sim[i].shape), name
                    err = float(np.abs(robot - sim[i].numpy()).max())
                    assert err <= record.parity_tolerance, (name, err, record.parity_tolerance)
                compared.add(name)
    deployable = {n for n, r in OBSERVATION_TERMS.items() if r.numpy is not None}
    assert compared == deployable, f"no recorded case feeds {sorted(deployable - compared)}"


def _row(value, i):
    """Row i of a batched source; a source shared by all worlds ((D,), e.g. a default pose) as it is."""
    return value[i].numpy() if value.dim() > 1 else value.numpy()


def action_cases():
    """(spec, default pose (J_t,), recorded (q, prev, action) of its joints) for specs the tasks build."""
    cases = []
    for yaw in (0.0, 0.3):
        env = make_env("arm-pick-place", 4, cfg=ArmPickPlaceConfig(ee_yaw_scale=yaw), seed=1)
        cases += _cases_of(env, env.action_specs)
    env = make_env("arm-reach", 4, seed=1)
    lower, upper = env.ctrl_low, env.ctrl_high
    cases += _cases_of(env, (*env.action_specs, joint_position_spec(env.joint_names, lower, upper)))
    return cases


def _cases_of(env, specs):
    gen = torch.Generator().manual_seed(0)
    env.reset()
    index = {n: i for i, n in enumerate(env.joint_names)}
    states = []
    for t in range(25):
        action = torch.randn(env.num_envs, env.action_dim, generator=gen).clamp(-1, 1)
        if t % 5 == 4:
            states.append((env.q.clone(), env.backend.ctrl[:, env._act_columns].to(torch.float32).clone()))
        env.step(action)
    env.close()
    out = []
    for spec in specs:
        joints = [index[j] for j in spec.joints]
        recorded = [(q[:, joints], prev[:, joints], 0.9 * (2 * torch.rand(env.num_envs, spec.dim, generator=gen) - 1))
                    for q, prev in states]
        out.append((spec, env.default_joint_pos[joints], recorded))
    return out


def test_every_action_term_matches_its_numpy_twin():
    compared = set()
    for spec, default, recorded in action_cases():
        record = ACTION_TERMS.get(spec.kind)
        sim_term = make_term(spec, default)
        moved = 0.0
        for q, prev, action in recorded:
            sim = sim_term.targets(action, q, prev if record.uses_previous_target else None)  # (N, J_t)
            for i in range(q.shape[0]):
                robot_fn = record.build_numpy(spec, default.double().numpy())
                robot = robot_fn(action[i].double().numpy(), q[i].double().numpy(), prev[i].double().numpy())
                err = float(np.abs(robot - sim[i].numpy()).max())
                assert err <= record.parity_tolerance, (spec.kind, err, record.parity_tolerance)
            moved = max(moved, float((sim - q).abs().max()))
        assert moved > 1e-3, spec.kind  # the targets really differ from the measured joints
        compared.add(spec.kind)
    assert compared == set(ACTION_TERMS.names()), f"no case for {sorted(set(ACTION_TERMS.names()) - compared)}"
