"""PolicyRuntime, the policy node's logic, on the real-time MuJoCo twin: lifecycle, operator actions, inputs,
dry run, resets, rewards and diagnostics. (The rclpy node and the DDS deploy command are thin shells over it.)"""

import time

import numpy as np
import pytest

from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.runtime import PolicyRuntime
from robo_rl.deploy.runtime_config import RuntimeConfig
from robo_rl.deploy.session import make_robot
from robo_rl.deploy.state_machine import Mode
from tests.conftest import REPO

pytestmark = pytest.mark.realtime  # the control loop runs on its own thread at 50 Hz (tests/workers.py)


def quick_hardware(tmp_path, robot: str) -> str:
    """The robot's hardware file with a 0.5 s soft start (the shortest safe one), so the tests run quickly."""
    text = (REPO / "hardware" / f"{robot}.yaml").read_text()
    start = text.index("ramp_time_s:")
    end = text.index("\n", start)
    path = tmp_path / f"{robot}.yaml"
    path.write_text(text[:start] + "ramp_time_s: 0.5" + text[end:])
    return str(path)


class Recorder:
    """A RobotInterface around the twin that records every command it is really sent."""

    def __init__(self, robot):
        self.robot = robot
        self.sent: list[JointCommand] = []

    def read_state(self) -> RobotState:
        return self.robot.read_state()

    def send_command(self, command: JointCommand) -> None:
        self.sent.append(command)
        self.robot.send_command(command)

    def close(self) -> None:
        self.robot.close()


