"""Sim expert recording (`robo-rl record --expert`) and behaviour cloning from the dataset (`--algo bc`).

The commands run in-process (`robo_rl.cli.main.main`, the `robo-rl` entry point, as tests/cli/test_cli_errors.py runs
them), not in a new interpreter that imports torch for each.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.sim_record import record_expert
from robo_rl.learn.checkpoint import load_checkpoint
from robo_rl.tasks.task_registry import make_env
from tests.cli.test_cli_errors import call, one_line_error


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory):
    root = tmp_path_factory.mktemp("demos") / "reach"
    summary = record_expert("arm-reach", 8, root, num_envs=8, action_noise=0.2)
    return root, summary


def test_recorded_expert_episodes_replay_to_the_recorded_states(tmp_path):
    """Replaying an episode's recorded actions from its recorded start reproduces its recorded joint states."""
    root = tmp_path / "clean"
    summary = record_expert("arm-reach", 2, root, num_envs=2)  # no action noise: the actions recorded ran
    reader = DatasetReader(root)
    assert summary["episodes"] == reader.num_episodes == 2 and summary["dropped"] == 0
    info = reader.meta.info["robo_rl"]
    assert info["task"] == "arm-reach" and info["contract"]["joint_names"][0] == "joint1"
    ep = reader.episode(1)
    assert ep["next.done"][-1] and not ep["next.done"][:-1].any()
    env = make_env("arm-reach", 1, seed=0)
    env.reset(random_start=False)
    # put the world where the episode started: its joints, and the target its policy observation names
    env.backend.reset(torch.tensor([0]), qpos=torch.tensor(ep["observation.state"][:1], dtype=torch.float64))
    names = reader.features["observation.policy"]["names"]
    env.target[0] = torch.tensor(ep["observation.policy"][0, [names.index(f"target_pos_{i}") for i in range(3)]])
    env._refresh()
    assert np.allclose(env.get_observations()["policy"][0].numpy(), ep["observation.policy"][0], atol=1e-5)
    gap = []
    for t in range(len(ep["action"]) - 1):
        env.step(torch.tensor(ep["action"][t : t + 1]))
        gap.append(float(np.abs(env.q[0].numpy() - ep["observation.state"][t + 1]).max()))
    assert max(gap) < 1e-3, max(gap)  # float32 storage of the start state is the only difference
    env.close()


def test_bc_trains_exports_and_its_errors_are_one_line(reach_demos, tmp_path, capsys):
    root, _ = reach_demos
    log = ["--set", f"runner.log_dir={tmp_path}", "--set", "runner.eval_episodes=4", "--num-envs", "4"]
    done = call(["train", "--task", "arm-reach", "--algo", "bc", "--dataset", str(root), "--max-iterations", "3",
                 "--run-name", "bc", *log])
    assert done == 0, capsys.readouterr().err
    state = load_checkpoint(tmp_path / "bc" / "model_000003.pt")
    assert state["config"]["algo_name"] == "bc" and state["config"]["algo"]["dataset"] == str(root.resolve())
    assert state["config"]["policy"]["obs_norm_clip"] == 5.0
    assert int(state["algo"]["policy"]["obs_normalizer.count"]) == DatasetReader(root).num_frames
    out = call(["export", str(tmp_path / "bc"), "--out", str(tmp_path / "bc.onnx")])
    assert out == 0 and (tmp_path / "bc.onnx").is_file(), capsys.readouterr().err
    capsys.readouterr()
    missing = call(["train", "--task", "arm-reach", "--algo", "bc", "--run-name", "x", *log])
    one_line_error(capsys, missing, "algo.dataset is not set; pass --dataset PATH")  # exit 2, one line
    wrong = call(["train", "--task", "quadruped-walk-flat", "--algo", "bc", "--dataset", str(root), "--run-name", "y",
                  *log])
    one_line_error(capsys, wrong, "observation.policy has 27 values")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_bc_update_lowers_the_action_error(reach_demos):
    from robo_rl.learn.algorithm_registry import EnvSpec
    from robo_rl.learn.algorithms.bc import BC, BCConfig, BCPolicyConfig, build_policy, load_demonstrations

    root, _ = reach_demos
    spec = EnvSpec(num_envs=1, obs_dim=27, critic_obs_dim=27, action_dim=7, action_clip=3.0)
    cfg = BCConfig(dataset=str(root), num_steps_per_env=20, batch_size=256)
    torch.manual_seed(0)
    obs, actions = load_demonstrations(cfg, spec)
    algo = BC(cfg, build_policy(BCPolicyConfig(), spec), obs, actions, torch.Generator().manual_seed(0))
    first = algo.update()["action_mse"]
    for _ in range(4):
        last = algo.update()["action_mse"]
    assert last < 0.5 * first


BC_ITERATIONS = 40
"""Of the BC preset's 100 (100 gradient steps each). Success of its 64 evaluation episodes, seeds 0, 1, 2: 0.58-0.61 at
5 iterations, 0.80-0.84 at 10, 0.86-0.97 at 15, then a plateau: 0.91 / 0.94 / 0.98 at 40, 0.91 / 0.92 / 0.91 at 100
(0.875-1.0 at every tenth iteration from 20 to 100)."""


@pytest.mark.slow
def test_bc_on_50_expert_demos_reaches_80_percent_success(reach_demos_50, tmp_path, capsys):
    """The issue's bar: 50 scripted-expert arm-reach demos (recorded with --noise 0.2), BC preset, >= 80 %."""
    done = call(["train", "--task", "arm-reach", "--algo", "bc", "--dataset", str(reach_demos_50), "--run-name", "bc",
                 "--max-iterations", str(BC_ITERATIONS), "--set", f"runner.log_dir={tmp_path}"])
    captured = capsys.readouterr()
    assert done == 0, captured.err
    line = next(ln for ln in captured.out.splitlines() if ln.startswith("evaluation:"))
    success = float(line.split("success")[1].split()[0])
    assert success >= 0.8, line


def test_record_with_cameras_and_dataset_info_commands(tmp_path, capsys):
    """The README's camera recording and `dataset info` (fewer, smaller episodes)."""
    out = tmp_path / "pick"

    def run(*args: str) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of `robo-rl ARGS`."""
        capsys.readouterr()
        code = call(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, stdout, stderr = run("record", "--task", "arm-pick-place", "--expert", "--episodes", "2", "--num-envs", "2",
                               "--cameras", "scene", "track", "--image-size", "64", "--out", str(out))
    assert code == 0, stderr
    assert "2 episodes, 800 frames, expert success 1.00, dropped frames 0" in stdout
    code, stdout, stderr = run("dataset", "info", str(out))
    assert code == 0, stderr
    assert "LeRobot v3.0, 2 episodes, 800 frames at 50 fps" in stdout
    assert "observation.images.track         video    [64, 64, 3]" in stdout
    code, stdout, _ = run("dataset", "stats", str(out))
    assert code == 0 and stdout.startswith("observation.state")
    code, stdout, _ = run("dataset", "video", str(out), "--episode", "1", "--camera", "observation.images.scene",
                          "--out", str(tmp_path / "ep1.mp4"))
    assert code == 0 and "400 frames of observation.images.scene at 50 fps" in stdout
    from robo_rl.demos.video_segments import count_video_frames

    assert count_video_frames(tmp_path / "ep1.mp4") == 400
    code, _, stderr = run("record", "--task", "arm-pick-place", "--expert", "--cameras", "wrist", "--out",
                          str(tmp_path / "b"))
    assert code == 2 and "camera 'wrist' is not in the model" in stderr
    assert run("dataset", "info", str(tmp_path))[0] == 2
