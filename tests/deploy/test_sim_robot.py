"""SimRobot: the MuJoCo twin behind the RobotInterface, and the deploy command's safe stop."""

import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import mujoco
import numpy as np
import pytest

from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.robot import JointCommand, Setpoints
from robo_rl.deploy.transports.sim import SimRobot
from tests.conftest import REPO

PANDA = load_hardware(REPO / "hardware" / "panda.yaml")


def hold(robot, q, names=PANDA.joint_names):
    n = len(names)
    return JointCommand(names, np.asarray(q, float), np.zeros(n), PANDA.kp.copy(), PANDA.kd.copy(), np.zeros(n))


def test_commands_move_joints_by_name_and_latency_delays_them():
    fast = SimRobot(REPO / "envs" / "panda.xml", PANDA, control_dt=0.02)
    slow = SimRobot(REPO / "envs" / "panda.xml", PANDA, control_dt=0.02, latency_s=0.04)
    q0 = fast.read_state().q.copy()
    target = q0.copy()
    target[0] += 0.3
    order = np.arange(7)[::-1]  # the command lists joints in reverse order
    reversed_cmd = JointCommand(
        tuple(PANDA.joint_names[i] for i in order), target[order], np.zeros(7), PANDA.kp[order], PANDA.kd[order],
        np.zeros(7),
    )
    fast.send_command(reversed_cmd)
    slow.send_command(reversed_cmd)
    moved_fast = fast.read_state().q[0] - q0[0]
    moved_slow = slow.read_state().q[0] - q0[0]
    assert moved_fast > 0.02  # joint1 moved toward its target within one 20 ms tick
    assert abs(moved_slow) < 1e-3  # 40 ms latency: nothing yet
    for _ in range(2):
        slow.send_command(reversed_cmd)
    assert slow.read_state().q[0] - q0[0] > 0.02
    assert abs(fast.read_state().q[1] - q0[1]) < 0.01  # other joints hold


def test_noise_and_clock():
    robot = SimRobot(REPO / "envs" / "panda.xml", PANDA, control_dt=0.02, noise_std=0.01, seed=1)
    a, b = robot.read_state(), robot.read_state()
    assert not np.array_equal(a.q, b.q) and np.abs(a.q - b.q).max() < 0.1
    robot.send_command(hold(robot, a.q))
    assert robot.read_state().stamp == robot.time > a.stamp


def test_twin_runs_at_the_contracts_physics_dt():
    """Training overrides the MJCF timestep with the contract's physics_dt; the twin must too."""
    robot = SimRobot(REPO / "envs" / "panda.xml", PANDA, control_dt=0.02, physics_dt=0.0025)
    assert robot.model.opt.timestep == 0.0025 and robot.substeps == 8
    robot.send_command(hold(robot, robot.read_state().q))
    assert robot.time == pytest.approx(0.02)
    with pytest.raises(ValueError, match="control_dt = 0.021 is not a whole number of physics steps"):
        SimRobot(REPO / "envs" / "panda.xml", PANDA, control_dt=0.021, physics_dt=0.0025)
    from robo_rl.deploy.session import open_session

    session = open_session(REPO / "policies" / "panda_reach.onnx", REPO / "hardware" / "panda.yaml", realtime=False)
    assert session.robot.model.opt.timestep == session.policy.policy.contract.physics_dt


def test_twin_refuses_a_base_that_disagrees_with_the_hardware_kind():
    with pytest.raises(ValueError, match="has no free joint .* but hardware 'panda' is kind 'legged'"):
        SimRobot(REPO / "envs" / "panda.xml", replace(PANDA, kind="legged"), control_dt=0.02)


@pytest.mark.realtime  # the twin steps in a thread at wall-clock pace
def test_commands_that_arrive_while_the_twin_is_late_take_effect_as_far_apart_as_they_arrived():
    """A stalled physics thread (its process descheduled on a loaded host) catches up without sleeping; commands
    that arrived during the stall take effect at the sim times of their arrival, not all in its first step, the last
    replacing the others: a 50 Hz stream of setpoints stays continuous (a jump of the setpoints drove the Panda's
    replay over DDS to 2.7 rad/s under the CI suite's load)."""
    robot = SimRobot(REPO / "envs" / "panda.xml", PANDA, control_dt=0.02, realtime=True)
    played = []  # (sim time, joint 1's position target) at every physics step

    class Probe:  # the mujoco module, recording what each step plays
        def __getattr__(self, name):
            return getattr(mujoco, name)

        def mj_step(self, m, d):
            played.append((d.time, d.ctrl[robot.aid[0]]))
            mujoco.mj_step(m, d)

    try:
        time.sleep(0.1)
        q0 = robot.read_state().q.copy()

        def ramp(first: float, n: int = 150):  # joint 1 at 1 rad/s from q0 + first, one setpoint per ms
            q = np.tile(q0, (n, 1))
            q[:, 0] += first + 0.001 * np.arange(1, n + 1)
            zero = np.zeros((n, 7))  # no velocity lead: the played target is the setpoint
            return replace(hold(robot, q0), setpoints=Setpoints(period=0.001, q=q, dq=zero, ddq=zero))

        first, second = ramp(0.0), ramp(0.15)  # the second continues the first 0.15 s after it
        robot._mj = Probe()
        senders = [threading.Thread(target=lambda c=c, t=t: (time.sleep(t), robot.send_command(c)))
                   for c, t in ((first, 0.05), (second, 0.2))]
        with robot._lock:  # the physics thread stalls for 0.35 s; the commands arrive 0.05 s and 0.2 s into it
            for s in senders:
                s.start()
            time.sleep(0.35)
        for s in senders:
            s.join()
        time.sleep(0.05)  # the thread catches up (175 steps of 2 ms in a few ms)
        t, target = np.array(played).T
        moving = target - target[0] > 1e-6
        assert moving.any() and target[-1] - q0[0] > 0.25  # both ramps were played
        jumps = np.abs(np.diff(target))
        # 2 ms steps at 1 rad/s: 2 mrad each; the second ramp taking effect with the first: one jump of 0.136 rad
        assert jumps.max() < 0.01, (jumps.max(), t[np.argmax(jumps)])
    finally:
        robot.close()


@pytest.mark.realtime  # the deploy command runs the twin in real time
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_deploy_command_stops_safely_on_signal(sig):
    proc = subprocess.Popen(
        [sys.executable, "-m", "robo_rl.cli", "deploy", "--policy", "policies/go2_walk.onnx",
         "--robot", "hardware/go2.yaml", "--transport", "sim", "--velocity", "0.5,0,0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as a background job of a non-interactive shell: SIGINT starts out ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    time.sleep(5.0)  # 2 s soft start, then POLICY
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "mode=POLICY" in out and "Ctrl-C: damping and stopping" in out
    assert "stopped in DAMP" in out and "Traceback" not in err
