"""`robo-rl train-real`: learn on a robot (or its twin) with an actor process and a learner process over gRPC.

--role actor    runs the robot: `RobotEnv` at the control rate, the learner's newest policy, the transitions streamed
                to the learner and recorded into a dataset (`robo_rl.adapters.robot_actor`); torch-free inference.
--role learner  trains SAC / RLPD from the streamed transitions and serves the weights (`robo_rl.learn.real_learner`).
--role both     this process is the actor and starts the learner as a child process (`--role learner`), so
                learning never shares the control loop's interpreter; the learner is stopped (and saves) at the end.

Everything that can be refused is refused before anything is sent to the robot (exit 2, one line): a missing reward
module, a template the actor cannot drive, a learner address that does not answer within --connect-timeout.
Imported for every `robo-rl` command: it imports the deploy core, torch and grpc only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from robo_rl.core.config import ConfigError, UserError

LEARNER_START_TIMEOUT_S = 120.0
"""--role both: how long the learner child may take to answer (imports, networks, demonstrations, a resume)."""
LEARNER_STOP_TIMEOUT_S = 60.0
"""How long the learner child may take to save its last checkpoint after SIGTERM before it is killed."""


def add_parser(sub: Any) -> None:
    """The `train-real` subcommand's arguments."""
    tr = sub.add_parser("train-real", help="learn on a robot or its twin: an actor process at the control rate and "
                                           "a SAC / RLPD learner process, over gRPC")
    tr.add_argument("--robot", required=True, metavar="hardware/Y.yaml")
    tr.add_argument("--policy", required=True, metavar="policies/X.onnx",
                    help="template: its contract fixes the observations, the actions and the control rate")
    tr.add_argument("--transport", default="sim",
                    help="sim (the MuJoCo twin, in real time), dds, or ros2 (the robot's ROS 2 topics; a sourced ROS 2 "
                         "workspace)")
    tr.add_argument("--algo", default="sac", choices=("sac", "rlpd"), help="rlpd: SAC with --dataset demonstrations")
    tr.add_argument("--role", default="both", choices=("both", "actor", "learner"))
    tr.add_argument("--takeover", choices=("keyboard", "gamepad", "spacemouse"),
                    help="actor, arms: an operator's device that takes over from the policy while held (its steps are "
                         "flagged and become demonstrations too)")
    tr.add_argument("--learner-address", default=None, metavar="HOST:PORT",
                    help="where the learner listens / the actor connects (default 127.0.0.1:50061)")
    tr.add_argument("--reward", dest="rewards", action="append", default=[], metavar="NAME",
                    help="reward module scored every step (goal_distance[:sigma=S,threshold=T,hold_steps=N], "
                         "velocity_tracking, operator; repeatable)")
    tr.add_argument("--reset-module", default="home", help="what starts each episode: home, random, operator")
    tr.add_argument("--episode-steps", type=int, default=250, help="steps before an episode is truncated")
    tr.add_argument("--max-param-age", type=float, default=1.0, metavar="S",
                    help="parameters the learner has not vouched for within S seconds are stale: the actor stops "
                         "acting on them within one control period")
    tr.add_argument("--on-stale", default="hold", choices=("hold", "damp"),
                    help="hold: READY holds the last pose through the safety filter; damp: DAMP")
    tr.add_argument("--connect-timeout", type=float, default=5.0, metavar="S",
                    help="the learner must answer within S seconds at start, or nothing is sent to the robot")
    tr.add_argument("--duration", type=float, help="actor: stop after this many seconds (default: until Ctrl-C)")
    tr.add_argument("--max-time", type=float, help="learner: stop after this many seconds (learner.max_time_s)")
    tr.add_argument("--run-name", help="learner run folder under --log-dir (default real_<robot>_<date>_<time>)")
    tr.add_argument("--resume", metavar="RUN", help="learner: continue a run (folder or name) from its checkpoint")
    tr.add_argument("--log-dir", default="runs", help="folder of run folders")
    tr.add_argument("--dataset", metavar="PATH", help="RLPD demonstrations: a LeRobot v3.0 dataset (e.g. a recording)")
    tr.add_argument("--record", metavar="DIR", help="actor: its dataset of transitions (default <log-dir>/<run>/"
                                                    "actor_dataset; an existing one is appended to)")
    tr.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="learner config override, e.g. --set algo.batch_size=512 (repeatable)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--domain-id", type=int, default=0, help="dds transport: DDS domain (ROS_DOMAIN_ID)")
    tr.add_argument("--status-interval", type=float, default=10.0, metavar="S", help="actor status line period")
    tr.add_argument("--realtime-priority", type=int, default=50, metavar="P",
                    help="actor: SCHED_FIFO priority of the control loop's thread, 1-99 (0: normal scheduling)")


