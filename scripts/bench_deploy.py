"""Benchmark the deploy path: ONNX inference latency and control-loop jitter against SimRobot.

    python scripts/bench_deploy.py            # reference policies, 50 Hz and 500 Hz loops
    python scripts/bench_deploy.py --quick

Inference: one observation at a time through onnxruntime (1 thread), as the controller calls it.
Loop: the Controller in-process against the MuJoCo twin running in real time in its own thread;
jitter = how late each tick starts against its absolute deadline t0 + k / rate (p99), with the
tick-to-tick period statistics beside it. At 50 Hz the policy runs (POLICY mode);
at 500 Hz the controller holds the default pose (READY), as a PD-rate loop would.
"""

from __future__ import annotations

import argparse
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


def loop_jitter(policy: str, robot: str, rate_hz: float, seconds: float, with_policy: bool) -> dict[str, float]:
    """Controller timing statistics at `rate_hz` over `seconds`, measured after the soft start."""
    session = open_session(REPO / "policies" / f"{policy}.onnx", REPO / "hardware" / f"{robot}.yaml", realtime=True)
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.calls, args.seconds = 2_000, 2.0

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

    print()
    for name, value, op, goal in targets:
        ok = value < goal if op == "<" else value > goal
        print(f"TARGET {name} measured={value:.3f} goal={op}{goal} {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
