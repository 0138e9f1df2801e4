"""Deploy on any registered transport: look the transport up, connect, and run `PolicyRuntime` live.

`run_deploy` is what `robo-rl deploy --transport NAME` runs for every transport: everything is loaded and
checked before the robot is touched (ValueError, one line); then the robot must send fresh state, the
controller ramps to the default pose (RAMP -> READY), and

- on a real transport (DDS, ...) POLICY starts only on the operator's explicit `start` (typed on stdin, or
  through the transport's own operator channel, e.g. rt/robo_rl/operator), and the loop runs until the
  duration has passed or Ctrl-C;
- on a rehearsal transport (the sim twin) POLICY starts on its own once READY, and the run also ends when
  the robot is damped or e-stopped.

Ctrl-C and the end both leave the robot in DAMP with a last damping command; so does any error here.
`open_session` wires the same pieces without starting the loop, for stepping the controller by hand (tests,
benchmarks, fast-forward rehearsal with `realtime=False`).

Transports come only from the registry `robo_rl.deploy.robot.TRANSPORTS`; a built-in one
(`robo_rl.deploy.transports.<name>`) is imported when it is first chosen.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from robo_rl.deploy import transports as builtin_transports
from robo_rl.deploy.controller import REALTIME_PRIORITY
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.policy import PolicyStep
from robo_rl.deploy.reward_modules import reward_cameras
from robo_rl.deploy.robot import TRANSPORTS, ConnectOptions, RobotInterface, Transport, take_control
from robo_rl.deploy.runtime import (
    RUNTIME_REQUESTS,
    PolicyRuntime,
    check_reported_joints,
    needs_reported_ee,
    wait_for_fresh_state,
)
from robo_rl.deploy.runtime_config import RuntimeConfig
from robo_rl.deploy.state_machine import Mode


# ---------------------------------------------------------------------------------------------- transports
def builtin_transport_names() -> tuple[str, ...]:
    """Names of the transports shipped in robo_rl.deploy.transports (one module or package each; none imported)."""
    return tuple(m.name for m in pkgutil.iter_modules(builtin_transports.__path__))


def transport_names() -> tuple[str, ...]:
    """Every transport that can be chosen: the built-in ones, then those registered from elsewhere."""
    builtin = builtin_transport_names()
    return builtin + tuple(n for n in TRANSPORTS.names() if n not in builtin)


class TransportUnavailable(ValueError):
    """A built-in transport whose optional dependency is not installed here (cyclonedds, mujoco, rclpy)."""


def transport(name: str) -> Transport:
    """The transport registered as `name`, importing its built-in module first if needed (its optional
    dependencies load only now); ValueError (one line, listing the choices) for an unknown name,
    TransportUnavailable (one line) for a built-in one whose dependency is missing."""
    if name not in TRANSPORTS and name in builtin_transport_names():
        try:
            importlib.import_module(f"{builtin_transports.__name__}.{name}")  # registers it (mujoco, cyclonedds, rclpy)
        except ImportError as exc:
            raise TransportUnavailable(f"transport {name!r} cannot be used here: {exc}") from None
    if name not in TRANSPORTS:
        raise ValueError(f"transport {name!r} is not available; choose from: {', '.join(transport_names())}")
    return TRANSPORTS.get(name)


def available_transports() -> dict[str, Transport]:
    """Name -> Transport of every transport whose dependencies are installed (imports each built-in one)."""
    found = {}
    for name in transport_names():
        try:
            found[name] = transport(name)
        except TransportUnavailable:  # its optional dependency (cyclonedds, mujoco, rclpy) is not installed
            continue
    return found


def make_robot(transport_name: str, hw: HardwareSpec, control_dt: float, *, realtime: bool, latency_s: float = 0.0,
               noise_std: float = 0.0, seed: int = 0, physics_dt: float | None = None, domain_id: int = 0,
               command_interface: str | None = None, needs_ee: bool = False,
               cameras: tuple[tuple[str, int, int], ...] = (), render: Mapping[str, Any] | None = None,
               scene: str | None = None) -> RobotInterface:
    """Connect to the robot through the registered transport `transport_name` (see ConnectOptions for the rest).

    `realtime=False` (fast-forward: one control period per command) is for rehearsal transports only.
    """
    entry = transport(transport_name)
    if not realtime and not entry.rehearsal:
        raise ValueError(f"transport {transport_name} runs in real time only (realtime=False is for the sim "
                         "transport)")
    options = ConnectOptions(control_dt=control_dt, realtime=realtime, physics_dt=physics_dt, latency_s=latency_s,
                             noise_std=noise_std, seed=seed, domain_id=domain_id, command_interface=command_interface,
                             needs_ee=needs_ee, cameras=cameras, render=render, scene=scene)
    return entry.connect(hw, options)


# ---------------------------------------------------------------------------------------------- by hand
def camera_options(policy: PolicyStep, rewards: Sequence[str] = ()) -> dict[str, Any]:
    """The ConnectOptions of the cameras a policy reads, then those its reward classifiers read (`rewards`, as
    RuntimeConfig.rewards): (name, height, width) of each, and how training drew the policy's."""
    terms = policy.inputs.images
    cameras = tuple((c, t.params["height"], t.params["width"]) for c, t in zip(policy.inputs.cameras, terms,
                                                                                strict=True))
    cameras += tuple(c for c in reward_cameras(rewards) if c[0] not in {name for name, _, _ in cameras})
    return {"cameras": cameras, "render": policy.policy.contract.extra.get("render")}


