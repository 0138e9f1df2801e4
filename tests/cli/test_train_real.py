"""`robo-rl train-real` as processes on loopback: bad input, the learning smoke, SIGKILL of the learner and the actor.

The Panda twin runs in real time inside the actor process (sim transport); the learner is a second process.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robo_rl.deploy.learner_client import probe_learner
from robo_rl.learn.checkpoint import latest_checkpoint, load_checkpoint, load_run_checkpoint
from tests.conftest import REPO

pytestmark = pytest.mark.realtime  # a control loop at 50 Hz and two processes (tests/workers.py)

LEARNER_SETTINGS = ("--set", "learner.save_interval_s=1", "--set", "learner.publish_interval_s=0.2",
                    "--set", "learner.log_interval_s=1", "--set", "algo.learning_starts=50",
                    "--set", "algo.batch_size=64", "--set", "policy.actor_hidden_dims=[64,64]",
                    "--set", "policy.critic_hidden_dims=[64,64]")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hardware(tmp_path: Path) -> str:
    """The Panda with a 0.5 s stale-state timeout (the top of its safe range): two processes share 2 busy cores here."""
    path = tmp_path / "panda.yaml"
    path.write_text((REPO / "hardware" / "panda.yaml").read_text().replace("state_timeout_s: 0.05",
                                                                          "state_timeout_s: 0.5"))
    return str(path)


def _args(tmp_path: Path, port: int, *extra: str) -> list[str]:
    return ["train-real", "--robot", _hardware(tmp_path), "--policy", "policies/panda_reach.onnx", "--transport", "sim",
            "--reward", "goal_distance", "--reset-module", "random", "--learner-address", f"127.0.0.1:{port}",
            "--log-dir", str(tmp_path / "runs"), "--episode-steps", "100", *extra]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "robo_rl.cli", *args], cwd=REPO, stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)})


def _wait(condition, timeout: float, what: str, *procs: subprocess.Popen):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := condition():
            return value
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, f"a process exited ({dead[0].returncode}) while waiting for {what}"
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def _received(log: Path) -> int:
    """The newest `learner: N steps received` of a learner's log (0 before one)."""
    found = re.findall(r"learner: (\d+) steps received", log.read_text())
    return int(found[-1]) if found else 0


