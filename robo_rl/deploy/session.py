"""Wire a policy, a robot description and a transport into a running Controller.

`open_session` loads and checks everything before any robot is touched; `run_live` (the sim twin's
rehearsal) drives the modes PASSIVE -> RAMP -> READY -> POLICY with a live status line and stops safely
(DAMP, a last damping command) on Ctrl-C or at the end. Real transports go through
`robo_rl.deploy.runtime`, where POLICY starts only on an explicit operator action.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.deploy.controller import REALTIME_PRIORITY, Controller
from robo_rl.deploy.hardware import HardwareSpec, load_hardware
from robo_rl.deploy.policy import OnnxPolicy, PolicyStep
from robo_rl.deploy.robot import RobotInterface
from robo_rl.deploy.state_machine import Mode

TRANSPORTS = ("sim", "dds")


@dataclass
class Session:
    hw: HardwareSpec
    policy: PolicyStep
    robot: RobotInterface
    controller: Controller


def make_robot(transport: str, hw: HardwareSpec, control_dt: float, *, realtime: bool, latency_s: float = 0.0,
               noise_std: float = 0.0, seed: int = 0, physics_dt: float | None = None, domain_id: int = 0,
               command_interface: str | None = None, needs_ee: bool = False) -> RobotInterface:
    """The chosen transport; each is imported only when chosen (the sim twin needs mujoco, DDS cyclonedds).

    `physics_dt` (the contract's) sets the sim twin's time step: training overrides the MJCF's.
    `domain_id`, `command_interface` and `needs_ee` (wait for end-effector positions) are for `dds`.
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r} is not available; choose from: {', '.join(TRANSPORTS)}")
    if transport == "dds":
        if not realtime:
            raise ValueError("transport dds runs in real time only (realtime=False is for the sim transport)")
        from robo_rl.deploy.transports.dds import DdsRobot, DdsSettings, check_domain_id

        settings = DdsSettings.from_hardware(hw, command_interface=command_interface)
        return DdsRobot(hw, settings, control_dt=control_dt, domain_id=check_domain_id(domain_id), needs_ee=needs_ee)
    from robo_rl.deploy.transports.sim import SimRobot

    sim = hw.transport.get("sim") or {}
    if "model" not in sim:
        raise ValueError(f"hardware {hw.robot!r} has no transport.sim.model (the MJCF of its twin)")
    model = find_asset(sim["model"], what=f"sim twin model of {hw.robot!r}")
    return SimRobot(model, hw, control_dt=control_dt, keyframe=sim.get("keyframe"), latency_s=latency_s,
                    noise_std=noise_std, realtime=realtime, seed=seed, physics_dt=physics_dt,
                    object_body=sim.get("object"))


def load_for_deploy(policy_path: str | Path, hardware_path: str | Path, *,
                    commands: Mapping[str, object] | None = None, allow_unsafe_hardware: bool = False,
                    warn: Callable[[str], None] | None = None) -> tuple[HardwareSpec, PolicyStep]:
    """Load and cross-check hardware file, policy and operator commands (ValueError, one line); touches no robot."""
    hw = load_hardware(find_asset(hardware_path, what="hardware file"), allow_unsafe=allow_unsafe_hardware, warn=warn)
    onnx_policy = OnnxPolicy(find_asset(policy_path, what="policy file"))
    policy = PolicyStep(onnx_policy, hw, commands, warn=warn)  # validates the contract and the commands
    return hw, policy


def default_pose(policy: PolicyStep, hw: HardwareSpec) -> np.ndarray:
    """(J,) pose RAMP moves to and READY holds: the policy's default; mid-range for joints it does not drive."""
    q = policy.default_q.copy()
    undriven = np.setdiff1d(np.arange(len(hw.joint_names)), policy.robot_index)
    q[undriven] = (hw.joint_lower[undriven] + hw.joint_upper[undriven]) / 2
    return q


