"""Short learning checks: a broken PPO, task or runner fails these (marked slow)."""

import math

import pytest

from robo_rl.learn.runner import OnPolicyRunner
from robo_rl.learn.train_config import resolve_train_config
from robo_rl.tasks.task_registry import task_config_class


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
def test_quadruped_tracking_reward_rises(cli, tmp_path):
    """The README's quadruped command on a short budget: the velocity-tracking reward rises, no NaN."""
    result = cli(
        "train", "--task", "quadruped-walk-flat", "--max-iterations", "100",
        "--run-name", "quad", "--set", f"runner.log_dir={tmp_path}", "--set", "runner.eval_episodes=0",
    )
    assert result.returncode == 0, result.stderr
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "quad"), size_guidance={"scalars": 0})
    acc.Reload()
    values = [e.value for e in acc.Scalars("Episode_Reward/track_lin_vel_xy")]
    losses = [e.value for e in acc.Scalars("Loss/value_loss")]
    assert len(losses) == 100 and all(math.isfinite(v) for v in losses)
    # A robot that stands still already earns ~0.33 per second from small commands; walking earns up to 1.
    first, last = sum(values[:10]) / 10, sum(values[-10:]) / 10
    assert last > 1.4 * first and last > 0.45, f"tracking reward per second {first:.3f} -> {last:.3f}"


@pytest.mark.slow
def test_quick_start_reaches_within_3cm(cli, tmp_path):
    """The README's quick-start training command, unchanged: the evaluation ends within 3 cm."""
    result = cli("train", "--task", "arm-reach", "--video", cwd=tmp_path, timeout=1200)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("evaluation:"))
    fields = dict(part.rsplit(" ", 1) for part in line.split(" | ")[1:])
    assert float(fields["ee_distance_final"]) < 0.03, line
    assert float(fields["success"]) >= 0.9, line
    assert list(tmp_path.glob("runs/arm-reach_*/videos/*.mp4"))
