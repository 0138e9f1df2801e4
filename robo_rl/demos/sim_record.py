"""Record expert demonstrations in simulation into a LeRobot v3.0 dataset, cameras included.

`record_demos` runs an actor in N parallel worlds of a task env: the task's scripted expert
(`robo_rl.tasks.experts.EXPERTS`, `record_expert` builds the env) or a trained policy (`PolicyActor`; the
CLI loads the teacher run and builds its env, so this module needs nothing of `robo_rl.learn`); each world
buffers its episode and hands it to the dataset writer when it ends, so episodes are whole and in the
order they finish. Per frame: `observation.state` (the robot's joint positions), `observation.policy`
(the policy observation of the task's deploy contract, what a policy trained on it sees),
`observation.images.<camera>` for each camera asked for, `action` (the raw action, clipped),
`command.joint_position` (the joint position targets that action set, what a robot is sent and
`robo_rl.demos.replay` replays), `next.reward`, `next.done` and `next.terminated` (a failure, not a
time-out), `next.success` (the task's success state after the step, for a task that has one: what the reward
classifier learns from), and `observation.critic` for a task whose critic sees more than its policy (SAC / RLPD use it).
Each frame's task (meta/tasks.parquet) is its episode's instruction for a task with instructions
(arm-pick-place-vision: one phrasing per episode), the task's description otherwise.
info.json carries the task name and its deploy contract under "robo_rl".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from robo_rl.demos.dataset_metadata import DEFAULT_IMAGE_SIZE, camera, scalar, vector
from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.tasks.experts import EXPERTS, make_expert_env
from robo_rl.tasks.task_env import single_torch_thread


def expert_features(env: Any, cameras: Sequence[str], image_size: int) -> dict[str, Any]:
    """The dataset features of `env`'s expert demos."""
    fps = 1.0 / env.dt
    obs_names = [f"{t.name}_{i}" for t in env.policy_terms for i in range(t.dim * t.history)]
    features = {
        "observation.state": vector(env.joint_names),
        "observation.policy": vector(obs_names),
        "action": vector([f"action_{i}" for i in range(env.action_dim)]),
        "command.joint_position": vector(env.joint_names),
        "next.reward": scalar(),
        "next.done": scalar("bool"),
        "next.terminated": scalar("bool"),
    }
    if isinstance(getattr(env, "success", None), torch.Tensor):  # a task with a success state (arm-pick-place)
        features["next.success"] = scalar("bool")
    if env.obs_dims["critic"] != env.obs_dims["policy"]:  # an asymmetric critic: SAC / RLPD learn from it too
        features["observation.critic"] = vector([f"critic_{i}" for i in range(env.obs_dims["critic"])])
    for cam in cameras:
        env.backend.name_id("camera", cam)  # ValueError listing the model's cameras
        features[f"observation.images.{cam}"] = camera(image_size, image_size, fps)
    return features


