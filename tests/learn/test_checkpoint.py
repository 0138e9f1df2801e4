import pytest
import torch

from robo_rl.core.config import ConfigError
from robo_rl.core.files import atomic_write
from robo_rl.learn.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


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


def test_torch_file_that_is_not_a_checkpoint(tmp_path):
    from robo_rl.learn.checkpoint import load_run_checkpoint

    torch.save(torch.zeros(3), tmp_path / "x.pt")
    with pytest.raises(ConfigError, match=r"not a robo_rl training checkpoint \(it holds a Tensor\)"):
        load_run_checkpoint(tmp_path / "x.pt")
    torch.save({"iteration": 1, "algo": {}}, tmp_path / "y.pt")
    with pytest.raises(ConfigError, match="it lacks train_time, config"):
        load_run_checkpoint(tmp_path / "y.pt")


def test_check_output_file(tmp_path):
    from robo_rl.learn.checkpoint import check_output_file

    check_output_file(tmp_path / "new" / "deeper" / "x.onnx", "--out")  # creatable folders are fine
    assert not (tmp_path / "new").exists()  # and the check creates nothing
    with pytest.raises(ConfigError, match="is a directory"):
        check_output_file(tmp_path, "--out")
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        check_output_file(tmp_path / "f" / "x.onnx", "--out")
    with pytest.raises(ConfigError, match="cannot be written"):
        check_output_file("/proc/x.onnx", "--out")
