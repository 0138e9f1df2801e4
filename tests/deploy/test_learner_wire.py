"""The actor <-> learner messages: npz without pickle, chunks, transition batches, the actor's weights in numpy."""

import io
import pickle

import numpy as np
import pytest

from robo_rl.deploy.actor_weights import ActorWeights
from robo_rl.deploy.learner_wire import (
    CHUNK_BYTES,
    WireError,
    check_transitions,
    chunks,
    decode,
    encode,
    join,
    parse_address,
    transition_batch,
)


def _rows(n: int, obs_dim: int = 3, action_dim: int = 2, start: int = 0) -> list[dict]:
    rng = np.random.default_rng(start)
    return [{"obs": rng.normal(size=obs_dim), "action": rng.uniform(-1, 1, action_dim), "reward": float(i),
             "terminated": i == n - 1, "truncated": False, "next_obs": rng.normal(size=obs_dim),
             "episode_start": i == 0, "intervention": False, "seq": start + i} for i in range(n)]


def _weights(rng: np.random.Generator, *, layer_norm: bool = False, activation: str = "elu") -> ActorWeights:
    f = np.float32
    trunk = [("linear", rng.normal(size=(8, 5)).astype(f), rng.normal(size=8).astype(f))]
    if layer_norm:
        trunk.append(("layer_norm", rng.normal(size=8).astype(f), rng.normal(size=8).astype(f), 1e-5))
    trunk.append((activation,))
    return ActorWeights(layers=tuple(trunk), mean_head=(rng.normal(size=(2, 8)).astype(f), np.zeros(2, f)),
                        log_std_head=(rng.normal(size=(2, 8)).astype(f), np.zeros(2, f)), log_std_bounds=(-5.0, 2.0),
                        obs_mean=rng.normal(size=5).astype(f), obs_var=rng.uniform(0.5, 2, 5).astype(f), obs_eps=0.01,
                        obs_clip=5.0, bound=1.5, learner_id="abc", version=7, random_actions=False)


def test_a_message_round_trips_through_chunks_of_at_most_the_limit():
    rng = np.random.default_rng(0)
    arrays = {"big": rng.normal(size=(300, 1000)).astype(np.float32), "flags": np.array([True, False])}
    data = encode(arrays, {"kind": "x", "n": 3})
    pieces = chunks(data, 100_000)
    assert len(pieces) == -(-len(data) // 100_000) and max(map(len, pieces)) <= 100_000
    out, meta = decode(join(iter(pieces)))
    assert meta == {"kind": "x", "n": 3}
    np.testing.assert_array_equal(out["big"], arrays["big"])
    np.testing.assert_array_equal(out["flags"], arrays["flags"])
    assert max(map(len, chunks(bytes(CHUNK_BYTES * 2 + 1)))) <= CHUNK_BYTES <= 4 * 10**6


def test_a_pickled_object_is_never_loaded():
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.frombuffer(b"{}", np.uint8), evil=np.array([{"a": 1}], dtype=object))
    with pytest.raises(WireError, match="^message is not an npz of plain arrays"):
        decode(buffer.getvalue())
    with pytest.raises(WireError, match="^message is not an npz"):
        decode(pickle.dumps({"obs": 1}))
    with pytest.raises(WireError, match="larger than 10 bytes"):
        join([b"123456", b"789012"], limit=10)


def test_transition_batches_are_checked_row_by_row():
    batch = transition_batch(_rows(4))
    assert check_transitions(batch, 3, 2) == 4 and batch["seq"].dtype == np.int64 and batch["obs"].shape == (4, 3)
    with pytest.raises(WireError, match=r"^transition batch: obs is float32\[4, 3\], expected float32\[4, 5\]$"):
        check_transitions(batch, 5, 2)
    bad = dict(batch, reward=np.array([0, np.nan, 0, 0], np.float32))
    with pytest.raises(WireError, match="^transition batch: reward holds non-finite values$"):
        check_transitions(bad, 3, 2)
    with pytest.raises(WireError, match="^transition batch: seq must increase"):
        check_transitions(dict(batch, seq=batch["seq"][::-1].copy()), 3, 2)
    with pytest.raises(WireError, match="^transition batch lacks next_obs$"):
        check_transitions({k: v for k, v in batch.items() if k != "next_obs"}, 3, 2)


def test_addresses_are_host_and_port():
    assert parse_address("127.0.0.1:50061") == ("127.0.0.1", 50061)
    assert parse_address("[::1]:80") == ("[::1]", 80)
    assert parse_address("localhost:0", any_port=True) == ("localhost", 0)
    for bad in ("50061", "host:", ":80", "host:99999", "host:port", "localhost:0"):
        with pytest.raises(ValueError, match="^learner address .*: expected host:port"):
            parse_address(bad)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_actor_weights_round_trip_and_their_actions_are_bounded(layer_norm):
    rng = np.random.default_rng(1)
    weights = _weights(rng, layer_norm=layer_norm)
    back = ActorWeights.from_message(*decode(encode(*weights.to_message())))
    obs = rng.normal(size=(16, 5)).astype(np.float32)
    np.testing.assert_array_equal(back.deterministic(obs), weights.deterministic(obs))
    assert (back.learner_id, back.version, back.obs_dim, back.action_dim) == ("abc", 7, 5, 2)
    actions = back.sample(obs, np.random.default_rng(0))
    assert actions.shape == (16, 2) and actions.dtype == np.float32 and np.all(np.abs(actions) <= 1.5)
    uniform = ActorWeights(**{**vars(weights), "random_actions": True}).sample(obs, np.random.default_rng(0))
    assert np.all(np.abs(uniform) <= 1.5) and uniform.std() > 0.5  # uniform in [-bound, bound]


def test_malformed_actor_weights_are_refused_with_one_line():
    arrays, meta = _weights(np.random.default_rng(2)).to_message()
    with pytest.raises(WireError, match="^actor weights lack 'mean_w'$"):
        ActorWeights.from_message({k: v for k, v in arrays.items() if k != "mean_w"}, meta)
    with pytest.raises(WireError, match="^actor weights: layer 1 of unknown kind 'gelu'"):
        ActorWeights.from_message(arrays, {**meta, "layers": [{"kind": "linear"}, {"kind": "gelu"}]})
    with pytest.raises(WireError, match="^actor weights: a head has shapes"):
        ActorWeights.from_message({**arrays, "mean_w": np.zeros((2, 3), np.float32)}, meta)
    with pytest.raises(WireError, match="non-finite"):
        ActorWeights.from_message({**arrays, "mean_b": np.array([np.inf, 0], np.float32)}, meta)
    with pytest.raises(WireError, match="^expected actor weights"):
        ActorWeights.from_message(arrays, {**meta, "kind": "transitions"})
