"""arm-pick-place-vision: camera images and text instructions as observation groups."""

import pytest
import torch

from robo_rl.core.instructions import InstructionSet
from robo_rl.tasks.arm_pick_place import VISION_CUBES, VISION_INSTRUCTIONS, ArmPickPlaceVisionConfig
from robo_rl.tasks.task_registry import make_env
from robo_rl.terms import validate_contract


def test_image_and_text_groups():
    env = make_env("arm-pick-place-vision", 6, seed=1)
    obs = env.reset(random_start=False)
    image, text = obs["image"], obs["text"]
    assert image.shape == (6, 3, 64, 64) and image.dtype == torch.uint8
    assert text.shape == (6,) and text.dtype == torch.long
    goals = torch.tensor([env.instruction_set.goal_of(i) for i in text.tolist()])
    assert torch.equal(goals, env.goal)  # the instruction's goal is the truth, `goal`
    for i in range(6):  # the instruction names the goal cube's colour, and that cube has that colour
        colour, rgb = VISION_CUBES[int(goals[i])]
        assert colour in env.instructions[int(text[i])]
        geom = env.backend.name_id("geom", env.cfg.cube_bodies[int(goals[i])])
        torch.testing.assert_close(torch.tensor(env.backend.model.geom_rgba[geom, :3]), torch.tensor(rgb),
                                   check_dtype=False)
    assert image.float().std() > 10  # not blank
    assert not torch.equal(image[0], image[1])  # worlds differ (layouts, targets)
    env.close()


def test_only_reset_worlds_are_rendered_again_and_images_follow_the_state():
    env = make_env("arm-pick-place-vision", 3, seed=2)
    env.reset(random_start=False)
    zero = torch.zeros(3, env.action_dim)
    obs, *_ = env.step(zero)
    env.episode_length[1] = env.max_episode_length - 1  # world 1 times out on the next step
    obs, _, _, truncated, info = env.step(zero)
    assert truncated.tolist() == [False, True, False]
    before, after = info["final_obs"]["image"], obs["image"]
    assert torch.equal(before[[0, 2]], after[[0, 2]])
    assert not torch.equal(before[1], after[1])  # new layout after the reset
    assert torch.equal(after, env.backend.render_cameras("scene", 64, 64))  # equal to a full render
    env.close()


def test_without_images_the_task_is_the_same_but_renders_nothing():
    """`images: false` (state-based baselines, the scripted expert's env): no "image" group, nothing rendered; the
    state observations, instructions and rewards are those of the task with images."""
    from robo_rl.tasks.arm_pick_place import ArmPickPlaceVisionConfig
    from robo_rl.tasks.experts import make_expert_env

    with_images = make_env("arm-pick-place-vision", 3, seed=4)
    without = make_env("arm-pick-place-vision", 3, seed=4, cfg=ArmPickPlaceVisionConfig(images=False))
    a, b = with_images.reset(random_start=False), without.reset(random_start=False)
    assert "image" in a and set(b) == {"policy", "critic", "text"}
    action = torch.full((3, without.action_dim), 0.5)
    for _ in range(3):
        (a, ra, *_), (b, rb, *_) = with_images.step(action), without.step(action)
        assert "image" not in b and torch.equal(a["policy"], b["policy"]) and torch.equal(a["text"], b["text"])
        assert torch.equal(ra, rb)
    expert_env = make_expert_env("arm-pick-place-vision", 2)
    assert expert_env.cfg.images is False and "image" not in expert_env.reset()
    for env in (with_images, without, expert_env):
        env.close()


def test_contract_records_camera_and_instructions():
    env = make_env("arm-pick-place-vision", 1)
    extra = env.contract.extra
    assert extra["camera"] == "scene" and extra["image_size"] == 64
    assert extra["instructions"] == list(env.instructions)
    assert extra["instruction_goal"] == [VISION_CUBES[env.instruction_set.goal_of(i)][0] for i in range(27)]
    assert sum(extra["instruction_heldout"]) == 9
    assert InstructionSet.from_extra(extra) == env.instruction_set  # what the robot side reads back
    validate_contract(env.contract)
    env.close()