# ---------------------------------------------------------------------------------------------- checks
def _positive(flag: str, value: float | None) -> None:
    if value is not None and not (value == value and 0 < value < float("inf")):
        raise UserError(f"train-real: {flag} {value!r}: must be a finite number > 0")


def _check_common(args: argparse.Namespace) -> None:
    """The checks every role makes before anything starts (one line each)."""
    from robo_rl.deploy.learner_wire import DEFAULT_ADDRESS, parse_address

    args.learner_address = args.learner_address or DEFAULT_ADDRESS
    try:
        parse_address(args.learner_address, any_port=args.role == "learner")
    except ValueError as exc:
        raise UserError(f"train-real: --learner-address: {exc}") from None
    for flag in ("max_param_age", "connect_timeout", "duration", "max_time", "status_interval"):
        _positive(f"--{flag.replace('_', '-')}", getattr(args, flag))
    if args.episode_steps < 1:
        raise UserError(f"train-real: --episode-steps {args.episode_steps}: must be >= 1")
    if args.resume and args.run_name:
        raise UserError("train-real: give --run-name (a new run) or --resume RUN, not both")


def _template(args: argparse.Namespace) -> Any:
    """The template's contract, checked against the robot (touches no robot); UserError for one the actor cannot
    drive (cameras, action chunks)."""
    from robo_rl.deploy.runtime import load_for_deploy

    try:
        _, step = load_for_deploy(args.policy, args.robot)
    except ValueError as exc:
        raise UserError(f"train-real: {exc}") from None
    contract = step.policy.contract
    if step.inputs.images:
        raise UserError(f"train-real: {args.policy} reads cameras; the actor's policy takes the observation vector "
                        "only (a template without camera inputs)")
    if contract.action.chunk != 1:
        raise UserError(f"train-real: {args.policy} acts in chunks of {contract.action.chunk}; the actor takes one "
                        "action per control period")
    return contract


def _check_actor(args: argparse.Namespace) -> None:
    from robo_rl.deploy.reset_modules import RESET_MODULES
    from robo_rl.deploy.reward_modules import REWARD_MODULES, parse_reward_spec
    from robo_rl.deploy.session import transport

    if not args.rewards:
        raise UserError(f"train-real: no reward module configured: give --reward NAME ({', '.join(REWARD_MODULES)})")
    for spec in args.rewards:
        try:
            parse_reward_spec(spec)  # an unknown name, a bad option: one line naming the spec
        except ValueError as exc:
            raise UserError(f"train-real: --{exc}") from None
    if args.reset_module not in RESET_MODULES:
        raise UserError(f"train-real: --reset-module {args.reset_module!r}: allowed values are "
                        f"{', '.join(RESET_MODULES)}")
    try:
        transport(args.transport)
    except ValueError as exc:
        raise UserError(f"train-real: --transport: {exc}") from None


def _run_dir(args: argparse.Namespace) -> Path:
    """The learner's run folder as this machine sees it (the actor records beside the learner's files)."""
    if args.resume:
        return Path(args.resume) if Path(args.resume).is_dir() else Path(args.log_dir) / args.resume
    return Path(args.log_dir) / _run_name(args)


def _run_name(args: argparse.Namespace) -> str:
    if not args.run_name:
        args.run_name = f"real_{Path(args.robot).stem}_{time.strftime('%Y%m%d_%H%M%S')}"
    return args.run_name


# ---------------------------------------------------------------------------------------------- command
def cmd_train_real(args: argparse.Namespace) -> int:
    from robo_rl.cli.robot import stop_on_signals

    _check_common(args)
    contract = _template(args)
    if args.role == "learner":
        return _learner(args, contract)
    _check_actor(args)
    if args.dataset and not Path(args.dataset).is_dir():
        raise UserError(f"train-real: --dataset {args.dataset}: no such dataset folder")
    record = Path(args.record) if args.record else _run_dir(args) / "actor_dataset"
    child = None
    if args.role == "both":
        _learner_config(args, contract)  # a bad --set or --dataset is refused here, in one line, not in the child
        child = _start_learner(args)
    stop_on_signals()
    try:
        dims = (contract.obs_dim, contract.action_dim)
        if child is None:
            _probe(args.learner_address, args.connect_timeout, dims)
        else:
            _wait_for_learner(child, args.learner_address)
        return _actor(args, contract, record)
    finally:
        if child is not None:
            _stop_learner(child)


