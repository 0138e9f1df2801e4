"""Shared by the DDS tests: loopback-only Cyclone DDS, a random domain per test, the twin in a subprocess.

The `dds_domain` fixture (tests/conftest.py) sets CYCLONEDDS_URI for the test and returns its domain.

Every test that opens DDS pins Cyclone DDS to the loopback interface with multicast off and peer
localhost (CYCLONEDDS_URI, also for the subprocesses it starts) and uses its own random domain id, so
concurrently running tests never hear each other and no packet leaves this machine.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.workers import worker_slot

pytest.importorskip("cyclonedds", reason="the DDS transport needs cyclonedds (pip install '.[dds]')")

from robo_rl.deploy.dds_settings import MAX_DOMAIN_ID, loopback_config  # noqa: E402

LOOPBACK_URI = loopback_config()


def random_domain() -> int:
    """A domain id no other test run is likely to use at the same moment; never one another worker of this run
    can draw (worker i of n draws from 1 + i, 1 + i + n, 1 + i + 2n, ...)."""
    index, count = worker_slot()
    return random.SystemRandom().choice(range(1 + index, MAX_DOMAIN_ID + 1, count))


DOMAIN_THREADS = ("tev", "dq.builtins")
"""Threads Cyclone DDS runs for each domain that has a participant in this process (named by Cyclone)."""


def dds_threads() -> int:
    """How many of this process's threads are Cyclone DDS domain threads (DOMAIN_THREADS; Linux /proc)."""
    n = 0
    for task in os.listdir("/proc/self/task"):
        try:
            n += Path(f"/proc/self/task/{task}/comm").read_text().strip() in DOMAIN_THREADS
        except OSError:  # the thread ended meanwhile
            pass
    return n


def dds_env() -> dict[str, str]:
    """Environment for a subprocess: this checkout first on the path, loopback-only DDS."""
    return {**os.environ, "PYTHONPATH": str(REPO), "CYCLONEDDS_URI": LOOPBACK_URI}


def start_cli(*args: str, stdin=subprocess.DEVNULL, log: Path | None = None) -> subprocess.Popen:
    """`python -m robo_rl.cli ARGS` in the background (output to `log`, or discarded)."""
    out = open(log, "w") if log is not None else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "robo_rl.cli", *args], cwd=REPO, env=dds_env(), stdin=stdin,
                            stdout=out, stderr=subprocess.STDOUT, text=True)


def start_twin(hardware: str, domain: int, *extra: str, log: Path | None = None) -> subprocess.Popen:
    """`robo-rl twin --robot HARDWARE --transport dds --domain-id DOMAIN` in the background."""
    return start_cli("twin", "--robot", hardware, "--transport", "dds", "--domain-id", str(domain), *extra, log=log)


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> int:
    """SIGTERM (a clean stop), then SIGKILL if it hangs; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def wait_until(condition: Callable[[], object], timeout: float, what: str, poll: float = 0.02):
    """Poll until `condition()` is truthy (returned); AssertionError naming `what` after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class Probe:
    """The test's own DDS participant: records what it hears, publishes what an operator would.

    Args:
        domain: the DDS domain.
        listen: {DDS topic: IDL struct} to record (every sample, with its receive time).
    """

    def __init__(self, domain: int, listen: dict[str, type] | None = None):
        from robo_rl.deploy import ros_interface as names
        from robo_rl.deploy.transports.dds import dds_types as dt
        from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint

        self.names, self.dt = names, dt
        self.endpoint = DdsEndpoint(domain)
        self.heard: dict[str, list[tuple[float, object]]] = {}
        for topic, struct in (listen or {}).items():
            self.heard[topic] = []
            qos = names.EVENT_QOS if topic in ("rt/diagnostics",) else names.COMMAND_QOS
            if struct in (dt.JointState, dt.Imu, dt.PointStamped, dt.Twist, dt.LowState_):
                qos = names.SENSOR_QOS
            self.endpoint.reader(topic, struct, qos, lambda msg, t, topic=topic: self.heard[topic].append((t, msg)))
        self._operator = self.endpoint.writer(names.OPERATOR.dds_name(), dt.String, names.OPERATOR.qos)
        self._estop = self.endpoint.writer(names.ESTOP.dds_name(), dt.Bool, names.ESTOP.qos)
        self._cmd_vel = self.endpoint.writer(names.CMD_VEL.dds_name(), dt.Twist, names.CMD_VEL.qos)
        self._target = self.endpoint.writer(names.TARGET_POSE.dds_name(), dt.PoseStamped, names.TARGET_POSE.qos)

    def operator(self, word: str) -> None:
        self._operator.write(self.dt.String(data=word))

    def estop(self, pressed: bool = True) -> None:
        """Press the e-stop (True) or send a heartbeat that presses nothing (False)."""
        self._estop.write(self.dt.Bool(data=pressed))

    def cmd_vel(self, vx: float, vy: float, wz: float) -> None:
        t = self.dt
        self._cmd_vel.write(t.Twist(linear=t.Vector3(x=vx, y=vy), angular=t.Vector3(z=wz)))

    def target(self, x: float, y: float, z: float) -> None:
        t = self.dt
        self._target.write(t.PoseStamped(pose=t.Pose(position=t.Point(x=x, y=y, z=z))))

    def latest(self, topic: str):
        samples = self.heard[topic]
        return samples[-1][1] if samples else None

    def mode(self) -> str | None:
        """The policy side's mode, from the newest /diagnostics message heard."""
        from robo_rl.deploy.ros_messages import read_diagnostics

        msg = self.latest("rt/diagnostics")
        return None if msg is None else read_diagnostics(msg).get("mode")

    def matched(self) -> bool:
        """The operator writer has found its reader (the deploy side is listening)."""
        return bool(self._operator.get_matched_subscriptions())

    def close(self) -> None:
        self.endpoint.close()


def relaxed_hardware(tmp_path: Path, robot: str, state_timeout_s: float = 0.4) -> str:
    """A copy of hardware/<robot>.yaml with a longer stale-state timeout (still inside its safe range).

    The panda's 50 ms is meant for a dedicated robot computer; here two Python processes share 2 cores
    with other work (in CI: torchrun ranks, learning runs), and a scheduling stall of 50 ms, or once in a
    while of 200 ms, trips the watchdog (correctly) mid-test and leaves the robot damped.
    """
    text = (REPO / "hardware" / f"{robot}.yaml").read_text()
    start = text.index("state_timeout_s:")
    end = text.index("\n", start)
    path = tmp_path / f"{robot}.yaml"
    path.write_text(text[:start] + f"state_timeout_s: {state_timeout_s}" + text[end:])
    return str(path)
