"""Benchmark: camera frames/s of the batched headless renderer (`backend.render_cameras`) on the CPU.

The worlds are `arm-pick-place-vision`'s (the arm with its gripper, a table, three coloured cubes
and the place marker), N of them driven for 1 s by the scripted expert so that each shows its own
mid-episode scene; the camera is the task's fixed `scene` camera. Frames/s = worlds / seconds of
one `render_cameras("scene", W, W)` call for all worlds; the sizes take turns within each round,
median over rounds, single process. With `--variants` each speed setting of `RenderSettings` is
also timed switched back to MuJoCo's default value (and the per-world `mujoco.Renderer` path that
`backend.render` uses for videos), all in turn within each round on the same states, so a slow
spell of this shared machine hits every variant alike.

    python scripts/bench_render.py                         # 64 worlds, 64 and 96 px
    python scripts/bench_render.py --variants              # what each setting is worth at 64 px
    MUJOCO_GL=osmesa python scripts/bench_render.py        # the other headless OpenGL
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from collections.abc import Callable

# isort: off
from robo_rl.sim import set_training_process_defaults

set_training_process_defaults()  # before torch is imported, as the CLI does
from robo_rl.sim.mujoco_cpu import MujocoCpuBackend  # noqa: E402  (sets a headless MUJOCO_GL before mujoco loads)

# isort: on
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from robo_rl.sim.render import CameraRenderer, RenderSettings  # noqa: E402

CAMERA = "scene"
TARGET_FPS = 200.0
"""Issue 11's goal for 64x64 frames/s on this 2-core machine."""


def mid_episode_backend(num_envs: int, seed: int = 0, seconds: float = 1.0) -> MujocoCpuBackend:
    """The backend of arm-pick-place-vision worlds `seconds` into an episode of the scripted expert: every world
    differs.

    The env is left open (its backend is returned); the process ends soon after in the benchmark.
    """
    from robo_rl.tasks.experts import PickPlaceExpert
    from robo_rl.tasks.task_registry import make_env

    env = make_env("arm-pick-place-vision", num_envs, seed=seed)
    env.reset(random_start=False)
    expert = PickPlaceExpert(env)
    for _ in range(round(seconds / env.dt)):
        env.step(expert(env))
    return env.backend


def frames_per_s(render: Callable[[], object], frames: int, rounds: int) -> list[float]:
    """Frames/s of `render` (which draws `frames` images) in each of `rounds` timed calls, after one untimed."""
    render()
    rates = []
    for _ in range(rounds):
        t = time.perf_counter()
        render()
        rates.append(frames / (time.perf_counter() - t))
    return rates


def variant_loops(b: MujocoCpuBackend, size: int, slow_worlds: int) -> dict[str, tuple[Callable[[], object], int]]:
    """name -> (one call, frames it draws): ours, each setting back at MuJoCo's default, and mujoco.Renderer."""
    n = b.num_envs
    states, mocap = b.state.numpy(), b.mocap_pos.numpy()
    models = [b.model] * n  # no per-world parameters in these worlds
    variants = {  # name -> (settings, slow): each setting RenderSettings changes, back at MuJoCo's value
        "shadows on (4096 px shadow map)": (RenderSettings(shadows=True), True),
        "reflections on": (RenderSettings(reflections=True), False),
        "skybox on": (RenderSettings(skybox=True), False),
        "4x multisampling": (RenderSettings(multisamples=4), False),
        "28 x 16 facets (MuJoCo's default)": (RenderSettings(num_slices=28, num_stacks=16), False),
    }
    loops: dict[str, tuple[Callable[[], object], int]] = {}
    ours = CameraRenderer(b.model, CAMERA, size, size, max_worlds=n)
    loops["ours (RenderSettings defaults)"] = (lambda: ours.render(models, states, mocap), n)
    for name, (settings, slow) in variants.items():
        k = slow_worlds if slow else n
        r = CameraRenderer(b.model, CAMERA, size, size, max_worlds=k, settings=settings)
        loops[name] = ((lambda r=r, k=k: r.render(models, states, mocap, range(k))), k)
    infinite = copy.copy(b.model)  # the floor as it was before this benchmark: an infinite plane, 5 cm grid
    infinite.geom_size[mujoco.mj_name2id(infinite, mujoco.mjtObj.mjOBJ_GEOM, "floor")] = [0, 0, 0.05]
    old_floor = CameraRenderer(infinite, CAMERA, size, size, max_worlds=n)  # the context holds the plane's grid
    loops["infinite floor plane (0 0 0.05)"] = (lambda: old_floor.render([infinite] * n, states, mocap), n)
    full = RenderSettings(shadows=True, reflections=True, skybox=True, multisamples=4, num_slices=28, num_stacks=16)
    everything = CameraRenderer(infinite, CAMERA, size, size, max_worlds=slow_worlds, settings=full)
    loops["all of MuJoCo's defaults + infinite floor"] = (
        lambda: everything.render([infinite] * slow_worlds, states, mocap, range(slow_worlds)), slow_worlds)
    video = mujoco.Renderer(infinite, height=size, width=size)  # backend.render's path, old floor
    d, frame = mujoco.MjData(infinite), np.empty((size, size, 3), np.uint8)

    def per_world_renderer() -> None:
        for i in range(slow_worlds):
            mujoco.mj_setState(infinite, d, states[i], mujoco.mjtState.mjSTATE_FULLPHYSICS)
            mujoco.mj_forward(infinite, d)
            video.update_scene(d, camera=CAMERA)
            video.render(out=frame)

    loops["mujoco.Renderer per world, mj_forward (videos)"] = (per_world_renderer, slow_worlds)
    return loops