# ---------------------------------------------------------------------------------------------- learner
def _learner_config(args: argparse.Namespace, contract: Any) -> Any:
    from robo_rl.learn.real_learner import resolve_config

    overrides = list(args.overrides)
    if args.max_time is not None:
        overrides.insert(0, f"learner.max_time_s={args.max_time}")
    dataset = str(Path(args.dataset).resolve()) if args.dataset else None
    return resolve_config(args.algo, template=str(args.policy), obs_dim=contract.obs_dim,
                          action_dim=contract.action_dim, action_clip=contract.action.clip, overrides=overrides,
                          dataset=dataset, seed=args.seed, address=args.learner_address)


def _learner(args: argparse.Namespace, contract: Any) -> int:
    """--role learner: create or resume the run folder, train and serve until stopped (Ctrl-C, SIGTERM: a last
    checkpoint, exit 0)."""
    import yaml

    from robo_rl.core.config import build
    from robo_rl.learn.logger import TrainLogger
    from robo_rl.learn.real_learner import RealRobotLearner, RealTrainConfig, check_resumable, replace_learner
    from robo_rl.learn.run_folder import RunLock, check_new_run_dir, create_run_dir, find_run_dir, record_resume

    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    cfg = _learner_config(args, contract)
    command = ["robo-rl", *getattr(args, "argv", [])]
    lock = None
    if args.resume:
        run_dir = find_run_dir(args.resume, args.log_dir)
        saved = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        check_resumable(saved, cfg)
        cfg = replace_learner(build(RealTrainConfig, saved), address=cfg.learner.address,
                              max_time_s=cfg.learner.max_time_s)
        lock = RunLock(run_dir)  # a live learner in this run is refused before anything is built
    else:
        run_dir = Path(args.log_dir) / _run_name(args)
        check_new_run_dir(run_dir)
    try:
        learner = RealRobotLearner(cfg, run_dir, log=lambda line: print(line, flush=True))
        try:
            learner.service.start()  # an address in use is refused before the run folder is written
        except OSError as exc:
            raise UserError(f"train-real: {exc}") from None
        if lock is None:
            lock = create_run_dir(run_dir, cfg, command)
        first = learner.resume()
        if args.resume:
            record_resume(run_dir, cfg, first, command)
        logger = TrainLogger(run_dir, 0, purge_step=first or None, print_progress=False)
        try:
            learner.run(should_stop=stop.is_set, logger=logger)
        finally:
            logger.close()
    finally:
        if lock is not None:
            lock.release()
    return 0


def _learner_argv(args: argparse.Namespace) -> list[str]:
    """The command line of the learner child of --role both."""
    argv = ["train-real", "--role", "learner", "--robot", args.robot, "--policy", args.policy, "--algo", args.algo,
            "--learner-address", args.learner_address, "--log-dir", args.log_dir, "--seed", str(args.seed)]
    argv += ["--resume", args.resume] if args.resume else ["--run-name", args.run_name]
    if args.dataset:
        argv += ["--dataset", args.dataset]
    if args.max_time is not None:
        argv += ["--max-time", str(args.max_time)]
    for override in args.overrides:
        argv += ["--set", override]
    return argv


def _start_learner(args: argparse.Namespace) -> subprocess.Popen:
    # Its own process group: a Ctrl-C on the terminal reaches the actor, which stops the robot first and then the
    # learner (SIGTERM: it saves its last checkpoint).
    return subprocess.Popen([sys.executable, "-m", "robo_rl.cli", *_learner_argv(args)], start_new_session=True)


def _wait_for_learner(child: subprocess.Popen, address: str) -> None:
    """Until the learner child answers; UserError when it exits or does not answer within LEARNER_START_TIMEOUT_S."""
    from robo_rl.deploy.learner_client import probe_learner

    end = time.monotonic() + LEARNER_START_TIMEOUT_S
    while True:
        if child.poll() is not None:
            raise UserError(f"train-real: the learner exited with code {child.returncode} before it answered (its "
                            "message is above)")
        try:
            probe_learner(address, 1.0)
            return
        except ConnectionError as exc:
            if time.monotonic() > end:
                raise UserError(f"train-real: {exc} (started {LEARNER_START_TIMEOUT_S:g} s ago)") from None


