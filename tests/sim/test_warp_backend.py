"""The MuJoCo Warp backend (Warp's CPU device here): the same tasks, states and results as the CPU backend.

Tolerances are per task and were set from measured gaps (docs/benchmarks.md, MuJoCo Warp backend): on models whose
contacts the two engines compute alike, float32 against float64 is the only difference, and worlds
stay within ~1e-5 of each other for 50 steps. Sphere-on-heightfield contacts differ between the
engines (MuJoCo's C collider returns up to eight contacts per foot on a heightfield, MuJoCo Warp
fewer), so on rough terrain the worlds agree tightly only until the feet land and then in their
statistics.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("robo_rl.sim.mujoco_warp", reason="needs the gpu extra (mujoco-warp, warp-lang)")

from robo_rl.core.assets import find_asset  # noqa: E402
from robo_rl.core.config import ConfigError  # noqa: E402
from robo_rl.learn.builders import build_env, resolve_config  # noqa: E402
from robo_rl.sim.mujoco_warp import MujocoWarpBackend, WarpBufferOverflow, wp  # noqa: E402
from robo_rl.tasks.task_registry import TASKS, make_env, task_entry  # noqa: E402
from tests.conftest import sigkill_then_resume  # noqa: E402
from tests.sim.warp_support import WARP_DEVICE, env_pair, paired_rollout  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Tolerance:
    tight_steps: int
    """Policy steps over which every world's qpos must agree within `qpos`."""
    qpos: float
    reward_rel: float
    """|mean reward difference| / |mean reward| over all 50 steps and worlds."""
    qvel_rel: float
    """|mean |qvel| difference| / mean |qvel| over all 50 steps and worlds."""


TOLERANCES = {
    # measured max |dqpos| over 50 steps: 5e-6, 7e-7, 3e-6, 3e-6; reward and qvel means within 1e-6
    "arm-reach": Tolerance(50, 1e-4, 1e-4, 1e-4),
    "quadruped-walk-flat": Tolerance(50, 1e-4, 1e-4, 1e-4),
    "arm-pick-place": Tolerance(50, 1e-4, 1e-4, 1e-4),
    "arm-pick-place-vision": Tolerance(50, 1e-4, 1e-4, 1e-4),
    # measured: 6e-6 for the first 3 steps, then up to 6.5e-2 once feet touch the heightfield;
    # mean reward within 2.2 %, mean |qvel| within 0.15 %
    "quadruped-walk-rough": Tolerance(3, 1e-4, 0.1, 0.02),
}


def test_every_registered_task_has_a_stated_tolerance():
    assert set(TASKS) == set(TOLERANCES)


@pytest.mark.parametrize("task", sorted(TOLERANCES))
def test_task_runs_50_steps_on_both_backends_and_agrees(task):
    tol = TOLERANCES[task]
    p = paired_rollout(task, 16, 50)
    gap = (p.qpos[0] - p.qpos[1]).abs().amax(dim=(1, 2))  # (T,) worst world and coordinate per step
    assert gap[: tol.tight_steps].max() < tol.qpos, gap
    reward = p.reward.mean(dim=(1, 2))  # (2,)
    assert (reward[0] - reward[1]).abs() <= tol.reward_rel * reward.abs().mean(), reward
    speed = p.qvel.abs().mean(dim=(1, 2, 3))  # (2,)
    assert (speed[0] - speed[1]).abs() <= tol.qvel_rel * speed.mean(), speed
    assert torch.isfinite(p.obs).all()


def test_same_seed_gives_the_same_initial_states_on_both_backends():
    cpu, warp = env_pair("quadruped-walk-flat", 32, seed=3)
    obs_cpu, obs_warp = cpu.reset(), warp.reset()
    assert torch.allclose(cpu.backend.state.float(), warp.backend.state.cpu(), atol=1e-6)
    assert torch.allclose(obs_cpu["critic"], obs_warp["critic"].cpu(), atol=1e-5)
    assert torch.equal(cpu.episode_length, warp.episode_length.cpu())