def open_session(policy_path: str | Path, hardware_path: str | Path, transport: str = "sim", *,
                 realtime: bool = True, latency_s: float = 0.0, noise_std: float = 0.0, seed: int = 0,
                 commands: Mapping[str, object] | None = None, allow_unsafe_hardware: bool = False,
                 warn: Callable[[str], None] | None = None,
                 wrap_robot: Callable[[RobotInterface], RobotInterface] | None = None, domain_id: int = 0,
                 command_interface: str | None = None, realtime_priority: int = REALTIME_PRIORITY,
                 instruction: str | None = None, scene: str | None = None, rewards: tuple[str, ...] = (),
                 reset_module: str = "home") -> PolicyRuntime:
    """Load, cross-check and connect, and build the controller (in PASSIVE, not running): a PolicyRuntime whose
    `controller` the caller steps (`tick`) or runs itself; `.hw`, `.policy` and `.robot` are what was loaded.

    Everything that can be refused is refused before the transport is created: a malformed hardware file or
    contract, a mismatch between them, non-finite operator commands. Operator commands start neutral (stand
    still / the centre of the target box); `commands` overrides them (clamped into the trained range with a
    warning line) and `policy.set_command` changes them while running.

    Args:
        allow_unsafe_hardware: accept hardware safety values outside their safe range (loud warnings).
        warn: receives warning lines (default: stderr).
        wrap_robot: applied to the connected robot before the controller uses it (recording, tests).
        domain_id, command_interface: DDS domain and (ros2 profile) command interface, transport dds.
        realtime_priority: SCHED_FIFO priority of the thread that runs the controller (0: normal; see
            Controller); used only with `realtime`.
        instruction: the text a policy that follows instructions (a VLA) follows.
        scene: the sim twin's MJCF instead of the hardware file's (e.g. envs/panda_pick_vision.xml).
        rewards, reset_module: the reward modules scored every POLICY tick and the reset module (RuntimeConfig).

    With `realtime=False` (rehearsal transports only) the robot advances one control period per command and
    the controller's clock is the simulation time: a rehearsal as fast as the CPU allows.
    """
    say = warn or (lambda line: print(f"warning: {line}", file=sys.stderr, flush=True))
    config = RuntimeConfig(policy_path=str(policy_path), hardware_config=str(hardware_path),
                           command_interface=command_interface, allow_unsafe_hardware=allow_unsafe_hardware,
                           realtime_priority=realtime_priority, rewards=tuple(rewards), reset_module=reset_module)
    holder: dict[str, Any] = {}
    clock = time.monotonic if realtime else (lambda: holder["robot"].time)  # robot.time: rehearsal transports
    runtime = PolicyRuntime(config, log=say, warn=say, clock=clock)
    runtime.configure(commands, warn=warn, instruction=instruction)
    contract = runtime.policy.policy.contract
    robot = make_robot(transport, runtime.hw, contract.policy_dt, realtime=realtime, latency_s=latency_s,
                       noise_std=noise_std, seed=seed, physics_dt=contract.physics_dt, domain_id=domain_id,
                       command_interface=command_interface, needs_ee=needs_reported_ee(runtime), scene=scene,
                       **camera_options(runtime.policy, runtime.config.rewards))
    holder["robot"] = robot = wrap_robot(robot) if wrap_robot is not None else robot
    runtime.attach(robot)
    return runtime


