"""Closing the loop: the committed reference policies run on SimRobot through the whole deploy core
(contract check, observation builder, ONNX, safety filter, state machine, controller) and reach the
task metric they reached in training (recorded in their contract at export)."""

import numpy as np

from robo_rl.deploy.session import open_session
from robo_rl.deploy.state_machine import Mode
from robo_rl.terms.rotations import quat_rotate_inverse_np as quat_rotate_inverse
from tests.conftest import REPO

POLICIES = REPO / "policies"


def ramp_to_policy(session):
    c = session.controller
    c.request_ramp()
    for _ in range(10_000):
        c.tick(session.robot.time)  # fast mode: the clock is simulation time
        if c.mode is Mode.READY:
            c.start_policy()
            return
    raise AssertionError(f"never reached READY: {c.status_line()}")


def run_ticks(session, n):
    c = session.controller
    for _ in range(n):
        c.tick(session.robot.time)  # fast mode: the clock is simulation time
    assert c.mode is Mode.POLICY, c.status_line()


def reach_distances(session, num_targets: int) -> np.ndarray:
    """Ramp a reach policy's session to POLICY, then give it `num_targets` targets drawn (seed 0) from its
    contract's target box, one training episode (3 s) each; the end-effector distances (num_targets,) at the ends."""
    contract = session.policy.policy.contract
    rng = np.random.default_rng(0)
    low, high = np.array(contract.extra["target_low"]), np.array(contract.extra["target_high"])
    ramp_to_policy(session)
    steps = round(3.0 / contract.policy_dt)  # the training episode length
    distances = []
    for _ in range(num_targets):
        target = rng.uniform(low, high)
        session.policy.commands["target_pos"] = target
        run_ticks(session, steps)
        distances.append(np.linalg.norm(session.robot.read_state().ee_pos - target))
    return np.array(distances)


def test_panda_reach_policy_on_sim_robot():
    session = open_session(POLICIES / "panda_reach.onnx", REPO / "hardware" / "panda.yaml", realtime=False)
    contract = session.policy.policy.contract
    distances = reach_distances(session, 12)
    trained = contract.extra["train_eval"]["ee_distance_final"]
    deployed = float(np.mean(distances))
    print(f"panda reach: deployed {deployed:.4f} m, trained {trained:.4f} m")
    assert deployed < 0.03 and deployed < trained + 0.01, (deployed, trained)


def test_go2_walk_policy_on_sim_robot():
    session = open_session(POLICIES / "go2_walk.onnx", REPO / "hardware" / "go2.yaml", realtime=False)
    contract = session.policy.policy.contract
    ex = contract.extra
    rng = np.random.default_rng(0)
    ramp_to_policy(session)
    robot = session.robot
    errors = []
    segment = round(10.0 / contract.policy_dt)  # commands are resampled every 10 s in training
    for _ in range(4):
        cmd = np.array([rng.uniform(*ex["lin_vel_x"]), rng.uniform(*ex["lin_vel_y"]), rng.uniform(*ex["ang_vel_z"])])
        session.policy.commands["velocity_command"] = cmd
        for _ in range(segment):
            run_ticks(session, 1)
            d = robot.data
            v_b = quat_rotate_inverse(d.qpos[3:7], d.qvel[0:3])  # base-frame velocity, as in training
            errors.append(np.linalg.norm(cmd[:2] - v_b[:2]))
    trained = ex["train_eval"]["lin_vel_error"]
    deployed = float(np.mean(errors))
    print(f"go2 walk: deployed {deployed:.4f} m/s, trained {trained:.4f} m/s")
    assert deployed < trained + 0.1, (deployed, trained)
