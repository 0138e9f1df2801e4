"""ONNX export: contract in the metadata, torch/onnxruntime parity, nothing left behind on failure."""

import json

import numpy as np
import pytest
import torch

from robo_rl.deploy.policy import OnnxPolicy
from robo_rl.export import onnx_export as export_mod
from robo_rl.learn.runner import OnPolicyRunner
from robo_rl.learn.train_config import resolve_train_config
from robo_rl.tasks.task_registry import task_config_class


def tiny_checkpoint(task, run_dir):
    cfg = resolve_train_config(
        {"task": task},
        ["sim.num_envs=16", "runner.max_iterations=2", "algo.num_steps_per_env=8", "runner.eval_episodes=0"],
        env_config_cls=task_config_class,
    )
    runner = OnPolicyRunner(cfg, run_dir)
    runner.learn()
    # make the normaliser non-trivial so a missing normaliser in the graph would show
    runner.policy.obs_normalizer.mean.add_(0.3)
    runner.save()
    runner.close()
    return run_dir


@pytest.fixture(scope="module", params=["arm-reach", "quadruped-walk-flat"])
def exported(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(request.param)
    run_dir = tiny_checkpoint(request.param, base / "run")
    out = base / "policy.onnx"
    contract = export_mod.export_policy(run_dir, out, parity_envs=8, parity_steps=5)
    return request.param, run_dir, out, contract


def test_export_embeds_contract_and_matches_torch(exported):
    task, run_dir, out, contract = exported
    policy = OnnxPolicy(out)
    assert policy.contract == contract
    assert json.loads(out.with_suffix(".json").read_text()) == json.loads(contract.to_json())
    assert contract.obs_normalization and contract.extra["task"] == task
    assert "train_eval" in contract.extra

    from robo_rl.learn.builders import build_env, load_policy, load_trained

    _, state, cfg = load_trained(run_dir)
    env = build_env(cfg, num_envs=4)
    torch_policy = load_policy(state, cfg, env)
    obs = env.reset()["policy"]  # (4, O)
    env.close()
    actions, targets = policy(obs.numpy())  # batched, dynamic batch size
    with torch.no_grad():
        want = torch_policy.act_inference(obs).clamp(-contract.action.clip, contract.action.clip)
    assert np.abs(actions - want.numpy()).max() <= 1e-5
    expected_targets = np.asarray(contract.default_joint_pos) + np.asarray(contract.action.scale) * actions
    assert np.abs(targets - expected_targets).max() <= 1e-5
    single, _ = policy(obs[0].numpy())
    assert single.shape == (contract.action_dim,)


def test_failed_parity_leaves_no_file(exported, tmp_path, monkeypatch):
    _, run_dir, _, _ = exported
    monkeypatch.setattr(export_mod, "PARITY_TOLERANCE", -1.0)
    out = tmp_path / "bad.onnx"
    with pytest.raises(ValueError, match="parity check failed"):
        export_mod.export_policy(run_dir, out, parity_envs=4, parity_steps=2, evaluate=False)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_or_truncated_onnx_is_refused(exported, tmp_path):
    _, _, out, _ = exported
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(out.read_bytes()[: len(out.read_bytes()) // 2])
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not an onnx file" * 10)
    for path in (truncated, garbage):
        with pytest.raises(ValueError, match="cannot be loaded"):
            OnnxPolicy(path)
    with pytest.raises(ValueError, match="does not exist"):
        OnnxPolicy(tmp_path / "missing.onnx")


def test_export_cli(cli, exported, tmp_path):
    _, run_dir, _, _ = exported
    out = tmp_path / "cli.onnx"
    result = cli("export", str(run_dir), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.is_file() and out.with_suffix(".json").is_file()
    assert "parity" in result.stdout
    bad = cli("export", str(run_dir), "--out", str(tmp_path / "x.txt"))
    assert bad.returncode == 2 and "must end in .onnx" in bad.stderr