def rehearse(runtime: PolicyRuntime, duration_s: float) -> dict[str, float]:
    """The twin rehearsal fast-forward: RAMP, POLICY once READY, for `duration_s` of robot time (or until DAMP /
    ESTOP), then DAMP and a last damping command; returns the controller's stats.

    `runtime` comes from `open_session(..., realtime=False)` on a rehearsal transport (its robot keeps `time`).
    """
    c, robot = runtime.controller, runtime.robot
    c.request_ramp()
    end = robot.time + duration_s
    try:
        while robot.time < end and c.mode not in (Mode.DAMP, Mode.ESTOP):
            c.tick(robot.time)
            if c.mode is Mode.READY:
                runtime.start()
    finally:
        runtime.deactivate()  # DAMP and a last damping command, whatever happened
    return c.stats()


# ---------------------------------------------------------------------------------------------- live
def run_deploy(runtime: PolicyRuntime, transport_name: str, *, options: Mapping[str, Any] | None = None,
               commands: Mapping[str, object] | None = None, instruction: str | None = None,
               wrap_robot: Callable[[RobotInterface], RobotInterface] | None = None, duration_s: float | None = None,
               stdin: TextIO | None = None, out: TextIO | None = None,
               status_every_s: float = 0.5) -> PolicyRuntime:
    """Run `runtime` (not yet configured) live on the transport `transport_name` until the end; returns it stopped.

    Args:
        options: ConnectOptions fields the user chose (latency_s, noise_std, seed, domain_id, command_interface).
        commands: operator commands to start with (velocity_command, target_pos).
        instruction: the text a policy that follows instructions (a VLA) follows.
        wrap_robot: applied to the connected robot before the controller uses it (the CLI's recorder).
        duration_s: stop after this long (s); None: until Ctrl-C (or, rehearsing, DAMP / ESTOP).
        stdin: operator words typed here (`start` + Enter, ...) on a real transport; default sys.stdin.
        out: status lines (default sys.stdout).
    """
    stdin = sys.stdin if stdin is None else stdin  # looked up now: tests and callers may have replaced them
    out = sys.stdout if out is None else out
    entry = transport(transport_name)
    runtime.configure(commands, instruction=instruction)
    hw, policy = runtime.hw, runtime.policy
    contract = policy.policy.contract
    print(f"deploying {runtime.config.policy_path} on {hw.robot} ({transport_name}) at {1 / contract.policy_dt:g} "
          f"Hz; commands {({k: v.round(3).tolist() for k, v in policy.commands.items()})}; Ctrl-C stops safely",
          file=out, flush=True)
    robot = make_robot(transport_name, hw, contract.policy_dt, realtime=True, physics_dt=contract.physics_dt,
                       needs_ee=needs_reported_ee(runtime), **camera_options(policy, runtime.config.rewards),
                       **dict(options or {}))
    link = None
    try:
        if entry.operator_link is not None:
            link = entry.operator_link(robot, runtime)
            runtime.subscribe(on_event=lambda event: link.publish_event(event.to_json()), on_record=link.publish_record)
        target = wrap_robot(robot) if wrap_robot is not None else robot
        print(f"waiting for robot state from {robot} ...", file=out, flush=True)
        if not runtime.config.dry_run:  # e.g. release a Go2's sport mode: once it answers, before the first command
            first = wait_for_fresh_state(robot, runtime.config.state_wait_s, runtime.hw.safety.state_timeout_s)
            check_reported_joints(first, runtime.hw)  # before anything is sent to the robot
            runtime.wait_for_heartbeat(runtime.config.state_wait_s)  # an e-stop nobody can press: nothing is sent
            take_control(robot)
        runtime.activate(target)
        words: queue.Queue[str] = queue.Queue()
        if not entry.rehearsal:
            if stdin is not None:
                threading.Thread(target=_stdin_words, args=(stdin, words), daemon=True).start()
            print(f"connected{', DRY RUN: nothing is sent' if runtime.config.dry_run else ''}. Once READY, type "
                  f"`start` + Enter{' (' + link.hint + ')' if link is not None else ''}; also: "
                  f"{', '.join(w for w in RUNTIME_REQUESTS if w != 'start')}", file=out, flush=True)
        _operate(runtime, entry, link, words, duration_s, status_every_s, out)
    except KeyboardInterrupt:
        print("\nCtrl-C: damping and stopping", file=out, flush=True)
    finally:
        runtime.deactivate()  # DAMP and a last damping command
        if runtime.controller is not None:
            print("\n" + runtime.status_line(), file=out, flush=True)
        robot.close()
    return runtime