def _episode_instructions(split: str, episodes: int, seed: int = 5) -> tuple[list[int], list[int]]:
    """(instruction, goal) of each world's first `episodes` episodes, 8 worlds, from resets alone."""
    env = make_env("arm-pick-place-vision", 8, seed=seed,
                   cfg=ArmPickPlaceVisionConfig(images=False, instruction_split=split))
    texts, goals = [], []
    try:
        for _ in range(episodes):
            obs = env.reset(random_start=False)
            texts += obs["text"].tolist()
            goals += env.goal.tolist()
    finally:
        env.close()
    return texts, goals


def test_each_episode_draws_a_phrasing_of_its_goal_from_the_configured_split():
    seen = {}
    for split in ("train", "heldout", "all"):
        texts, goals = _episode_instructions(split, 12)
        for text, goal in zip(texts, goals, strict=True):
            assert VISION_INSTRUCTIONS.goal_of(text) == goal
            assert split == "all" or VISION_INSTRUCTIONS.split_of(text) == split
        seen[split] = set(texts)
    assert seen["train"] == set(VISION_INSTRUCTIONS.indices("train"))  # 96 draws reach all 18 phrasings
    assert seen["heldout"] == set(VISION_INSTRUCTIONS.indices("heldout"))  # ... and all 9 held-out ones
    assert seen["all"] & seen["train"] and seen["all"] & seen["heldout"]
    assert _episode_instructions("train", 3) == _episode_instructions("train", 3)  # seeded by the env's generator
    assert _episode_instructions("train", 3) != _episode_instructions("train", 3, seed=6)


def test_instruction_split_is_checked_and_the_instruction_is_saved_with_the_env_state():
    from robo_rl.core.config import ConfigError, build

    with pytest.raises(ConfigError, match=r"env.instruction_split = 'test': allowed values are train, heldout, all"):
        build(ArmPickPlaceVisionConfig, {"instruction_split": "test"}, "env")
    env = make_env("arm-pick-place-vision", 4, seed=3, cfg=ArmPickPlaceVisionConfig(images=False))
    env.reset(random_start=False)
    state = env.state_dict()
    before = env.instruction.clone()
    env.reset(random_start=False)
    env.load_state_dict(state)
    assert torch.equal(env.instruction, before)
    env.close()


def test_vision_instructions_hold_out_other_wordings_for_every_colour():
    s = VISION_INSTRUCTIONS
    assert s.goal_names == ("red", "blue", "yellow")
    assert len(s.indices("train")) == 18 and len(s.indices("heldout")) == 9
    assert s.texts[:3] == tuple(f"put the {c} cube on the green marker" for c in s.goal_names)  # the old instructions
    for held in s.indices("heldout"):  # a held-out phrasing shares few words with any train phrasing of its colour
        words = set(s.texts[held].split())
        for seen in s.by_goal("train")[s.goal_of(held)]:
            assert len(words ^ set(s.texts[seen].split())) >= 4, (s.texts[held], s.texts[seen])


def test_evaluation_reports_success_per_goal_and_phrasing_group():
    """run_episodes splits a task's success by the goal each episode's instruction names and by its phrasing group."""
    import dataclasses

    from robo_rl.learn.evaluation import by_instruction, run_episodes

    s = VISION_INSTRUCTIONS
    red, blue = s.index_of("put the red cube on the green marker"), s.index_of("put the blue cube on the green marker")
    held_red = next(i for i in s.indices("heldout") if s.goal_of(i) == s.goal_of(red))
    got = by_instruction(s, torch.tensor([red, red, blue, held_red]), torch.tensor([1.0, 0.0, 1.0, 1.0]))
    assert got == pytest.approx({"success/red": 2 / 3, "success/blue": 1.0, "success/train": 2 / 3,
                                 "success/heldout": 1.0})

    cfg = dataclasses.replace(ArmPickPlaceVisionConfig(), images=False, instruction_split="all",
                              episode_length_s=0.2)
    env = make_env("arm-pick-place-vision", 12, cfg=cfg, seed=2)
    try:
        metrics = run_episodes(env, lambda obs: torch.zeros(12, env.action_dim))["metrics"]
    finally:
        env.close()
    assert {"success", "success/train", "success/heldout"} <= set(metrics)
    assert any(k in metrics for k in ("success/red", "success/blue", "success/yellow"))
