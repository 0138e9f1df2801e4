"""The actor of train-real on the Panda twin in simulated time: stale parameters stop acting within one period."""

import numpy as np
import pytest

from robo_rl.adapters.robot_actor import ActorConfig, RobotActor, parameters_fresh
from robo_rl.adapters.robot_env import RobotEnv
from robo_rl.core.config import ConfigError, build
from robo_rl.deploy.actor_weights import ActorWeights
from robo_rl.deploy.state_machine import Mode
from tests.adapters.test_robot_env import PANDA


class FakeFeed:
    """What `ParameterFeed` offers the actor: (weights, when the learner last vouched for them)."""

    def __init__(self):
        self.current = (None, -np.inf)
        self.last_error = "UNAVAILABLE: connection refused"


class Sink(list):
    def put(self, row):
        self.append(row)


def _weights(learner_id: str, version: int, obs_dim: int, action_dim: int) -> ActorWeights:
    rng = np.random.default_rng(version)
    f = np.float32
    return ActorWeights(layers=(("linear", 0.1 * rng.normal(size=(16, obs_dim)).astype(f), np.zeros(16, f)), ("elu",)),
                        mean_head=(0.1 * rng.normal(size=(action_dim, 16)).astype(f), np.zeros(action_dim, f)),
                        log_std_head=(np.zeros((action_dim, 16), f), np.full(action_dim, -3.0, f)),
                        log_std_bounds=(-5.0, 2.0), obs_mean=None, obs_var=None, obs_eps=0.0, obs_clip=0.0,
                        bound=0.3, learner_id=learner_id, version=version, random_actions=False)


@pytest.mark.parametrize("on_stale", ["hold", "damp"])
def test_stale_parameters_stop_driving_the_robot_within_one_control_period(on_stale):
    """The learner stops answering at t_dead: every policy action is decided by t_dead + max_param_age_s (so sent
    within one period after), the first tick after is safe (READY holding the last commanded pose, or DAMP), the loss
    is logged once however long it lasts, and a restarted learner's weights start a new episode."""
    env = RobotEnv(*PANDA, rewards=("goal_distance",), reset_module="random", max_episode_steps=10_000, seed=0)
    clock = lambda: env.runtime.robot.time  # noqa: E731  (simulated time: the learner's answers are stepped by hand)
    feed, sink, lines = FakeFeed(), Sink(), []
    cfg = build(ActorConfig, {"max_param_age_s": 0.1, "param_poll_s": 0.02, "on_stale": on_stale})
    actor = RobotActor(env, cfg, feed, sink, log=lines.append, clock=clock, status_interval_s=0)
    c, period = env.runtime.controller, env.runtime.controller.period
    o, a = env.observation_space.shape[0], env.action_space.shape[0]
    try:
        assert actor.step() == "idle" and c.mode is Mode.PASSIVE and lines == []  # nothing yet: nothing moves
        first = _weights("L1", 1, o, a)
        feed.current = (first, clock())
        assert actor.step() == "reset" and c.mode is Mode.POLICY
        for _ in range(10):  # the learner answers every tick
            feed.current = (first, clock())
            assert actor.step() == "act"
        t_dead = clock()  # its last answer
        decided, steps = [], []
        while len(steps) < 30:
            now = clock()
            steps.append((now, actor.step(), c.mode, c.last_command.q.copy()))
            if steps[-1][1] == "act":
                decided.append(now)
        assert max(decided) <= t_dead + cfg.max_param_age_s + 1e-9  # each sent within one period after
        kinds = [s[1] for s in steps]
        stale = kinds.index("stale")
        assert kinds[:stale] == ["act"] * stale and set(kinds[stale + 1:]) == {"idle"}
        assert steps[stale][0] - t_dead <= cfg.max_param_age_s + period + 1e-9
        if on_stale == "hold":
            held = steps[stale - 1][3]  # the last policy command's pose, held through the filter from then on
            assert all(s[2] is Mode.READY and np.allclose(s[3], held) for s in steps[stale:])
        else:
            assert all(s[2] is Mode.DAMP and np.all(c.last_command.kp == 0) for s in steps[stale:])
        assert len([line for line in lines if "learner lost" in line]) == 1 and actor.stale_events == 1
        assert ("READY" if on_stale == "hold" else "DAMP") in lines[0] and "UNAVAILABLE" in lines[0]
        assert "the episode is interrupted" in lines[0]

        sent = len(sink)
        restarted = _weights("L2", 1, o, a)  # a restarted learner: another id, its versions start again
        feed.current = (restarted, clock())
        assert actor.step() == "reset" and c.mode is Mode.POLICY
        assert "learner back (parameters version 1 of learner L2)" in lines[-1]
        feed.current = (restarted, clock())
        assert actor.step() == "act" and actor.in_use == ("L2", 1)
        assert sink[sent]["episode_start"] and not sink[sent - 1]["episode_start"]
        assert [r["seq"] for r in sink] == list(range(len(sink)))
        assert actor.report()["period_count"] > 0
    finally:
        env.close()