def observes_ee(policy: PolicyStep) -> bool:
    """True when the policy observes the end-effector position (the robot must report it)."""
    return any(t.name == "ee_pos" for t in policy.policy.contract.observation)


def open_session(policy_path: str | Path, hardware_path: str | Path, transport: str = "sim", *,
                 realtime: bool = True, latency_s: float = 0.0, noise_std: float = 0.0, seed: int = 0,
                 commands: Mapping[str, object] | None = None, allow_unsafe_hardware: bool = False,
                 warn: Callable[[str], None] | None = None,
                 wrap_robot: Callable[[RobotInterface], RobotInterface] | None = None, domain_id: int = 0,
                 command_interface: str | None = None, realtime_priority: int = REALTIME_PRIORITY) -> Session:
    """Load and cross-check policy, hardware and operator commands (ValueError, one line), then connect.

    Everything that can be refused is refused here, before the transport is created: a malformed
    hardware file or contract, a mismatch between them, non-finite operator commands. Operator
    commands start neutral (stand still / the centre of the target box); `commands` overrides them
    (clamped into the trained range with a warning line) and `session.policy.set_command` changes
    them while running.

    Args:
        allow_unsafe_hardware: accept hardware safety values outside their safe range (loud warnings).
        warn: receives warning lines (default: stderr).
        wrap_robot: applied to the connected robot before the controller uses it (recording, tests).
        domain_id, command_interface: DDS domain and (ros2 profile) command interface, transport dds.
        realtime_priority: SCHED_FIFO priority of the thread that runs the controller (0: normal; see
            Controller); used only with `realtime`.

    With `realtime=False` (sim transport only) the robot advances one control period per command and
    the controller's clock is the simulation time: a rehearsal as fast as the CPU allows.
    """
    hw, policy = load_for_deploy(policy_path, hardware_path, commands=commands,
                                 allow_unsafe_hardware=allow_unsafe_hardware, warn=warn)
    contract = policy.policy.contract
    robot = make_robot(transport, hw, contract.policy_dt, realtime=realtime, latency_s=latency_s,
                       noise_std=noise_std, seed=seed, physics_dt=contract.physics_dt, domain_id=domain_id,
                       command_interface=command_interface, needs_ee=observes_ee(policy))
    if wrap_robot is not None:
        robot = wrap_robot(robot)
    clock = time.monotonic if realtime else (lambda: robot.time)  # robot.time: sim transports
    controller = Controller(robot, hw, policy, default_pose(policy, hw), clock=clock,
                            realtime_priority=realtime_priority if realtime else 0)
    controller.on_warning = warn or (lambda line: print(f"warning: {line}", file=sys.stderr, flush=True))
    return Session(hw, policy, robot, controller)


def run_live(session: Session, duration_s: float | None, *, status_every_s: float = 0.5, out=sys.stdout) -> dict:
    """Sim twin only: run the controller in a thread: RAMP, then POLICY at once when READY (a rehearsal; on a
    real transport POLICY waits for the operator, see robo_rl.deploy.runtime); status lines; stop safely."""
    c = session.controller
    stop = threading.Event()
    worker = threading.Thread(target=c.run, kwargs={"stop_event": stop}, daemon=True)
    c.request_ramp()
    worker.start()
    start = time.monotonic()
    try:
        while worker.is_alive():
            if c.mode is Mode.READY:
                c.start_policy()
            print("\r" + c.status_line(), end="", file=out, flush=True)
            if duration_s is not None and time.monotonic() - start >= duration_s:
                break
            if c.mode in (Mode.DAMP, Mode.ESTOP):
                break
            time.sleep(status_every_s)
    except KeyboardInterrupt:
        print("\nCtrl-C: damping and stopping", file=out, flush=True)
    finally:
        stop.set()
        worker.join(timeout=2.0)
        c.shutdown()
        session.robot.close()
    print("\n" + c.status_line(), file=out, flush=True)
    return c.stats()
