"""Transports come from an open registry: one registered here, by a test, runs a reference policy through the
deploy core; built-in ones are imported only when chosen; unknown names are refused with the choices."""

import subprocess
import sys

import numpy as np
import pytest

from robo_rl.deploy.robot import TRANSPORTS, ConnectOptions, Transport
from robo_rl.deploy.session import open_session, rehearse, transport, transport_names
from robo_rl.deploy.state_machine import Mode
from robo_rl.deploy.transports.sim import connect_twin
from tests.conftest import REPO, run_cli


class UsedTwin:
    """The sim twin behind a toy transport that counts what the deploy core did with it."""

    def __init__(self, twin):
        self.twin = twin
        self.hw = twin.hw
        self.reads = 0
        self.sent = []
        self.closed = False

    def read_state(self):
        self.reads += 1
        return self.twin.read_state()

    def send_command(self, command):
        self.sent.append(command)
        self.twin.send_command(command)

    def close(self):
        self.closed = True
        self.twin.close()

    @property
    def time(self) -> float:
        return self.twin.time


def test_a_transport_registered_by_a_test_runs_a_reference_policy_through_the_deploy_core():
    connected: list[tuple[UsedTwin, ConnectOptions]] = []

    def connect(hw, options):
        robot = UsedTwin(connect_twin(hw, options))
        connected.append((robot, options))
        return robot

    assert "toy-twin" not in transport_names()
    with TRANSPORTS.registered("toy-twin", Transport(connect=connect, rehearsal=True, help="a test's twin")):
        assert "toy-twin" in transport_names()
        runtime = open_session(REPO / "policies" / "go2_walk.onnx", REPO / "hardware" / "go2.yaml", "toy-twin",
                               realtime=False, commands={"velocity_command": np.array([0.5, 0.0, 0.0])})
        stats = rehearse(runtime, 4.0)  # 4 s of robot time: the 2 s soft start, then the policy walks
    assert "toy-twin" not in TRANSPORTS
    (robot, options), = connected
    assert runtime.robot is robot and not options.realtime and options.control_dt == 0.02
    assert options.physics_dt == runtime.policy.policy.contract.physics_dt
    assert robot.reads >= 195 and len(robot.sent) == stats["ticks"] + 1  # + the last damping command
    assert 4.0 <= robot.time <= 4.0 + 3 * 0.02  # fast-forward: robot time, not wall-clock time
    modes = [t.mode for t in runtime.controller.state_machine.transitions]
    assert modes == [Mode.PASSIVE, Mode.RAMP, Mode.READY, Mode.POLICY, Mode.DAMP]
    assert runtime.controller.state_machine.fault_reason is None  # ended by the rehearsal, not a fault
    last = robot.sent[-1]
    assert (last.kp == 0).all() and np.allclose(last.kd, runtime.hw.safety.damping_kd)
    robot.close()


def test_unknown_transports_are_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"^transport 'carrier-pigeon' is not available; choose from: .*dds.*sim"):
        transport("carrier-pigeon")
    bad = run_cli("deploy", "--policy", "policies/panda_reach.onnx", "--robot", "hardware/panda.yaml",
                  "--transport", "carrier-pigeon", timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("robo-rl: transport 'carrier-pigeon' is not available; choose from: ")


def test_transports_are_imported_only_when_chosen():
    """The wiring imports neither the twin (mujoco) nor DDS (cyclonedds) until one of them is chosen."""
    code = ("import sys; import robo_rl.deploy.session as s; "
            "print(sorted(m for m in ('mujoco', 'cyclonedds', 'torch', 'robo_rl.deploy.transports.sim', "
            "'robo_rl.deploy.transports.dds') if m in sys.modules)); "
            "s.transport('sim'); print('mujoco' in sys.modules, 'cyclonedds' in sys.modules, "
            "'robo_rl.deploy.transports.sim' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["[]", "False False True"]
