"""What the actor and the learner send each other over gRPC: numpy arrays in an npz (never a pickle), in chunks.

The service is `robo_rl.Learner`, served with grpc's generic handlers over raw bytes (no protobuf, no generated code):

    SendTransitions   actor -> learner: a stream of chunks that together are one transition batch (npz);
                      the answer is a small JSON object (`{"received": rows, "dropped": rows}`).
    GetParameters     actor -> learner: a JSON request `{"learner_id", "version"}` naming the parameters the actor
                      holds; the answer is a stream whose first message is a JSON header
                      `{"learner_id", "version", "obs_dim", "action_dim", "changed"}` and, when `changed`, the chunks
                      of the newest actor weights (npz, `robo_rl.deploy.actor_weights`).

Every message is an npz made with `np.savez` and read with `np.load(..., allow_pickle=False)`, so a message can hold
only plain numeric arrays (an object array is refused). Its JSON header travels in the array `meta` (uint8). A message
larger than `CHUNK_BYTES` is cut into chunks of at most that size: gRPC's default limit on one message is 4 MiB, and
a chunked message of any size crosses it without raising that limit.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

SERVICE = "robo_rl.Learner"
SEND_TRANSITIONS = "SendTransitions"
GET_PARAMETERS = "GetParameters"
DEFAULT_ADDRESS = "127.0.0.1:50061"
"""Where the learner listens and the actor connects unless told otherwise (loopback: this machine only)."""
CHUNK_BYTES = 4_000_000
"""Largest chunk of one message on the wire (under gRPC's default 4 MiB message limit)."""
MAX_MESSAGE_BYTES = 256 * 2**20
"""Largest reassembled message accepted (a transition batch or the actor's weights); more is refused."""

TRANSITION_KEYS = {"obs": np.float32, "action": np.float32, "reward": np.float32, "terminated": np.bool_,
                   "truncated": np.bool_, "next_obs": np.float32, "episode_start": np.bool_, "intervention": np.bool_,
                   "seq": np.int64}
"""Arrays of a transition batch and their dtypes: obs (B, O), action (B, A) (what the robot executed, env units),
reward (B,), terminated (B,) (a failure or success: no bootstrap), truncated (B,) (time limit), next_obs (B, O),
episode_start (B,) (the first step of an episode: the learner closes the world's previous one if it was left open, an
actor that was restarted or that held), seq (B,) (the actor's step counter, increasing: resent rows are dropped)."""


class WireError(ValueError):
    """A message that is not what the protocol allows (one line: what and why)."""


def method(name: str) -> str:
    """The gRPC method path of `name`: `/robo_rl.Learner/<name>`."""
    return f"/{SERVICE}/{name}"


def parse_address(address: str, *, any_port: bool = False) -> tuple[str, int]:
    """(host, port) of `host:port` (IPv6 hosts in brackets); ValueError (one line) otherwise. `any_port`: port 0 (a
    server's "any free port") is allowed too."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not (0 if any_port else 1) <= int(port) < 65536:
        raise ValueError(f"learner address {address!r}: expected host:port with a port 1-65535, e.g. "
                         f"{DEFAULT_ADDRESS}")
    return host, int(port)


# ---------------------------------------------------------------------------------------------- messages
def encode(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> bytes:
    """One message: the arrays and a JSON header, as npz bytes (uncompressed: speed over size on a robot's link)."""
    if "meta" in arrays:
        raise WireError("an array may not be called 'meta' (the header's name)")
    header = np.frombuffer(json.dumps(dict(meta)).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, meta=header, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    return buffer.getvalue()


def decode(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, header) of a message; WireError for anything but an npz of plain arrays with a JSON header."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise WireError(f"message of {len(data)} bytes: larger than {MAX_MESSAGE_BYTES}")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:  # object arrays raise ValueError
        raise WireError(f"message is not an npz of plain arrays: {exc}") from None
    if "meta" not in arrays:
        raise WireError("message has no header (array 'meta')")
    try:
        meta = json.loads(arrays.pop("meta").tobytes().decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"message header is not JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise WireError("message header is not a JSON object")
    return arrays, meta


def encode_json(obj: Mapping[str, Any]) -> bytes:
    """A small JSON message (requests, acknowledgements, headers)."""
    return json.dumps(dict(obj)).encode()


def decode_json(data: bytes) -> dict[str, Any]:
    """The JSON object of a small message; WireError otherwise."""
    try:
        obj = json.loads(bytes(data).decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"expected a JSON object: {exc}") from None
    if not isinstance(obj, dict):
        raise WireError("expected a JSON object")
    return obj


def chunks(data: bytes, size: int = CHUNK_BYTES) -> list[bytes]:
    """`data` cut into pieces of at most `size` bytes (at least one piece, even for empty data)."""
    if size < 1:
        raise ValueError(f"chunk size {size}: must be >= 1")
    return [data[i:i + size] for i in range(0, len(data), size)] or [b""]


def join(pieces: Iterable[bytes], limit: int = MAX_MESSAGE_BYTES) -> bytes:
    """One message from its chunks; WireError when they add up to more than `limit` bytes."""
    parts, total = [], 0
    for piece in pieces:
        total += len(piece)
        if total > limit:
            raise WireError(f"message larger than {limit} bytes")
        parts.append(bytes(piece))
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------- transitions
def transition_batch(rows: list[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Stack per-step rows (each holding every key of TRANSITION_KEYS) into a batch: obs (B, O), reward (B,), ..."""
    return {k: np.stack([np.asarray(r[k], dtype=dtype) for r in rows]) for k, dtype in TRANSITION_KEYS.items()}


def check_transitions(arrays: Mapping[str, np.ndarray], obs_dim: int, action_dim: int) -> int:
    """The number of rows B of a transition batch; WireError (one line) for a missing array, a wrong shape or dtype,
    or a non-finite value."""
    missing = [k for k in TRANSITION_KEYS if k not in arrays]
    if missing:
        raise WireError(f"transition batch lacks {', '.join(missing)}")
    b = arrays["seq"].shape[0] if arrays["seq"].ndim == 1 else -1
    widths = {"obs": obs_dim, "next_obs": obs_dim, "action": action_dim}
    for key, dtype in TRANSITION_KEYS.items():
        v = arrays[key]
        want = (b, widths[key]) if key in widths else (b,)
        if v.shape != want or v.dtype != np.dtype(dtype):
            raise WireError(f"transition batch: {key} is {v.dtype}{list(v.shape)}, expected "
                            f"{np.dtype(dtype)}{list(want)}")
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            raise WireError(f"transition batch: {key} holds non-finite values")
    if not np.all(np.diff(arrays["seq"]) > 0):
        raise WireError("transition batch: seq must increase from row to row")
    return b
