"""Short learning checks: a broken PPO, task or runner fails these (marked slow)."""

import pytest

from robo_rl.config import resolve_train_config
from robo_rl.runner import OnPolicyRunner
from robo_rl.tasks import task_config_class


class Recorder:
    """Logger stand-in that keeps every iteration's scalars."""

    def __init__(self):
        self.history: list[dict[str, float]] = []

    def log(self, iteration, scalars, elapsed, final):
        self.history.append(dict(scalars))

    def video(self, iteration, path):
        pass


def train(task, overrides, tmp_path):
    cfg = resolve_train_config({"task": task}, overrides, env_config_cls=task_config_class)
    runner = OnPolicyRunner(cfg, tmp_path)
    rec = Recorder()
    try:
        runner.learn(rec)
    finally:
        runner.close()
    return rec.history


def mean_of(history, key, iterations):
    values = [h[key] for h in iterations(history) if key in h]
    assert values, f"{key} was never logged"
    return sum(values) / len(values)


@pytest.mark.slow
def test_arm_reach_learns_to_reach(tmp_path):
    history = train(
        "arm-reach",
        ["sim.num_envs=256", "runner.max_iterations=70", "policy.actor_hidden_dims=[128, 128]",
         "policy.critic_hidden_dims=[128, 128]", "algo.entropy_coef=0.005"],
        tmp_path,
    )
    first = mean_of(history, "Metrics/ee_distance_final", lambda h: h[:5])
    last = mean_of(history, "Metrics/ee_distance_final", lambda h: h[-5:])
    assert first > 0.2  # an untrained arm ends far from its targets
    assert last < 0.06, f"final end-effector distance {last:.3f} m after a short budget"


@pytest.mark.slow
def test_quadruped_tracking_reward_rises(tmp_path):
    history = train("quadruped-walk-flat", ["sim.num_envs=512", "runner.max_iterations=60"], tmp_path)
    key = "Episode_Reward/track_lin_vel_xy"
    first = mean_of(history, key, lambda h: h[:10])
    last = mean_of(history, key, lambda h: h[-10:])
    assert all(h["Loss/value_loss"] == h["Loss/value_loss"] for h in history)  # no NaN
    assert last > first * 1.5, f"tracking reward {first:.3f} -> {last:.3f}"
