"""`robo-rl deploy --transport dds` and `robo-rl twin --transport dds`: the runtime and the twin over plain DDS.

Deploy: PolicyRuntime over a DdsRobot, with the operator reached two ways: words typed on stdin
(`start` + Enter, ...) and the same words as std_msgs/String on `rt/robo_rl/operator`; the e-stop on
`rt/estop` (std_msgs/Bool); cmd_vel and target_pose; /diagnostics once per diagnostics period. POLICY
starts only on the operator's `start`.

Twin: the MuJoCo twin (SimRobot in real time) served on the robot's topics until stopped.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Mapping
from typing import TextIO

from robo_rl.deploy.reward_modules import EpisodeEvent
from robo_rl.deploy.runtime import RUNTIME_REQUESTS, PolicyRuntime, RuntimeConfig
from robo_rl.deploy.state_machine import Mode


def _stdin_words(stream: TextIO, out: queue.Queue) -> None:
    """Put each non-empty line typed on `stream` into `out` (runs on a daemon thread until EOF)."""
    for line in stream:
        word = line.strip()
        if word:
            out.put(word)


def run_dds_deploy(config: RuntimeConfig, *, domain_id: int, duration_s: float | None,
                   commands: Mapping[str, object] | None = None, stdin: TextIO | None = sys.stdin,
                   out: TextIO = sys.stdout, status_every_s: float = 0.5, record: str | None = None) -> PolicyRuntime:
    """Run the policy on a DDS robot until `duration_s` has passed or Ctrl-C; returns the (stopped) runtime.

    Everything is loaded and checked before DDS is joined (ValueError, one line); then the robot must
    send fresh state within config.state_wait_s (ValueError otherwise). With `record` (a new dataset
    folder) every POLICY tick is recorded (`robo_rl.demos.recorder.RecordingRobot`); a success, failure
    or reset event ends the episode, and the report is printed at the end.
    """
    from robo_rl.deploy.transports.dds import DdsEndpoint, DdsOperatorLink, DdsRobot, DdsSettings, check_domain_id

    def log(line: str) -> None:
        print(f"\n{line}", file=out, flush=True)

    link: DdsOperatorLink | None = None

    recording = None

    def on_event(event: EpisodeEvent) -> None:
        if link is not None:
            link.publish_event(event.to_json())
        if recording is not None and event.kind in ("success", "failure", "reset") and recording._open:
            recording.end_episode()

    def on_record(obs, command) -> None:
        if link is not None:
            link.publish_record(obs, command)

    runtime = PolicyRuntime(config, on_event=on_event, on_record=on_record, log=log)
    runtime.configure(commands)
    hw, policy = runtime.hw, runtime.policy
    settings = DdsSettings.from_hardware(hw, command_interface=config.command_interface)
    from robo_rl.deploy.session import observes_ee

    endpoint = DdsEndpoint(check_domain_id(domain_id))
    robot = None
    try:
        robot = DdsRobot(hw, settings, control_dt=policy.policy.contract.policy_dt, endpoint=endpoint,
                         needs_ee=observes_ee(policy))
        if record is not None:
            from robo_rl.demos.recorder import recording_wrapper

            wrap, _ = recording_wrapper(record, task=f"deploy {str(config.policy_path).rsplit('/', 1)[-1]}")
            robot = recording = wrap(robot)
            recording.gate = lambda: runtime.controller is not None and runtime.controller.mode is Mode.POLICY
        link = DdsOperatorLink(endpoint, settings, runtime)
        print(f"waiting for robot state on {robot.state_topic} (DDS domain {domain_id}) ...", file=out, flush=True)
        runtime.activate(robot)
        words: queue.Queue[str] = queue.Queue()
        if stdin is not None:
            threading.Thread(target=_stdin_words, args=(stdin, words), daemon=True).start()
        print(f"connected; commands to {robot.command_topic} ({settings.profile}"
              f"{', ' + settings.command_interface if settings.profile == 'ros2' else ''}"
              f"{', DRY RUN: nothing is sent' if config.dry_run else ''}). Once READY, type `start` + Enter "
              f"(or publish it on rt/robo_rl/operator); also: {', '.join(w for w in RUNTIME_REQUESTS if w != 'start')}",
              file=out, flush=True)
        _operate(runtime, link, words, duration_s, status_every_s, out)
    except KeyboardInterrupt:
        print("\nCtrl-C: damping and stopping", file=out, flush=True)
    finally:
        runtime.deactivate()
        if runtime.controller is not None:
            print("\n" + runtime.status_line(), file=out, flush=True)
        if robot is not None:
            robot.close()
        if recording is not None:
            recording.writer.close()  # commits the episode still open
            r = recording.report()
            print(f"recorded {r['frames']} frames into {record}, dropped {r['dropped']}", file=out, flush=True)
        link = None
        endpoint.close()
    return runtime


def _operate(runtime: PolicyRuntime, link, words: queue.Queue, duration_s: float | None, status_every_s: float,
             out: TextIO) -> None:
    start = time.monotonic()
    next_diag = next_status = start
    period = runtime.config.diagnostics_period_s
    while True:
        now = time.monotonic()
        if duration_s is not None and now - start >= duration_s:
            return
        pending = link.requests()
        while not words.empty():
            pending.append(words.get_nowait())
        for word in pending:
            runtime.request(word)
        if now >= next_diag:
            level, message, values = runtime.diagnostics()
            link.publish_diagnostics(time.time(), level, message, values)
            next_diag = now + period
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


def run_twin(hardware_path: str, *, domain_id: int, rate_hz: float, duration_s: float | None,
             command_interface: str | None = None, physics_dt: float | None = None, latency_s: float = 0.0,
             noise_std: float = 0.0, seed: int = 0, out: TextIO = sys.stdout) -> int:
    """Serve the MuJoCo twin of `hardware_path` on DDS until `duration_s` or Ctrl-C; returns commands applied."""
    from robo_rl.core.assets import find_asset
    from robo_rl.deploy.hardware import load_hardware
    from robo_rl.deploy.transports.dds import DdsEndpoint, DdsSettings, DdsTwinServer, check_domain_id
    from robo_rl.deploy.transports.sim import SimRobot

    hw = load_hardware(find_asset(hardware_path, what="hardware file"))
    settings = DdsSettings.from_hardware(hw, command_interface=command_interface)
    sim = hw.transport.get("sim") or {}
    if "model" not in sim:
        raise ValueError(f"hardware {hw.robot!r} has no transport.sim.model (the MJCF of its twin)")
    model = find_asset(sim["model"], what=f"sim twin model of {hw.robot!r}")
    control_dt = 1.0 / hw.control_rate_hz
    robot = SimRobot(model, hw, control_dt=control_dt, keyframe=sim.get("keyframe"), latency_s=latency_s,
                     noise_std=noise_std, realtime=True, seed=seed, physics_dt=physics_dt)
    endpoint = DdsEndpoint(check_domain_id(domain_id))
    stop = threading.Event()
    try:
        server = DdsTwinServer(robot, hw, settings, endpoint, rate_hz=rate_hz,
                               base_twist=robot.base_twist if robot.floating else None)
    except BaseException:
        robot.close()
        endpoint.close()
        raise
    try:
        topics = settings.state_topics()
        print(f"twin of {hw.robot} on DDS domain {domain_id}: state on {topics['joints']} at {rate_hz:g} Hz, "
              f"commands on {settings.command_topic_name()}; Ctrl-C stops", file=out, flush=True)
        server.serve(stop, duration_s)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        robot.close()
        endpoint.close()
    print(f"twin stopped: {server.commands} commands applied, {server.rejected} rejected"
          f"{' (last: ' + server.last_error + ')' if server.last_error else ''}", file=out, flush=True)
    return server.commands
