"""The `robo-rl` command: train, play, export, deploy, twin, record, replay, dataset, reward-classifier, tasks.

User mistakes (unknown task, bad config key or value, missing run, unwritable output, a run in use)
print one line `robo-rl: ...` on stderr and never a traceback.

Exit codes:
    0: success.
    1: training stopped because a value became non-finite (`training stopped at iteration N: ...`);
       the run's newest checkpoint is the last good one.
    2: a user mistake (command line, config, files); nothing was written.
    3: a distributed run lost a rank (it died, stalled past --dist-timeout or became unreachable).
    130: interrupted (Ctrl-C or SIGTERM; the newest checkpoint on disk is whole).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import yaml

from robo_rl.cli.classifier import cmd_reward_classifier  # light: torch and the dataset reader lazily
from robo_rl.cli.demos import cmd_dataset, cmd_record, cmd_replay  # light: numpy; the rest lazily
from robo_rl.cli.robot import cmd_deploy, cmd_twin, stop_on_signals  # light: numpy; the deploy core lazily
from robo_rl.cli.train_real import add_parser as add_train_real_parser  # light; actor and learner lazily
from robo_rl.cli.train_real import cmd_train_real
from robo_rl.core.assets import find_data_file
from robo_rl.core.config import MAX_SEED, ConfigError, RankLost, UserError, load_yaml
from robo_rl.deploy.controller import REALTIME_PRIORITY  # light: numpy
from robo_rl.sim.sim_config import MAX_NUM_ENVS


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (`robo-rl train: argument --num-envs: ...`), exit 2."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("robo-rl").strip()
        self.exit(2, f"robo-rl: {where + ': ' if where else ''}{message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="robo-rl", description="Robotics RL: train, evaluate and deploy robot policies.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a policy")
    t.add_argument("--task", help="task name (see `robo-rl tasks`)")
    t.add_argument("--algo", help="learning algorithm: a name in the algorithm registry (unknown names list them; "
                                  "default: the registry's default, PPO)")
    t.add_argument("--config", help="YAML preset (default: sim_configs/<task>.yaml, or <task>-<algo>.yaml with "
                                    "an --algo other than the default, when it exists)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set algo.learning_rate=3e-4 (repeatable)")
    t.add_argument("--num-envs", type=int, help="parallel worlds (sim.num_envs)")
    t.add_argument("--seed", type=int, help="random seed")
    t.add_argument("--max-iterations", type=int, help="runner.max_iterations")
    t.add_argument("--max-time", type=float, help="stop after this many seconds of training (runner.max_time_s)")
    t.add_argument("--run-name", help="run folder name under runner.log_dir")
    t.add_argument("--resume", metavar="RUN", help="continue a run (its folder or name) from its latest checkpoint")
    t.add_argument("--video", action="store_true", help="record an evaluation video at the end")
    t.add_argument("--dataset", metavar="PATH", help="demonstrations (a LeRobot v3.0 folder) for bc, flow-bc, RLPD")
    t.add_argument("--distributed", action="store_true",
                   help="one rank of a data-parallel run started by torchrun (`torchrun --nproc_per_node=G -m "
                        "robo_rl.cli train ... --distributed`): sim.num_envs worlds split over the ranks, gradients "
                        "averaged, rank 0 writes the run")
    t.add_argument("--dist-timeout", type=float, default=300.0, metavar="S",
                   help="with --distributed: seconds any rank may wait for the others before the job ends with "
                        "one line on every rank (default 300)")

    pl = sub.add_parser("play", help="run a trained policy and print its return and task metrics")
    pl.add_argument("run", metavar="RUN_OR_CHECKPOINT")
    pl.add_argument("--episodes", type=int, default=16, help="episodes to run (one per world)")
    pl.add_argument("--video", metavar="OUT.mp4", help="also write a video of the first episode")
    pl.add_argument("--seed", type=int, default=1000, help="seed of the evaluation episodes")
    pl.add_argument("--flow-steps", type=int, metavar="K", help="a flow policy's denoising steps (default: trained K)")

    ex = sub.add_parser("export", help="export a trained policy to ONNX with its deploy contract")
    ex.add_argument("run", metavar="RUN_OR_CHECKPOINT")
    ex.add_argument("--out", required=True, metavar="policies/NAME.onnx", help="output file (.onnx)")

    dp = sub.add_parser("deploy", help="run an exported policy on a robot through the deploy core")
    dp.add_argument("--policy", required=True, metavar="policies/X.onnx")
    dp.add_argument("--robot", required=True, metavar="hardware/Y.yaml")
    dp.add_argument("--transport", default="sim",
                    help="how to reach the robot, a registered transport: sim (the MuJoCo twin, in-process) or dds "
                         "(a real robot or `robo-rl twin` over DDS, ROS 2 wire format; POLICY starts when the "
                         "operator types start)")
    dp.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    dp.add_argument("--velocity", metavar="VX,VY,WZ", help="velocity command for legged policies")
    dp.add_argument("--target", metavar="X,Y,Z", help="end-effector target for reaching policies (base frame, m)")
    dp.add_argument("--instruction", metavar="TEXT", help="what a policy that follows instructions (a VLA) does, e.g. "
                                                        "\"put the red cube on the green marker\"")
    dp.add_argument("--scene", metavar="envs/X.xml", help="sim transport: the twin's MJCF instead of the hardware "
                                                         "file's (e.g. envs/panda_pick_vision.xml for a VLA)")
    dp.add_argument("--latency", type=float, default=0.0, help="sim transport: command latency (s)")
    dp.add_argument("--noise", type=float, default=0.0, help="sim transport: sensor noise std")
    dp.add_argument("--allow-unsafe-hardware", action="store_true",
                    help="experts only: accept hardware safety values outside their safe range (warned loudly)")
    dp.add_argument("--domain-id", type=int, default=0, help="dds transport: DDS domain (ROS_DOMAIN_ID)")
    dp.add_argument("--command-interface", help="dds transport, ros2 profile: forward_position, joint_trajectory "
                                                "or pd_targets (default: the hardware file's, else pd_targets)")
    dp.add_argument("--dry-run", action="store_true", help="dds transport: run everything but send no command")
    dp.add_argument("--estop-timeout", type=float, default=0.0, metavar="S",
                    help="dds transport: the e-stop topic is a heartbeat: nothing starts until a message (true or "
                         "false) arrived, and none for S seconds latches ESTOP (default 0: no heartbeat expected)")
    dp.add_argument("--realtime-priority", type=int, default=REALTIME_PRIORITY, metavar="P",
                    help="SCHED_FIFO priority of the control thread, 1-99 (0: normal scheduling; needs rtprio)")
    dp.add_argument("--reset-module", default="home", help="dds transport: what `reset` runs (home, random, operator)")
    dp.add_argument("--record", metavar="DIR", help="record every POLICY tick (joints, commands) into a new dataset")
    dp.add_argument("--reward", dest="rewards", action="append", default=[], metavar="NAME",
                    help="dds transport: reward module scored each POLICY tick (goal_distance[:sigma=S,threshold=T,"
                         "hold_steps=N], velocity_tracking, "
                         "operator, classifier:<model.onnx>[,threshold=T][,debounce=N][,camera=C]; repeatable, "
                         "summed); with --record every frame carries its outcome (next.reward, next.done, ...)")

    tw = sub.add_parser("twin", help="serve the MuJoCo twin of a robot on its DDS topics until stopped")
    tw.add_argument("--robot", required=True, metavar="hardware/Y.yaml")
    tw.add_argument("--transport", default="dds", help="how the twin is reached (dds)")
    tw.add_argument("--domain-id", type=int, default=0, help="DDS domain (ROS_DOMAIN_ID)")
    tw.add_argument("--rate", type=float, default=200.0, help="state publishing rate (Hz)")
    tw.add_argument("--command-interface", help="ros2 profile: the command interface it accepts (default as deploy)")
    tw.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    tw.add_argument("--physics-dt", type=float, help="physics time step (s); default the MJCF's")
    tw.add_argument("--latency", type=float, default=0.0, help="command latency (s)")
    tw.add_argument("--noise", type=float, default=0.0, help="sensor noise std")
    tw.add_argument("--cameras", nargs="*", default=[], metavar="CAMERA",
                    help="model cameras whose frames are published (PNG sensor_msgs/CompressedImage on "
                         "<camera>/image/compressed), as a robot's camera drivers would")
    tw.add_argument("--image-size", type=int, default=96, help="with --cameras: frames are SIZE x SIZE")
    tw.add_argument("--camera-rate", type=float, default=30.0, help="with --cameras: frames per second")
    tw.add_argument("--no-ee-position", action="store_true",
                    help="ros2 profile, arms: publish no ee_position, as franka_ros2 (deploy then computes it from the "
                         "joints)")
    tw.add_argument("--sport-mode", default="normal", choices=("normal", "ai", "advanced", "released", "locked"),
                    help="unitree profile: the onboard controller active at start, as on a Go2 at power-on (the twin "
                         "ignores low-level commands until deploy releases it); locked: it refuses to be released")

    rc = sub.add_parser("record", help="record LeRobot v3.0 demonstrations: a task's expert or teacher, or teleop")
    rc.add_argument("--task", help="with --expert or --teacher: the task to record in simulation")
    rc.add_argument("--expert", action="store_true", help="record the task's scripted expert")
    rc.add_argument("--teacher", metavar="RUN", help="record this trained policy of --task instead (e.g. a PPO run)")
    rc.add_argument("--robot", metavar="hardware/Y.yaml", help="with --teleop: the arm that is teleoperated")
    rc.add_argument("--teleop", choices=("keyboard", "gamepad", "spacemouse"),
                    help="end-effector teleoperation device (keys: w/s a/d r/f move, space gripper, enter ends "
                         "the episode, q quits)")
    rc.add_argument("--max-speed", type=float, default=0.1, help="teleop: end-effector speed at full input (m/s)")
    rc.add_argument("--transport", default="sim",
                    help="teleop: how the arm is reached, a registered transport: sim (its twin, in-process) or dds "
                         "(a robot or `robo-rl twin`, in real time)")
    rc.add_argument("--domain-id", type=int, default=0, help="teleop, dds transport: DDS domain (ROS_DOMAIN_ID)")
    rc.add_argument("--policy", metavar="policies/X.onnx",
                    help="teleop: record in this exported policy's terms (its observations and actions, as deploy "
                         "--record writes them), so BC for it trains on the recording")
    rc.add_argument("--episodes", type=int, default=50)
    rc.add_argument("--out", required=True, metavar="DIR", help="new dataset folder")
    rc.add_argument("--cameras", nargs="*", default=[], metavar="CAMERA", help="model cameras to record")
    rc.add_argument("--image-size", type=int, default=None,
                    help="camera images are SIZE x SIZE (default: the task's own image size, or 96)")
    rc.add_argument("--noise", type=float, default=0.0,
                    help="std of noise on the executed (not the recorded) actions: recoveries for cloning")
    rc.add_argument("--num-envs", type=int, default=8, help="parallel worlds")
    rc.add_argument("--seed", type=int, default=0)
    rc.add_argument("--set", dest="overrides", action="append", default=[], metavar="env.FIELD=VALUE",
                    help="--expert, --teacher: override a field of the task config recorded in, e.g. --set "
                         "env.setpoint_controller=hardware/panda_gripper.yaml (repeatable)")

    rp = sub.add_parser("replay", help="replay a recorded episode's joint targets on the twin, through the safety "
                                       "filter, and compare the joints with the recording")
    rp.add_argument("dataset")
    rp.add_argument("--episode", type=int, default=0)
    rp.add_argument("--robot", required=True, metavar="hardware/Y.yaml")
    rp.add_argument("--realtime", action="store_true", help="at the recorded rate (default: as fast as possible)")
    rp.add_argument("--transport", default="sim",
                    help="how to reach the robot, a registered transport: sim (the MuJoCo twin, in-process) or dds "
                         "(a real robot or `robo-rl twin`; on a real robot the replay runs in real time and starts "
                         "when the operator types start + Enter once the first pose is held)")
    rp.add_argument("--domain-id", type=int, default=0, help="dds transport: DDS domain (ROS_DOMAIN_ID)")

    ds = sub.add_parser("dataset", help="inspect a LeRobot v3.0 dataset")
    ds_sub = ds.add_subparsers(dest="dataset_command", required=True)
    info = ds_sub.add_parser("info", help="episodes, frames, fps, features")
    info.add_argument("path")
    st = ds_sub.add_parser("stats", help="per-feature mean, std, min and max of meta/stats.json")
    st.add_argument("path")
    vd = ds_sub.add_parser("video", help="write one episode's camera frames to an MP4, or (--render) re-render its "
                                         "joint states on the robot's twin")
    vd.add_argument("path")
    vd.add_argument("--episode", type=int, default=0)
    vd.add_argument("--camera", help="video feature (default: the first); with --render: a camera of the twin "
                                     "(default: track)")
    vd.add_argument("--render", metavar="hardware/Y.yaml", help="re-render the recorded joints on this robot's twin")
    vd.add_argument("--out", required=True, metavar="OUT.mp4")
    tb = ds_sub.add_parser("to-rosbag", help="write episodes as a rosbag2 bag (JointState, commands, compressed "
                                             "images, episode events); the import mapping goes beside it")
    tb.add_argument("path")
    tb.add_argument("--out", required=True, metavar="BAG")
    tb.add_argument("--episodes", help="e.g. 0,2,5-7 (default: all)")
    tb.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    fb = ds_sub.add_parser("from-rosbag", help="import a rosbag2 bag into a new dataset with a topic -> feature "
                                               "mapping (YAML), resampled to the mapping's fps")
    fb.add_argument("bag")
    fb.add_argument("--mapping", required=True, metavar="MAPPING.yaml")
    fb.add_argument("--out", required=True, metavar="DIR")

    rw = sub.add_parser("reward-classifier", help="a learned success detector for the `classifier` reward module")
    rw_sub = rw.add_subparsers(dest="classifier_command", required=True)
    rt = rw_sub.add_parser("train", help="label a dataset's camera frames by success (next.success), train a small "
                                         "CNN on them, export it to ONNX with its preprocessing")
    rt.add_argument("--dataset", required=True, metavar="DIR", help="a LeRobot v3.0 dataset with the camera and labels")
    rt.add_argument("--out", default="policies/reward_classifier.onnx", metavar="X.onnx",
                    help="the model (its spec goes beside it as X.json; default policies/reward_classifier.onnx)")
    rt.add_argument("--camera", help="camera to classify (default scene)")
    rt.add_argument("--label-key", help="per-frame success feature, > 0.5 = success (default next.success)")
    rt.add_argument("--margin-s", type=float, help="seconds of frames before an episode's first success left out "
                                                   "(default 0.2)")
    rt.add_argument("--heldout", type=float, help="fraction of episodes held out for the accuracy (default 0.2)")
    rt.add_argument("--image-size", type=int, help="square input side; default the camera's own size")
    rt.add_argument("--steps", type=int, help="gradient steps (default 1500)")
    rt.add_argument("--batch-size", type=int, help="frames per step (default 64)")
    rt.add_argument("--learning-rate", type=float, help="AdamW learning rate (default 1e-3)")
    rt.add_argument("--shift", type=int, help="random-shift augmentation, pixels (default 4; 0: none)")
    rt.add_argument("--threshold", type=float, help="probability from which a frame is a success (default 0.5)")
    rt.add_argument("--debounce", type=int, help="consecutive positive frames the robot needs (default 10)")
    rt.add_argument("--seed", type=int, help="seed of the split, the weights and the batches (default 0)")

    add_train_real_parser(sub)
    sub.add_parser("tasks", help="list tasks with observation and action sizes")
    return p


# ---------------------------------------------------------------------------------------------- train
class _Start(NamedTuple):
    """A validated training start: nothing has been written yet."""

    cfg: Any
    run_dir: Path
    resuming: bool
    state: dict[str, Any] | None
    """The checkpoint to resume from (None: start at iteration 0)."""


def _overrides(args: argparse.Namespace) -> list[str]:
    """`--set` overrides with the dedicated flags in front (a later `--set` wins)."""
    overrides = list(args.overrides)
    for flag, key in (
        ("algo", "algo_name"),
        ("num_envs", "sim.num_envs"),
        ("seed", "seed"),
        ("max_iterations", "runner.max_iterations"),
        ("max_time", "runner.max_time_s"),
        ("run_name", "runner.run_name"),
        ("dataset", "algo.dataset"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            if flag == "dataset":  # runs record where their data is, whatever the resume's working folder
                value = str(Path(value).resolve())
            overrides.insert(0, f"{key}={value}")
    if args.video:
        overrides.insert(0, "runner.video_at_end=true")
    return overrides


def _preset_name(task: str, algo: str | None, default_algo: str) -> str:
    """The default preset of a task: `<task>.yaml` for the default algorithm, else `<task>-<algo>.yaml`."""
    return f"{task}.yaml" if algo in (None, default_algo) else f"{task}-{algo}.yaml"


def _train_config(args: argparse.Namespace) -> _Start:
    """Resolve and validate everything before anything heavy starts or anything is written."""
    from robo_rl.learn.algorithm_registry import ALGORITHMS
    from robo_rl.learn.builders import resolve_config
    from robo_rl.learn.run_folder import check_new_run_dir
    from robo_rl.tasks.task_registry import task_config_class

    overrides = _overrides(args)
    if args.resume:
        return _resume_config(args, overrides)
    if args.config:
        raw = load_yaml(args.config)
    elif args.task and (preset := find_data_file(
            "sim_configs", _preset_name(args.task, args.algo, ALGORITHMS.default))) is not None:
        raw = load_yaml(preset)
    else:
        raw = {}
    if args.task:
        task_config_class(args.task)  # unknown names fail here, listing the valid ones
        raw["task"] = args.task
    cfg = resolve_config(raw, overrides)
    # `gym:Hopper-v5` -> `gym_Hopper-v5_<date>_<time>`: a colon in a path confuses scp, rsync and TensorBoard specs
    name = cfg.runner.run_name or f"{cfg.task.replace(':', '_')}_{time.strftime('%Y%m%d_%H%M%S')}"
    run_dir = Path(cfg.runner.log_dir) / name
    check_new_run_dir(run_dir)
    return _Start(cfg, run_dir, False, None)


def _resume_config(args: argparse.Namespace, overrides: list[str]) -> _Start:
    """The config of a resumed run: its own config plus overrides of `RESUMABLE_FIELDS` only."""
    from robo_rl.learn.builders import config_from_checkpoint, resolve_config
    from robo_rl.learn.checkpoint import latest_checkpoint, load_run_checkpoint
    from robo_rl.learn.run_folder import find_run_dir
    from robo_rl.learn.train_config import RESUMABLE_FIELDS, resume_changes

    run_dir = find_run_dir(args.resume)
    if args.config:
        raise UserError("--config cannot be combined with --resume (the run's own config is used)")
    raw = load_yaml(run_dir / "config.yaml")
    if args.task and args.task != raw.get("task"):
        raise UserError(f"--task {args.task} does not match the resumed run's task {raw.get('task')}")
    cfg = resolve_config(raw, overrides)
    ckpt = latest_checkpoint(run_dir)
    state = load_run_checkpoint(ckpt) if ckpt else None
    # The checkpoint's config is what its tensors were trained under; without one, the run's config.yaml.
    trained = config_from_checkpoint(state) if state else resolve_config(raw)
    changed = resume_changes(trained, cfg)
    if changed:
        allowed = ", ".join(f.removeprefix("runner.") for f in RESUMABLE_FIELDS)
        raise UserError(f"--resume {run_dir}: cannot change {'; '.join(changed)}: a resumed run keeps its "
                        f"learning problem and network; only runner.{{{allowed}}} may change")
    return _Start(cfg, run_dir, True, state)


def cmd_train(args: argparse.Namespace) -> int:
    stop_on_signals()  # SIGTERM (torchrun's, a scheduler's) unwinds like Ctrl-C: no partial file is left
    if args.dist_timeout <= 0:
        raise UserError(f"--dist-timeout {args.dist_timeout}: must be > 0 seconds")
    if not args.distributed:
        return _train_started(args, _train_config(args))
    from robo_rl.learn import distributed

    distributed.init(args.dist_timeout)
    try:
        code = _train_started(args, _agreed_start(args))
    except BaseException:
        distributed.shutdown(together=False)
        raise
    distributed.shutdown()
    return code


def _agreed_start(args: argparse.Namespace) -> _Start:
    """Rank 0 resolves the run (config, run folder, checkpoint: files only it may see) and shares it; a mistake is
    printed by rank 0 alone and ends every rank with exit 2."""
    from robo_rl.learn import distributed

    world = distributed.world()
    if world.is_main:
        try:
            start = _train_config(args)
            distributed.worlds_per_rank(start.cfg.sim.num_envs, world.size)  # refused here, not on every rank
        except (ConfigError, UserError) as exc:
            distributed.broadcast_object(None)
            raise exc from None
        return distributed.broadcast_object(start)
    start = distributed.broadcast_object(None)
    if start is None:
        raise SystemExit(2)
    return start


def _train_started(args: argparse.Namespace, start: _Start) -> int:
    """Build, resume or create the run folder (rank 0), train."""
    from robo_rl.learn import distributed
    from robo_rl.learn.run_folder import RunLock, create_run_dir, record_resume
    from robo_rl.learn.runner import make_runner

    main_rank = distributed.world().is_main
    # A live run is refused before anything is built; a failed resume leaves its folder as it was.
    lock = RunLock(start.run_dir) if start.resuming and main_rank else None
    try:
        runner = make_runner(start.cfg, start.run_dir)  # builds env and networks; writes nothing
        try:
            first = runner.resume(start.state) if start.state is not None else 0
            command = ["robo-rl", *args.argv]
            if main_rank and start.resuming:  # only now that the start has succeeded
                record_resume(start.run_dir, start.cfg, first, command)
            elif main_rank:
                lock = create_run_dir(start.run_dir, start.cfg, command)
            return _train(start, runner, first) if main_rank else _train_quietly(runner)
        finally:
            runner.close()
    finally:
        if lock is not None:
            lock.release()


def _train_quietly(runner: Any) -> int:
    """A rank other than 0: train in step with the others; it prints and writes nothing (a divergence: one line)."""
    from robo_rl.learn.runner import TrainingDiverged

    try:
        runner.learn(None)
    except TrainingDiverged as exc:
        print(f"robo-rl: rank {runner.world.rank}: {exc}", file=sys.stderr)
        return 1
    return 0


def _train(start: _Start, runner: Any, first: int) -> int:
    """Train a started run; returns the exit code (1 when training diverged)."""
    from robo_rl.learn.logger import TrainLogger
    from robo_rl.learn.runner import TrainingDiverged

    cfg, run_dir = start.cfg, start.run_dir
    if start.resuming:
        print(f"resuming {run_dir} at iteration {first}", flush=True)
        for note in runner.resume_notes:
            print(f"note: {note}", flush=True)
    ranks = f" over {runner.world.size} ranks" if runner.world.size > 1 else ""
    print(
        f"training {cfg.task} with {cfg.algo_name}: {cfg.sim.num_envs} worlds{ranks}, "
        f"{cfg.runner.max_iterations} iterations, run dir {run_dir}",
        flush=True,
    )
    logger = TrainLogger(
        run_dir,
        cfg.runner.max_iterations,
        max_time_s=cfg.runner.max_time_s,
        purge_step=first if start.resuming else None,
        print_progress=cfg.runner.progress_bar,
    )
    try:
        last = runner.learn(logger)
    except TrainingDiverged as exc:
        print(f"robo-rl: {exc}", file=sys.stderr)
        return 1
    finally:
        logger.close()
    print(_summary(cfg.task, last, runner.iteration, runner.train_time))
    if cfg.runner.eval_episodes:
        print(_eval_line(runner.evaluate(cfg.runner.eval_episodes)))
    print(f"checkpoints and TensorBoard logs: {run_dir}   (tensorboard --logdir {run_dir.parent})")
    print(f"evaluate: robo-rl play {run_dir}")
    return 0


def _summary(task: str, scalars: dict[str, float], iteration: int, seconds: float) -> str:
    parts = [f"done: {task}, {iteration} iterations in {seconds:.0f} s"]
    if "Train/mean_return" in scalars:
        parts.append(f"mean return {scalars['Train/mean_return']:.3f}")
    parts += [f"{k[8:]} {v:.4f}" for k, v in scalars.items() if k.startswith("Metrics/")]
    return " | ".join(parts)


def _eval_line(result: dict[str, Any]) -> str:
    line = [f"evaluation: {result['episodes']} episodes", f"mean return {result['mean_return']:.3f}"]
    line += [f"{k} {v:.4f}" for k, v in result["metrics"].items()]
    return " | ".join(line)


# ---------------------------------------------------------------------------------------------- play
def _print_provenance(run: str) -> None:
    """Print where the run of `run` (a run folder, run name or checkpoint file) was trained: one line."""
    from robo_rl.learn.checkpoint import resolve_checkpoint
    from robo_rl.learn.run_folder import provenance_line

    print(provenance_line(resolve_checkpoint(run).parent), flush=True)


def cmd_play(args: argparse.Namespace) -> int:
    from robo_rl.learn.evaluation import evaluate_checkpoint

    if not 1 <= args.episodes <= MAX_NUM_ENVS:
        raise UserError(f"--episodes {args.episodes}: must be 1 .. {MAX_NUM_ENVS} (one world per episode)")
    if not 0 <= args.seed <= MAX_SEED:
        raise UserError(f"--seed {args.seed}: must be 0 .. {MAX_SEED}")
    _print_provenance(args.run)
    result = evaluate_checkpoint(args.run, episodes=args.episodes, seed=args.seed, video=args.video,
                                 flow_steps=args.flow_steps)
    print(_eval_line(result))
    if args.video:
        print(f"video: {args.video}")
    return 0


# ---------------------------------------------------------------------------------------------- export
def cmd_export(args: argparse.Namespace) -> int:
    from robo_rl.deploy.instruction import tokenizer_path
    from robo_rl.export.onnx_export import (
        PARITY_TOLERANCE,
        VLA_PARITY_TOLERANCE,
        export_policy,
        instruction_graph_path,
    )

    _print_provenance(args.run)
    try:
        contract = export_policy(args.run, args.out)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    out = Path(args.out)
    files = [out, out.with_suffix(".json")]
    if any(t.name == "instruction" for t in contract.inputs):
        files += [instruction_graph_path(out), tokenizer_path(instruction_graph_path(out))]
    tolerance = VLA_PARITY_TOLERANCE if contract.inputs else PARITY_TOLERANCE
    print(f"exported {', '.join(map(str, files))} (parity onnxruntime vs torch <= {tolerance:g})")
    inputs = "".join(f" + {t.name}" for t in contract.inputs)  # a VLA's camera and instruction
    print(f"robot {contract.robot}, {contract.obs_dim} observations{inputs} -> {contract.action_dim} actions "
          f"({', '.join(contract.action.kinds)}) -> {len(contract.joint_names)} joint targets "
          f"at {1 / contract.policy_dt:g} Hz")
    evaluation = contract.extra.get("train_eval")
    if evaluation:
        print("in simulation: " + " | ".join(f"{k} {v:.4f}" for k, v in evaluation.items() if k != "episodes"))
    return 0


# ---------------------------------------------------------------------------------------------- tasks
def cmd_tasks(_: argparse.Namespace) -> int:
    import robo_rl.adapters  # noqa: F401  (the train extra, as below; registers the prefixes gym:, mjlab:, ...)
    from robo_rl.tasks.task_registry import TASKS, make_env

    for name in TASKS:
        env = make_env(name, 1)  # one world: the exact groups and terms of the default config
        print(f"{name}\n  {env.description}")
        for line in task_summary(env):
            print(f"  {line}")
        env.close()
    for prefix, what in TASKS.prefixes().items():  # whole families of names, each described where it is registered
        print(f"{prefix}<{what}>")
        if TASKS.prefix_help(prefix):
            print(f"  {TASKS.prefix_help(prefix)}")
    return 0


def task_summary(env) -> list[str]:
    """Lines describing a built task's observation groups and action terms (for `robo-rl tasks`)."""
    policy = ", ".join(f"{t.name} {t.dim}" + (f"x{t.history}" if t.history > 1 else "") for t in env.policy_terms)
    lines = [f"policy obs  {env.obs_dims['policy']:>3}: {policy}"]
    extra = ", ".join(f"{t.name} {t.dim}" for t in env.critic_extra_terms)
    lines.append(f"critic obs  {env.obs_dims['critic']:>3}: the policy's terms" + (f" + {extra}" if extra else ""))
    if env.camera is not None:
        size = env.cfg.image_size
        lines.append(f"image obs     : 3x{size}x{size} uint8 from camera {env.camera!r}")
    if env.instructions:
        held = len(env.instruction_set.indices("heldout"))
        lines.append(f"text obs      : instruction index of {len(env.instructions)} ({env.instructions[0]!r}, ...; "
                     f"{held} held out of training)")
    terms = " + ".join(f"{spec.kind} {spec.dim}" for spec in env.action_specs)
    lines.append(f"actions     {env.action_dim:>3}: {terms}")
    return lines


