"""Sim expert recording (`robo_rl.demos.sim_record`): the task text of a task with instructions."""

from __future__ import annotations

import numpy as np

from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.sim_record import record_expert
from robo_rl.tasks.experts import make_expert_env


def test_each_episode_of_a_task_with_instructions_is_recorded_with_its_instruction(tmp_path):
    """arm-pick-place-vision: every frame's task is its episode's instruction (one phrasing per episode), so
    meta/tasks.parquet holds the phrasings and a language-conditioned learner reads them back."""
    summary = record_expert("arm-pick-place-vision", 3, tmp_path / "ds", num_envs=3, seed=0)  # no cameras: state only
    assert summary["episodes"] == 3
    env = make_expert_env("arm-pick-place-vision", 3, seed=0)  # the recorder's env: the same first episodes
    obs = env.reset(random_start=False)
    start = obs["policy"].numpy()  # (3, O) each world's first observation
    want = [env.instructions[i] for i in obs["text"].tolist()]
    env.close()

    reader = DatasetReader(tmp_path / "ds")
    tasks = reader.meta.tasks
    for e in range(3):
        episode = reader.episode(e, images=False)
        world = int(np.flatnonzero((start == episode["observation.policy"][0]).all(1))[0])  # the world it ran in
        assert reader.meta.episodes[e]["tasks"] == [want[world]]
        assert {tasks[i] for i in episode["task_index"].tolist()} == {want[world]}  # every frame
    assert set(tasks) == set(want) and not set(tasks) & {env.description, "arm-pick-place-vision"}


def test_a_task_with_a_success_state_records_it_after_every_step(tmp_path):
    """arm-pick-place: `next.success` is the task's success after each step, the episode's final success on its last
    frame (the world is reset inside that step), so the reward classifier can label frames; the expert succeeds."""
    summary = record_expert("arm-pick-place", 2, tmp_path / "ds", num_envs=2, seed=0)
    reader = DatasetReader(tmp_path / "ds")
    assert reader.features["next.success"]["dtype"] == "bool" and summary["success_rate"] == 1.0
    for e in range(2):
        success = reader.episode(e, images=False)["next.success"].astype(bool)
        assert not success[0] and success[-1]  # the cube starts off its target and ends on it
        assert 0.2 < success.mean() < 0.8  # placed part-way through the episode and kept there
