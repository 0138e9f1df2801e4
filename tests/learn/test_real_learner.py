"""The learner of train-real: its gRPC service (loopback), SAC fed by another process's transitions, checkpoints."""

import threading
import time

import numpy as np
import pytest
import torch

from robo_rl.core.config import ConfigError
from robo_rl.deploy.learner_client import ParameterFeed, TransitionSender, open_channel, probe_learner
from robo_rl.deploy.learner_wire import transition_batch
from robo_rl.learn.algorithm_registry import EnvSpec
from robo_rl.learn.algorithms.sac import SAC, SACConfig, SACPolicy, SACPolicyConfig
from robo_rl.learn.learner_service import LearnerService
from robo_rl.learn.real_learner import RealRobotLearner, actor_weights, resolve_config
from robo_rl.learn.replay_buffer import ReplayBuffer

O, A = 6, 3


def _row(i: int, rng: np.random.Generator, *, start: bool = False, terminated: bool = False,
         intervention: bool = False) -> dict:
    return {"obs": rng.normal(size=O), "action": rng.uniform(-1, 1, A), "reward": float(i), "terminated": terminated,
            "truncated": False, "next_obs": rng.normal(size=O), "episode_start": start, "intervention": intervention,
            "seq": i}


@pytest.fixture
def service():
    svc = LearnerService("127.0.0.1:0", learner_id="L1", obs_dim=O, action_dim=A, queue_batches=4, chunk_bytes=2048)
    svc.start()
    channel = open_channel(f"127.0.0.1:{svc.port}")
    yield svc, channel
    channel.close()
    svc.stop()


def test_transitions_and_parameters_round_trip_through_the_service_in_chunks(service):
    """Rows arrive exactly, in order, once (a resent batch is dropped by seq); weights of several chunks arrive equal
    to the torch actor's (the numpy forward pass matches it), and are resent only when a newer version exists."""
    svc, channel = service
    rng = np.random.default_rng(0)
    sender = TransitionSender(channel, actor_id="A1", capacity_rows=1000, batch_rows=300, chunk_bytes=1024)
    rows = [_row(i, rng, start=i == 0) for i in range(500)]
    for r in rows:
        sender.put(r)
    assert sender.flush_once() == 500 and sender.queued() == 0
    got = svc.take()
    assert [len(b["seq"]) for b in got] == [300, 200]  # two messages, each of several 1 kB chunks
    np.testing.assert_array_equal(np.concatenate([b["obs"] for b in got]), np.stack([r["obs"] for r in rows]).astype(
        np.float32))
    np.testing.assert_array_equal(np.concatenate([b["seq"] for b in got]), np.arange(500))
    for r in rows[-10:]:  # an acknowledgement that was lost: the actor sends the same rows again
        sender.put(r)
    sender.flush_once()
    assert svc.take() == [] and svc.received == 500

    spec = EnvSpec(num_envs=1, obs_dim=O, critic_obs_dim=O, action_dim=A, action_clip=2.0)
    policy = SACPolicy(SACPolicyConfig(actor_hidden_dims=(64, 64), actor_layer_norm=True, activation="elu"), spec)
    policy.obs_normalizer.update(torch.randn(100, O) * 3 + 1)
    svc.publish(actor_weights(policy, learner_id="L1", version=1, random_actions=False))
    assert len(svc._published.chunks) > 2
    feed = ParameterFeed(channel, poll_s=1.0, rpc_timeout_s=2.0)
    assert feed.poll_once() and feed.received == 1 and feed.age() < 1.0
    weights = feed.current[0]
    obs = torch.randn(32, O) * 2
    torch_actions = policy.act_inference(obs).detach().numpy()
    np.testing.assert_allclose(weights.deterministic(obs.numpy()), torch_actions, atol=1e-5)
    assert feed.poll_once() and feed.received == 1  # the same version: confirmed, not resent
    svc.publish(actor_weights(policy, learner_id="L1", version=2, random_actions=False))
    assert feed.poll_once() and feed.received == 2 and feed.current[0].version == 2


def test_both_queues_are_bounded_and_drop_the_oldest_with_a_count(service):
    svc, channel = service
    rng = np.random.default_rng(1)
    sender = TransitionSender(channel, actor_id="A1", capacity_rows=5, batch_rows=2)
    for i in range(8):
        sender.put(_row(i, rng))
    assert sender.dropped == 3 and sender.queued() == 5  # the actor's queue: rows 0-2 went
    sender.flush_once()  # 3 messages of <= 2 rows; the learner's queue holds 4 batches
    for i in range(8, 14):
        sender.put(_row(i, rng))
    sender.flush_once()
    batches = svc.take()
    assert len(batches) == 4 and svc.dropped == 11 - 8 + 1  # the oldest batches were dropped, their rows counted
    assert batches[-1]["seq"][-1] == 13