def _stdin_words(stream: TextIO, out: queue.Queue) -> None:
    """Put each non-empty line typed on `stream` into `out` (runs on a daemon thread until EOF)."""
    for line in stream:
        word = line.strip()
        if word:
            out.put(word)


def _operate(runtime: PolicyRuntime, entry: Transport, link, words: queue.Queue, duration_s: float | None,
             status_every_s: float, out: TextIO) -> None:
    """Carry out operator words, publish diagnostics (every diagnostics period and at once when the mode changes),
    print status lines until the end (see run_deploy)."""
    start = time.monotonic()
    next_diag = next_status = start
    published_mode = None
    while runtime.active:
        now = time.monotonic()
        if duration_s is not None and now - start >= duration_s:
            return
        pending = link.requests() if link is not None else []
        while not words.empty():
            pending.append(words.get_nowait())
        for word in pending:
            runtime.request(word)
        mode = runtime.controller.mode
        if entry.rehearsal:  # the twin: no operator to wait for
            if mode is Mode.READY:
                runtime.start()
            elif mode in (Mode.DAMP, Mode.ESTOP):
                return
        if link is not None and (now >= next_diag or mode is not published_mode):
            level, message, values = runtime.diagnostics()
            link.publish_diagnostics(time.time(), level, message, values)
            next_diag, published_mode = now + runtime.config.diagnostics_period_s, mode
        if now >= next_status:
            print("\r" + runtime.status_line(), end="", file=out, flush=True)
            next_status = now + status_every_s
        time.sleep(0.02)  # operator words are carried out within this


def deploy_exit_code(runtime: PolicyRuntime) -> tuple[int, str | None]:
    """(exit code, fault line): 1 when the robot ended in DAMP on a fault or in ESTOP, else 0."""
    c = runtime.controller
    if c is None:
        return 0, None
    fault = c.state_machine.fault_reason or ("estop" if c.mode is Mode.ESTOP else None)
    if fault is None or fault == "shutdown":
        return 0, None
    detail = f": {c.last_error}" if c.last_error else ""
    return 1, f"deploy stopped on fault {fault}{detail}"
