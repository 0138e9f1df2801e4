"""Evaluation videos reach TensorBoard (as GIFs), and progress suits its output (MP4 files: tests/demos)."""

import io

import numpy as np

from robo_rl.learn.logger import PLAIN_INTERVAL_S, TrainLogger
from robo_rl.learn.policy_video import encode_gif


def _frames(n: int = 12, h: int = 61, w: int = 81) -> list[np.ndarray]:
    """Odd sizes on purpose: yuv420p needs even ones, the writer must cope."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in range(n)]


def test_gif_is_small_and_strided():
    from PIL import Image

    gif = encode_gif(_frames(n=400, h=240, w=320), fps=50.0, max_frames=100, max_width=160)
    image = Image.open(io.BytesIO(gif))
    assert image.format == "GIF" and image.size == (160, 120)
    assert image.n_frames == 100


def test_video_reaches_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TrainLogger(tmp_path, 10, print_progress=False, stream=io.StringIO())
    logger.video(3, tmp_path / "eval.mp4", _frames(), fps=25.0)
    logger.close()
    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0})
    events.Reload()
    (image,) = events.Images("Video/eval")
    assert image.step == 3 and image.encoded_image_string[:6] == b"GIF89a"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_plain_lines_without_a_terminal(tmp_path, monkeypatch):
    clock = iter([0.0, 1.0, 2.0, PLAIN_INTERVAL_S + 0.5, PLAIN_INTERVAL_S + 1.0])
    monkeypatch.setattr("robo_rl.learn.logger.time.monotonic", lambda: next(clock))
    out = io.StringIO()
    logger = TrainLogger(tmp_path, 5, stream=out)
    for it in range(1, 6):
        logger.log(it, {"Perf/steps_per_s": 1000.0, "Metrics/success": 0.5}, elapsed=it, final=it == 5)
    logger.close()
    lines = out.getvalue().splitlines()
    # the first iteration, the first one 10 s later, and the final one; never carriage returns
    assert [line.split(" | ")[0] for line in lines] == ["it 1/5", "it 4/5", "it 5/5"]
    assert "success 0.500" in lines[-1] and "\r" not in out.getvalue()


def test_progress_bar_on_a_terminal(tmp_path):
    out = _Terminal()
    logger = TrainLogger(tmp_path, 4, stream=out)
    for it in range(1, 5):
        logger.log(it, {"Perf/steps_per_s": 1000.0}, elapsed=it, final=it == 4)
    logger.close()
    text = out.getvalue()
    assert "\r" in text and "4/4" in text  # tqdm redraws in place
    assert text.rstrip().splitlines()[-1].startswith("it 4/4 | 1,000 steps/s")  # and a final plain summary
