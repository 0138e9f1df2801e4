"""Batched kinematics of a serial chain of hinge joints in torch: site pose and geometric Jacobian.

The chain is read once from the MjModel into a plain JSON description (`serial_chain`, format in
`robo_rl.core.contract.validate_chain`); `SerialChain` turns it into constant tensors and evaluates all worlds
at once with a handful of batched ops per link: no per-world Python and no MuJoCo call, so the same code
runs on a GPU backend. The robot side has a numpy twin fed by the same description
(`robo_rl.deploy.kinematics`), which the exporter writes into the deploy contract.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from robo_rl.core.contract import validate_chain

_HINGE = 3  # mujoco.mjtJoint.mjJNT_HINGE


def serial_chain(model: Any, site: str, *, root: str | None = None) -> dict[str, Any]:
    """Describe the kinematic chain from body `root` down to `site` of an MjModel (JSON values only).

    Args:
        model: the MjModel.
        site: the site whose pose the chain ends in (e.g. the end-effector TCP).
        root: the body whose frame the chain is expressed in (the robot base); default: the site body's
            ancestor whose parent is the world.

    Raises:
        ValueError: a name is not in the model, `root` is not an ancestor of the site, or a body on the chain
            has a joint other than one hinge.
    """
    import mujoco

    site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
    if site_id < 0:
        raise ValueError(f"site {site!r} is not in the model")
    bodies = [int(model.site_bodyid[site_id])]  # site body first, walking up to the world
    while bodies[-1] != 0:
        bodies.append(int(model.body_parentid[bodies[-1]]))
    if root is None:
        root_id = bodies[-2]  # the ancestor right below the world
    else:
        root_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, root)
        if root_id not in bodies:
            raise ValueError(f"body {root!r} is not an ancestor of site {site!r}")
    path = bodies[: bodies.index(root_id)][::-1]  # root's child ... site body
    links = []
    for b in path:
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b)
        link: dict[str, Any] = {"body": name, "pos": _floats(model.body_pos[b]), "quat": _floats(model.body_quat[b]),
                                "joint": None, "axis": None, "anchor": None, "qpos0": None, "range": None}
        n, adr = int(model.body_jntnum[b]), int(model.body_jntadr[b])
        if n > 1 or (n == 1 and model.jnt_type[adr] != _HINGE):
            raise ValueError(f"body {name!r} on the chain to site {site!r} must have at most one hinge joint")
        if n == 1:
            link.update(
                joint=mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, adr),
                axis=_floats(model.jnt_axis[adr]),
                anchor=_floats(model.jnt_pos[adr]),
                qpos0=float(model.qpos0[model.jnt_qposadr[adr]]),
                range=_floats(model.jnt_range[adr]) if model.jnt_limited[adr] else None,
            )
        links.append(link)
    root_name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, root_id)
    chain = {"root": root_name, "links": links,
             "site": {"name": site, "pos": _floats(model.site_pos[site_id]), "quat": _floats(model.site_quat[site_id])}}
    validate_chain(chain, f"chain to site {site!r}")
    return chain


def _floats(values: Any) -> list[float]:
    return [float(v) for v in values]


def quat_to_matrix(q: Tensor) -> Tensor:
    """Rotation matrices (..., 3, 3) of quaternions (..., 4) (w, x, y, z; normalised here)."""
    q = q / torch.linalg.vector_norm(q, dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    ).reshape(*q.shape[:-1], 3, 3)


def skew(v: Tensor) -> Tensor:
    """Cross-product matrices (..., 3, 3) of vectors (..., 3): skew(v) @ u = v x u."""
    x, y, z = v.unbind(-1)
    zero = torch.zeros_like(x)
    return torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], dim=-1).reshape(*v.shape[:-1], 3, 3)


class SerialChain:
    """Forward kinematics and site Jacobian of a serial hinge chain for a batch of configurations.

    Args:
        chain: the description from `serial_chain` (or a contract's ee_delta term).
        device: where the constant tensors live.
        dtype: their dtype (float32 in training).

    Positions, rotations and Jacobians are expressed in the chain's root frame.
    """

    def __init__(self, chain: dict[str, Any], *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32):
        self.joint_names = validate_chain(chain, "chain")
        links = chain["links"]

        def t(values: Any) -> Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        self._link_pos = t([link["pos"] for link in links])  # (L, 3)
        self._link_rot = quat_to_matrix(t([link["quat"] for link in links]))  # (L, 3, 3)
        self._joint_of_link = [i for i, link in enumerate(links) if link["joint"] is not None]  # (J,) link index
        jl = [links[i] for i in self._joint_of_link]
        axis = t([link["axis"] for link in jl])
        self._axis = axis / torch.linalg.vector_norm(axis, dim=-1, keepdim=True)  # (J, 3) link frame
        self._anchor = t([link["anchor"] for link in jl])  # (J, 3) link frame
        self._qpos0 = t([link["qpos0"] for link in jl])  # (J,)
        k = skew(self._axis)  # (J, 3, 3)
        self._k, self._k2 = k, k @ k  # Rodrigues: R(a, th) = I + sin th K + (1 - cos th) K^2
        inf = float("inf")
        self.lower = t([link["range"][0] if link["range"] else -inf for link in jl])  # (J,)
        self.upper = t([link["range"][1] if link["range"] else inf for link in jl])  # (J,)
        self._site_pos = t(chain["site"]["pos"])  # (3,)
        self._site_rot = quat_to_matrix(t(chain["site"]["quat"]))  # (3, 3)
        self._eye = torch.eye(3, dtype=dtype, device=device)

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    def _walk(self, q: Tensor) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
        """Site pose and every joint's world axis and anchor for configurations q (N, J)."""
        n = q.shape[0]
        rot = self._eye.expand(n, 3, 3)  # (N, 3, 3) frame of the current link in the root frame
        pos = q.new_zeros(n, 3)  # (N, 3)
        theta = q - self._qpos0  # (N, J)
        s, c1 = torch.sin(theta), 1.0 - torch.cos(theta)  # (N, J)
        axes, anchors = [], []
        j = 0
        for i in range(self._link_pos.shape[0]):
            pos = pos + rot @ self._link_pos[i]  # (N, 3)
            rot = rot @ self._link_rot[i]  # (N, 3, 3)
            if j < len(self._joint_of_link) and self._joint_of_link[j] == i:
                anchor = pos + rot @ self._anchor[j]  # (N, 3)
                axes.append(rot @ self._axis[j])  # (N, 3); the joint's own rotation leaves its axis fixed
                anchors.append(anchor)
                local = self._eye + s[:, j, None, None] * self._k[j] + c1[:, j, None, None] * self._k2[j]  # (N, 3, 3)
                rot = rot @ local
                pos = anchor - rot @ self._anchor[j]
                j += 1
        site_pos = pos + rot @ self._site_pos  # (N, 3)
        site_rot = rot @ self._site_rot  # (N, 3, 3)
        return site_pos, site_rot, axes, anchors

    def forward(self, q: Tensor) -> tuple[Tensor, Tensor]:
        """Site position (N, 3) and rotation matrix (N, 3, 3) for joint positions q (N, J), chain order."""
        site_pos, site_rot, _, _ = self._walk(q)
        return site_pos, site_rot

    def jacobian(self, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Site position (N, 3), rotation (N, 3, 3) and geometric Jacobian (N, 6, J): rows 0-2 linear velocity
        of the site, rows 3-5 angular velocity, both in the root frame, per unit joint velocity."""
        site_pos, site_rot, axes, anchors = self._walk(q)
        axis = torch.stack(axes, dim=-1)  # (N, 3, J)
        arm = site_pos[:, :, None] - torch.stack(anchors, dim=-1)  # (N, 3, J) anchor -> site
        linear = torch.linalg.cross(axis, arm, dim=1)  # (N, 3, J)
        return site_pos, site_rot, torch.cat([linear, axis], dim=1)  # (N, 6, J)
