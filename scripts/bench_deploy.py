"""Benchmark the deploy path: ONNX inference latency, control-loop jitter against SimRobot, and over DDS.

    python scripts/bench_deploy.py            # reference policies, 50 Hz and 500 Hz loops, DDS rows
    python scripts/bench_deploy.py --smoke

Inference: one observation at a time through onnxruntime (1 thread), as the controller calls it.
Loop: the Controller in-process against the MuJoCo twin running in real time in its own thread;
jitter = how late each tick starts against its absolute deadline t0 + k / rate (p99), with the
tick-to-tick period statistics beside it. At 50 Hz the policy runs (POLICY mode);
at 500 Hz the controller holds the default pose (READY), as a PD-rate loop would.
DDS (loopback only: CYCLONEDDS_URI pins Cyclone DDS to `lo`, no multicast, a random domain):
round trip = a JointState of 12 joints sent to a second process that echoes it back at once
(reliable, keep last 1); loop = the Controller at 50 Hz in POLICY over DDS against `robo-rl twin` in
another process (the Go2 on Unitree's lowstate / lowcmd, the Panda on ROS 2 topics).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from robo_rl.deploy.policy import OnnxPolicy
from robo_rl.deploy.session import open_session
from robo_rl.deploy.state_machine import Mode

REPO = Path(__file__).resolve().parents[1]
REFERENCE = {"panda_reach": "panda", "go2_walk": "go2"}


def inference_latency(policy_path: Path, calls: int) -> np.ndarray:
    """Seconds per call for `calls` single-observation inferences."""
    policy = OnnxPolicy(policy_path)
    obs = np.random.default_rng(0).standard_normal(policy.contract.obs_dim).astype(np.float32)
    for _ in range(200):
        policy(obs)
    out = np.empty(calls)
    for i in range(calls):
        t = time.perf_counter()
        policy(obs)
        out[i] = time.perf_counter() - t
    return out


def start_loop(session, rate_hz: float, with_policy: bool = True) -> tuple[threading.Event, threading.Thread]:
    """Run the session's controller at `rate_hz` on a thread: RAMP, READY, then POLICY (or hold READY);
    returns (stop event, thread) once there, with the timing statistics reset."""
    c = session.controller
    c.period = 1.0 / rate_hz
    stop = threading.Event()
    worker = threading.Thread(target=c.run, kwargs={"stop_event": stop}, daemon=True)
    c.request_ramp()
    worker.start()
    while c.mode is not Mode.READY:
        time.sleep(0.01)
    if with_policy:
        c.start_policy()
    c.reset_stats()
    return stop, worker


def loop_jitter(policy: str, robot: str, rate_hz: float, seconds: float, with_policy: bool) -> dict[str, float]:
    """Controller timing statistics at `rate_hz` over `seconds`, measured after the soft start."""
    session = open_session(REPO / "policies" / f"{policy}.onnx", REPO / "hardware" / f"{robot}.yaml", realtime=True)
    c = session.controller
    stop, worker = start_loop(session, rate_hz, with_policy)
    time.sleep(seconds)
    stats = c.stats()
    fault = c.last_fault
    stop.set()
    worker.join()
    c.shutdown()
    session.robot.close()
    if fault is not None:
        print(f"  warning: the controller faulted ({fault}: {c.last_error})")
    return stats


PING, PONG = "rt/robo_rl_bench/ping", "rt/robo_rl_bench/pong"


def dds_echo(domain: int, seconds: float) -> None:
    """The second process of the round trip: send every ping straight back (from the listener thread)."""
    from robo_rl.deploy import ros_interface as names
    from robo_rl.deploy.transports.dds import dds_types as dt
    from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint

    endpoint = DdsEndpoint(domain)
    pong = endpoint.writer(PONG, dt.JointState, names.COMMAND_QOS)
    endpoint.reader(PING, dt.JointState, names.COMMAND_QOS, lambda msg, received: pong.write(msg))
    time.sleep(seconds)
    endpoint.close()


def dds_round_trip(domain: int, pings: int) -> np.ndarray:
    """Seconds per round trip of `pings` JointState messages through an echoing second process."""
    from robo_rl.deploy import ros_interface as names
    from robo_rl.deploy import ros_messages as rm
    from robo_rl.deploy.transports.dds import dds_types as dt
    from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint

    echo = subprocess.Popen([sys.executable, __file__, "--dds-echo", str(domain)], env=_dds_env())
    endpoint = DdsEndpoint(domain)
    got = threading.Event()
    endpoint.reader(PONG, dt.JointState, names.COMMAND_QOS, lambda msg, received: got.set())
    ping = endpoint.writer(PING, dt.JointState, names.COMMAND_QOS)
    n = 12
    msg = rm.joint_state_message(dt.dds_message_types(), [f"joint_{i}" for i in range(n)], np.zeros(n), np.zeros(n),
                                 np.zeros(n), 0.0)
    try:
        deadline = time.monotonic() + 30.0
        while not got.is_set():  # discovery: until the first echo comes back
            if time.monotonic() > deadline:
                raise RuntimeError("the echo process never answered")
            ping.write(msg)
            got.wait(0.1)
        time.sleep(0.2)
        out = np.empty(pings)
        for i in range(pings):
            got.clear()
            t = time.perf_counter()
            ping.write(msg)
            if not got.wait(1.0):
                raise RuntimeError(f"round trip {i} lost")
            out[i] = time.perf_counter() - t
        return out
    finally:
        endpoint.close()
        echo.terminate()
        echo.wait()


def _dds_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def dds_loop_jitter(policy: str, robot: str, domain: int, seconds: float) -> dict[str, float]:
    """Controller statistics at 50 Hz in POLICY over DDS against `robo-rl twin` in another process."""
    twin = subprocess.Popen([sys.executable, "-m", "robo_rl.cli", "twin", "--robot", f"hardware/{robot}.yaml",
                             "--transport", "dds", "--domain-id", str(domain)], cwd=REPO, env=_dds_env(),
                            stdout=subprocess.DEVNULL)
    session = worker = None
    stop = threading.Event()
    try:
        session = open_session(REPO / "policies" / f"{policy}.onnx", REPO / "hardware" / f"{robot}.yaml", "dds",
                               domain_id=domain)
        session.robot.wait_for_state(60.0, fresh_within_s=session.hw.safety.state_timeout_s)
        c = session.controller
        worker = threading.Thread(target=c.run, kwargs={"stop_event": stop}, daemon=True)
        c.request_ramp()
        worker.start()
        deadline = time.monotonic() + 30.0
        while c.mode is not Mode.READY:
            if time.monotonic() > deadline or c.mode in (Mode.DAMP, Mode.ESTOP):
                raise RuntimeError(f"never READY over DDS: {c.status_line()} {c.last_error or ''}")
            time.sleep(0.01)
        c.start_policy()
        c.reset_stats()
        time.sleep(seconds)
        stats = c.stats()
        if c.last_fault is not None:
            print(f"  warning: the controller faulted ({c.last_fault}: {c.last_error})")
        return stats
    finally:
        stop.set()
        if worker is not None:
            worker.join()
            session.controller.shutdown()
        if session is not None:
            session.robot.close()
        twin.terminate()
        twin.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--pings", type=int, default=2_000)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--no-dds", action="store_true", help="skip the DDS rows")
    p.add_argument("--dds-echo", type=int, metavar="DOMAIN", help=argparse.SUPPRESS)  # the round trip's 2nd process
    args = p.parse_args()
    if args.dds_echo is not None:
        dds_echo(args.dds_echo, 120.0)
        return
    if args.smoke:
        args.calls, args.seconds, args.pings = 2_000, 2.0, 300

    targets = []
    print("onnxruntime inference, one observation per call (us)")
    worst_p99 = 0.0
    for name in REFERENCE:
        lat = inference_latency(REPO / "policies" / f"{name}.onnx", args.calls) * 1e6
        p50, p99 = np.percentile(lat, [50, 99])
        worst_p99 = max(worst_p99, p99)
        print(f"  {name:<12} p50 {p50:7.1f}   p99 {p99:7.1f}   max {lat.max():8.1f}")
    targets.append(("inference_p99_us", worst_p99, "<", 100.0))

    print(f"\ncontrol loop against SimRobot (real time), {args.seconds:g} s each (ms)")
    for rate, with_policy in ((50.0, True), (500.0, False)):
        s = loop_jitter("go2_walk", "go2", rate, args.seconds, with_policy)
        mode = "POLICY" if with_policy else "READY"
        jitter_p99 = s["lateness_p99"] * 1e3  # how late ticks start against their absolute deadlines
        print(f"  {rate:5.0f} Hz {mode:<6} ticks {int(s['ticks']):6d}  period p50 {s['period_p50'] * 1e3:7.3f}  "
              f"p99 {s['period_p99'] * 1e3:7.3f}  max {s['period_max'] * 1e3:7.3f}  "
              f"lateness p99 {s['lateness_p99'] * 1e3:6.3f}  missed {int(s['missed_ticks'])}")
        if rate == 50.0:
            targets.append(("loop_jitter_p99_ms_50hz", jitter_p99, "<", 1.0))

    if not args.no_dds:
        from robo_rl.deploy.dds_settings import MAX_DOMAIN_ID, loopback_config

        os.environ["CYCLONEDDS_URI"] = loopback_config()  # loopback only; the child processes inherit it
        domain = random.SystemRandom().randint(1, MAX_DOMAIN_ID)
        rtt = dds_round_trip(domain, args.pings) * 1e3
        p50, p99 = np.percentile(rtt, [50, 99])
        print(f"\nDDS round trip between two processes, JointState (12 joints), {args.pings} pings (ms)")
        print(f"  p50 {p50:6.3f}   p99 {p99:6.3f}   max {rtt.max():6.3f}")
        print(f"\ncontrol loop over DDS against `robo-rl twin` in another process, 50 Hz POLICY, "
              f"{args.seconds:g} s each (ms)")
        worst = 0.0
        for policy, robot, profile in (("go2_walk", "go2", "unitree"), ("panda_reach", "panda", "ros2")):
            try:
                s = dds_loop_jitter(policy, robot, domain, args.seconds)
            except RuntimeError as exc:  # a loaded machine can stall a process past the watchdog: once more
                print(f"  {robot}: {exc}; retrying once")
                s = dds_loop_jitter(policy, robot, domain, args.seconds)
            worst = max(worst, s["lateness_p99"] * 1e3)
            print(f"  {robot:<5} {profile:<7} ticks {int(s['ticks']):6d}  period p50 {s['period_p50'] * 1e3:7.3f}  "
                  f"p99 {s['period_p99'] * 1e3:7.3f}  max {s['period_max'] * 1e3:7.3f}  "
                  f"lateness p99 {s['lateness_p99'] * 1e3:6.3f}  missed {int(s['missed_ticks'])}")
        targets.append(("dds_loop_jitter_p99_ms_50hz", worst, "<", 1.0))

    print()
    for name, value, op, goal in targets:
        ok = value < goal if op == "<" else value > goal
        print(f"TARGET {name} measured={value:.3f} goal={op}{goal} {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
