"""Own SIGINT / SIGTERM handling for a process whose middleware must outlive the robot's last command.

rclpy's default signal handlers shut the ROS context down the moment SIGINT or SIGTERM arrives: the control thread
then publishes into a dead context, and the last damping command that `Controller.shutdown` sends raises instead of
reaching the robot. So the ROS 2 nodes start rclpy with `SignalHandlerOptions.NO` and install a `ShutdownRequest`:
a signal only sets a flag (a second one interrupts a hung teardown); the main thread's spin loop sees it and runs
`run_teardown`, whose order keeps the robot safe:

    control   DAMP, the control thread stopped, one last damping command published (the context is still alive)
    executor  no more callbacks (services, subscriptions) run
    node      its publishers, subscriptions and timers destroyed
    context   rclpy shut down, last

Pure Python (the signal module and threading): tested without rclpy.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping, Sequence

TEARDOWN_ORDER = ("control", "executor", "node", "context")
"""The teardown steps, in the order they run."""


class ShutdownRequest:
    """SIGINT / SIGTERM as a flag for the main loop instead of an exception or a dead context."""

    def __init__(self):
        self._event = threading.Event()
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until a shutdown is requested (True) or `timeout_s` passes (False)."""
        return self._event.wait(timeout_s)

    def request(self, why: str = "request") -> None:
        """Ask for the shutdown from code (what a signal does)."""
        if self.signal_name is None:
            self.signal_name = why
        self._event.set()

    def handler(self, signum: int, frame: object) -> None:
        """The signal handler: the first signal requests the shutdown, a second one interrupts a hung teardown."""
        if self._event.is_set():
            raise KeyboardInterrupt(f"{signal.Signals(signum).name} during the teardown")
        self.request(signal.Signals(signum).name)

    def install(self, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
                set_handler: Callable = signal.signal) -> Callable[[], None]:
        """Install `handler` for `signals` (main thread only); returns a function that puts the previous ones back."""
        previous = {sig: set_handler(sig, self.handler) for sig in signals}

        def restore() -> None:
            for sig, old in previous.items():
                set_handler(sig, old)

        return restore


def run_teardown(steps: Mapping[str, Callable[[], object]], log: Callable[[str], None] = print) -> list[str]:
    """Run every step of TEARDOWN_ORDER once, in that order, even when an earlier one fails.

    Args:
        steps: one callable per name of TEARDOWN_ORDER.
        log: receives one line per failed step.

    Returns:
        The failures, one line each ("<step>: <error>"); empty when all went well.

    Raises:
        ValueError: `steps` does not name exactly the steps of TEARDOWN_ORDER.
    """
    if set(steps) != set(TEARDOWN_ORDER):
        raise ValueError(f"teardown steps {sorted(steps)}: expected exactly {', '.join(TEARDOWN_ORDER)}")
    failures = []
    for name in TEARDOWN_ORDER:
        try:
            steps[name]()
        except Exception as exc:  # the later steps still run: the context must go down in any case
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            log(f"teardown {failures[-1]}")
    return failures
