"""GPU check of the MuJoCo Warp backend: parity with the CPU backend on CUDA, then throughput. Installs nothing.

Run it from a set-up checkout (`bash scripts/setup.sh`, which installs the `gpu` extra) on a machine
with an NVIDIA GPU:

    .venv/bin/python scripts/gpu_check.py            # about 5 minutes, most of it compiling kernels once

It runs, each with a time limit, and prints a short report at the end:
  1. tests/sim/test_warp_backend.py with the Warp side on cuda:0 (every task against the CPU backend);
  2. scripts/bench_sim.py --backend mujoco_warp --device cuda:0: our env against raw mujoco_warp.step
     (TARGET warp_env_vs_raw_step_* >= 0.85) and end-to-end PPO env steps/s on quadruped-walk-flat at
     4096 worlds (TARGET warp_ppo_quadruped_env_steps_per_s >= 150000 on an H100/H200-class GPU).
  3. with --distributed, scripts/bench_distributed.py --scaling: PPO env steps/s on quadruped-walk-flat, one GPU
     (4096 worlds) against all local GPUs under torchrun (4096 worlds each, NCCL), and the scaling factor
     (TARGET distributed_scaling_<G>_ranks >= 0.8 G); on a machine with one GPU it reports that nothing scales.
Exit status 0 when every step exits 0 (a FAIL target is reported, not an error), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(title: str, argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[str, str, float]:
    """(status: "ok", "exit N" or "timed out", its output, seconds) of one step, killed after `timeout_s`."""
    print(f"== {title}: {' '.join(argv)}", flush=True)
    t = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        out, status = done.stdout + done.stderr, "ok" if done.returncode == 0 else f"exit {done.returncode}"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        status = f"timed out after {timeout_s:.0f} s"
    seconds = time.perf_counter() - t
    print(out[-4000:], flush=True)
    return status, out, seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--smoke", action="store_true", help="smaller benchmark (a smoke test of the script)")
    p.add_argument("--distributed", action="store_true", help="also measure 1 GPU against all local GPUs")
    args = p.parse_args()
    python = sys.executable
    probe = subprocess.run([python, "-c", "import warp as wp; wp.config.quiet = True; "
                            "print('DEVICES', *wp.get_devices())"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("gpu_check: warp is not installed here; run `bash scripts/setup.sh` first (it installs the gpu extra)")
        return 1
    devices = next(ln for ln in probe.stdout.splitlines() if ln.startswith("DEVICES")).split()[1:]
    if args.device not in devices:
        print(f"gpu_check: Warp sees no {args.device} here (devices: {', '.join(devices)}); run it on a CUDA machine")
        return 1
    env = {**os.environ, "ROBO_RL_TEST_WARP_DEVICE": args.device, "PYTHONPATH": str(REPO)}
    bench = [python, "scripts/bench_sim.py", "--backend", "mujoco_warp", "--device", args.device,
             "--num-envs", "4096", "--rounds", "5", "--steps", "20"]
    if args.smoke:
        bench = [*bench[:4], "--device", args.device, "--smoke"]
    steps = [
        ("parity with the CPU backend", [python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                         "tests/sim/test_warp_backend.py"], 150),
        ("throughput", bench, 150),
    ]
    if args.distributed:
        import torch

        gpus = torch.cuda.device_count()
        if gpus < 2:
            print(f"gpu_check: --distributed needs 2 or more GPUs; this machine has {gpus}: scaling not measured")
        else:
            steps.append(("distributed scaling", [python, "scripts/bench_distributed.py", "--scaling", "--ranks",
                                                  str(gpus), "--device", "cuda", "--worlds", "4096",
                                                  *(["--smoke"] if args.smoke else [])], 400))
    report = []
    for title, argv, limit in steps:
        status, out, seconds = run(title, argv, env, limit)
        lines = [ln for ln in out.splitlines() if ln.startswith("TARGET ") or " passed" in ln or " failed" in ln]
        report.append((title, status, seconds, lines))
    print("\n== gpu_check report")
    for title, status, seconds, lines in report:
        print(f"{title}: {status} in {seconds:.0f} s")
        for line in lines:
            print(f"  {line}")
    return 0 if all(status == "ok" for _, status, _, _ in report) else 1


if __name__ == "__main__":
    sys.exit(main())
