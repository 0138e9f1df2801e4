"""The learner's gRPC server (`robo_rl.Learner`, `robo_rl.deploy.learner_wire`): transitions in, actor weights out.

gRPC's worker threads only decode, check and queue: a received transition batch goes into a bounded queue (when it
is full the oldest batch is dropped and its rows counted in `dropped`) that the training loop drains with `take`;
parameter requests are answered from the newest published weights, already encoded and chunked (`publish`), so no
request ever waits for training. An actor's resent rows (a send whose acknowledgement was lost) are dropped by
their `seq`.

The training loop calls `heartbeat` on every pass; when it has not for `stall_timeout_s` (a hung learner whose server
threads still run) parameter requests are refused (UNAVAILABLE), so the actor's parameters age as if the learner
were gone.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np

from robo_rl.deploy.actor_weights import ActorWeights
from robo_rl.deploy.learner_wire import (
    CHUNK_BYTES,
    GET_PARAMETERS,
    SEND_TRANSITIONS,
    SERVICE,
    WireError,
    check_transitions,
    chunks,
    decode,
    decode_json,
    encode,
    encode_json,
    join,
    parse_address,
)


@dataclass(frozen=True)
class Published:
    """The newest weights as they go on the wire."""

    version: int
    chunks: tuple[bytes, ...]


class LearnerService:
    """The gRPC server; see the module docstring.

    Args:
        address: `host:port` to listen on (port 0: any free port, see `port`).
        learner_id: this learner process (the actor tells a restarted learner by it).
        obs_dim, action_dim: O and A a transition batch must have.
        queue_batches: bound of the receive queue (batches).
        stall_timeout_s: refuse parameter requests when the training loop has not called `heartbeat` for this long.
        chunk_bytes: largest chunk of the weights on the wire.
        clock: monotonic time (s).
    """

    def __init__(self, address: str, *, learner_id: str, obs_dim: int, action_dim: int, queue_batches: int = 1024,
                 stall_timeout_s: float = 5.0, chunk_bytes: int = CHUNK_BYTES,
                 clock: Callable[[], float] = time.monotonic):
        parse_address(address, any_port=True)
        self.address, self.learner_id = address, learner_id
        self.obs_dim, self.action_dim = obs_dim, action_dim
        self.queue_batches, self.stall_timeout_s, self.chunk_bytes = queue_batches, stall_timeout_s, chunk_bytes
        self.clock = clock
        self._lock = threading.Lock()
        self._arrived = threading.Event()
        self._queue: deque[dict[str, np.ndarray]] = deque()
        self._last_seq: dict[str, int] = {}
        self._published: Published | None = None
        self._heartbeat = clock()
        self.received = 0
        """Rows accepted (duplicates excluded)."""
        self.dropped = 0
        """Rows dropped because the receive queue was full (the training loop fell behind)."""
        self.actor_dropped: dict[str, int] = {}
        """Rows each actor dropped from its own full send queue (as it last reported)."""
        self.port: int | None = None
        self._server: grpc.Server | None = None

    # ------------------------------------------------------------------ server
    def start(self) -> int:
        """Listen; returns the port. OSError (one line) when the address cannot be bound (in use, not local)."""
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="learner-rpc"), options=[
            ("grpc.max_receive_message_length", CHUNK_BYTES + 4096),
            ("grpc.max_send_message_length", CHUNK_BYTES + 4096),
            ("grpc.so_reuseport", 0),  # a second learner on the same port fails instead of sharing it
        ])
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
            SEND_TRANSITIONS: grpc.stream_unary_rpc_method_handler(self._send_transitions),
            GET_PARAMETERS: grpc.unary_stream_rpc_method_handler(self._get_parameters),
        })])
        try:
            port = server.add_insecure_port(self.address)
        except RuntimeError:
            port = 0
        if port == 0:
            raise OSError(f"the learner cannot listen on {self.address} (in use by another process, or not an "
                          "address of this machine)")
        server.start()
        self._server, self.port = server, port
        return port

    def stop(self, grace_s: float = 0.5) -> None:
        if self._server is not None:
            self._server.stop(grace_s).wait()
            self._server = None

    # ------------------------------------------------------------------ the training loop's side
    def heartbeat(self) -> None:
        """The training loop is alive (called on every pass)."""
        self._heartbeat = self.clock()

    def publish(self, weights: ActorWeights) -> None:
        """Make `weights` the answer to parameter requests from now on."""
        data = encode(*weights.to_message())
        self._published = Published(weights.version, tuple(chunks(data, self.chunk_bytes)))

    def take(self) -> list[dict[str, np.ndarray]]:
        """Every queued transition batch, oldest first (the queue is left empty)."""
        with self._lock:
            batches = list(self._queue)
            self._queue.clear()
            self._arrived.clear()
        return batches

    def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for a transition batch; True when one is queued."""
        return self._arrived.wait(timeout_s)

    # ------------------------------------------------------------------ handlers (gRPC threads)
    def _send_transitions(self, chunk_iterator: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        try:
            arrays, meta = decode(join(chunk_iterator))
            if meta.get("kind") != "transitions":
                raise WireError(f"expected transitions, got a message of kind {meta.get('kind')!r}")
            check_transitions(arrays, self.obs_dim, self.action_dim)
        except WireError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        actor = str(meta.get("actor_id", ""))
        with self._lock:
            keep = arrays["seq"] > self._last_seq.get(actor, -1)  # (B,) rows not received before
            if not keep.all():
                arrays = {k: v[keep] for k, v in arrays.items()}
            rows = int(keep.sum())
            if rows:
                self._last_seq[actor] = int(arrays["seq"][-1])
                self._queue.append(arrays)
                self.received += rows
                if len(self._queue) > self.queue_batches:
                    self.dropped += len(self._queue.popleft()["seq"])
                self._arrived.set()
            self.actor_dropped[actor] = int(meta.get("dropped", 0))
            dropped = self.dropped
        return encode_json({"received": rows, "dropped": dropped})

    def _get_parameters(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            held = decode_json(request)
        except WireError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        quiet = self.clock() - self._heartbeat
        if quiet > self.stall_timeout_s:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the learner's training loop has not run for {quiet:.1f} s")
        published = self._published
        header: dict[str, Any] = {"learner_id": self.learner_id, "version": -1 if published is None else
                                  published.version, "obs_dim": self.obs_dim, "action_dim": self.action_dim}
        header["changed"] = published is not None and not held.get("header_only") and (
            held.get("learner_id"), held.get("version")) != (self.learner_id, published.version)
        yield encode_json(header)
        if header["changed"]:
            yield from published.chunks
