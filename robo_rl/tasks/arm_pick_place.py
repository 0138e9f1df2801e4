"""arm-pick-place: a Franka Panda with its parallel gripper picks a cube and places it at a target.

Actions: an `ee_delta` term (Cartesian steps of the TCP through damped least-squares IK, the hand kept
pointing down) and a `gripper` term (> 0 closes). The cubes are config (`cube_bodies`, free bodies of the
MJCF) and the one to move is state (`goal`, per world), so a scene with several cubes only changes the
config. Sparse success (the goal cube within `success_distance` of the target and at rest) plus optional
shaped terms (reach, lift, move); `Metrics/success` is the success at the end of each episode.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError, _f
from robo_rl.core.contract import ActionTermSpec, DeployContract, ObsTerm
from robo_rl.core.instructions import SPLIT_CHOICES, InstructionSet
from robo_rl.tasks import rewards as rew
from robo_rl.tasks.arm_reach import PANDA_JOINTS
from robo_rl.tasks.mjcf import check_model_file
from robo_rl.tasks.task_config import TaskConfig
from robo_rl.tasks.task_env import TaskEnv, check_reward_names
from robo_rl.tasks.task_registry import TASKS, TaskEntry
from robo_rl.terms import ObservationTermRecord, register_observation
from robo_rl.terms.base_motion import identity
from robo_rl.terms.ee_delta import ee_delta_spec
from robo_rl.terms.gripper import gripper_spec

GRIPPER_JOINT = "finger_joint1"
"""The actuated finger; finger_joint2 follows it through an equality constraint in the MJCF."""
FINGER_OPEN = 0.04
"""Finger position when open (m; the Franka Hand opens 0.08 m in all)."""
FINGER_CLOSED = 0.0


@dataclass(frozen=True, kw_only=True)
class ArmPickPlaceConfig(TaskConfig):
    """arm-pick-place task parameters."""

    model: str = "envs/panda_pick.xml"
    """MJCF scene (relative to the repository root or absolute): the arm, its hand, a table and the cubes."""
    physics_dt: float = _f(0.0025, gt=0.0, le=0.01)
    """Physics time step in seconds; 2.5 ms, not arm-reach's 5 ms: the arm's joint-1/joint-3 servos chatter under
    torque saturation at 5 ms near joint2 = 0, and grasps see it (see envs/panda_pick.xml)."""
    decimation: int = _f(8, ge=1)
    """Physics steps per policy step (policy_dt = physics_dt * decimation: 50 Hz, the Panda's control rate)."""
    episode_length_s: float = _f(8.0, gt=0.0)
    """Episode length; one cube and one target per episode."""
    action_scale: float = _f(0.02, gt=0.0, le=0.1)
    """End-effector step in m per unit of action per policy step (1 m/s at 50 Hz for a full action)."""
    action_clip: float = _f(1.0, gt=0.0)
    """Raw actions are clipped to +-action_clip before the terms see them."""
    ee_yaw_scale: float = _f(0.0, ge=0.0, le=0.5)
    """Hand yaw step in rad per unit of action; 0 leaves out the yaw column (the hand keeps its heading)."""
    ik_damping: float = _f(0.05, gt=0.0)
    """Damping of the least-squares IK (m): larger is smoother near singularities."""
    max_joint_step: float = _f(0.04, gt=0.0, le=0.2)
    """Largest joint change the IK asks for per policy step (rad); below the Panda's 2.175 rad/s x 20 ms."""
    gripper_speed: float = _f(0.08, gt=0.0, le=0.1)
    """Finger speed (m/s) of the gripper target; the Franka Hand's maximum is 0.1 m/s."""
    init_joint_noise: float = _f(0.05, ge=0.0)
    """Initial arm joints are the home pose plus uniform noise of this half-width (rad)."""
    cube_bodies: tuple[str, ...] = _f(("cube",))
    """Free bodies of the MJCF that are cubes (all of the first one's size); each episode draws one as the goal cube."""
    cube_low: tuple[float, ...] = _f((0.4, -0.2))
    """Lower corner (x, y) of the region cubes start in, base frame (m)."""
    cube_high: tuple[float, ...] = _f((0.6, 0.2))
    """Upper corner (x, y) of the cube start region (m)."""
    target_low: tuple[float, ...] = _f((0.4, -0.2))
    """Lower corner (x, y) of the region the place target is drawn in, base frame (m); on the table."""
    target_high: tuple[float, ...] = _f((0.6, 0.2))
    """Upper corner (x, y) of the place target region (m)."""
    table_height: float = 0.0
    """Height of the table top in the base frame (m), as in the MJCF."""
    min_place_distance: float = _f(0.1, ge=0.0)
    """The target is drawn at least this far (m, in the plane) from the goal cube's start."""
    min_cube_separation: float = _f(0.08, gt=0.0)
    """Cubes start at least this far apart (m, in the plane), when there are several."""
    success_distance: float = _f(0.03, gt=0.0)
    """The cube counts as placed within this distance of the target (m)."""
    rest_speed: float = _f(0.05, gt=0.0)
    """... and at rest: cube speed below this (m/s)."""
    lift_height: float = _f(0.04, gt=0.0)
    """The cube counts as lifted this far above its resting height (m)."""
    reach_std: float = _f(0.1, gt=0.0)
    """Length scale of the reach term 1 - tanh(|ee - cube| / reach_std) (m)."""
    move_std: float = _f(0.1, gt=0.0)
    """Length scale of the move term 1 - tanh(|cube - target| / move_std) (m)."""
    rewards: dict[str, float] = _f({"success": 5.0, "reach": 0.5, "lift": 1.0, "move": 2.0, "action_rate": -0.01})
    """Scale of each reward term (sum of scale * term * dt); `success` is the sparse term, the rest are shaping."""

    def validate(self) -> None:
        check_model_file(self.model)
        check_reward_names(self.rewards, ArmPickPlaceEnv.reward_terms)
        if not self.cube_bodies or not all(isinstance(b, str) and b for b in self.cube_bodies):
            raise ConfigError(f"config error: env.cube_bodies = {list(self.cube_bodies)!r}: expected body names")
        for low, high in (("cube_low", "cube_high"), ("target_low", "target_high")):
            lo, hi = getattr(self, low), getattr(self, high)
            for name, v in ((low, lo), (high, hi)):
                if len(v) != 2:
                    raise ConfigError(f"config error: env.{name} = {list(v)!r}: expected 2 numbers (x, y)")
            if any(a > b for a, b in zip(lo, hi, strict=True)):
                raise ConfigError(f"config error: env.{low} = {list(lo)!r}: must not exceed env.{high} = "
                                  f"{list(hi)!r} in any axis")


register_observation(ObservationTermRecord(
    name="object_lin_vel", inputs=("object_lin_vel_w",), torch=identity, numpy=None, dim=3,  # sim only: the critic's
))
"""The goal cube's linear velocity (3,) in the world; privileged, never deployed."""


class ArmPickPlaceEnv(TaskEnv):
    description = "Franka Panda + gripper picks a cube and places it at a target (end-effector delta + gripper)"
    joint_names = PANDA_JOINTS + (GRIPPER_JOINT,)
    keyframe = "home"
    reward_terms = ("success", "reach", "lift", "move", "action_rate")
    policy_terms = (
        ObsTerm(name="joint_pos_rel", dim=8),
        ObsTerm(name="joint_vel", dim=8),
        ObsTerm(name="ee_pos", dim=3),
        ObsTerm(name="object_pos", dim=3),
        ObsTerm(name="target_pos", dim=3),
        ObsTerm(name="last_action", dim=4),
    )
    critic_extra_terms = (ObsTerm(name="object_lin_vel", dim=3),)

    @classmethod
    def action_dim_of(cls, cfg: ArmPickPlaceConfig) -> int:
        return 3 + (cfg.ee_yaw_scale > 0) + 1

    def __init__(self, cfg: ArmPickPlaceConfig, num_envs: int, **options: Any):
        if cfg.ee_yaw_scale > 0:  # the last_action term follows the action size
            terms = list(type(self).policy_terms)
            terms[-1] = ObsTerm(name="last_action", dim=5)
            self.policy_terms = tuple(terms)
        self.target = torch.zeros(num_envs, 3)  # (N, 3) world frame; read by _refresh
        self.goal = torch.zeros(num_envs, dtype=torch.long)  # (N,) index into cfg.cube_bodies
        super().__init__(cfg, num_envs, **options)  # seed, backend, device, ...: see TaskEnv
        b, m = self.backend, self.backend.model
        self._cubes = self._resolve_cubes(cfg.cube_bodies)  # (C, 7) qpos and (C, 6) qvel addresses
        self.ee_pos_w = self.sensors32[:, b.sensor_slice("ee_pos")]  # (N, 3) view, refreshed in place
        self.base_pos = torch.zeros(3)  # the arm's base (link0) sits at the world origin, axes aligned
        self.cube_half = float(m.geom_size[m.body_geomadr[b.name_id("body", cfg.cube_bodies[0])], 2])
        self.rest_z = cfg.table_height + self.cube_half  # cube centre height when it rests on the table
        self._init_qpos = b.init_state[b.slices["qpos"]].clone()  # (nq,)
        self.lifted = torch.zeros(num_envs, dtype=torch.bool)  # (N,) the goal cube was lifted this episode
        self._refresh()

    def _action_term_specs(self) -> tuple[ActionTermSpec, ...]:
        c, m = self.cfg, self.backend.model
        quat = _home_site_quat(m, self.keyframe, "ee")  # the home pose's hand orientation: pointing down
        yaw = c.ee_yaw_scale if c.ee_yaw_scale > 0 else None
        return (
            ee_delta_spec(m, "ee", scale=c.action_scale, yaw_scale=yaw, damping=c.ik_damping,
                          max_joint_step=c.max_joint_step, orientation=quat),
            gripper_spec(GRIPPER_JOINT, open_pos=FINGER_OPEN, closed_pos=FINGER_CLOSED,
                         max_step=c.gripper_speed * c.physics_dt * c.decimation),
        )

    def _resolve_cubes(self, names: tuple[str, ...]) -> tuple[Tensor, Tensor]:
        b, m = self.backend, self.backend.model
        qpos, qvel = [], []
        for name in names:
            body = b.name_id("body", name)
            jnt = int(m.body_jntadr[body])
            if m.body_jntnum[body] != 1 or m.jnt_type[jnt] != 0:  # mjJNT_FREE
                raise ConfigError(f"config error: env.cube_bodies: body {name!r} must have one free joint")
            qpos.append(torch.arange(int(m.jnt_qposadr[jnt]), int(m.jnt_qposadr[jnt]) + 7))
            qvel.append(torch.arange(int(m.jnt_dofadr[jnt]), int(m.jnt_dofadr[jnt]) + 6))
        return torch.stack(qpos), torch.stack(qvel)  # (C, 7), (C, 6)

    # ------------------------------------------------------------------ state, once per step
    def _refresh(self) -> None:
        super()._refresh()
        qpos_idx, qvel_idx = self._cubes
        self.cube_pos = self.qpos32[:, qpos_idx[:, :3]]  # (N, C, 3)
        rows = torch.arange(self.num_envs)
        self.object_pos_w = self.cube_pos[rows, self.goal]  # (N, 3) the goal cube
        self.object_vel_w = self.qvel32[:, qvel_idx[:, :3]][rows, self.goal]  # (N, 3)
        self.ee_to_object = rew.cost_position_error_l2(self.ee_pos_w, self.object_pos_w)  # (N,)
        self.object_to_target = rew.cost_position_error_l2(self.object_pos_w, self.target)  # (N,)
        speed = torch.linalg.vector_norm(self.object_vel_w, dim=-1)  # (N,)
        self.success = (self.object_to_target < self.cfg.success_distance) & (speed < self.cfg.rest_speed)
        self.is_lifted = self.object_pos_w[:, 2] > self.rest_z + self.cfg.lift_height

    def _post_physics(self) -> None:
        self.lifted |= self.is_lifted

    # ------------------------------------------------------------------ task hooks
    def _obs_sources(self) -> dict[str, Tensor]:
        return {**super()._obs_sources(), "ee_pos": self.ee_pos_w, "object_pos": self.object_pos_w,
                "target_pos": self.target, "base_pos": self.base_pos, "object_lin_vel_w": self.object_vel_w}

    def _reward_terms(self) -> dict[str, Tensor]:
        c = self.cfg
        return {
            "success": self.success.to(torch.float32),
            "reach": rew.reward_distance_tanh(self.ee_to_object, std=c.reach_std),
            "lift": self.is_lifted.to(torch.float32),
            "move": rew.reward_distance_tanh(self.object_to_target, std=c.move_std),
            "action_rate": rew.cost_action_rate_l2(self.action, self.prev_action),
        }

    def _terminated(self) -> Tensor:
        """The goal cube fell off the table."""
        return self.object_pos_w[:, 2] < self.cfg.table_height - 0.1

    def _reset_worlds(self, ids: Tensor) -> None:
        c, k, j = self.cfg, ids.numel(), len(PANDA_JOINTS)
        qpos = self._init_qpos.repeat(k, 1)  # (K, nq): fingers open, velocities zero
        noise = (2 * torch.rand(k, j, generator=self.generator) - 1) * c.init_joint_noise  # (K, 7)
        q = self.default_joint_pos.repeat(k, 1)  # (K, 8)
        q[:, :j] = (q[:, :j] + noise).clamp(self.ctrl_low[:j], self.ctrl_high[:j])
        qpos[:, self.q_idx] = q.to(torch.float64)
        goal = torch.randint(0, len(c.cube_bodies), (k,), generator=self.generator)  # (K,)
        cubes_xy, target_xy = self._sample_layout(k, goal)  # (K, C, 2), (K, 2)
        qpos_idx = self._cubes[0]  # (C, 7)
        qpos[:, qpos_idx[:, 0]] = cubes_xy[..., 0].to(torch.float64)
        qpos[:, qpos_idx[:, 1]] = cubes_xy[..., 1].to(torch.float64)
        qpos[:, qpos_idx[:, 2]] = self.rest_z
        qpos[:, qpos_idx[:, 3:]] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # upright, no yaw
        target = torch.cat([target_xy, torch.full((k, 1), self.rest_z)], dim=-1) + self.base_pos  # (K, 3)
        self.target[ids] = target
        self.goal[ids] = goal
        self.backend.mocap_pos[ids, 0] = target.to(self.backend.mocap_pos.dtype)
        self._set_joint_targets(q, ids)  # hold the reset pose until the first action arrives
        for buf in (self.action, self.prev_action, self.lifted):
            buf.index_fill_(0, ids, 0)
        self.backend.reset(ids, qpos=qpos)

    def _sample_layout(self, k: int, goal: Tensor, tries: int = 16, rounds: int = 50) -> tuple[Tensor, Tensor]:
        """Cube (K, C, 2) and target (K, 2) positions in the plane: cubes apart by min_cube_separation, the target
        min_place_distance from the goal cube and clear of the others. Rejection sampling, `tries` draws per world
        at once as tensors; worlds without an acceptable draw draw again (a few rounds at most in practice).

        Raises:
            ConfigError: no layout found in `rounds` rounds (the regions are too small for the distances asked).
        """
        c, n = self.cfg, len(self.cfg.cube_bodies)
        cubes, target = torch.empty(k, n, 2), torch.empty(k, 2)
        todo = torch.arange(k)  # (K',) worlds still without a layout
        for _ in range(rounds):
            cand_cubes, cand_target, ok = self._draw_layouts(len(todo), goal[todo], tries)  # (K', T, ...)
            found = ok.any(-1)  # (K',)
            pick = ok.to(torch.int8).argmax(-1)[found]  # first acceptable draw of each world that has one
            rows = found.nonzero().squeeze(-1)
            cubes[todo[found]] = cand_cubes[rows, pick]
            target[todo[found]] = cand_target[rows, pick]
            todo = todo[~found]
            if todo.numel() == 0:
                return cubes, target
        raise ConfigError(f"config error: env.cube_low/high, env.target_low/high: no layout of {n} cube(s) "
                          f"{c.min_cube_separation} m apart with the target {c.min_place_distance} m from the goal "
                          f"cube found in {rounds * tries} draws; widen the regions or lower the distances")

    def _draw_layouts(self, k: int, goal: Tensor, tries: int) -> tuple[Tensor, Tensor, Tensor]:
        """`tries` candidate layouts per world: cubes (K, T, C, 2), targets (K, T, 2), acceptable (K, T) bool."""
        c, n = self.cfg, len(self.cfg.cube_bodies)
        lo = torch.tensor(c.cube_low).repeat(n)  # (2C,)
        span = torch.tensor(c.cube_high).repeat(n) - lo
        cubes = self._uniform(k * tries, lo, span).reshape(k, tries, n, 2)  # (K, T, C, 2)
        t_lo = torch.tensor(c.target_low)
        target = self._uniform(k * tries, t_lo, torch.tensor(c.target_high) - t_lo).reshape(k, tries, 2)  # (K, T, 2)
        gap = torch.cdist(cubes, cubes) + torch.eye(n) * 1e9  # (K, T, C, C), a cube is never too close to itself
        cubes_ok = (gap >= c.min_cube_separation).flatten(2).all(-1)  # (K, T)
        to_target = torch.linalg.vector_norm(cubes - target[:, :, None], dim=-1)  # (K, T, C)
        is_goal = torch.arange(n) == goal[:, None, None]  # (K, 1, C)
        need = torch.where(is_goal, c.min_place_distance, c.min_cube_separation)  # (K, 1, C)
        return cubes, target, cubes_ok & (to_target >= need).all(-1)

    def _episode_metrics(self, ids: Tensor) -> dict[str, Tensor]:
        return {
            "success": self.success[ids].to(torch.float32),
            "object_distance_final": self.object_to_target[ids],
            "lifted": self.lifted[ids].to(torch.float32),
        }

    def _task_buffers(self) -> dict[str, Tensor]:
        return {"target": self.target, "goal": self.goal, "action": self.action, "prev_action": self.prev_action,
                "lifted": self.lifted}

    @property
    def contract(self) -> DeployContract:
        c, z = self.cfg, self.rest_z
        return self._make_contract(
            "panda",
            {
                "target_low": [*c.target_low, z],
                "target_high": [*c.target_high, z],
                "cube_low": list(c.cube_low),
                "cube_high": list(c.cube_high),
                "cube_size": 2 * self.cube_half,
                "success_distance": c.success_distance,
            },
        )


def _home_site_quat(model, keyframe: str | None, site: str) -> list[float]:
    """Orientation (w, x, y, z) of `site` in the world frame at the keyframe pose."""
    import mujoco
    import numpy as np

    d = mujoco.MjData(model)
    if keyframe is not None:
        mujoco.mj_resetDataKeyframe(model, d, mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, keyframe))
    mujoco.mj_kinematics(model, d)
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, d.site_xmat[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)])
    return quat.tolist()