def test_state_is_one_tensor_shared_with_warp_without_copies():
    env = make_env("arm-reach", 4, backend="mujoco_warp", device=WARP_DEVICE)
    b = env.backend
    assert isinstance(b, MujocoWarpBackend) and b.state.dtype == torch.float32
    ptr = b.state.data_ptr()
    qpos = wp.to_torch(b._d.qpos)
    assert qpos.data_ptr() == b.qpos.data_ptr() and b.qpos.data_ptr() >= ptr  # Warp's qpos is a view of state
    b.qpos[1, 0] = 0.25  # a torch write is what the physics steps from
    b.qvel[1] = 0.0
    b.step(1)
    assert b.state.data_ptr() == ptr and abs(float(b.qpos[1, 0]) - 0.25) < 0.01
    assert wp.to_torch(b._d.ctrl).data_ptr() == b.ctrl.data_ptr()
    env.close()


def test_per_world_reset_and_sensors_match_the_cpu_backend():
    envs = env_pair("quadruped-walk-flat", 8, seed=1)
    for env in envs:
        env.reset()
        env.step(torch.full((8, env.action_dim), 0.3))
    ids = torch.tensor([1, 5])
    qpos = envs[0].backend.qpos[ids].clone()
    qpos[:, 2] += 0.05
    for env in envs:
        env.backend.reset(ids, qpos=qpos)
    cpu, warp = envs[0].backend, envs[1].backend
    assert torch.allclose(cpu.state.float(), warp.state.cpu(), atol=1e-5)
    assert torch.allclose(cpu.sensordata.float(), warp.sensordata.cpu(), atol=1e-4)  # reset worlds: recomputed


def test_domain_randomization_writes_per_world_model_fields_like_the_cpu_backend():
    cls, cfg_cls = task_entry("quadruped-walk-flat")
    base = cfg_cls()
    rand = dataclasses.replace(base.randomization, friction_scale=(0.4, 1.6), mass_scale=(0.8, 1.2), com_offset=0.02,
                               kp_scale=(0.8, 1.2), kd_scale=(0.8, 1.2), motor_strength=(0.8, 1.0),
                               damping_add=(0.0, 0.2), armature_add=(0.0, 0.02))
    cfg = dataclasses.replace(base, randomization=rand)
    cpu, warp = env_pair("quadruped-walk-flat", 8, cfg=cfg, seed=2)
    for field in ("geom_friction", "body_mass", "body_ipos", "actuator_gainprm", "actuator_biasprm",
                  "actuator_forcerange", "dof_damping", "dof_armature"):
        a, b = cpu.backend.model_field(field), warp.backend.model_field(field).cpu()
        assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-6), field
        assert not torch.equal(b[0], b[1]), f"{field}: worlds share one value"
    p_cpu, p_warp = cpu.reset(), warp.reset()
    actions = torch.Generator().manual_seed(0)
    for _ in range(20):
        a = 0.5 * torch.randn(8, cpu.action_dim, generator=actions)
        p_cpu, *_ = cpu.step(a)
        p_warp, *_ = warp.step(a)
    assert (cpu.backend.qpos.float() - warp.backend.qpos.cpu()).abs().max() < 1e-4


def test_contact_buffer_overflow_is_a_clear_error():
    env = make_env("quadruped-walk-flat", 4, backend="mujoco_warp", device=WARP_DEVICE, nconmax=1)
    env.reset()
    with pytest.raises(WarpBufferOverflow, match=r"overflowed in \d+ world\(s\).*raise sim.nconmax"):
        for _ in range(50):  # the feet touch down within the first steps
            env.step(torch.zeros(4, env.action_dim))


def test_camera_images_come_from_the_warp_batch_renderer_and_look_like_the_cpu_ones():
    cpu, warp = env_pair("arm-pick-place-vision", 4, seed=0)
    a, b = cpu.reset()["image"], warp.reset()["image"].cpu()
    assert b.shape == a.shape == (4, 3, 64, 64) and b.dtype == torch.uint8
    for i in range(4):  # same scene, OpenGL against Warp's ray tracer: the pictures agree in the main
        corr = np.corrcoef(a[i].flatten().double().numpy(), b[i].flatten().double().numpy())[0, 1]
        assert corr > 0.95, (i, corr)


