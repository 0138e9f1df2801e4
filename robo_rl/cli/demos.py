"""The demonstration commands of the `robo-rl` CLI: record, replay, dataset (arguments in cli/main.py).

cli/main imports this module for every command, also on a robot where only numpy (and onnxruntime) is
installed, so each command imports what it needs when it runs: pyarrow and PyAV (the `demos` extra), torch
and mujoco (the `train` extra).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robo_rl.core.config import UserError
from robo_rl.demos.dataset_metadata import DEFAULT_IMAGE_SIZE


def cmd_record(args: argparse.Namespace) -> int:
    sim = bool(args.expert or args.teacher)
    if (args.expert and args.teacher) or sim == bool(args.teleop) or (sim and not args.task) or (
            args.teleop and not args.robot):
        raise UserError("record: give either --task TASK --expert or --task TASK --teacher RUN (simulation), or "
                        "--robot HW --teleop DEVICE")
    if args.overrides and not sim:
        raise UserError("record: --set changes the task config of a recording in simulation (--expert, --teacher)")
    if sim and (args.transport != "sim" or args.domain_id or args.policy):
        raise UserError("record: --transport, --domain-id and --policy are options of teleoperation (--robot HW "
                        "--teleop DEVICE); --expert and --teacher record in simulation")
    size = args.image_size or DEFAULT_IMAGE_SIZE
    if args.episodes < 1 or args.num_envs < 1 or not 8 <= size <= 1024 or args.noise < 0:
        raise UserError("record: --episodes and --num-envs must be >= 1, --image-size 8 .. 1024, --noise >= 0")
    if args.teleop:
        return _record_teleop(args)
    from robo_rl.cli.robot import stop_on_signals

    stop_on_signals()  # Ctrl-C or SIGTERM, also in a background job: the episodes recorded so far stay a dataset
    started = time.monotonic()

    def progress(n: int) -> None:
        if sys.stdout.isatty() or n == args.episodes or n % 10 == 0:
            end = "\n" if n == args.episodes or not sys.stdout.isatty() else "\r"
            print(f"recorded {n}/{args.episodes} episodes ({time.monotonic() - started:.0f} s)", end=end, flush=True)

    try:
        summary = _record_teacher(args, progress) if args.teacher else _record_expert(args, progress)
    except ValueError as exc:
        raise UserError(f"record: {exc}") from None
    rate = summary["success_rate"]  # NaN for a task without a success metric (locomotion)
    success = f", {'teacher' if args.teacher else 'expert'} success {rate:.2f}" if rate == rate else ""
    print(f"dataset {args.out}: {summary['episodes']} episodes, {summary['frames']} frames{success}, dropped frames "
          f"{summary['dropped']}")
    return 0


def env_config(task: str, base: Any, overrides: Sequence[str]) -> Any:
    """`base` (the task's config; None: its defaults) with `--set env.FIELD=VALUE` overrides; ValueError (one line)
    for another section, or a field the task lacks or a value it refuses."""
    from robo_rl.core.config import ConfigError, apply_overrides, build, to_plain
    from robo_rl.tasks.task_registry import task_config_class

    cls = task_config_class(task)
    raw = apply_overrides({"env": to_plain(base if base is not None else cls())}, overrides)
    if raw.keys() != {"env"}:
        raise ValueError(f"--set {overrides[0]}: a recording's overrides are its task config's, env.FIELD=VALUE")
    try:
        return build(cls, raw["env"], "env")
    except ConfigError as exc:
        raise ValueError(str(exc).removeprefix("config error: ")) from None


def _record_expert(args: argparse.Namespace, progress: Callable[[int], None]) -> dict[str, Any]:
    """record --task T --expert: the task's scripted expert, in its default config with --set's overrides."""
    from robo_rl.demos.sim_record import record_expert  # the train extra (torch, mujoco)

    cfg = env_config(args.task, None, args.overrides) if args.overrides else None
    return record_expert(args.task, args.episodes, args.out, num_envs=args.num_envs, cameras=args.cameras,
                         image_size=args.image_size, seed=args.seed, action_noise=args.noise, progress=progress,
                         cfg=cfg)


def _record_teacher(args: argparse.Namespace, progress: Callable[[int], None]) -> dict[str, Any]:
    """record --task T --teacher RUN: the run's deterministic policy, in the task config it was trained with;
    ValueError (one line) if the run is of another task or runs action chunks."""
    import torch  # the train extra (torch, mujoco), as the imports below

    from robo_rl.demos.sim_record import PolicyActor, record_demos
    from robo_rl.learn.builders import load_policy, load_trained
    from robo_rl.learn.evaluation import inference_actor
    from robo_rl.tasks.task_registry import make_env

    _, state, cfg = load_trained(args.teacher)
    if cfg.task != args.task:
        raise ValueError(f"--teacher {args.teacher}: the run was trained on {cfg.task!r}, not {args.task!r}")
    if getattr(cfg.policy, "execute_steps", 1) > 1:
        raise ValueError(f"--teacher {args.teacher}: its policy executes action chunks; record from a one-step policy")
    env_cfg = env_config(args.task, cfg.env, args.overrides) if args.overrides else cfg.env
    env = make_env(args.task, min(args.num_envs, args.episodes), cfg=env_cfg, seed=args.seed)
    try:
        with torch.no_grad():
            policy = load_policy(state, cfg, env)
        return record_demos(env, PolicyActor(inference_actor(policy)), args.episodes, args.out, task=args.task,
                            source=f"teacher policy {Path(args.teacher).name}", cameras=args.cameras,
                            image_size=args.image_size, seed=args.seed, action_noise=args.noise, progress=progress)
    finally:
        env.close()


def _record_teleop(args: argparse.Namespace) -> int:
    from robo_rl.demos.teleop import DEVICES, record_teleop  # pyarrow, PyAV (the demos extra)

    try:
        device = DEVICES[args.teleop]()
    except (ImportError, OSError, ValueError) as exc:
        raise UserError(f"record: teleop device {args.teleop}: {exc}") from None
    print(f"teleoperating {args.robot} ({args.transport}): w/s a/d r/f move the hand, space toggles the gripper, "
          "enter ends the episode, q quits", flush=True)
    try:
        report = record_teleop(args.robot, args.out, device, cameras=tuple(args.cameras),
                               image_size=args.image_size or DEFAULT_IMAGE_SIZE, max_speed=args.max_speed,
                               status=lambda line: print(line, flush=True), transport=args.transport,
                               domain_id=args.domain_id, policy=args.policy)
    except (ValueError, RuntimeError) as exc:
        raise UserError(f"record: {exc}") from None
    finally:
        if hasattr(device, "close"):
            device.close()
    print(f"dataset {args.out}: {report['episodes']} episodes, {report['frames']} frames, dropped {report['dropped']}, "
          f"{report['rate_hz']:.1f} Hz")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from robo_rl.demos.replay import replay_episode  # pyarrow, PyAV (the demos extra)
    from robo_rl.deploy.session import transport

    def confirm() -> bool:
        print("holding the episode's first pose: type start + Enter to replay (anything else stops)", flush=True)
        return sys.stdin.readline().strip() == "start"

    try:
        rehearsal = transport(args.transport).rehearsal  # a real robot: the operator confirms on stdin
        out = replay_episode(args.dataset, args.episode, args.robot, realtime=args.realtime,
                             transport=args.transport, domain_id=args.domain_id,
                             confirm=None if rehearsal else confirm)
    except (ValueError, RuntimeError) as exc:
        raise UserError(f"replay: {exc}") from None
    gap = np.abs(out["q"][:-1] - out["recorded"][1:]).max(axis=1) if len(out["q"]) > 1 else np.zeros(1)
    shown = ", ".join(f"{k} {v}" for k, v in sorted(out["interventions"].items())) or "none"
    print(f"replayed episode {args.episode}: {len(out['q'])} ticks; joints vs the recording: max "
          f"{gap.max():.2e} rad, last second {gap[-50:].max():.2e} rad; safety filter interventions: {shown}")
    return 0


def cmd_dataset(args: argparse.Namespace) -> int:
    from robo_rl.demos.dataset_reader import DatasetReader  # pyarrow, PyAV (the demos extra), as below
    from robo_rl.demos.mp4_writer import write_mp4

    if args.dataset_command in ("to-rosbag", "from-rosbag"):
        try:
            if args.dataset_command == "to-rosbag":
                print(dataset_to_rosbag(args.path, args.out, args.episodes, args.storage))
            else:
                print(dataset_from_rosbag(args.bag, args.mapping, args.out))
        except ValueError as exc:
            raise UserError(f"dataset {args.dataset_command}: {exc}") from None
        return 0
    reader = DatasetReader(args.path)
    if args.dataset_command == "stats":
        stats = json.loads((reader.root / "meta" / "stats.json").read_text())
        for key, st in stats.items():
            def fmt(name: str, st: dict = st) -> str:
                return np.array2string(np.asarray(st[name]).reshape(-1)[:6], precision=3, separator=" ")
            print(f"{key:<32} mean {fmt('mean')} std {fmt('std')} min {fmt('min')} max {fmt('max')}")
        return 0
    if args.dataset_command == "video" and args.render:
        from robo_rl.demos.replay import render_episode  # the render itself needs mujoco (the train extra)

        try:
            frames, fps = render_episode(args.path, args.episode, args.render, camera=args.camera or "track")
        except ValueError as exc:
            raise UserError(f"dataset video: {exc}") from None
        write_mp4(args.out, frames, fps)
        print(f"{args.out}: episode {args.episode} re-rendered on the twin, {len(frames)} frames at {fps:g} fps")
        return 0
    if args.dataset_command == "video":
        key = args.camera or (reader.video_keys[0] if reader.video_keys else None)
        if key not in reader.video_keys:
            raise UserError(f"dataset video: {args.path} has no camera {key!r}; cameras: "
                            f"{', '.join(reader.video_keys) or 'none'}")
        frames = reader.episode(args.episode)[key]
        write_mp4(args.out, list(frames), reader.fps)
        print(f"{args.out}: episode {args.episode}, {len(frames)} frames of {key} at {reader.fps:g} fps")
        return 0
    info = reader.meta.info
    print(f"{args.path}: LeRobot {info['codebase_version']}, {reader.num_episodes} episodes, {reader.num_frames} "
          f"frames at {reader.fps:g} fps, robot {info.get('robot_type') or '-'}, tasks {len(reader.meta.tasks)}")
    for key, spec in reader.features.items():
        names = spec.get("names")
        shown = f" ({', '.join(map(str, names[:4]))}{', ...' if len(names) > 4 else ''})" if names else ""
        print(f"  {key:<32} {spec['dtype']:<8} {spec['shape']}{shown}")
    return 0


# ---------------------------------------------------------------------------------------------- rosbag2
MAPPING_FILE = "robo_rl_mapping.yaml"
"""`dataset to-rosbag` writes the import mapping of the bag into the bag folder under this name."""


def parse_episodes(text: str | Sequence[int] | None) -> list[int] | None:
    """None, a list of ints, or "0,2,5-7" -> episode indices (None: all); ValueError (one line) otherwise."""
    if text is None or isinstance(text, (list, tuple)):
        return None if text is None else [int(e) for e in text]
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"--episodes {text!r}: expected indices like 0,2,5-7")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"--episodes {text!r}: range {part} runs backwards")
        out.extend(range(lo, hi + 1))
    return out


def dataset_to_rosbag(dataset: str | Path, out: str | Path, episodes: str | Sequence[int] | None = None,
                      storage: str = "mcap") -> str:
    """`robo-rl dataset to-rosbag`: export, and write the import mapping as <out>/robo_rl_mapping.yaml.

    Returns:
        The one summary line printed.
    """
    from robo_rl.demos.rosbag_export import dataset_mapping, dataset_to_bag  # rosbags, pyarrow (optional)

    report = dataset_to_bag(dataset, out, episodes=parse_episodes(episodes), storage=storage)
    mapping_path = Path(out) / MAPPING_FILE
    mapping_path.write_text(yaml.safe_dump(dataset_mapping(dataset), sort_keys=False))
    return (f"wrote {report['episodes']} episodes ({report['frames']} frames, {report['duration_s']:.1f} s) of "
            f"{dataset} to {out} ({storage}, topics {', '.join(sorted(report['topics']))}); import mapping "
            f"{mapping_path}")


def dataset_from_rosbag(bag: str | Path, mapping_yaml_path: str | Path, out: str | Path) -> str:
    """`robo-rl dataset from-rosbag`: import with a YAML mapping (its fps is the dataset rate).

    Returns:
        The one summary line printed.
    """
    from robo_rl.demos.rosbag_import import bag_to_dataset  # rosbags, pyarrow (optional)

    report = bag_to_dataset(bag, out, mapping_yaml_path)
    extra = f"; {report['skipped']} frames skipped before every stream started" if report["skipped"] else ""
    extra += f"; {report['empty']} episodes had no complete frame" if report["empty"] else ""
    return f"imported {report['episodes']} episodes ({report['frames']} frames) from {bag} into {out}{extra}"