VISION_CUBES = (("red", (0.85, 0.2, 0.15)), ("blue", (0.2, 0.35, 0.85)), ("yellow", (0.9, 0.8, 0.1)))
"""Cube colours of arm-pick-place-vision (the place marker is green); the first is the scene's own cube."""

VISION_INSTRUCTIONS = InstructionSet.from_templates(
    [colour for colour, _ in VISION_CUBES],
    train=(
        "put the {goal} cube on the green marker",
        "move the {goal} block onto the green target",
        "place the {goal} cube on the green mark",
        "pick up the {goal} cube and set it down on the green marker",
        "take the {goal} cube over to the green marker",
        "the {goal} cube goes on the green target",
    ),
    heldout=(  # other verbs, nouns and sentence shapes than any train phrasing, not a one-word swap of one
        "grab the {goal} one and drop it onto the green spot",
        "could you bring the {goal} box to where the green square is",
        "I want the {goal} block sitting on top of the green pad",
    ),
)
"""arm-pick-place-vision's instructions: 6 train and 3 held-out phrasings for each cube colour, template-major
(`InstructionSet.from_templates`: text p * 3 + g is phrasing p of colour g; the first three are the train
phrasing "put the <colour> cube on the green marker")."""


@dataclass(frozen=True, kw_only=True)
class ArmPickPlaceVisionConfig(ArmPickPlaceConfig):
    """arm-pick-place-vision: arm-pick-place with three coloured cubes, a camera image and a text instruction."""

    model: str = "envs/panda_pick_vision.xml"
    """The arm-pick-place scene with one cube per entry of VISION_CUBES (red, blue, yellow), named cube_<colour>;
    the twin rehearses in the same file."""
    setpoint_controller: str = "hardware/panda_gripper.yaml"
    """The Panda's 1 kHz setpoint stream (TaskConfig.setpoint_controller), as the VLA is deployed: trained on targets
    that step in at the tick, it placed 40.6 % of the cubes in simulation and 0 % on the twin (docs/vla.md)."""
    physics_dt: float = _f(0.002, gt=0.0, le=0.01)
    """Physics time step (s): a whole number of the stream's 1 ms setpoints (arm-pick-place's 2.5 ms is not)."""
    decimation: int = _f(10, ge=1)
    """Physics steps per policy step (50 Hz, the Panda's control rate)."""
    cube_bodies: tuple[str, ...] = _f(tuple(f"cube_{c}" for c, _ in VISION_CUBES))
    """Cube bodies: the scene's cubes, cube_<colour> for each entry of VISION_CUBES."""
    image_size: int = _f(64, choices=(64, 96))
    """Side (pixels) of the square RGB image of the `scene` camera in the "image" observation group."""
    images: bool = True
    """Render the "image" group at every step; false: no "image" group, for what reads only the state ("policy",
    "critic"): state-based baselines and the scripted expert (rendering is ~85 % of a step's time on the CPU)."""
    instruction_split: str = _f("train", choices=SPLIT_CHOICES)
    """Phrasings each episode's instruction is drawn from (uniformly, among those of its goal cube): "train",
    "heldout" (never seen in training: evaluates language generalisation) or "all" (VISION_INSTRUCTIONS)."""

    def validate(self) -> None:
        super().validate()
        names = tuple(f"cube_{c}" for c, _ in VISION_CUBES)
        if self.cube_bodies != names:
            raise ConfigError(f"config error: env.cube_bodies = {list(self.cube_bodies)!r}: this task's scene has "
                              f"the cubes {list(names)}")


