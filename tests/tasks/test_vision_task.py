"""arm-pick-place-vision: camera images and text instructions as observation groups."""

import torch

from robo_rl.tasks.arm_pick_place import VISION_CUBES
from robo_rl.tasks.task_registry import make_env
from robo_rl.terms import validate_contract


def test_image_and_text_groups():
    env = make_env("arm-pick-place-vision", 6, seed=1)
    obs = env.reset(random_start=False)
    image, text = obs["image"], obs["text"]
    assert image.shape == (6, 3, 64, 64) and image.dtype == torch.uint8
    assert text.shape == (6,) and text.dtype == torch.long
    assert torch.equal(text, env.goal)
    for i in range(6):  # the instruction names the goal cube's colour, and that cube has that colour
        colour, rgb = VISION_CUBES[int(text[i])]
        assert colour in env.instructions[int(text[i])]
        geom = env.backend.name_id("geom", env.cfg.cube_bodies[int(text[i])])
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
    validate_contract(env.contract)
    env.close()
