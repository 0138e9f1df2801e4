"""Sim expert recording (`robo_rl.demos.sim_record`): the task text of a task with instructions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np

from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.sim_record import record_expert
from robo_rl.tasks.experts import make_expert_env
from tests.conftest import REPO


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


def test_a_recording_stopped_by_sigterm_in_a_background_job_keeps_its_finished_episodes(tmp_path):
    """`robo-rl record` started with SIGINT ignored (as a shell's background job is) and stopped by SIGTERM exits 130
    and leaves a dataset of the episodes finished before the signal, none half-written."""
    log = tmp_path / "record.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "robo_rl.cli", "record", "--task", "arm-reach", "--expert", "--episodes", "100000",
         "--num-envs", "4", "--out", str(tmp_path / "ds")], cwd=REPO, stdout=open(log, "w"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO)}, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        end = time.monotonic() + 120
        while "recorded 10/" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < end, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    reader = DatasetReader(tmp_path / "ds")
    lengths = [len(reader.episode(e, images=False)["action"]) for e in range(reader.num_episodes)]
    assert reader.num_episodes >= 10 and set(lengths) == {lengths[0]}  # whole episodes only (arm-reach's are fixed)


def test_set_records_in_a_changed_task_config_and_a_bad_override_is_one_line(tmp_path, capsys):
    """`record --set env.FIELD=VALUE` records the expert in that task config (here 1 s episodes: 50 frames each);
    another section, an unknown field or a refused value is one line, exit 2, and nothing is written."""
    from tests.cli.test_cli_errors import call, one_line_error

    out = tmp_path / "short"
    assert call(["record", "--task", "arm-reach", "--expert", "--episodes", "2", "--num-envs", "2", "--out", str(out),
                 "--set", "env.episode_length_s=1.0"]) == 0
    assert capsys.readouterr().out.strip().endswith("2 episodes, 100 frames, expert success 1.00, dropped frames 0")
    assert DatasetReader(out).num_frames == 100
    base = ["record", "--task", "arm-reach", "--expert", "--episodes", "1", "--out", str(tmp_path / "bad")]
    one_line_error(capsys, call([*base, "--set", "algo.learning_rate=1"]), "env.FIELD=VALUE")
    one_line_error(capsys, call([*base, "--set", "env.no_such_field=1"]), "no_such_field")
    one_line_error(capsys, call([*base, "--set", "env.decimation=0"]), "decimation")
    assert not (tmp_path / "bad").exists()
