"""The actor's side of the learner link (gRPC): transitions out, parameters in, each on its own thread.

Neither ever blocks the control loop. `TransitionSender.put` appends a step to a bounded queue (when it is full the
oldest step is dropped and counted) and a background thread sends what is queued every `send_interval_s`, a step
leaving the queue only once the learner acknowledged it (the learner drops a resent step by its `seq`). A
background `ParameterFeed` asks the learner every `poll_s` for weights newer than the ones held; `confirmed_at` is
when the learner last vouched that the actor's weights are its newest (the time the answering request was sent), so
the actor can tell how old its parameters are however the learner is lost: dead, stalled, or cut off.

A channel reconnects on its own (backoff 0.1-1 s), so a learner restarted on the same address is found again.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from robo_rl.deploy.actor_weights import ActorWeights
from robo_rl.deploy.learner_wire import (
    CHUNK_BYTES,
    GET_PARAMETERS,
    SEND_TRANSITIONS,
    WireError,
    chunks,
    decode,
    decode_json,
    encode,
    encode_json,
    join,
    method,
    parse_address,
    transition_batch,
)

CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", CHUNK_BYTES + 4096),
    ("grpc.max_send_message_length", CHUNK_BYTES + 4096),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
)
"""A lost learner is looked for again every 0.1-1 s (gRPC's default backoff grows to 2 minutes)."""


def open_channel(address: str) -> grpc.Channel:
    """An insecure channel to the learner at `host:port` (ValueError, one line, for a malformed address)."""
    parse_address(address)
    return grpc.insecure_channel(address, options=list(CHANNEL_OPTIONS))


def _rpc_error(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else ""
    return f"{code.name if code is not None else type(exc).__name__}{': ' + details if details else ''}"


def probe_learner(address: str, timeout_s: float, *, dims: tuple[int, int] | None = None) -> dict[str, Any]:
    """The learner's parameter header, asked once; ConnectionError (one line) when nothing at `address` answers as a
    learner within `timeout_s` (nothing listening, a stalled learner, another service), or (with `dims`, the actor's
    (O, A)) when the learner trains a policy of other sizes."""
    channel = open_channel(address)
    try:
        call = channel.unary_stream(method(GET_PARAMETERS))
        stream = call(encode_json({"learner_id": "", "version": -1, "header_only": True}), timeout=timeout_s,
                      wait_for_ready=True)
        header = decode_json(next(stream))
    except grpc.RpcError as exc:
        why = "" if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED else f" ({_rpc_error(exc)})"
        raise ConnectionError(f"the learner at {address} did not answer within {timeout_s:g} s{why}") from None
    except (StopIteration, WireError) as exc:
        raise ConnectionError(f"{address} answered, but not as a robo_rl learner ({exc or 'no header'})") from None
    finally:
        channel.close()
    if dims is not None and (header.get("obs_dim"), header.get("action_dim")) != tuple(dims):
        raise ConnectionError(f"the learner at {address} trains a policy of {header.get('obs_dim')} observations and "
                              f"{header.get('action_dim')} actions; this template has {dims[0]} and {dims[1]}")
    return header


class ParameterFeed:
    """Polls the learner for newer actor weights on a background thread; see the module docstring.

    Args:
        channel: to the learner.
        poll_s: seconds between requests.
        rpc_timeout_s: deadline of one request (a stalled learner costs at most this per poll).
        dims: the actor's (O, A); weights of other sizes are refused (`last_error`), never handed to the loop.
        clock: monotonic time (s).
    """

    def __init__(self, channel: grpc.Channel, *, poll_s: float, rpc_timeout_s: float,
                 dims: tuple[int, int] | None = None, clock: Callable[[], float] = time.monotonic):
        self._call = channel.unary_stream(method(GET_PARAMETERS))
        self.poll_s, self.rpc_timeout_s, self.dims, self.clock = poll_s, rpc_timeout_s, dims, clock
        self.current: tuple[ActorWeights | None, float] = (None, -math.inf)
        """(newest weights, when the learner last vouched for them); replaced whole, so one read is consistent."""
        self.received = 0
        """Weights received (every new version, of any learner)."""
        self.errors = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="parameter-feed", daemon=True)

    def start(self) -> ParameterFeed:
        self._thread.start()
        return self

    def age(self, now: float | None = None) -> float:
        """Seconds since the learner last vouched for the held weights (inf before any)."""
        return (self.clock() if now is None else now) - self.current[1]

    def poll_once(self) -> bool:
        """One request; True when the learner answered (new weights or a confirmation)."""
        weights, _ = self.current
        held = {"learner_id": weights.learner_id, "version": weights.version} if weights else {
            "learner_id": "", "version": -1}
        sent_at = self.clock()
        try:
            stream = self._call(encode_json(held), timeout=self.rpc_timeout_s)
            header = decode_json(next(stream))
            if header.get("changed"):
                new = ActorWeights.from_message(*decode(join(stream)))
                if self.dims is not None and (new.obs_dim, new.action_dim) != tuple(self.dims):
                    raise WireError(f"the learner's weights take {new.obs_dim} observations to {new.action_dim} "
                                    f"actions; this actor has {self.dims[0]} and {self.dims[1]}")
                self.current = (new, sent_at)
                self.received += 1
            elif weights is not None and (header.get("learner_id"), header.get("version")) == (
                    weights.learner_id, weights.version):
                self.current = (weights, sent_at)
            return True
        except (grpc.RpcError, WireError, StopIteration) as exc:
            self.errors += 1
            self.last_error = _rpc_error(exc) if isinstance(exc, grpc.RpcError) else str(exc) or "no header"
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.poll_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.rpc_timeout_s + 1.0)


