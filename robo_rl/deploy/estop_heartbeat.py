"""The e-stop topic as a heartbeat: losing the e-stop publisher must not go unnoticed.

A latched e-stop that nobody can press any more is no e-stop. With a deadline set, every message on the e-stop topic
(True or False) is a beat; PolicyRuntime refuses to activate until one arrived within the deadline and latches ESTOP
when none arrives for that long while it runs (checked every control tick). Thread-safe: beats come from subscription
threads, the checks from the control thread.
"""

from __future__ import annotations

import math
import threading


def check_estop_timeout(timeout_s: object) -> float:
    """`timeout_s` as a float if it is a finite number >= 0 (0: no heartbeat expected); ValueError otherwise."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            math.isfinite(timeout_s) and timeout_s >= 0):
        raise ValueError(f"estop_timeout_s = {timeout_s!r}: must be a finite number >= 0 (s; 0: no heartbeat)")
    return float(timeout_s)


class EstopHeartbeat:
    """Deadline of the e-stop topic's messages.

    Args:
        timeout_s: longest allowed gap between two e-stop messages (s), > 0.
        topic: the topic's name, for the messages.
    """

    def __init__(self, timeout_s: float, topic: str = "estop"):
        if check_estop_timeout(timeout_s) == 0:
            raise ValueError("EstopHeartbeat needs a timeout > 0 (0 means: no heartbeat, so no EstopHeartbeat)")
        self.timeout_s = float(timeout_s)
        self.topic = topic
        self._lock = threading.Lock()
        self._last: float | None = None
        self.beats = 0

    def beat(self, received: float) -> None:
        """One e-stop message (either value) received at `received` (monotonic s)."""
        with self._lock:
            self._last = received if self._last is None else max(self._last, received)
            self.beats += 1

    def missing(self, now: float) -> str | None:
        """None while the last message is at most `timeout_s` old at `now`, else one line saying what is missing."""
        with self._lock:
            last = self._last
        if last is None:
            return (f"no e-stop heartbeat: nothing received on {self.topic} (publish std_msgs/Bool false at least "
                    f"every {self.timeout_s / 2:g} s)")
        age = now - last
        if age > self.timeout_s:
            return f"e-stop heartbeat lost: nothing on {self.topic} for {age:.2f} s (deadline {self.timeout_s:g} s)"
        return None
