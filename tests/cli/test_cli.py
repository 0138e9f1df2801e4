"""The README's train / play / TensorBoard commands, end to end on a tiny budget."""

import av
import pytest

from tests.conftest import REPO


def read_scalars(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return acc.Tags()["scalars"], acc


def frame_count(path):
    """Decoded frames of an H.264 video (the codec browsers play); 0 for any other codec."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return sum(1 for _ in container.decode(stream)) if stream.codec_context.name == "h264" else 0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from tests.conftest import run_cli

    log_dir = tmp_path_factory.mktemp("runs")
    result = run_cli(
        "train", "--task", "arm-reach", "--num-envs", "32", "--max-iterations", "3", "--run-name", "tiny",
        "--video", "--set", f"runner.log_dir={log_dir}", "--set", "runner.eval_episodes=4",
        "--set", "algo.num_steps_per_env=16",  # 48 steps: enough for some episodes to end
    )
    assert result.returncode == 0, result.stderr
    return log_dir / "tiny", result.stdout


def test_train_writes_config_checkpoint_logs_and_video(tiny_run):
    run_dir, stdout = tiny_run
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / "model_000003.pt").is_file()
    assert "it 3/3" in stdout and "ETA" in stdout and "steps/s" in stdout
    assert "evaluation: 4 episodes" in stdout and "ee_distance_final" in stdout
    tags, acc = read_scalars(run_dir)
    for tag in ("Loss/value_loss", "Loss/learning_rate", "Perf/steps_per_s", "Episode_Reward/position_error",
                "Metrics/ee_distance_final", "Episode/length_s"):
        assert tag in tags, tag
    assert [e.step for e in acc.Scalars("Loss/value_loss")] == [1, 2, 3]
    videos = list((run_dir / "videos").glob("*.mp4"))
    assert len(videos) == 1 and frame_count(videos[0]) > 10


def test_play_prints_metrics_and_writes_video(cli, tiny_run, tmp_path):
    run_dir, _ = tiny_run
    out = tmp_path / "play.mp4"
    result = cli("play", str(run_dir), "--episodes", "3", "--video", str(out))
    assert result.returncode == 0, result.stderr
    assert "evaluation: 3 episodes" in result.stdout and "success" in result.stdout
    assert frame_count(out) == 150  # one full 3 s episode at 50 Hz


def test_train_refuses_to_overwrite_a_run(cli, tiny_run):
    run_dir, _ = tiny_run
    result = cli("train", "--task", "arm-reach", "--run-name", "tiny", "--set", f"runner.log_dir={run_dir.parent}")
    assert result.returncode == 2 and "already exists" in result.stderr


def test_config_file_and_time_budget(cli, tmp_path):
    result = cli(
        "train", "--config", "sim_configs/arm-reach.yaml", "--max-time", "1", "--num-envs", "16",
        "--run-name", "timed", "--set", f"runner.log_dir={tmp_path}", "--set", "runner.eval_episodes=0",
    )
    assert result.returncode == 0, result.stderr
    assert "it 200/200" not in result.stdout  # stopped by the 1 s budget, well before the preset's 200
    assert list((tmp_path / "timed").glob("model_*.pt"))  # and still saved a checkpoint


def test_offline_learners_are_known_before_torch_is_imported():
    """The CLI leaves torch's OpenMP workers their default wait policy for offline learners (they step no physics);
    its list must be the registry's OfflineRunner algorithms."""
    from robo_rl.cli.main import OFFLINE_ALGORITHMS, _parser, _trains_offline
    from robo_rl.learn.algorithm_registry import ALGORITHMS
    from robo_rl.learn.runner import OfflineRunner

    offline = {n for n in ALGORITHMS.names() if issubclass(ALGORITHMS.get(n).runner_cls, OfflineRunner)}
    assert offline == set(OFFLINE_ALGORITHMS)

    def train(*args: str) -> bool:
        return _trains_offline(_parser().parse_args(["train", *args]))

    assert train("--algo", "flow-bc") and not train("--algo", "ppo") and not train("--task", "arm-reach")
    assert train("--config", str(REPO / "sim_configs" / "arm-pick-place-vision-vla-sft.yaml"))
    assert not train("--config", str(REPO / "sim_configs" / "arm-pick-place-vision-vla-rl.yaml"))
