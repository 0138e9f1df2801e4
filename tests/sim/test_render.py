"""Batched headless camera rendering (robo_rl.sim.render through backend.render_cameras)."""

import ctypes.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from robo_rl.core.assets import find_asset
from robo_rl.learn.policy_video import image_grid
from robo_rl.sim.mujoco_cpu import MujocoCpuBackend
from tests.conftest import REPO

PANDA = find_asset("envs/panda.xml")
GL_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa"}


def make_backend(num_envs: int) -> MujocoCpuBackend:
    """Panda worlds, world k with joint 1 turned by 0.3 k rad (different poses), sensors recomputed."""
    b = MujocoCpuBackend(PANDA, num_envs, keyframe="home")
    qpos = b.qpos.clone()
    qpos[:, 0] = 0.3 * torch.arange(num_envs, dtype=qpos.dtype)
    b.reset(torch.arange(num_envs), qpos=qpos)
    return b


@pytest.fixture
def backend():
    b = make_backend(4)
    try:
        b.render_cameras("scene", 64, 64)
    except Exception as exc:  # no OpenGL at all on this machine
        b.close()
        pytest.skip(f"offscreen rendering unavailable: {exc}")
    yield b
    b.close()


def pixel_change(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of pixels (over all channels) that differ between two images."""
    return float((a != b).float().mean())


def test_shape_dtype_and_not_blank(backend):
    images = backend.render_cameras("scene", 48, 32)  # W=48, H=32
    assert images.shape == (4, 3, 32, 48) and images.dtype == torch.uint8
    per_world_std = images.float().flatten(1).std(1)  # (N,)
    assert bool((per_world_std > 10).all()), per_world_std  # arm, floor and background: not a flat image


def test_matches_mujocos_own_renderer(backend):
    """Pixel for pixel what `mujoco.Renderer` draws with the same settings: rows top-down, RGB order, state."""
    import mujoco

    from robo_rl.sim.render import RenderSettings, render_model

    images = backend.render_cameras("scene", 64, 48)  # (N, 3, 48, 64)
    settings = RenderSettings()
    model = render_model(backend.model, 64, 48, settings)
    reference = mujoco.Renderer(model, height=48, width=64)
    reference.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = settings.shadows
    reference.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = settings.reflections
    reference.scene.flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = settings.skybox
    d = mujoco.MjData(model)
    try:
        for k in (0, 3):
            mujoco.mj_setState(model, d, backend.state[k].numpy(), mujoco.mjtState.mjSTATE_FULLPHYSICS)
            mujoco.mj_forward(model, d)
            reference.update_scene(d, camera="scene")
            expected = torch.from_numpy(reference.render()).permute(2, 0, 1)  # (3, H, W)
            assert torch.equal(images[k], expected), k
    finally:
        reference.close()


def test_video_frames_look_like_mujocos_defaults_and_leave_the_model_as_it_was(backend):
    """backend.render (videos) draws without MSAA and with a smaller shadow map: the same picture as MuJoCo's
    default renderer up to edge aliasing, and the model's own quality settings are untouched."""
    import mujoco

    from robo_rl.sim.render import VIDEO_SHADOW_SIZE

    quality = backend.model.vis.quality
    before = (quality.offsamples, quality.shadowsize)
    assert before == (4, 4096) and VIDEO_SHADOW_SIZE < 4096  # the panda scene's, which the fast path changes
    frame = backend.render(2, camera="scene", width=160, height=120).astype(np.float64)  # (H, W, 3)
    assert (quality.offsamples, quality.shadowsize) == before
    d = mujoco.MjData(backend.model)
    mujoco.mj_setState(backend.model, d, backend.state[2].numpy(), mujoco.mjtState.mjSTATE_FULLPHYSICS)
    mujoco.mj_forward(backend.model, d)
    with mujoco.Renderer(backend.model, height=120, width=160) as reference:
        reference.update_scene(d, camera="scene")
        expected = reference.render().astype(np.float64)
    difference = np.abs(frame - expected).mean(axis=2)  # (H, W)
    print(f"mean difference {difference.mean():.2f} levels, share > 40: {(difference > 40).mean():.4f}")
    assert difference.mean() < 3.0, difference.mean()  # measured 0.52: edges and shadow borders only
    assert (difference > 40).mean() < 0.02  # measured 0.003: no part of the scene missing or moved


def test_kinematics_steps_one_by_one_give_the_same_images(backend, monkeypatch):
    """The path for MuJoCo < 3.4 (no mj_fwdKinematics) draws the same pixels."""
    import mujoco

    first = backend.render_cameras("scene", 64, 64).clone()
    monkeypatch.delattr(mujoco, "mj_fwdKinematics")
    assert torch.equal(backend.render_cameras("scene", 64, 64), first)


def test_same_state_gives_same_pixels(backend):
    first = backend.render_cameras("scene", 64, 64).clone()
    again = backend.render_cameras("scene", 64, 64)
    assert torch.equal(first, again)
    other = make_backend(4)  # a second backend (its own GL context) with the same states
    try:
        assert torch.equal(first, other.render_cameras("scene", 64, 64))
    finally:
        other.close()


def test_different_arm_poses_give_different_images(backend):
    images = backend.render_cameras("scene", 64, 64)  # world k has joint 1 at 0.3 k rad
    for k in range(1, 4):
        assert pixel_change(images[0], images[k]) > 0.01, k


def test_moved_object_changes_only_its_world(backend):
    before = backend.render_cameras("scene", 64, 64).clone()
    backend.mocap_pos[2, 0] += torch.tensor([0.0, 0.15, 0.1], dtype=backend.mocap_pos.dtype)  # the target sphere
    after = backend.render_cameras("scene", 64, 64)
    moved = (before[2] != after[2]).any(0)  # (H, W): pixels that changed in any channel
    assert int(moved.sum()) >= 2  # the 2 cm sphere is ~1 pixel wide here: it leaves one place, shows in another
    for k in (0, 1, 3):
        assert torch.equal(before[k], after[k])


def test_ids_subset_matches_the_full_batch(backend):
    full = backend.render_cameras("scene", 64, 64).clone()
    subset = backend.render_cameras("scene", 64, 64, ids=torch.tensor([3, 1]))
    assert subset.shape == (2, 3, 64, 64)
    assert torch.equal(subset, full[[3, 1]])


def test_output_buffer_is_reused_and_physics_untouched(backend):
    state = backend.state.clone()
    first = backend.render_cameras("scene", 64, 64)
    second = backend.render_cameras("scene", 64, 64)
    assert first.data_ptr() == second.data_ptr()  # preallocated: no new tensor per call
    assert torch.equal(backend.state, state)


def test_per_world_model_colours_show(backend):
    """A world's own model (domain randomisation) is what its image shows."""
    base = backend.render_cameras("scene", 64, 64).clone()
    floor = backend.name_id("geom", "floor")
    rgba = backend.model.geom_rgba.copy()  # (G, 4)
    rgba[floor, :3] = [0.9, 0.1, 0.1]
    backend.set_model_field("geom_rgba", [1], rgba[None])
    images = backend.render_cameras("scene", 64, 64)
    assert pixel_change(base[1], images[1]) > 0.3  # the floor fills much of the view
    assert torch.equal(base[0], images[0])


def test_bad_camera_name_is_one_line_listing_cameras(backend):
    with pytest.raises(ValueError) as err:
        backend.render_cameras("front", 64, 64)
    assert str(err.value) == "camera 'front' is not in the model; cameras: track, scene"


@pytest.mark.parametrize("width, height", [(0, 64), (64, -1), (5000, 64)])
def test_bad_size_is_refused(backend, width, height):
    with pytest.raises(ValueError, match=r"(width|height) = -?\d+: must be an integer in 1\.\.4096"):
        backend.render_cameras("scene", width, height)


def test_bad_render_settings_are_refused():
    from robo_rl.sim.render import CameraRenderer, RenderSettings

    b = MujocoCpuBackend(PANDA, 1)
    try:
        with pytest.raises(ValueError, match=r"render settings: num_slices = 2: must be an integer in 3\.\.64"):
            CameraRenderer(b.model, "scene", 64, 64, max_worlds=1, settings=RenderSettings(num_slices=2))
    finally:
        b.close()


_RENDER_IN_SUBPROCESS = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_render import make_backend
b = make_backend(4)
np.save({out!r}, b.render_cameras("scene", 64, 64).numpy())
b.close()
"""


def test_other_gl_backend_in_a_subprocess(backend, tmp_path):
    """The headless OpenGL not used here (EGL or OSMesa) renders the same scene, nearly the same pixels."""
    here = os.environ.get("MUJOCO_GL", "egl")
    other = "osmesa" if here == "egl" else "egl"
    if ctypes.util.find_library(GL_LIBRARIES[other]) is None:
        pytest.skip(f"MUJOCO_GL={other}: lib{GL_LIBRARIES[other]} is not installed")
    out = tmp_path / "images.npy"
    env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}  # mujoco set it here for MUJOCO_GL
    env.update(MUJOCO_GL=other, PYTHONPATH=str(REPO))
    code = _RENDER_IN_SUBPROCESS.format(tests=str(REPO / "tests" / "sim"), out=str(out))
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    theirs = torch.from_numpy(np.load(out))
    ours = backend.render_cameras("scene", 64, 64)
    assert theirs.shape == ours.shape and theirs.dtype == torch.uint8
    assert float(theirs.float().std()) > 10
    assert float((theirs.float() - ours.float()).abs().mean()) < 2.0  # identical with Mesa's llvmpipe for both


def test_mujoco_imported_first_without_mujoco_gl_is_one_line(tmp_path):
    """mujoco imported before robo_rl with MUJOCO_GL unset picks glfw: a clear error, not an abort."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    env["PYTHONPATH"] = str(REPO)
    code = (
        "import mujoco\n"
        "from robo_rl.sim.mujoco_cpu import MujocoCpuBackend\n"
        f"MujocoCpuBackend({str(PANDA)!r}, 1).render_cameras('scene', 64, 64)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "RuntimeError: no headless OpenGL: mujoco was imported before MUJOCO_GL was set, so it chose glfw, "
        "which needs a display; set MUJOCO_GL=egl (or osmesa) in the environment, "
        "or import robo_rl.sim.mujoco_cpu before mujoco"
    )


def test_image_grid_tiles_row_by_row():
    images = torch.arange(3, dtype=torch.uint8).view(3, 1, 1, 1).expand(3, 3, 2, 2).contiguous()  # (3, 3, 2, 2)
    grid = image_grid(images, columns=2, scale=2)  # 2 rows x 2 columns of 2x2 images, doubled
    assert grid.shape == (8, 8, 3) and grid.dtype == np.uint8
    assert (grid[:4, :4] == 0).all() and (grid[:4, 4:] == 1).all()
    assert (grid[4:, :4] == 2).all() and (grid[4:, 4:] == 0).all()  # the empty cell is black


def test_camera_picture_script_writes_a_grid(backend, tmp_path):
    from PIL import Image

    out = tmp_path / "view.png"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "camera_picture.py"), str(out), "--worlds", "8", "--scale", "1"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    picture = np.asarray(Image.open(out).convert("RGB"))
    assert picture.shape == (128, 256, 3)  # 2 rows x 4 columns of 64x64
    cells = picture.reshape(2, 64, 4, 64, 3).transpose(0, 2, 1, 3, 4).reshape(8, 64, 64, 3)  # (8, H, W, 3)
    assert (cells.reshape(8, -1).std(1) > 10).all()
    assert (cells[0] != cells[1]).mean() > 0.01  # two worlds in different poses
