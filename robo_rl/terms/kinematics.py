"""Serial hinge chains: their JSON description (read from an MjModel, validated) and their kinematics in numpy.

`serial_chain` reads the description from a MuJoCo model; `validate_chain` checks one (the `ee_delta` action
term carries it in the deploy contract); `SerialChain` is the robot side's forward kinematics and site Jacobian,
one configuration at a time, numpy only. The sim side's batched torch twin is
`robo_rl.terms.kinematics_torch.SerialChain`, fed by the same description.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robo_rl.core.contract import finite_number


def _vec(value: Any, n: int) -> bool:
    """True when `value` is a list of `n` finite numbers."""
    return isinstance(value, list) and len(value) == n and all(finite_number(v) for v in value)


def _unit_like(value: Any, n: int = 4) -> bool:
    """True for `n` finite numbers that are not all zero (a quaternion or an axis, normalised by the reader)."""
    return _vec(value, n) and any(v != 0 for v in value)


_CHAIN_KEYS = ("root", "links", "site")
_LINK_KEYS = ("body", "pos", "quat", "joint", "axis", "anchor", "qpos0", "range")
_SITE_KEYS = ("name", "pos", "quat")


def validate_chain(chain: Any, where: str) -> tuple[str, ...]:
    """Check a serial kinematic chain description; returns its joint names in chain order.

    Format (JSON; every position and axis in the frame of the element's parent; quaternions w, x, y, z):
        {"root": <body the chain is expressed in (the robot base)>,
         "links": [{"body": <name>, "pos": [3], "quat": [4], "joint": <hinge joint name> | null,
                    "axis": [3], "anchor": [3], "qpos0": <float>, "range": [low, high] | null}, ...],
         "site": {"name": <name>, "pos": [3], "quat": [4]}}
    A link's frame is its parent's frame moved by pos, rotated by quat, then (if it has a joint) rotated by
    q - qpos0 about `axis` through `anchor` (both in the link frame), as MuJoCo's kinematics do. Links without
    a joint carry null axis, anchor, qpos0 and range.

    Raises:
        ValueError: one line naming `where` and the first malformed entry.
    """
    if not isinstance(chain, dict) or sorted(chain) != sorted(_CHAIN_KEYS):
        raise ValueError(f"{where}: must be an object with keys {', '.join(_CHAIN_KEYS)}")
    links, site = chain["links"], chain["site"]
    if not isinstance(chain["root"], str) or not isinstance(links, list) or not links:
        raise ValueError(f"{where}: root must be a body name and links a non-empty list")
    joints: list[str] = []
    for i, link in enumerate(links):
        at = f"{where}.links[{i}]"
        if not isinstance(link, dict) or sorted(link) != sorted(_LINK_KEYS):
            raise ValueError(f"{at}: must be an object with keys {', '.join(_LINK_KEYS)}")
        if not isinstance(link["body"], str) or not _vec(link["pos"], 3) or not _unit_like(link["quat"]):
            raise ValueError(f"{at} ({link['body']!r}): needs a body name, pos (3 finite numbers) and a non-zero "
                             f"finite quat (4 numbers)")
        if link["joint"] is None:
            if any(link[k] is not None for k in ("axis", "anchor", "qpos0", "range")):
                raise ValueError(f"{at} ({link['body']!r}): a link without a joint has null axis, anchor, qpos0, range")
            continue
        if not isinstance(link["joint"], str) or not _unit_like(link["axis"], 3) or not _vec(link["anchor"], 3):
            raise ValueError(f"{at} ({link['body']!r}): joint needs a name, a non-zero axis and an anchor "
                             f"(3 finite numbers each)")
        if not finite_number(link["qpos0"]):
            raise ValueError(f"{at} ({link['joint']!r}): qpos0 = {link['qpos0']!r}: must be a finite number")
        r = link["range"]
        if r is not None and not (_vec(r, 2) and r[0] < r[1]):
            raise ValueError(f"{at} ({link['joint']!r}): range = {r!r}: must be [low, high] with low < high, or null")
        joints.append(link["joint"])
    if not joints:
        raise ValueError(f"{where}: the chain has no joint")
    if not isinstance(site, dict) or sorted(site) != sorted(_SITE_KEYS) or not isinstance(site["name"], str):
        raise ValueError(f"{where}.site: must be an object with keys {', '.join(_SITE_KEYS)}")
    if not _vec(site["pos"], 3) or not _unit_like(site["quat"]):
        raise ValueError(f"{where}.site: pos must be 3 finite numbers and quat 4 finite numbers, not all zero")
    return tuple(joints)


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


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of a quaternion (4,) (w, x, y, z; normalised here)."""
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def skew(v: np.ndarray) -> np.ndarray:
    """Cross-product matrix (3, 3) of v (3,): skew(v) @ u = v x u."""
    x, y, z = v
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


class SerialChain:
    """Forward kinematics and site Jacobian of one configuration of a serial hinge chain.

    Args:
        chain: the chain description (a contract's ee_delta `params.chain`).

    Positions, rotations and Jacobians are expressed in the chain's root frame (the robot base).
    """

    def __init__(self, chain: dict[str, Any]):
        self.joint_names = validate_chain(chain, "chain")
        links = chain["links"]
        self._links = []  # per link: (pos (3,), rot (3, 3), joint or None: (axis, anchor, qpos0, K, K^2))
        lower, upper = [], []
        for link in links:
            joint = None
            if link["joint"] is not None:
                axis = np.asarray(link["axis"], dtype=np.float64)
                axis = axis / np.linalg.norm(axis)
                k = skew(axis)
                joint = (axis, np.asarray(link["anchor"], dtype=np.float64), float(link["qpos0"]), k, k @ k)
                lower.append(link["range"][0] if link["range"] else -np.inf)
                upper.append(link["range"][1] if link["range"] else np.inf)
            self._links.append((np.asarray(link["pos"], dtype=np.float64), quat_to_matrix(link["quat"]), joint))
        self.lower = np.array(lower)  # (J,)
        self.upper = np.array(upper)  # (J,)
        self._site_pos = np.asarray(chain["site"]["pos"], dtype=np.float64)  # (3,)
        self._site_rot = quat_to_matrix(chain["site"]["quat"])  # (3, 3)

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    def jacobian(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Site position (3,), rotation (3, 3) and geometric Jacobian (6, J) at joint positions q (J,)."""
        rot, pos = np.eye(3), np.zeros(3)
        axes, anchors = [], []
        j = 0
        for link_pos, link_rot, joint in self._links:
            pos = pos + rot @ link_pos
            rot = rot @ link_rot
            if joint is not None:
                axis, anchor_local, qpos0, k, k2 = joint
                anchor = pos + rot @ anchor_local
                axes.append(rot @ axis)
                anchors.append(anchor)
                theta = q[j] - qpos0
                rot = rot @ (np.eye(3) + np.sin(theta) * k + (1.0 - np.cos(theta)) * k2)
                pos = anchor - rot @ anchor_local
                j += 1
        site_pos = pos + rot @ self._site_pos
        site_rot = rot @ self._site_rot
        axis = np.stack(axes, axis=1)  # (3, J)
        linear = np.cross(axis, site_pos[:, None] - np.stack(anchors, axis=1), axis=0)  # (3, J)
        return site_pos, site_rot, np.concatenate([linear, axis])  # (3,), (3, 3), (6, J)

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position (3,) and rotation (3, 3) at joint positions q (J,)."""
        site_pos, site_rot, _ = self.jacobian(q)
        return site_pos, site_rot