COMMANDS = {"train": cmd_train, "play": cmd_play, "export": cmd_export, "deploy": cmd_deploy, "twin": cmd_twin,
            "record": cmd_record, "replay": cmd_replay, "dataset": cmd_dataset,
            "reward-classifier": cmd_reward_classifier, "tasks": cmd_tasks, "train-real": cmd_train_real}


OFFLINE_ALGORITHMS = ("bc", "flow-bc", "vla-sft")
"""Algorithms that learn from a dataset (`OfflineRunner`): no physics runs while they learn (tests check this list
against the registry, which this module reads only after torch is imported)."""


def _trains_offline(args: argparse.Namespace) -> bool:
    """Whether `train` runs an offline algorithm, read without importing torch: --algo, else the --config preset's or
    the resumed run's `algo_name` (False when neither says)."""
    if args.algo:
        return args.algo in OFFLINE_ALGORITHMS
    candidates = [Path(args.config)] if args.config else []
    if args.resume:
        candidates += [Path(args.resume) / "config.yaml", Path("runs") / args.resume / "config.yaml"]
    for path in candidates:
        try:
            raw = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(raw, dict):
            return raw.get("algo_name") in OFFLINE_ALGORITHMS
    return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    args.argv = argv  # recorded in a run's provenance
    # Before anything imports torch. Not for an offline learner: it steps no physics while it learns, and sleeping
    # OpenMP workers halve its speed (measured: the VLA's SFT, 6 vs 13 iterations in 90 s on 2 cores).
    if args.command in ("play", "export", "record", "train-real") or (args.command == "train" and
                                                                      not _trains_offline(args)):
        from robo_rl.sim import set_training_process_defaults

        set_training_process_defaults()
    try:
        return COMMANDS[args.command](args)
    except (ConfigError, UserError) as exc:
        print(f"robo-rl: {exc}", file=sys.stderr)
        return 2
    except RankLost as exc:
        print(f"robo-rl: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("robo-rl: interrupted", file=sys.stderr)
        return 130

