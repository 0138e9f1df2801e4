import numpy as np
import pytest
import torch

from robo_rl.core.assets import find_asset
from robo_rl.sim.mujoco_cpu import MujocoCpuBackend

PANDA = find_asset("envs/panda.xml")


def test_state_views_share_memory_and_step_moves_worlds():
    b = MujocoCpuBackend(PANDA, 3, keyframe="home")
    assert b.qpos.shape == (3, b.model.nq)
    q0 = b.qpos.clone()
    b.ctrl[1, 0] = 1.0  # only world 1 gets a new target
    b.step(20)
    assert torch.allclose(b.qpos[0], q0[0], atol=1e-3)
    assert abs(float(b.qpos[1, 0] - q0[1, 0])) > 0.05
    assert torch.equal(b.qpos[0], b.qpos[2])
    assert b.time[0] == pytest.approx(20 * b.model.opt.timestep)
    b.close()


def test_reset_sets_state_and_sensors():
    b = MujocoCpuBackend(PANDA, 2, keyframe="home")
    ee = b.sensor_slice("ee_pos")
    home_ee = b.sensordata[0, ee].clone()
    qpos = b.qpos[1:].clone()
    qpos[0, 0] = 0.5
    b.reset(torch.tensor([1]), qpos=qpos)
    assert b.qpos[1, 0] == 0.5
    assert b.time[1] == 0.0
    assert not torch.allclose(b.sensordata[1, ee], home_ee)  # sensors follow the new state at once
    b.close()


def test_per_world_model_parameters():
    b = MujocoCpuBackend(PANDA, 2, keyframe="home")
    b.ctrl[:, 0] = 1.0
    b.set_model_field("dof_damping", [1], np.array([b.model.dof_damping + 1000.0]))
    b.step(10)
    assert float(b.qpos[0, 0]) > float(b.qpos[1, 0]) + 0.05  # the heavily damped world moves less
    assert b.model.dof_damping[0] < 1000.0  # the shared model is untouched
    b.close()


def test_unknown_name_lists_valid_names():
    b = MujocoCpuBackend(PANDA, 1)
    with pytest.raises(ValueError, match="sensor 'ee_p' is not in the model; sensors: ee_pos"):
        b.sensor_slice("ee_p")
    b.close()


def test_render_returns_an_image():
    b = MujocoCpuBackend(PANDA, 1, keyframe="home")
    try:
        frame = b.render(0, camera="track", width=64, height=48)
    except Exception as exc:  # no GL context at all on this machine
        pytest.skip(f"offscreen rendering unavailable: {exc}")
    assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8
    assert frame.std() > 5  # not a blank image
    b.close()


def test_inline_and_pooled_reset_compute_the_same_sensors(monkeypatch):
    """Small resets recompute sensors on the calling thread, large ones on the pool: same numbers.

    The Go2's IMU (gyro, accelerometer, velocimeter) also depends on velocities and actuator forces.
    """
    import robo_rl.sim.mujoco_cpu as mujoco_cpu

    def sensors_after_reset(inline_max):
        monkeypatch.setattr(mujoco_cpu, "_INLINE_FORWARD_MAX", inline_max)
        b = MujocoCpuBackend(find_asset("envs/go2.xml"), 6, keyframe="home")
        b.ctrl[:, 1] += 0.3
        b.step(15)
        ids = torch.tensor([1, 4])
        qpos = b.qpos[ids] + 0.2
        b.reset(ids, qpos=qpos, qvel=torch.full((2, b.model.nv), 0.5))
        out = b.sensordata.clone()
        b.close()
        return out

    inline, pooled = sensors_after_reset(10**6), sensors_after_reset(0)
    assert torch.equal(inline, pooled)
    assert not torch.equal(inline[1], inline[0])  # the reset worlds' sensors did change


def test_centre_of_mass_offset_moves_a_same_frame_body():
    """MuJoCo skips the inertial frame of bodies compiled with it equal to the body frame; an offset must count."""
    go2 = find_asset("envs/go2.xml")
    b = MujocoCpuBackend(go2, 2, keyframe="home")
    foot = b.name_id("body", "FL_foot")
    assert b.model.body_sameframe[foot] == 1  # zero ipos: the case the flag shortcuts
    ipos = b.model_field("body_ipos")[1:]  # (1, nbody, 3)
    ipos[0, foot, 2] = 0.05
    b.set_model_field("body_ipos", [1], ipos)
    import mujoco

    xipos = []
    for w in range(2):
        m = b._models[w]
        d = mujoco.MjData(m)
        mujoco.mj_setState(m, d, b.state[w].numpy(), mujoco.mjtState.mjSTATE_FULLPHYSICS)
        mujoco.mj_kinematics(m, d)
        xipos.append(d.xipos[foot] - d.xpos[foot])
    assert np.linalg.norm(xipos[0]) < 1e-9 and np.linalg.norm(xipos[1]) == pytest.approx(0.05)