def test_freshness_and_the_config_checks():
    assert parameters_fresh(10.0, 10.5, 0.5) and not parameters_fresh(10.0, 10.51, 0.5)
    with pytest.raises(ValueError, match="^param_poll_s = 1.0: must be < max_param_age_s = 0.5"):
        build(ActorConfig, {"max_param_age_s": 0.5, "param_poll_s": 1.0})
    with pytest.raises(ConfigError, match="on_stale"):
        build(ActorConfig, {"on_stale": "freeze"})
    with pytest.raises(ValueError, match="^learner address 'nowhere'"):
        build(ActorConfig, {"learner_address": "nowhere"})


def test_an_operators_takeover_is_sent_and_recorded_as_executed_and_flagged(tmp_path):
    """While the operator's device is held (steps 5-14) the actor streams and records the action executed (the
    operator's, written as policy actions), flagged; the learner puts those rows into its demonstrations too."""
    from robo_rl.demos.dataset_reader import DatasetReader
    from robo_rl.demos.teleop import DeviceTakeover, TeleopInput, arm_chain
    from robo_rl.demos.transition_recorder import TransitionRecorder

    held = [False]
    env = RobotEnv(*PANDA, rewards=("goal_distance",), reset_module="home", max_episode_steps=10_000, seed=0)
    hw = env.runtime.hw
    env.takeover = DeviceTakeover(lambda: TeleopInput(np.array([0.0, 1.0 if held[0] else 0.0, 0.0])), arm_chain(hw),
                                  hw, 1.0 / hw.control_rate_hz, max_speed=0.2)
    clock = lambda: env.runtime.robot.time  # noqa: E731
    feed, sink = FakeFeed(), Sink()
    o, a = env.observation_space.shape[0], env.action_space.shape[0]
    record = TransitionRecorder(tmp_path / "rec", obs_names=[f"o{i}" for i in range(o)], action_dim=a, fps=50.0,
                                task="reach")
    actor = RobotActor(env, build(ActorConfig, {"max_param_age_s": 10.0}), feed, sink, log=lambda line: None,
                       clock=clock, status_interval_s=0, record=record)
    try:
        weights = _weights("L1", 1, o, a)
        weights.mean_head[1][:] = 5.0  # the policy always asks for nearly +bound: its actions are recognisable
        feed.current = (weights, clock())
        assert actor.step() == "reset"
        for k in range(20):
            held[0] = 5 <= k < 15
            feed.current = (weights, clock())
            assert actor.step() == "act"
    finally:
        env.close()
        record.close()
    flags = [bool(r["intervention"]) for r in sink]
    assert flags == [False] * 5 + [True] * 10 + [False] * 5
    assert all(r["action"].min() > 0.29 for r in sink[:5] + sink[15:])  # the policy's (bound 0.3)
    assert all(r["action"].min() < 0.2 for r in sink[5:15])  # the operator's, written as policy actions
    frames = DatasetReader(tmp_path / "rec").frames(["intervention", "action"])
    np.testing.assert_array_equal(frames["intervention"].astype(bool), flags)
    np.testing.assert_allclose(frames["action"], np.stack([r["action"] for r in sink]), rtol=1e-6)