def test_a_stalled_or_dead_learner_stops_vouching_for_the_parameters():
    now = [0.0]
    svc = LearnerService("127.0.0.1:0", learner_id="L1", obs_dim=O, action_dim=A, stall_timeout_s=1.0,
                         clock=lambda: now[0])
    svc.start()
    spec = EnvSpec(num_envs=1, obs_dim=O, critic_obs_dim=O, action_dim=A, action_clip=1.0)
    svc.publish(actor_weights(SACPolicy(SACPolicyConfig(), spec), learner_id="L1", version=1, random_actions=True))
    channel = open_channel(f"127.0.0.1:{svc.port}")
    feed = ParameterFeed(channel, poll_s=1.0, rpc_timeout_s=1.0)
    try:
        assert feed.poll_once()
        confirmed = feed.current[1]
        now[0] = 1.5  # the training loop has not called heartbeat for 1.5 s
        assert not feed.poll_once() and feed.current[1] == confirmed
        assert feed.last_error.startswith("UNAVAILABLE: the learner's training loop has not run for 1.5 s")
        svc.heartbeat()
        assert feed.poll_once() and feed.current[1] > confirmed
        svc.stop()
        assert not feed.poll_once() and feed.last_error.startswith("UNAVAILABLE")
    finally:
        channel.close()
        svc.stop()


def test_steps_from_an_actor_enter_the_buffer_as_row_by_row_and_close_episodes_left_open():
    rng = torch.Generator().manual_seed(0)
    rows, t = 7, 10  # the ring wraps
    by_row, at_once = ReplayBuffer(rows, 1, O, A), ReplayBuffer(rows, 1, O, A)
    steps = {"obs": torch.randn(t, 1, O, generator=rng), "actions": torch.rand(t, 1, A, generator=rng),
             "rewards": torch.randn(t, 1, generator=rng), "terminated": torch.rand(t, 1, generator=rng) > 0.7,
             "truncated": torch.zeros(t, 1, dtype=torch.bool), "next_obs": torch.randn(t, 1, O, generator=rng)}
    for i in range(t):
        by_row.add_obs(steps["obs"][i], steps["actions"][i])
        by_row.add_outcome(steps["rewards"][i], steps["terminated"][i], steps["truncated"][i], steps["next_obs"][i])
    at_once.add_steps({k: v[:4] for k, v in steps.items()})
    at_once.add_steps({k: v[4:] for k, v in steps.items()})
    assert (at_once.ptr, at_once.size) == (by_row.ptr, by_row.size)
    for key in by_row.data:
        torch.testing.assert_close(at_once.data[key], by_row.data[key])

    spec = EnvSpec(num_envs=1, obs_dim=O, critic_obs_dim=O, action_dim=A, action_clip=2.0)
    sac = SAC(SACConfig(buffer_size=100), SACPolicy(SACPolicyConfig(), spec), spec, torch.Generator())
    start = torch.tensor([True, False, False, True, False])  # an actor interrupted its first episode after 3 steps
    batch = {"obs": torch.randn(5, O), "action": torch.full((5, A), 1.0), "reward": torch.ones(5),
             "terminated": torch.zeros(5, dtype=torch.bool), "truncated": torch.zeros(5, dtype=torch.bool),
             "next_obs": torch.randn(5, O), "episode_start": start}
    sac.add_transitions(batch)
    assert sac.buffer.data["truncated"][:5, 0].tolist() == [False, False, True, False, False]
    assert torch.all(sac.buffer.data["actions"][:5] == 0.5)  # env units / the bound 2.0
    sac.add_transitions({k: v[:1] for k, v in batch.items()})  # a restarted actor's first step
    assert sac.buffer.data["truncated"][4, 0] and sac.env_steps == 6
    assert int(sac.policy.obs_normalizer.count) == 6