def wait_for(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def make_runtime(tmp_path):
    made = []

    def make(robot="panda", policy="panda_reach", **config):
        events, records, lines = [], [], []
        cfg = RuntimeConfig(policy_path=str(REPO / "policies" / f"{policy}.onnx"),
                            hardware_config=quick_hardware(tmp_path, robot), **config)
        rt = PolicyRuntime(cfg, on_event=events.append, on_record=lambda o, a, c, r: records.append((o, a, c, r)),
                           log=lines.append)
        rt.configure()
        contract = rt.policy.policy.contract
        twin = make_robot("sim", rt.hw, contract.policy_dt, realtime=True, physics_dt=contract.physics_dt)
        robot = Recorder(twin)
        rt.events_seen, rt.records, rt.lines, rt.twin = events, records, lines, robot
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.cleanup()
        rt.twin.close()


def test_policy_starts_only_on_start_and_stop_damps(make_runtime):
    rt = make_runtime()
    rt.activate(rt.twin)
    c = rt.controller
    wait_for(lambda: c.mode is Mode.READY, 5.0, "READY")
    time.sleep(0.5)
    assert c.mode is Mode.READY and not rt.records  # READY never turns into POLICY on its own
    assert rt.request("start") == (True, "POLICY started")
    wait_for(lambda: len(rt.records) >= 5, 2.0, "recorded POLICY ticks")
    obs, action, cmd, outcome = rt.records[-1]
    assert outcome.reward == 0 and not outcome.done  # no reward module: every step scores 0
    assert obs.shape == (rt.policy.policy.contract.obs_dim,) and cmd.joint_names == rt.hw.joint_names
    assert action.shape == (rt.policy.policy.contract.action_dim,)  # the raw actions of that tick (~/policy_step)
    assert rt.request("start")[0] is False  # already in POLICY: refused, one line
    assert rt.lines[-1] == "refused: start in mode POLICY: only allowed from READY"
    assert rt.request("stop")[0] and c.mode is Mode.DAMP
    kinds = [e.kind for e in rt.events_seen]
    assert kinds[0] == "start" and set(kinds[1:]) == {"intervention"}
    filtered = [e.detail["what"] for e in rt.events_seen[1:-1]]  # safety-filter limits, once per kind
    assert len(filtered) == len(set(filtered)) and set(filtered) <= set(c.intervention_counts)
    assert rt.events_seen[-1].detail == {"what": "operator_stop", "ends_episode": True}
    ok, message = rt.request("teleport")
    assert not ok and message.startswith("unknown request 'teleport'; allowed: start, stop, estop")


def test_estop_latches_until_reset_estop(make_runtime):
    rt = make_runtime()
    rt.activate(rt.twin)
    c = rt.controller
    wait_for(lambda: c.mode is Mode.READY, 5.0, "READY")
    rt.start()
    time.sleep(0.2)
    rt.estop()
    n = len(rt.twin.sent)
    time.sleep(0.2)
    after = rt.twin.sent[n:]
    assert after and all((cmd.kp == 0).all() for cmd in after)  # damping only
    assert rt.request("start")[0] is False and rt.request("reset")[0] is False
    assert rt.request("reset_estop")[0] and c.mode in (Mode.RAMP, Mode.READY)
    wait_for(lambda: c.mode is Mode.READY, 5.0, "READY again")
    assert rt.request("start")[0]


def test_dry_run_sends_nothing(make_runtime):
    rt = make_runtime(dry_run=True)
    rt.activate(rt.twin)
    wait_for(lambda: rt.controller.mode is Mode.READY, 5.0, "READY")
    rt.start()
    wait_for(lambda: len(rt.records) >= 10, 2.0, "POLICY ticks")
    assert rt.twin.sent == []  # the robot never got a command
    assert rt.controller.robot.withheld >= rt.controller.ticks - 1
    assert rt.diagnostics()[2]["dry_run"] is True


def test_goal_reward_ends_the_episode_and_reset_runs_the_reset_module(make_runtime):
    rt = make_runtime(rewards=("goal_distance",))
    rt.activate(rt.twin)
    c = rt.controller
    wait_for(lambda: c.mode is Mode.READY, 5.0, "READY")
    rt.set_target(np.array([0.45, 0.1, 0.35]))
    rt.start()
    wait_for(lambda: any(e.kind == "success" for e in rt.events_seen), 6.0, "success")
    wait_for(lambda: c.mode is Mode.READY, 1.0, "READY after success")  # end_episode_on_done
    success = next(e for e in rt.events_seen if e.kind == "success")
    assert success.detail["goal_distance_m"] < 0.03
    ok, message = rt.request("reset")
    assert ok, message
    assert message.startswith("reset 'home' done in ")
    assert np.abs(rt.twin.read_state().q - c.default_q).max() < 0.05
    assert [e.kind for e in rt.events_seen if e.kind != "intervention"] == ["start", "success", "reset"]
    # every POLICY tick's record carries the step the reward module scored that tick (~/policy_step's outcome),
    # the last one the success that ended the episode
    outcomes = [r[3] for r in rt.records]
    assert outcomes and all(o is not None for o in outcomes)
    assert outcomes[-1].success and outcomes[-1].done and not any(o.done for o in outcomes[:-1])
    assert outcomes[-1].reward > outcomes[0].reward


def test_cmd_vel_times_out_to_zero(make_runtime):
    rt = make_runtime("go2", "go2_walk", cmd_vel_timeout_s=0.3)
    rt.activate(rt.twin)
    wait_for(lambda: rt.controller.mode is Mode.READY, 10.0, "READY")
    rt.set_velocity_command(np.array([0.5, 0.0, 0.0]))
    time.sleep(0.1)
    assert rt.policy.commands["velocity_command"].tolist() == [0.5, 0.0, 0.0]
    time.sleep(0.4)
    assert rt.policy.commands["velocity_command"].tolist() == [0.0, 0.0, 0.0]
    values = rt.diagnostics()[2]
    assert values["mode"] == "READY" and values["command.velocity_command"] == [0.0, 0.0, 0.0]
    assert {"ticks", "missed_ticks", "period_p99_ms", "lateness_p99_ms", "fault"} <= set(values)
    # the control thread asked for RuntimeConfig's SCHED_FIFO priority; /diagnostics says what it got
    granted = rt.controller.realtime_note is None
    assert rt.controller.realtime_priority == RuntimeConfig.realtime_priority == 50
    assert values["realtime_priority"] == (50 if granted else 0)
    assert granted or any("real-time priority 50 refused" in line for line in rt.lines)


class StallingTwin(Recorder):
    """The twin as a DDS robot sees it across a full garbage collection of a big process: no sample is taken in while
    the collection holds every thread, so the first read after it still returns the last state from before."""

    def __init__(self, robot):
        super().__init__(robot)
        self.frozen: RobotState | None = None

    def read_state(self) -> RobotState:
        if self.frozen is not None:
            state, self.frozen = self.frozen, None
            return state
        return self.robot.read_state()

    def stall(self, seconds: float) -> None:
        self.frozen = self.robot.read_state()
        time.sleep(seconds)


def test_start_up_garbage_collection_leaves_the_first_tick_a_fresh_state(make_runtime, monkeypatch):
    """activate collects the start-up garbage before it waits for fresh state, not between that state and the first
    tick: a collection longer than the state timeout there made the first tick fault stale_state (seen in the full
    test suite's big process: DAMP, 0 missed ticks)."""
    import types

    rt = make_runtime()
    twin = StallingTwin(rt.twin.robot)
    stall_s = 4 * rt.hw.safety.state_timeout_s
    monkeypatch.setattr("robo_rl.deploy.runtime.gc", types.SimpleNamespace(collect=lambda: twin.stall(stall_s)))
    rt.activate(twin)
    wait_for(lambda: rt.controller.mode is Mode.READY or rt.controller.last_fault, 10.0, "READY or a fault")
    assert rt.controller.mode is Mode.READY and rt.controller.last_fault is None, rt.controller.status_line()


def test_activate_needs_fresh_state_and_config_is_checked(tmp_path):
    class Silent:
        def read_state(self):
            raise RuntimeError("nothing received yet")

        def send_command(self, command):
            raise AssertionError("a robot without state must never get a command")

        def close(self):
            pass

    cfg = RuntimeConfig(policy_path=str(REPO / "policies" / "panda_reach.onnx"),
                        hardware_config=str(REPO / "hardware" / "panda.yaml"), state_wait_s=0.3)
    rt = PolicyRuntime(cfg, log=lambda line: None)
    with pytest.raises(ValueError, match="activate before configure"):
        rt.activate(Silent())
    rt.configure()
    with pytest.raises(ValueError, match=r"no fresh robot state within 0.3 s \(nothing received yet\)"):
        rt.activate(Silent())
    assert rt.controller is None
    for bad, match in ((dict(command_interface="effort"), "command_interface 'effort': allowed values are"),
                       (dict(cmd_vel_timeout_s=0.0), "cmd_vel_timeout_s = 0.0: must be a finite number > 0"),
                       (dict(rewards=("speed",)), "rewards: reward 'speed': allowed values are goal_distance"),
                       (dict(reset_module="teleport"), "reset_module 'teleport': allowed values"),
                       (dict(realtime_priority=-1), r"realtime_priority = -1: must be an integer in \[0, 99\]")):
        with pytest.raises(ValueError, match=match):
            PolicyRuntime(RuntimeConfig(policy_path="p.onnx", hardware_config="h.yaml", **bad))
    load_hardware(REPO / "hardware" / "panda.yaml")


def test_robot_side_modules_import_no_torch_mujoco_or_dds():
    """The node logic (runtime, resets, rewards, ROS 2 names and adapters) needs numpy and onnxruntime only."""
    import subprocess
    import sys

    code = ("import sys; import robo_rl.deploy.runtime, robo_rl.deploy.reset_modules, robo_rl.deploy.reward_modules, "
            "robo_rl.deploy.ros_messages, robo_rl.deploy.ros_interface, robo_rl.deploy.session; "
            "print(sorted(m for m in ('torch', 'mujoco', 'cyclonedds', 'rclpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_failing_tick_hook_never_stops_the_loop():
    from robo_rl.deploy.session import open_session

    s = open_session(REPO / "policies" / "panda_reach.onnx", REPO / "hardware" / "panda.yaml", realtime=False)
    c = s.controller
    calls = []

    def hook(now, state, command):
        calls.append(command)
        raise RuntimeError("recorder disk full")

    c.on_tick = hook
    c.request_ramp()
    for _ in range(10):
        sent = c.tick(s.robot.time)
    assert len(calls) == 10 and calls[-1] is sent and c.hook_errors == 10
    assert c.last_hook_error == "RuntimeError: recorder disk full" and c.mode is Mode.RAMP


def test_diagnostics_go_out_at_once_when_the_mode_changes():
    """`robo-rl deploy` publishes /diagnostics every diagnostics period and also on the loop pass that sees a new mode,
    so a short POLICY episode (a reward module's success ends it within a second) is never missed by an operator."""
    import io
    import queue
    from types import SimpleNamespace

    from robo_rl.deploy.session import _operate

    class Runtime:  # the deploy loop's view of a PolicyRuntime: READY for 3 passes, then POLICY, then it stops
        config = SimpleNamespace(diagnostics_period_s=60.0)

        def __init__(self):
            self.passes = 0
            self.controller = SimpleNamespace(mode=Mode.READY)

        @property
        def active(self):
            self.passes += 1
            self.controller.mode = Mode.READY if self.passes <= 3 else Mode.POLICY
            return self.passes <= 8

        def diagnostics(self):
            return "ok", "", {"mode": self.controller.mode.name}

        def request(self, word):
            raise AssertionError(word)

        def status_line(self):
            return ""

    published = []
    link = SimpleNamespace(requests=list, publish_diagnostics=lambda stamp, level, message, values:
                           published.append(values["mode"]))
    _operate(Runtime(), SimpleNamespace(rehearsal=False), link, queue.Queue(), None, 60.0, io.StringIO())
    assert published == ["READY", "POLICY"]