def update_cost_us(b: MujocoCpuBackend, reps: int = 2000) -> dict[str, float]:
    """Microseconds per world of the state update before drawing: mj_forward vs mj_fwdKinematics."""
    m, d, states = b.model, mujoco.MjData(b.model), b.state.numpy()
    out = {}
    for name, fn in (("mj_forward", mujoco.mj_forward), ("mj_fwdKinematics", mujoco.mj_fwdKinematics)):
        t = time.perf_counter()
        for k in range(reps):
            mujoco.mj_setState(m, d, states[k % len(states)], mujoco.mjtState.mjSTATE_FULLPHYSICS)
            fn(m, d)
        out[name] = (time.perf_counter() - t) / reps * 1e6
    return out


def measure_variants(b: MujocoCpuBackend, size: int, rounds: int, slow_worlds: int) -> dict[str, list[float]]:
    """Frames/s per variant and round; all variants run one call in turn within each round."""
    loops = variant_loops(b, size, slow_worlds)
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, (call, frames) in loops.items():
            rates[name] += frames_per_s(call, frames, 1)
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, default=64, help="worlds rendered per call")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 96], help="square image sizes; 64 gives the TARGET")
    p.add_argument("--rounds", type=int, default=15, help="timed calls per size (the median counts)")
    p.add_argument("--variants", action="store_true", help="also time each setting at MuJoCo's default (64 px)")
    p.add_argument("--smoke", action="store_true", help="2 worlds 0.1 s into their episode, 1 round: a smoke test")
    args = p.parse_args()
    if args.smoke:
        args.num_envs, args.rounds = 2, 1
    if 64 not in args.sizes:
        args.sizes = [64, *args.sizes]

    b = mid_episode_backend(args.num_envs, seconds=0.1 if args.smoke else 1.0)
    print(f"MUJOCO_GL={os.environ.get('MUJOCO_GL')}, cores {os.cpu_count()}, "
          f"{args.num_envs} worlds of arm-pick-place-vision, "
          f"camera {CAMERA!r}, median of {args.rounds} calls")
    calls = {size: (lambda size=size: b.render_cameras(CAMERA, size, size)) for size in args.sizes}
    for call in calls.values():
        call()  # untimed: makes each renderer
    rates: dict[int, list[float]] = {size: [] for size in args.sizes}
    for _ in range(args.rounds):  # the sizes take turns, so a slow spell of the machine hits all of them
        for size, call in calls.items():
            rates[size] += frames_per_s(call, args.num_envs, 1)
    medians = {size: statistics.median(r) for size, r in rates.items()}
    for size, r in rates.items():
        q1, _, q3 = statistics.quantiles(r, n=4) if len(r) > 1 else (r[0],) * 3
        print(f"  {size}x{size}: {medians[size]:8.0f} frames/s   (middle half {q1:.0f}-{q3:.0f})")
    if args.variants:
        slow = min(8, args.num_envs)
        print(f"\nvariants at 64x64, frames/s (median of {args.rounds} rounds; the slow ones: {slow} worlds a call)")
        variant_rates = measure_variants(b, 64, args.rounds, slow)
        base = statistics.median(variant_rates["ours (RenderSettings defaults)"])
        for name, r in variant_rates.items():
            med = statistics.median(r)
            print(f"  {name:<50} {med:8.0f}   {med / base:5.2f} of ours")
        cost = update_cost_us(b)
        print("  state update per world before drawing: " + ", ".join(f"{k} {v:.1f} us" for k, v in cost.items()))
    b.close()
    value = medians[64]
    print(f"\nTARGET render_64px_frames_per_s measured={value:.1f} goal=>={TARGET_FPS:.0f} "
          f"{'PASS' if value >= TARGET_FPS else 'FAIL'}")


if __name__ == "__main__":
    main()
