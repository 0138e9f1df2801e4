"""`robo-rl deploy` and `robo-rl twin`: an exported policy on a robot or its twin, and the twin served over DDS.

Imported by `robo_rl.cli.main` for every command, also on a robot where only numpy and onnxruntime are installed:
the deploy core is imported inside each command.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.core.config import UserError


# ---------------------------------------------------------------------------------------------- deploy
def _vector(text: str, flag: str) -> np.ndarray:
    """Three finite comma-separated numbers (3,); UserError otherwise (NaN and Inf are refused)."""
    try:
        values = np.array([float(x) for x in text.split(",")])
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected three comma-separated numbers") from None
    if values.shape != (3,):
        raise UserError(f"{flag} {text!r}: expected three comma-separated numbers")
    if not np.all(np.isfinite(values)):
        raise UserError(f"{flag} {text!r}: non-finite value refused; expected three finite numbers")
    return values


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM both raise KeyboardInterrupt, even when the parent started us with SIGINT ignored
    (background jobs of a non-interactive shell, some launchers): the robot is stopped safely, a training run
    unwinds without leaving a partial file."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


# Flags a transport takes only if it lists the option (Transport.options), and flags of operator-started
# (real, not rehearsal) transports: (flag, ConnectOptions field or None, given?).
_TRANSPORT_FLAGS = (
    ("--latency", "latency_s", lambda a: a.latency != 0.0),
    ("--noise", "noise_std", lambda a: a.noise != 0.0),
    ("--domain-id", "domain_id", lambda a: a.domain_id != 0),
    ("--command-interface", "command_interface", lambda a: a.command_interface is not None),
    ("--scene", "scene", lambda a: getattr(a, "scene", None) is not None),
    ("--dry-run", None, lambda a: a.dry_run),
    ("--estop-timeout", None, lambda a: getattr(a, "estop_timeout", 0.0) != 0.0),
    ("--reset-module", None, lambda a: a.reset_module != "home"),
    ("--reward", None, lambda a: bool(a.rewards)),
)


def _takes(entry: Any, option: str | None) -> bool:
    """Whether a transport takes a ConnectOptions field (None: an operator flag, for real transports only)."""
    return not entry.rehearsal if option is None else option in entry.options


def _transport_options(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """The ConnectOptions the user chose for transport `name`; UserError for a flag it does not take."""
    from robo_rl.deploy.session import available_transports, transport

    try:
        entry = transport(name)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    given = [(flag, option) for flag, option, is_given in _TRANSPORT_FLAGS if is_given(args)]
    refused = [(flag, option) for flag, option in given if not _takes(entry, option)]
    if refused:
        takers = [n for n, e in available_transports().items() if all(_takes(e, o) for _, o in refused)]
        raise UserError(f"{', '.join(f for f, _ in refused)}: only with --transport {' or '.join(takers) or '?'} "
                        f"(got --transport {name})")
    values = {"latency_s": args.latency, "noise_std": args.noise, "domain_id": args.domain_id,
              "command_interface": args.command_interface, "scene": getattr(args, "scene", None)}
    return {option: values[option] for option in entry.options if option in values}


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr, flush=True)


def cmd_deploy(args: argparse.Namespace) -> int:
    """Deploy: exit 0 after a normal end or Ctrl-C, 1 when the robot stopped on a fault, 2 for bad input.

    Operator commands are parsed and checked (finite, clamped into the trained range with a warning)
    before anything connects to the robot. The transport comes from the registry; on a real one POLICY
    starts only on the operator's `start`, the sim twin's rehearsal starts it once READY.
    """
    from robo_rl.deploy.runtime import PolicyRuntime
    from robo_rl.deploy.runtime_config import RuntimeConfig
    from robo_rl.deploy.session import deploy_exit_code, run_deploy
    from robo_rl.deploy.state_machine import Mode

    wanted = {}
    if args.velocity:
        wanted["velocity_command"] = _vector(args.velocity, "--velocity")
    if args.target:
        wanted["target_pos"] = _vector(args.target, "--target")
    for flag, value in (("--duration", args.duration), ("--latency", args.latency), ("--noise", args.noise)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise UserError(f"{flag} {value!r}: must be a finite number >= 0")
    options = _transport_options(args, args.transport)
    try:
        config = RuntimeConfig(policy_path=args.policy, hardware_config=args.robot,
                               command_interface=args.command_interface, dry_run=args.dry_run,
                               reset_module=args.reset_module, rewards=tuple(args.rewards),
                               allow_unsafe_hardware=args.allow_unsafe_hardware,
                               realtime_priority=args.realtime_priority, estop_timeout_s=args.estop_timeout)
        runtime = PolicyRuntime(config, log=lambda line: print(f"\n{line}", flush=True), warn=_warn)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    wrap, holder = None, {}
    if args.record:  # the recorder is built here and handed to the deploy core (which never imports demos)
        from robo_rl.demos.recorder import recording_wrapper

        scored = bool(args.rewards)  # each frame carries the reward modules' outcome (next.reward, next.done, ...)
        wrap_recorder, holder = recording_wrapper(args.record, task=f"deploy {Path(args.policy).stem}",
                                                  policy=lambda: runtime.policy, scored=scored)

        def wrap(robot: Any) -> Any:
            rec = wrap_recorder(robot)
            rec.gate = lambda: runtime.controller is not None and runtime.controller.mode is Mode.POLICY
            return rec

        def end_episode(event: Any) -> None:
            rec = holder.get("rec")
            ends = ("reset",) if scored else ("success", "failure", "reset")  # scored: the outcome ends it
            if rec is not None and event.kind in ends and rec._open:
                rec.end_episode()

        def outcome(step: Any) -> None:
            rec = holder.get("rec")
            if rec is not None:
                rec.outcome(step)

        runtime.subscribe(on_event=end_episode, on_step=outcome if scored else None)
    stop_on_signals()
    try:
        run_deploy(runtime, args.transport, options=options, commands=wanted, wrap_robot=wrap,
                   duration_s=args.duration, instruction=args.instruction)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    finally:
        rec = holder.get("rec")
        if rec is not None:
            rec.writer.close()  # commits the episode still open
            r = rec.report()
            print(f"recorded {r['frames']} frames into {args.record}, dropped {r['dropped']}", flush=True)
    c = runtime.controller
    stats = c.stats()
    print(f"stopped in {c.mode.name}; ticks {stats['ticks']}, missed {stats['missed_ticks']}, "
          f"period p99 {stats['period_p99'] * 1e3:.2f} ms", flush=True)
    code, line = deploy_exit_code(runtime)
    if line:
        print(f"robo-rl: {line}", file=sys.stderr, flush=True)
    return code


# ---------------------------------------------------------------------------------------------- twin
def cmd_twin(args: argparse.Namespace) -> int:
    """Serve the twin until Ctrl-C / SIGTERM / --duration: exit 0; bad input: 2."""
    from robo_rl.deploy.session import available_transports, transport

    try:
        entry = transport(args.transport)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if entry.serve_twin is None:
        servers = [n for n, e in available_transports().items() if e.serve_twin is not None]
        raise UserError(f"--transport {args.transport!r}: the twin is served over {' or '.join(servers)} only")
    for flag, value in (("--duration", args.duration), ("--latency", args.latency), ("--noise", args.noise)):
        if value is not None and not (np.isfinite(value) and value >= 0):
            raise UserError(f"{flag} {value!r}: must be a finite number >= 0")
    stop_on_signals()
    try:
        entry.serve_twin(args.robot, domain_id=args.domain_id, rate_hz=args.rate, duration_s=args.duration,
                         command_interface=args.command_interface, physics_dt=args.physics_dt,
                         latency_s=args.latency, noise_std=args.noise, sport_mode=args.sport_mode,
                         publish_ee=not args.no_ee_position, cameras=tuple(args.cameras),
                         image_size=args.image_size, camera_rate_hz=args.camera_rate)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return 0