def _stop_learner(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(LEARNER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _probe(address: str, timeout_s: float, dims: tuple[int, int]) -> None:
    from robo_rl.deploy.learner_client import probe_learner

    try:
        probe_learner(address, timeout_s, dims=dims)
    except ConnectionError as exc:
        hint = "" if "trains a policy" in str(exc) else "; start it first (--role learner) or check --learner-address"
        raise UserError(f"train-real: {exc}{hint}") from None


# ---------------------------------------------------------------------------------------------- actor
def _actor(args: argparse.Namespace, contract: Any, record: Path) -> int:
    """--role actor (and both): the robot at its control rate with the learner's newest policy."""
    from robo_rl.adapters.robot_actor import ActorConfig, RobotActor
    from robo_rl.adapters.robot_env import RobotEnv
    from robo_rl.core.config import build
    from robo_rl.demos.transition_recorder import TransitionRecorder
    from robo_rl.deploy.learner_client import ParameterFeed, TransitionSender, open_channel

    try:
        cfg = build(ActorConfig, {"learner_address": args.learner_address, "max_param_age_s": args.max_param_age,
                                  "on_stale": args.on_stale, "connect_timeout_s": args.connect_timeout,
                                  "seed": args.seed, "realtime_priority": args.realtime_priority})
    except (ConfigError, ValueError) as exc:
        raise UserError(f"train-real: {exc}") from None
    from robo_rl.demos.recorder import policy_dims

    names, _ = policy_dims(contract)
    recorder = TransitionRecorder(record, obs_names=names, action_dim=contract.action_dim, fps=1.0 / contract.policy_dt,
                                  task=f"train-real {Path(args.policy).stem}",
                                  extra_info={"robo_rl": {"template": str(args.policy), "robot": str(args.robot),
                                                          "rewards": list(args.rewards)}})
    session = {"domain_id": args.domain_id} if args.transport != "sim" else {}
    try:
        takeover = _takeover(args)
        env = RobotEnv(args.policy, args.robot, args.transport, realtime=True, rewards=tuple(args.rewards),
                       reset_module=args.reset_module, max_episode_steps=args.episode_steps, seed=args.seed,
                       session=session, takeover=takeover)
    except ValueError as exc:  # the transport refused (no robot answering, a wrong profile): nothing was commanded
        recorder.close()
        raise UserError(f"train-real: {exc}") from None
    channel = open_channel(cfg.learner_address)
    feed = ParameterFeed(channel, poll_s=cfg.param_poll_s, rpc_timeout_s=cfg.rpc_timeout_s,
                         dims=(contract.obs_dim, contract.action_dim)).start()
    actor = None
    try:
        sender = TransitionSender(channel, actor_id=os.urandom(6).hex(), capacity_rows=cfg.send_queue_rows,
                                  send_interval_s=cfg.send_interval_s, rpc_timeout_s=4 * cfg.rpc_timeout_s).start()
        actor = RobotActor(env, cfg, feed, sender, record=recorder, log=lambda line: print(line, flush=True),
                           status_interval_s=args.status_interval)
        print(f"actor: {args.transport} transport at {1.0 / contract.policy_dt:g} Hz, learner {cfg.learner_address}, "
              f"recording into {record}", flush=True)
        try:
            actor.run(duration_s=args.duration)
        except RuntimeError as exc:  # a latched e-stop, a reset that failed: the robot is damped below
            print(f"robo-rl: train-real: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            sender.close()
    finally:
        with contextlib.ExitStack() as closing:  # last in, first run; each runs even when one before it raised
            if actor is not None:
                closing.callback(_print_actor_report, actor, recorder, record)
            closing.callback(channel.close)
            closing.callback(recorder.close)
            closing.callback(feed.close)
            closing.callback(env.close)  # first: DAMP and a last damping command
    return 0


def _print_actor_report(actor: Any, recorder: Any, record: Path) -> None:
    r = actor.report()
    print(f"actor: {r['steps']} steps, {r['episodes']} episodes, {r['stale_events']} stale interruptions, "
          f"weights received {r['received_weights']}, sent {r['sent']}, dropped {r['dropped']}, control "
          f"period {r['period_p50'] * 1e3:.2f} ms, jitter p99 {r['jitter_p99'] * 1e3:.3f} ms (max "
          f"{r['jitter_max'] * 1e3:.2f} ms); recorded {recorder.frames} frames into {record}", flush=True)


def _takeover(args: argparse.Namespace) -> Any:
    """The operator's takeover device of `--takeover` (None without one); ValueError (one line) when it cannot open."""
    if not getattr(args, "takeover", None):
        return None
    from robo_rl.core.assets import find_asset
    from robo_rl.demos.teleop import DEVICES, DeviceTakeover, arm_chain
    from robo_rl.deploy.hardware import load_hardware

    hw = load_hardware(find_asset(args.robot, what="hardware file"))
    if hw.kind != "arm":
        raise ValueError(f"--takeover: end-effector teleoperation needs an arm; {hw.robot} is {hw.kind}")
    try:
        device = DEVICES[args.takeover]()
    except (OSError, ValueError) as exc:
        raise ValueError(f"--takeover {args.takeover}: {exc}") from None
    return DeviceTakeover(device, arm_chain(hw), hw, 1.0 / hw.control_rate_hz)

