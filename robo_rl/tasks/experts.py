"""Scripted experts for the arm tasks, batched in torch, and a roll-out that records their demonstrations.

An expert is called once per policy step with the env and returns raw actions (N, A) in the task's own
action space; worlds whose episode ended are `reset` by id. The experts read the task's state (joints, the
goal cube, the target), as a demonstrator with perfect perception would:

- `ReachExpert` (arm-reach, joint-offset actions): damped least-squares IK on the batched kinematics,
  iterated to the target from the current joints; the action is the offset of that solution.
- `PickPlaceExpert` (arm-pick-place, ee_delta + gripper actions): a per-world state machine held as tensors:
  approach above the cube, descend, close, lift, carry, lower, open, retreat; a cube that leaves the hand
  sends the world back to the approach.

`rollout_expert` runs an expert until a number of episodes ended and returns their success rate and the
transitions, for behaviour cloning and RLPD (format in `Demonstrations`); `make_expert_env` builds a task's env
for its expert (without rendering camera images the expert does not read).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from robo_rl.tasks.task_env import single_torch_thread
from robo_rl.tasks.task_registry import make_env, task_config_class
from robo_rl.terms.ee_delta_torch import dls_step, limit_step
from robo_rl.terms.kinematics import serial_chain
from robo_rl.terms.kinematics_torch import SerialChain


class ReachExpert:
    """arm-reach: joint offsets that put the end-effector on the target.

    Args:
        env: an ArmReachEnv.
        iterations: DLS iterations per step (from the measured joints toward the target).
        damping: DLS damping (m).
        max_step: largest joint change per iteration (rad).
    """

    def __init__(self, env: Any, *, iterations: int = 8, damping: float = 0.05, max_step: float = 0.2):
        self.chain = SerialChain(serial_chain(env.backend.model, "ee"), device=env.device)
        self.iterations = iterations
        self.damping = damping
        self.max_step = max_step

    def reset(self, ids: Tensor) -> None:
        """Nothing to forget: the expert is stateless."""

    def __call__(self, env: Any) -> Tensor:
        q = env.q.clone()  # (N, J)
        target = env.target - env.base_pos  # (N, 3) base frame
        for _ in range(self.iterations):
            pos, _, jac = self.chain.jacobian(q)  # (N, 3), _, (N, 6, J)
            dq = limit_step(dls_step(jac[:, :3], target - pos, self.damping), self.max_step)  # position only
            q = torch.clamp(q + dq, self.chain.lower, self.chain.upper)
        offset = (q - env.default_joint_pos) / env.cfg.action_scale  # (N, J) raw action of that pose
        return offset.clamp(-env.cfg.action_clip, env.cfg.action_clip)


# Phases of the pick-and-place state machine.
APPROACH, DESCEND, CLOSE, LIFT, CARRY, LOWER, RELEASE, RETREAT = range(8)
PHASES = ("approach", "descend", "close", "lift", "carry", "lower", "release", "retreat")
GRIPPER_CLOSED_IN = (CLOSE, LIFT, CARRY, LOWER)
"""Phases in which the gripper is commanded closed."""


class PickPlaceExpert:
    """arm-pick-place: approach above the goal cube, descend, close, lift, carry, lower, open, retreat.

    Args:
        env: an ArmPickPlaceEnv.
        hover: height above the cube of the approach point (m).
        carry_height: height of the cube's centre above its resting height while carried (m).
        gain: fraction of the remaining error commanded per step (proportional control of the TCP).
        settle_speed: the grasp has settled, and the lift begins, once the closing fingers move slower than this
            (m/s). Every phase ends on what the observation shows, never on a hidden timer alone (only a phase that
            waits too long gives up after one): a timer would make "hold still" and "lift" the labels of one
            observable state, which behaviour cloning averages into a hand that never lifts.
    """

    def __init__(self, env: Any, *, hover: float = 0.1, carry_height: float = 0.12, gain: float = 0.5,
                 settle_speed: float = 0.002):
        n = env.num_envs
        self.chain = SerialChain(serial_chain(env.backend.model, "ee"), device=env.device)
        self.hover = hover
        self.carry_height = carry_height
        self.gain = gain
        self.settle_speed = settle_speed
        self.timeout_steps = round(1.5 / env.dt)  # a phase that waits for a condition gives up after this
        self.phase = torch.zeros(n, dtype=torch.long, device=env.device)  # (N,)
        self.timer = torch.zeros(n, dtype=torch.long, device=env.device)  # (N,) steps spent in the current phase
        self.yaw_column = env.action_dim == 5
        closed = torch.zeros(len(PHASES), dtype=torch.bool, device=env.device)
        closed[list(GRIPPER_CLOSED_IN)] = True
        self._closed = closed  # (P,) gripper command of each phase
        self._up = torch.tensor([0.0, 0.0, 1.0], device=env.device)

    def reset(self, ids: Tensor) -> None:
        self.phase[ids] = APPROACH
        self.timer[ids] = 0

    def __call__(self, env: Any) -> Tensor:
        c = env.cfg
        ee, _ = self.chain.forward(env.q[:, :7])  # (N, 3) TCP from the measured joints, base frame
        obj = env.object_pos_w - env.base_pos  # (N, 3)
        target = env.target - env.base_pos  # (N, 3)
        finger = env.q[:, 7]  # (N,)
        self._advance(ee, obj, target, finger, env)
        goal = self._goal(ee, obj, target, env.rest_z)  # (N, 3)
        step = (goal - ee) * (self.gain / c.action_scale)  # (N, 3) raw ee_delta actions
        grip = torch.where(self._closed[self.phase], 1.0, -1.0)[:, None]  # (N, 1)
        parts = [step.clamp(-c.action_clip, c.action_clip)]
        if self.yaw_column:
            parts.append(torch.zeros_like(grip))  # the cube stays aligned with the hand: no yaw
        return torch.cat([*parts, grip], dim=-1)

    def _goal(self, ee: Tensor, obj: Tensor, target: Tensor, rest_z: float) -> Tensor:
        """TCP goal (N, 3) of every world's phase. While the cube is held, the TCP moves so that the cube (not the
        TCP) reaches the target: a cube that slipped a few mm in the fingers still lands on it."""
        held_to_target = ee + (target - obj)  # (N, 3) the TCP position that puts the cube on the target
        up = self._up
        carry_z = rest_z + self.carry_height
        lift = torch.cat([ee[:, :2], (ee[:, 2] + carry_z - obj[:, 2])[:, None]], dim=-1)
        carry = torch.cat([held_to_target[:, :2], lift[:, 2:]], dim=-1)
        lower = held_to_target + 0.002 * up  # release 2 mm above the table
        retreat = torch.cat([ee[:, :2], torch.full_like(ee[:, 2:], rest_z + 0.15)], dim=-1)
        goals = torch.stack([obj + self.hover * up, obj, obj, lift, carry, lower, lower, retreat], dim=1)  # (N, P, 3)
        return goals[torch.arange(len(ee), device=ee.device), self.phase]

    def _advance(self, ee: Tensor, obj: Tensor, target: Tensor, finger: Tensor, env: Any) -> None:
        """Move worlds on to their next phase when its condition holds; back to APPROACH when the cube is lost."""
        up = self._up
        half = env.cube_half
        xy = torch.linalg.vector_norm
        lifted = obj[:, 2] > env.rest_z + self.carry_height - 0.03
        waited = self.timer >= self.timeout_steps
        above = obj + self.hover * up - ee  # (N, 3) TCP to the approach point
        done = torch.stack(
            [
                (xy(above[:, :2], dim=-1) < 0.01) & (above[:, 2].abs() < 0.02),
                (xy(obj - ee, dim=-1) < 0.006) | waited,
                (finger < 0.9 * 0.04) & (env.dq[:, 7].abs() < self.settle_speed) | waited,
                lifted | waited,
                xy((target - obj)[:, :2], dim=-1) < 0.01,
                (obj[:, 2] < env.rest_z + 0.005) | waited,
                finger > 0.9 * 0.04,
                torch.zeros_like(lifted),  # RETREAT is the last phase
            ],
            dim=1,
        )  # (N, P)
        rows = torch.arange(len(ee), device=ee.device)
        advance = done[rows, self.phase]  # (N,)
        holding = (self.phase >= LIFT) & (self.phase <= LOWER)
        lost = holding & (xy(obj - ee, dim=-1) > half + 0.02)  # the cube left the fingers
        self.phase = torch.where(lost, APPROACH, self.phase + advance.long())
        self.timer = torch.where(lost | advance, 0, self.timer + 1)


@dataclass
class Demonstrations:
    """Transitions recorded from an expert, flat over (step, world): row t * N + n is world n at step t.

    Attributes:
        obs: (M, O) policy observations the action was taken in.
        action: (M, A) raw actions (clipped to the task's action_clip).
        reward: (M,) rewards.
        next_obs: (M, O) the observation after the action; for a world whose episode ended it is the last
            observation of that episode (`info["final_obs"]`), not the first of the next.
        terminated: (M,) bool, the episode ended by failure (no bootstrapping).
        truncated: (M,) bool, the episode timed out (bootstrap from next_obs).
        episode_success: (E,) float32, the success metric of every episode that ended, in the order they ended.
        critic_obs: (M, O_c) the "critic" observations beside `obs`, for a task with that group (else None).
        next_critic_obs: (M, O_c) the "critic" observations beside `next_obs` (else None).
    """

    obs: Tensor
    action: Tensor
    reward: Tensor
    next_obs: Tensor
    terminated: Tensor
    truncated: Tensor
    episode_success: Tensor
    critic_obs: Tensor | None = None
    next_critic_obs: Tensor | None = None

    @property
    def success_rate(self) -> float:
        return float(self.episode_success.mean()) if self.episode_success.numel() else float("nan")

    def arrays(self) -> dict[str, Tensor]:
        """The transitions as `robo_rl.learn.replay_buffer.load_demo_arrays` takes them (RLPD's demonstrations)."""
        out = {k: getattr(self, k) for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated")}
        if self.critic_obs is not None:
            out.update(critic_obs=self.critic_obs, next_critic_obs=self.next_critic_obs)
        return out


def rollout_expert(env: Any, expert: Any, num_episodes: int, *, seed: int | None = None,
                   record: bool = True) -> Demonstrations:
    """Run `expert` in `env` until `num_episodes` episodes have ended; their success and (optionally) transitions.

    Every world starts a full episode (no random start); episodes that end are reset by the env and the
    expert. Episodes are counted in the order they end; the first `num_episodes` make up `episode_success`.
    With `record=False` the transition tensors are empty (for success measurements only).
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes = {num_episodes}: must be >= 1")
    obs = env.reset(seed=seed, random_start=False)
    expert.reset(torch.arange(env.num_envs))
    keys = ["obs", "action", "reward", "next_obs", "terminated", "truncated"]
    critic = "critic" in obs
    if critic:
        keys += ["critic_obs", "next_critic_obs"]
    rows: dict[str, list[Tensor]] = {k: [] for k in keys}
    success: list[Tensor] = []
    ended = 0
    while ended < num_episodes:
        with single_torch_thread():  # small tensors: threads only add wake-up latency (see base.py)
            action = expert(env).clamp(-env.cfg.action_clip, env.cfg.action_clip)  # (N, A)
        next_obs, reward, terminated, truncated, info = env.step(action)
        if record:
            for key, value in (("obs", obs["policy"]), ("action", action), ("reward", reward),
                               ("next_obs", info["final_obs"]["policy"]), ("terminated", terminated),
                               ("truncated", truncated)):
                rows[key].append(value.clone())
            if critic:
                rows["critic_obs"].append(obs["critic"].clone())
                rows["next_critic_obs"].append(info["final_obs"]["critic"].clone())
        episode = info["episode"]
        if episode:
            success.append(episode["success"])
            ended += episode["ids"].numel()
            expert.reset(episode["ids"])
        obs = next_obs
    cat = {k: torch.cat(v) if v else torch.zeros(0) for k, v in rows.items()}
    return Demonstrations(**cat, episode_success=torch.cat(success)[:num_episodes])


EXPERTS: dict[str, type] = {"arm-reach": ReachExpert, "arm-pick-place": PickPlaceExpert,
                            "arm-pick-place-vision": PickPlaceExpert}
"""Task name -> its scripted expert class (called with the env)."""


def make_expert_env(task: str, num_envs: int, *, seed: int = 0, cfg: Any = None) -> Any:
    """`task`'s env with its config `cfg` (None: the default) for its scripted expert: a task with a camera renders
    no "image" group (`images: false`), since the expert reads the state (its scene, goal and instruction are the
    task's)."""
    cfg = cfg if cfg is not None else task_config_class(task)()
    if getattr(cfg, "images", False):  # a camera task (e.g. arm-pick-place-vision)
        cfg = dataclasses.replace(cfg, images=False)
    return make_env(task, num_envs, cfg=cfg, seed=seed)