def draw_instructions(goal: Tensor, phrasings: Tensor, generator: torch.Generator) -> Tensor:
    """(K,) instruction index per world: one of its goal's P phrasings, uniformly.

    Args:
        goal: (K,) goal index of each world.
        phrasings: (G, P) instruction indices of each goal's phrasings (`InstructionSet.by_goal`).
        generator: the env's generator (runs stay seeded).
    """
    pick = torch.randint(0, phrasings.shape[1], goal.shape, generator=generator, device=goal.device)  # (K,)
    return phrasings[goal, pick]


class ArmPickPlaceVisionEnv(ArmPickPlaceEnv):
    """The goal cube is named only by the instruction: "text" is its index into `instructions` (one phrasing of
    the goal cube's colour, drawn each episode from `cfg.instruction_split`), "image" shows the scene. The
    state-based "policy" group still carries the goal cube's position (for state-based baselines and the
    scripted expert); image-and-language policies use "image" and "text" instead. `goal` stays the truth."""

    description = ("arm-pick-place with red, blue and yellow cubes; a 64x64 camera image and a text instruction "
                   "name the cube to move")
    camera = "scene"
    instruction_set = VISION_INSTRUCTIONS

    def __init__(self, cfg: ArmPickPlaceVisionConfig, num_envs: int, **options: Any):
        self.instruction = torch.zeros(num_envs, dtype=torch.long)  # (N,) index into `instructions`
        self._phrasings = torch.tensor(self.instruction_set.by_goal(cfg.instruction_split))  # (G, P)
        super().__init__(cfg, num_envs, **options)

    def _reset_worlds(self, ids: Tensor) -> None:
        super()._reset_worlds(ids)  # draws the goal cube
        self.instruction[ids] = draw_instructions(self.goal[ids], self._phrasings, self.generator)

    def _task_buffers(self) -> dict[str, Tensor]:
        return {**super()._task_buffers(), "instruction": self.instruction}

    @property
    def contract(self) -> DeployContract:
        c = super().contract
        return dataclasses.replace(c, extra={**c.extra, "camera": self.camera, "image_size": self.cfg.image_size,
                                             **self.instruction_set.to_extra()})


TASKS.register("arm-pick-place", TaskEntry(ArmPickPlaceEnv, ArmPickPlaceConfig))
TASKS.register("arm-pick-place-vision", TaskEntry(ArmPickPlaceVisionEnv, ArmPickPlaceVisionConfig))
