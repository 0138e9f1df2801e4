"""Batched torch kinematics and its numpy twin agree with MuJoCo's own site pose and mj_jacSite."""

import json

import numpy as np
import pytest
import torch

from robo_rl.sim.mjmodel import mujoco  # a headless MUJOCO_GL before mujoco loads: other tests render
from robo_rl.terms.kinematics import SerialChain as NumpyChain
from robo_rl.terms.kinematics import serial_chain
from robo_rl.terms.kinematics_torch import SerialChain
from tests.conftest import REPO

MODELS = ["panda.xml", "panda_pick.xml"]


def random_configurations(model, chain, n, seed):
    rng = np.random.default_rng(seed)
    lo = np.array([link["range"][0] for link in chain["links"] if link["joint"]])
    hi = np.array([link["range"][1] for link in chain["links"] if link["joint"]])
    return rng.uniform(lo, hi, size=(n, len(lo)))  # (N, J)


def mujoco_site(model, data, joints, q, site):
    """MuJoCo's site position, rotation and (6, J) Jacobian columns of `joints` at configuration q."""
    adr = [model.joint(j).qposadr[0] for j in joints]
    dof = [model.joint(j).dofadr[0] for j in joints]
    data.qpos[adr] = q
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    jp, jr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    sid = model.site(site).id
    mujoco.mj_jacSite(model, data, jp, jr, sid)
    return data.site_xpos[sid].copy(), data.site_xmat[sid].reshape(3, 3).copy(), np.vstack([jp[:, dof], jr[:, dof]])


@pytest.mark.parametrize("xml", MODELS)
def test_torch_and_numpy_chains_match_mujoco(xml):
    model = mujoco.MjModel.from_xml_path(str(REPO / "envs" / xml))
    data = mujoco.MjData(model)
    chain = serial_chain(model, "ee")
    assert chain["root"] == "link0" and chain["site"]["name"] == "ee"
    assert json.loads(json.dumps(chain)) == chain  # plain JSON: it travels in the contract
    joints = tuple(f"joint{i}" for i in range(1, 8))
    q = random_configurations(model, chain, 64, seed=0)  # (N, J)
    torch_chain = SerialChain(chain, dtype=torch.float64)
    numpy_chain = NumpyChain(chain)
    assert torch_chain.joint_names == numpy_chain.joint_names == joints
    pos, rot, jac = torch_chain.jacobian(torch.from_numpy(q))  # (N, 3), (N, 3, 3), (N, 6, J)
    pos32, _, jac32 = SerialChain(chain).jacobian(torch.from_numpy(q).float())
    for i in range(len(q)):
        want_pos, want_rot, want_jac = mujoco_site(model, data, joints, q[i], "ee")
        np.testing.assert_allclose(pos[i].numpy(), want_pos, atol=1e-12)
        np.testing.assert_allclose(rot[i].numpy(), want_rot, atol=1e-12)
        np.testing.assert_allclose(jac[i].numpy(), want_jac, atol=1e-12)
        np.testing.assert_allclose(pos32[i].numpy(), want_pos, atol=2e-6)  # the float32 training copy
        np.testing.assert_allclose(jac32[i].numpy(), want_jac, atol=2e-6)
        n_pos, n_rot, n_jac = numpy_chain.jacobian(q[i])
        np.testing.assert_allclose(n_pos, want_pos, atol=1e-12)
        np.testing.assert_allclose(n_rot, want_rot, atol=1e-12)
        np.testing.assert_allclose(n_jac, want_jac, atol=1e-12)
    f_pos, f_rot = torch_chain.forward(torch.from_numpy(q))
    torch.testing.assert_close(f_pos, pos)
    torch.testing.assert_close(f_rot, rot)


def test_chain_honours_joint_reference_and_anchor_offsets():
    """A chain whose joints have a nonzero qpos0 (ref) and off-centre anchors still matches MuJoCo."""
    xml = """
    <mujoco><worldbody><body name="base" pos="0.1 0.2 0.3" quat="0.9 0.1 0.3 0.2">
      <body name="a" pos="0 0 0.2" quat="0.7 0.7 0 0">
        <joint name="j1" axis="0.3 1 0.2" pos="0.05 0 -0.02" ref="0.4" range="-2 2"/>
        <geom size="0.02" mass="1"/>
        <body name="b" pos="0.3 0 0"><joint name="j2" axis="0 0 1" pos="0 0.1 0" range="-2 2"/>
          <geom size="0.02" mass="1"/><site name="tip" pos="0.2 0.05 0" quat="0.5 0.5 0.5 0.5"/>
        </body></body></body></worldbody></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    chain = serial_chain(model, "tip", root="base")
    # The chain is expressed in the root frame: move MuJoCo's world answer into it.
    mujoco.mj_kinematics(model, data)
    root_pos, root_rot = data.xpos[1].copy(), data.xmat[1].reshape(3, 3).copy()
    rng = np.random.default_rng(1)
    numpy_chain, torch_chain = NumpyChain(chain), SerialChain(chain, dtype=torch.float64)
    for _ in range(10):
        q = rng.uniform(-2, 2, 2)
        want_pos, want_rot, want_jac = mujoco_site(model, data, ("j1", "j2"), q, "tip")
        pos, rot, jac = numpy_chain.jacobian(q)
        np.testing.assert_allclose(root_pos + root_rot @ pos, want_pos, atol=1e-12)
        np.testing.assert_allclose(root_rot @ rot, want_rot, atol=1e-12)
        np.testing.assert_allclose(np.vstack([root_rot @ jac[:3], root_rot @ jac[3:]]), want_jac, atol=1e-12)
        t_pos, _, t_jac = torch_chain.jacobian(torch.from_numpy(q)[None])
        np.testing.assert_allclose(t_pos[0].numpy(), pos, atol=1e-12)
        np.testing.assert_allclose(t_jac[0].numpy(), jac, atol=1e-12)


def test_chain_refuses_what_it_cannot_describe():
    model = mujoco.MjModel.from_xml_path(str(REPO / "envs" / "panda_pick.xml"))
    with pytest.raises(ValueError, match="site 'nope' is not in the model"):
        serial_chain(model, "nope")
    with pytest.raises(ValueError, match="'cube' is not an ancestor of site 'ee'"):
        serial_chain(model, "ee", root="cube")
    chain = serial_chain(model, "ee")
    broken = json.loads(json.dumps(chain))
    broken["links"][2]["axis"] = [0, 0, 0]
    with pytest.raises(ValueError, match=r"chain.links\[2\] \('link3'\): joint needs a name, a non-zero axis"):
        NumpyChain(broken)