def test_checkpoint_state_moves_between_backends():
    cpu, warp = env_pair("arm-reach", 4, seed=0)
    cpu.reset()
    cpu.step(torch.full((4, cpu.action_dim), 0.2))
    warp.reset(seed=9)
    warp.load_state_dict(cpu.state_dict())
    assert torch.allclose(cpu.get_observations()["critic"], warp.get_observations()["critic"].cpu(), atol=1e-5)


def test_config_chooses_the_backend_and_keeps_devices_together():
    cfg = resolve_config({"task": "arm-reach"}, ["sim.backend=mujoco_warp", "sim.num_envs=2", "sim.nconmax=16"])
    env = build_env(cfg)
    assert isinstance(env.backend, MujocoWarpBackend) and env.backend._d.naconmax == 2 * 16
    env.close()
    with pytest.raises(ConfigError, match="mujoco_cpu backend runs on the cpu only"):
        resolve_config({"task": "arm-reach"}, ["sim.device=cuda:0"])
    with pytest.raises(ConfigError, match="learner must be on sim.device"):
        resolve_config({"task": "arm-reach"}, ["sim.backend=mujoco_warp", "device=cuda"])
    with pytest.raises(ConfigError, match="sim.device = 'gpu'"):
        resolve_config({"task": "arm-reach"}, ["sim.device=gpu"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the errors where no GPU exists")
def test_missing_cuda_device_is_named():
    with pytest.raises(ValueError, match="sim.device = 'cuda:0': this torch has no CUDA device"):
        make_env("arm-reach", 2, backend="mujoco_warp", device="cuda:0")
    with pytest.raises(ValueError, match="sim.device = 'cuda:0': Warp has no such device here; devices: cpu"):
        MujocoWarpBackend(find_asset("envs/panda.xml"), 2, device="cuda:0")


WARP_TRAIN = [
    "train", "--task", "arm-reach", "--num-envs", "16", "--seed", "5", "--set", "sim.backend=mujoco_warp",
    "--set", "algo.num_steps_per_env=8", "--set", "runner.save_interval=2", "--set", "runner.eval_episodes=0",
    "--set", "runner.progress_bar=false",
    "--set", "policy.actor_hidden_dims=[32, 32]", "--set", "policy.critic_hidden_dims=[32, 32]",
]


@pytest.mark.skipif(WARP_DEVICE != "cpu", reason="the CPU device's run (CI); gpu_check.py times PPO on a GPU")
def test_ppo_trains_arm_reach_on_warp_and_resumes_after_sigkill(cli, tmp_path):
    from robo_rl.learn.checkpoint import load_checkpoint

    resumed = sigkill_then_resume(cli, tmp_path, WARP_TRAIN)
    assert "resuming" in resumed.stdout
    a = load_checkpoint(tmp_path / "full" / "model_000006.pt")
    b = load_checkpoint(tmp_path / "killed" / "model_000006.pt")
    assert a["config"]["sim"]["backend"] == "mujoco_warp"
    assert a["env"]["physics_state"].dtype == torch.float32
    for name, tensor in a["algo"]["policy"].items():
        assert torch.equal(tensor, b["algo"]["policy"][name]), name
    assert torch.equal(a["env"]["physics_state"], b["env"]["physics_state"])


@pytest.mark.skipif(any(d.is_cuda for d in wp.get_devices()), reason="on a GPU machine gpu_check runs for real")
def test_gpu_check_says_why_it_cannot_run_without_a_gpu():
    import subprocess
    import sys

    from tests.conftest import REPO

    done = subprocess.run([sys.executable, "scripts/gpu_check.py"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 1 and "Warp sees no cuda:0 here (devices: cpu)" in done.stdout, done.stdout
