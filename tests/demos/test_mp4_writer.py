"""MP4 files (robo_rl.demos.mp4_writer) play in a browser: H.264, yuv420p, every frame; no partial file on failure."""

import av
import numpy as np
import pytest

from robo_rl.demos.mp4_writer import write_mp4


def _frames(n: int = 12, h: int = 61, w: int = 81) -> list[np.ndarray]:
    """Odd sizes on purpose: yuv420p needs even ones, the writer must cope."""
    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for _ in range(n)]


def test_mp4_is_h264_with_every_frame(tmp_path):
    path = tmp_path / "v.mp4"
    write_mp4(path, _frames(), fps=50.0)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        assert stream.codec_context.pix_fmt == "yuv420p"
        assert (stream.codec_context.width, stream.codec_context.height) == (80, 60)
        assert abs(float(stream.average_rate) - 50.0) < 1e-6
        assert sum(1 for _ in container.decode(stream)) == 12
    assert not list(tmp_path.glob(".*tmp"))  # no temp file left behind


def test_mp4_failure_leaves_no_file(tmp_path):
    path = tmp_path / "v.mp4"
    with pytest.raises(ValueError, match="no frames"):
        write_mp4(path, [], fps=50.0)
    assert list(tmp_path.iterdir()) == []