def test_the_learner_trains_from_streamed_steps_checkpoints_and_resumes_with_its_replay(tmp_path):
    cfg = resolve_config("sac", template="t.onnx", obs_dim=O, action_dim=A, action_clip=1.0, overrides=[
        "learner.address=127.0.0.1:0", "algo.learning_starts=30", "algo.batch_size=32",
        "learner.publish_interval_s=0.05", "policy.actor_hidden_dims=[32,32]", "policy.critic_hidden_dims=[32,32]",
        "learner.max_updates_owed=20"])
    learner = RealRobotLearner(cfg, tmp_path, log=lambda line: None)
    stop = threading.Event()
    thread = threading.Thread(target=learner.run, kwargs={"should_stop": stop.is_set})
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while learner.service.port is None and time.monotonic() < deadline:
            time.sleep(0.01)
        channel = open_channel(f"127.0.0.1:{learner.service.port}")
        feed = ParameterFeed(channel, poll_s=0.05, rpc_timeout_s=1.0)
        assert feed.poll_once() and feed.current[0].random_actions  # before learning_starts: uniform actions
        sender = TransitionSender(channel, actor_id="A", capacity_rows=1000)
        rng = np.random.default_rng(0)
        for i in range(120):
            sender.put(_row(i, rng, start=i % 40 == 0, terminated=i % 40 == 39))
        sender.flush_once()
        while learner.iteration < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        assert feed.poll_once() and not feed.current[0].random_actions and feed.current[0].version > 1
        channel.close()
    finally:
        stop.set()
        thread.join()
    assert learner.algo.env_steps == 120 and learner.iteration == 20  # one update per step, 20 owed at most
    assert list(learner.recent_returns) == [sum(range(k * 40, k * 40 + 40)) for k in range(3)]
    saved = sorted(p.name for p in tmp_path.glob("*.pt"))
    assert saved == ["model_000020.pt", "replay_000020.pt"]

    again = RealRobotLearner(cfg, tmp_path, log=lambda line: None)
    assert again.resume() == 20 and again.algo.buffer.size == 120 and again.version == learner.version
    for key, value in learner.policy.state_dict().items():
        torch.testing.assert_close(again.policy.state_dict()[key], value)
    assert again.learner_id != learner.learner_id  # the actor tells the restarted learner apart


def test_rlpd_trains_on_an_actors_own_recording_as_demonstrations(tmp_path):
    """The actor's dataset (TransitionRecorder) is RLPD's --dataset as it is: half of every batch comes from it."""
    from robo_rl.demos.transition_recorder import TransitionRecorder

    recorder = TransitionRecorder(tmp_path / "rec", obs_names=[f"o{i}" for i in range(O)], action_dim=A, fps=50,
                                  task="t")
    rng = np.random.default_rng(0)
    for episode in range(3):
        for step in range(20):
            last = step == 19
            recorder.add(rng.normal(size=O).astype(np.float32), rng.uniform(-1, 1, A).astype(np.float32), 1.0,
                         terminated=last and episode == 0, truncated=last and episode > 0)
        recorder.end_episode()
    recorder.close()
    cfg = resolve_config("rlpd", template="t.onnx", obs_dim=O, action_dim=A, action_clip=1.0,
                         dataset=str(tmp_path / "rec"), overrides=["learner.address=127.0.0.1:0",
                                                                   "algo.learning_starts=10", "algo.batch_size=16"])
    assert cfg.algo.demo_ratio == 0.5 and cfg.policy.num_critics == 4
    learner = RealRobotLearner(cfg, tmp_path / "run", log=lambda line: None)
    assert learner.algo.demos.size == 60 - 2  # a time-out's last frame has no next observation in the recording
    rows = [_row(i, rng, start=i == 0, intervention=4 <= i < 7) for i in range(12)]
    learner.ingest(transition_batch(rows))
    assert learner.train_step() and learner.iteration == 1
    # an operator's takeover (steps 4-6): in the replay buffer like every step, and appended to the demonstrations
    assert learner.interventions == 3 and learner.algo.demos.size == 58 + 3 and learner.algo.buffer.size == 12
    np.testing.assert_allclose(learner.algo.demos.data["obs"][-3:].numpy(), np.stack([r["obs"] for r in rows[4:7]]),
                               rtol=1e-6)
    with pytest.raises(ConfigError, match="^config error: algo_name = rlpd: needs demonstrations"):
        resolve_config("rlpd", template="t.onnx", obs_dim=O, action_dim=A, action_clip=1.0)


def test_a_learner_of_other_sizes_is_refused_at_start_and_its_weights_never_reach_the_loop(service):
    svc, channel = service
    spec = EnvSpec(num_envs=1, obs_dim=O, critic_obs_dim=O, action_dim=A, action_clip=1.0)
    svc.publish(actor_weights(SACPolicy(SACPolicyConfig(), spec), learner_id="L1", version=1, random_actions=True))
    address = f"127.0.0.1:{svc.port}"
    assert probe_learner(address, 5, dims=(O, A))["obs_dim"] == O
    with pytest.raises(ConnectionError, match=rf"^the learner at {address} trains a policy of {O} observations and "
                                              rf"{A} actions; this template has {O + 1} and {A}$"):
        probe_learner(address, 5, dims=(O + 1, A))
    feed = ParameterFeed(channel, poll_s=1.0, rpc_timeout_s=2.0, dims=(O + 1, A))
    assert not feed.poll_once() and feed.current[0] is None and "this actor has 7 and 3" in feed.last_error
