import pytest
import torch

from robo_rl.checkpoint import atomic_write, latest_checkpoint, load_checkpoint, save_checkpoint
from robo_rl.config import ConfigError


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "model_000001.pt"

    def broken(tmp):
        with open(tmp, "wb") as f:
            f.write(b"half a checkpoint")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, broken)
    assert list(tmp_path.iterdir()) == []


def test_roundtrip_and_latest(tmp_path):
    save_checkpoint(tmp_path / "model_000002.pt", {"w": torch.ones(3), "iteration": 2})
    save_checkpoint(tmp_path / "model_000010.pt", {"w": torch.zeros(3), "iteration": 10})
    assert latest_checkpoint(tmp_path).name == "model_000010.pt"
    assert load_checkpoint(tmp_path / "model_000002.pt")["iteration"] == 2


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    good = tmp_path / "model_000001.pt"
    save_checkpoint(good, {"w": torch.ones(1000)})
    bad = tmp_path / "model_000002.pt"
    bad.write_bytes(good.read_bytes()[:100])
    with pytest.raises(ConfigError, match="cannot be read"):
        load_checkpoint(bad)


def test_pickled_objects_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"obj": object()}, path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_checkpoint(path)