def test_bad_input_is_refused_with_one_line_before_anything_reaches_the_robot(tmp_path):
    port = _free_port()  # nothing listens there
    for extra, message in (
        (("--connect-timeout", "1", "--role", "actor"), f"the learner at 127.0.0.1:{port} did not answer within 1 s"),
        (("--role", "actor", "--learner-address", "localhost"), "--learner-address: learner address 'localhost'"),
        (("--role", "actor", "--reward", "goal_distance:sigma=0"),
         "train-real: --reward 'goal_distance:sigma=0': goal_distance sigma = 0.0: must be a finite number > 0"),
    ):
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "robo_rl.cli", *_args(tmp_path, port, *extra)], cwd=REPO,
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
        assert time.monotonic() - started < 30
    args = [a for a in _args(tmp_path, port, "--role", "actor") if a not in ("--reward", "goal_distance")]
    out = subprocess.run([sys.executable, "-m", "robo_rl.cli", *args], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("robo-rl: train-real: no reward module configured")
    assert not (tmp_path / "runs").exists()  # no dataset, no run folder: nothing was started


def test_learning_smoke_the_learner_receives_steps_and_the_actor_gets_newer_parameters(tmp_path):
    """--role both on the Panda twin for 18 s: the learner (a child process) trains on the streamed steps and the
    actor acts on versions that increase; both save what they made."""
    port = _free_port()
    out = subprocess.run([sys.executable, "-m", "robo_rl.cli", *_args(tmp_path, port, "--run-name", "smoke",
                                                                      "--duration", "18", "--status-interval", "4",
                                                                      *LEARNER_SETTINGS)],
                         cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                         timeout=180)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    versions = [int(v) for v in re.findall(r"parameters v(\d+)", out.stdout)]
    assert len(versions) >= 2 and versions[-1] > versions[0] >= 1, out.stdout
    final = re.search(r"actor: (\d+) steps, (\d+) episodes, 0 stale interruptions, weights received (\d+), sent (\d+)",
                      out.stdout)
    assert final and int(final[1]) > 250 and int(final[3]) > 5 and int(final[4]) > 0.9 * int(final[1]), out.stdout
    updates = [int(u) for u in re.findall(r"(\d+) updates", out.stdout)]
    assert updates and updates[-1] > 50, out.stdout
    run = tmp_path / "runs" / "smoke"
    state = load_run_checkpoint(latest_checkpoint(run))
    assert state["learner"]["env_steps"] >= 0.9 * int(final[1]) and (run / state["replay"]).is_file()
    assert (run / "actor_dataset" / "meta" / "info.json").is_file()


def test_sigkill_of_the_learner_the_actor_holds_once_and_resumes_with_a_restarted_learner(tmp_path):
    port = _free_port()
    learner_log, actor_log, again_log = tmp_path / "learner.log", tmp_path / "actor.log", tmp_path / "again.log"
    learner = _start(_args(tmp_path, port, "--role", "learner", "--run-name", "r", *LEARNER_SETTINGS), learner_log)
    actor = None
    try:
        _wait(lambda: "learner: listening" in learner_log.read_text(), 60, "the learner", learner)
        actor = _start(_args(tmp_path, port, "--role", "actor", "--run-name", "r", "--max-param-age", "0.5",
                             "--status-interval", "1"), actor_log)
        run = tmp_path / "runs" / "r"
        _wait(lambda: (c := latest_checkpoint(run)) is not None and c.name > "model_000010.pt", 90,
              "a checkpoint after 10 updates", learner, actor)
        os.kill(learner.pid, signal.SIGKILL)
        assert learner.wait() == -signal.SIGKILL
        before = len(actor_log.read_text())  # (a loaded machine may have had the live learner answer late before)
        after_kill = lambda: actor_log.read_text()[before:]  # noqa: E731
        line = _wait(lambda: re.search(r"actor: learner lost \(parameters [\d.]+ s old > max_param_age_s 0.5, the last "
                                       r"action taken on parameters ([\d.]+) s old.*", after_kill()), 10,
                     "the actor to notice", actor)
        # every action was chosen on parameters at most 0.5 s old (so sent within one period after), then READY held
        assert float(line[1]) <= 0.5 and "holding the last pose (READY)" in line[0], line[0]
        time.sleep(1.0)  # the actor keeps the robot held, and says so only once
        again = _start(_args(tmp_path, port, "--role", "learner", "--resume", "r", *LEARNER_SETTINGS), again_log)
        try:
            _wait(lambda: "actor: learner back" in after_kill(), 60, "the actor to resume", again, actor)
            resumed = after_kill()
            assert resumed.count("learner lost") == 1 and resumed.index("learner lost") < resumed.index("learner back")
            _wait(lambda: _received(again_log) > 50, 30, "steps at the restarted learner", again, actor)
            assert _stop(actor) == 130
            summary = re.search(r"actor: \d+ steps, \d+ episodes, (\d+) stale interruptions", actor_log.read_text())
            # the loss interrupted an episode, or came on the tick after one ended: nothing to interrupt
            assert summary and int(summary[1]) == ("the episode is interrupted" in line[0]), \
                actor_log.read_text()[-3000:]
        finally:
            assert _stop(again) == 0
    finally:
        for p in (learner, actor):
            if p is not None and p.poll() is None:
                p.kill()


def test_sigkill_of_the_actor_the_learner_keeps_serving_and_its_buffer_and_dataset_are_intact(tmp_path):
    from robo_rl.demos.dataset_reader import DatasetReader
    from robo_rl.demos.dataset_recovery import repair

    port = _free_port()
    learner_log, actor_log = tmp_path / "learner.log", tmp_path / "actor.log"
    learner = _start(_args(tmp_path, port, "--role", "learner", "--run-name", "r", *LEARNER_SETTINGS), learner_log)
    actor = None
    try:
        _wait(lambda: "learner: listening" in learner_log.read_text(), 60, "the learner", learner)
        actor = _start(_args(tmp_path, port, "--role", "actor", "--run-name", "r"), actor_log)
        _wait(lambda: _received(learner_log) > 200, 90, "200 steps at the learner", learner, actor)
        os.kill(actor.pid, signal.SIGKILL)
        assert actor.wait() == -signal.SIGKILL
        killed_at = time.monotonic()
        run = tmp_path / "runs" / "r"
        state = _wait(lambda: (c := latest_checkpoint(run)) and (s := load_run_checkpoint(c)) and
                      os.path.getmtime(c) > time.time() - (time.monotonic() - killed_at) + 1.5 and s,
                      20, "a checkpoint written after the kill", learner)
        assert learner.poll() is None and probe_learner(f"127.0.0.1:{port}", 5)["version"] >= 1  # still serving
        replay = load_checkpoint(run / state["replay"])
        steps = state["learner"]["env_steps"]
        assert replay["size"] == steps >= 200 and replay["obs"].shape == (steps, 1, 27)
        repair(run / "actor_dataset")
        frames = DatasetReader(run / "actor_dataset").num_frames
        assert frames >= steps - 50 - 10, (frames, steps)  # at most the last second (50 steps) lost, + one send
        assert _stop(learner) == 0
    finally:
        for p in (learner, actor):
            if p is not None and p.poll() is None:
                p.kill()


def test_the_takeover_device_needs_an_arm_and_a_device_that_opens():
    """`--takeover`: end-effector teleoperation of an arm (None without the flag); one line otherwise."""
    import argparse

    from robo_rl.cli.train_real import _takeover

    assert _takeover(argparse.Namespace(takeover=None, robot="hardware/panda.yaml")) is None
    with pytest.raises(ValueError, match="^--takeover: end-effector teleoperation needs an arm; go2 is legged$"):
        _takeover(argparse.Namespace(takeover="keyboard", robot="hardware/go2.yaml"))
    code = ("import argparse, sys; from robo_rl.cli.train_real import _takeover\n"
            "try:\n    _takeover(argparse.Namespace(takeover='keyboard', robot='hardware/panda.yaml'))\n"
            "except ValueError as exc:\n    print(exc)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.strip().startswith("--takeover keyboard: keyboard teleoperation needs a terminal"), out