class TransitionSender:
    """Streams the actor's transitions to the learner from a bounded queue on a background thread.

    Args:
        channel: to the learner.
        actor_id: this actor process (the learner keeps the newest `seq` per actor to drop resent rows).
        capacity_rows: queue bound; when full, the oldest step is dropped and counted in `dropped`.
        batch_rows: most steps per message.
        send_interval_s: seconds between sends.
        rpc_timeout_s: deadline of one send.
        chunk_bytes: largest chunk on the wire.
    """

    def __init__(self, channel: grpc.Channel, *, actor_id: str, capacity_rows: int, batch_rows: int = 2048,
                 send_interval_s: float = 0.1, rpc_timeout_s: float = 2.0, chunk_bytes: int = CHUNK_BYTES):
        if capacity_rows < 1 or batch_rows < 1:
            raise ValueError(f"capacity_rows = {capacity_rows}, batch_rows = {batch_rows}: both must be >= 1")
        self._call = channel.stream_unary(method(SEND_TRANSITIONS))
        self.actor_id, self.capacity_rows, self.batch_rows = actor_id, capacity_rows, batch_rows
        self.send_interval_s, self.rpc_timeout_s, self.chunk_bytes = send_interval_s, rpc_timeout_s, chunk_bytes
        self._rows: deque[Mapping[str, Any]] = deque()
        self._lock = threading.Lock()
        self.sent = 0
        self.dropped = 0
        """Steps dropped because the queue was full (the learner was away for capacity_rows steps)."""
        self.failures = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="transition-sender", daemon=True)

    def start(self) -> TransitionSender:
        self._thread.start()
        return self

    def put(self, row: Mapping[str, Any]) -> None:
        """Queue one step (every key of `learner_wire.TRANSITION_KEYS`); never blocks."""
        with self._lock:
            self._rows.append(row)
            if len(self._rows) > self.capacity_rows:
                self._rows.popleft()
                self.dropped += 1

    def queued(self) -> int:
        with self._lock:
            return len(self._rows)

    def flush_once(self) -> int:
        """Send what is queued, one message of at most `batch_rows` steps at a time; the steps sent (0 on failure)."""
        total = 0
        while True:
            with self._lock:
                batch = list(itertools.islice(self._rows, 0, self.batch_rows))
                dropped = self.dropped
            if not batch:
                return total
            data = encode(transition_batch(batch), {"kind": "transitions", "actor_id": self.actor_id,
                                                    "dropped": dropped})
            try:
                self._call(iter(chunks(data, self.chunk_bytes)), timeout=self.rpc_timeout_s)
            except grpc.RpcError as exc:
                self.failures += 1
                self.last_error = _rpc_error(exc)
                return total
            last = int(batch[-1]["seq"])
            with self._lock:
                while self._rows and int(self._rows[0]["seq"]) <= last:
                    self._rows.popleft()
            self.sent += len(batch)
            total += len(batch)

    def _run(self) -> None:
        while not self._stop.wait(self.send_interval_s):
            self.flush_once()

    def close(self, flush: bool = True) -> None:
        """Stop the thread; with `flush`, one last send of what is queued."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.rpc_timeout_s + 1.0)
        if flush:
            self.flush_once()