class Actor(Protocol):
    """What `record_demos` drives the env with: actions (N, A) from observation groups; `reset` of ended worlds."""

    def __call__(self, obs: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def reset(self, ids: torch.Tensor) -> None: ...


class ScriptedExpert:
    """The task's scripted expert (`robo_rl.tasks.experts`) as an actor: (obs groups) -> actions (N, A)."""

    def __init__(self, task: str, env: Any):
        self.env, self.expert = env, EXPERTS[task](env)

    def __call__(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.expert(self.env)

    def reset(self, ids: torch.Tensor) -> None:
        self.expert.reset(ids)


class PolicyActor:
    """A trained policy's deterministic actions (e.g. a PPO or SAC teacher's `act_inference`) as an actor:
    (obs groups) -> actions (N, A); stateless between episodes."""

    def __init__(self, act: Callable[[dict[str, torch.Tensor]], torch.Tensor]):
        self.act = act
        """Observation groups -> actions (N, A) (`robo_rl.learn.evaluation.inference_actor`)."""

    def __call__(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.act(obs)

    def reset(self, ids: torch.Tensor) -> None:
        pass


def record_expert(task: str, episodes: int, out: str | Path, *, num_envs: int = 8, cameras: Sequence[str] = (),
                  image_size: int | None = None, seed: int = 0, action_noise: float = 0.0,
                  progress: Callable[[int], None] | None = None, cfg: Any = None) -> dict[str, Any]:
    """Record `episodes` episodes of `task`'s scripted expert into a new dataset `out`, in the task config `cfg` (None:
    the default); returns a summary.

    A task without a scripted expert is recorded from a trained policy instead: `record_demos` with a
    `PolicyActor` in the env of the task config it was trained with (the CLI's `record --teacher RUN`).
    Other arguments as in `record_demos`; ValueError (one line) for a task without a scripted expert.
    """
    if task not in EXPERTS:
        raise ValueError(f"task {task!r} has no scripted expert (tasks with one: {', '.join(EXPERTS)}); record a "
                         "trained policy with --teacher RUN")
    if episodes < 1:
        raise ValueError(f"episodes = {episodes}: must be >= 1")
    env = make_expert_env(task, min(num_envs, episodes), seed=seed, cfg=cfg)  # `cameras` are rendered by record_demos
    try:
        return record_demos(env, ScriptedExpert(task, env), episodes, out, task=task, source="scripted expert",
                            cameras=cameras, image_size=image_size, seed=seed, action_noise=action_noise,
                            progress=progress)
    finally:
        env.close()


def record_demos(env: Any, actor: Actor, episodes: int, out: str | Path, *, task: str, source: str,
                 cameras: Sequence[str] = (), image_size: int | None = None, seed: int = 0, action_noise: float = 0.0,
                 progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Record `episodes` episodes of `env` (a task env of `task`, N worlds) driven by `actor` into a new dataset.

    The caller builds and closes `env` and `actor`: the task's scripted expert (`record_expert`), or a
    trained policy's deterministic actions (`PolicyActor`, demonstrations for a task without a scripted
    expert: a PPO teacher for the quadruped).
    source: who acted, for info.json ("scripted expert", "teacher policy <run>").
    action_noise: std of Gaussian noise added to the actions executed (not to the ones recorded), so the
        demonstrations also show the expert recovering from states it would not visit itself (DART);
        behaviour cloning needs that to stay on track.
    Returns {"episodes", "frames", "success_rate", "dropped"}; `progress(n)` is called after each episode.
    """
    if episodes < 1:
        raise ValueError(f"episodes = {episodes}: must be >= 1")
    image_size = image_size or getattr(env.cfg, "image_size", DEFAULT_IMAGE_SIZE)  # a vision task's own size
    features = expert_features(env, cameras, image_size)
    info = {"robo_rl": {"task": task, "contract": json_contract(env), "source": source}}
    writer = DatasetWriter(out, fps=1.0 / env.dt, features=features, robot_type=env.contract.robot, extra_info=info)
    with writer:  # an interrupt (Ctrl-C, SIGTERM) still commits every episode finished, and only those
        n = env.num_envs
        buffers: list[list[tuple[dict[str, np.ndarray], str]]] = [[] for _ in range(n)]  # (frame, task text)
        obs = env.reset(random_start=False)
        actor.reset(torch.arange(n))
        written, successes = 0, []
        noise = torch.Generator().manual_seed(seed + 7)
        while written < episodes:
            with single_torch_thread(), torch.no_grad():
                action = actor(obs).clamp(-env.cfg.action_clip, env.cfg.action_clip)  # (N, A) the label
                executed = action
                if action_noise > 0:
                    executed = (action + action_noise * torch.randn(action.shape, generator=noise)).clamp(
                        -env.cfg.action_clip, env.cfg.action_clip)
            images = {cam: env.backend.render_cameras(cam, image_size, image_size).permute(0, 2, 3, 1).cpu().numpy()
                      for cam in cameras}  # (N, H, W, 3) of the observation the action was taken in
            state = env.q.cpu().numpy().copy()
            policy = obs["policy"].cpu().numpy().copy()
            critic = obs["critic"].cpu().numpy().copy()
            texts = episode_tasks(env, obs, task)  # (N,) the task text of each world's frame
            targets = env.joint_targets(executed).cpu().numpy()  # (N, J) what the executed action commands
            obs, reward, terminated, truncated, info = env.step(executed)
            done = (terminated | truncated).cpu().numpy()
            success = step_success(env, info) if "next.success" in features else None  # (N,) bool
            act, rew, term = action.cpu().numpy(), reward.cpu().numpy(), terminated.cpu().numpy()
            for w in range(n):
                frame = {"observation.state": state[w], "observation.policy": policy[w], "action": act[w],
                         "command.joint_position": targets[w], "next.reward": rew[w], "next.done": done[w],
                         "next.terminated": term[w]}
                if "observation.critic" in features:
                    frame["observation.critic"] = critic[w]
                if success is not None:
                    frame["next.success"] = success[w]
                frame.update({f"observation.images.{c}": images[c][w].copy() for c in cameras})
                buffers[w].append((frame, texts[w]))
            ended = info["episode"]
            if ended:
                ids = ended["ids"].tolist()
                for k, w in enumerate(ids):
                    if written < episodes:
                        for frame, text in buffers[w]:
                            writer.add_frame(frame, task=text)
                        writer.end_episode()
                        successes.append(float(ended["success"][k]) if "success" in ended else float("nan"))
                        written += 1
                        if progress:
                            progress(written)
                    buffers[w] = []
                actor.reset(ended["ids"])
    stats = writer.stats()
    return {"episodes": written, "frames": stats.frames_written, "success_rate": _mean_success(successes),
            "dropped": stats.frames_dropped}


def step_success(env: Any, info: dict[str, Any]) -> np.ndarray:
    """(N,) bool: each world's success state after the step just taken; for a world whose episode ended (and was
    reset inside the step) its success at the end (the episode's `success` metric), not the new episode's."""
    success = env.success.cpu().numpy().copy()
    ended = info["episode"]
    if ended and "success" in ended:
        success[ended["ids"].cpu().numpy()] = ended["success"].cpu().numpy() > 0.5
    return success


def episode_tasks(env: Any, obs: dict[str, torch.Tensor], task: str) -> list[str]:
    """Each world's task text for the dataset (LeRobot's per-frame `task`): the instruction of its episode for a
    task with instructions ("text" group), otherwise the task's description (or its name)."""
    if "text" in obs and env.instructions:
        return [env.instructions[i] for i in obs["text"].tolist()]
    return [env.description or task] * env.num_envs


def _mean_success(successes: list[float]) -> float:
    """Mean success of the recorded episodes; NaN for a task without a success metric."""
    values = np.asarray(successes, dtype=np.float64)
    return float(values[np.isfinite(values)].mean()) if np.isfinite(values).any() else float("nan")


def json_contract(env: Any) -> Any:
    """The env's deploy contract as plain JSON data."""
    return json.loads(env.contract.to_json())
