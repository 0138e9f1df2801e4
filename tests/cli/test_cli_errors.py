"""Every user mistake is one line on stderr, exit 2, no traceback, and leaves the run folder as it was.

Most cases run in-process (`robo_rl.cli.main.main`, fast); a few run as a subprocess for the real exit code.
The NaN guard (exit 1, last good checkpoint intact) is tested at the end.
"""

import hashlib
import shutil
from pathlib import Path

import pytest
import torch

from robo_rl.cli import main as cli
from robo_rl.learn.checkpoint import load_run_checkpoint
from tests.conftest import run_cli

TINY = ["--set", "algo.num_steps_per_env=4", "--set", "runner.eval_episodes=0", "--set", "runner.progress_bar=false",
        "--set", "policy.actor_hidden_dims=[8]", "--set", "policy.critic_hidden_dims=[8]"]


def call(argv: list[str]) -> int:
    """cli.main's exit code, including argparse's SystemExit."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def one_line_error(capsys, code: int, fragment: str, expected_code: int = 2) -> str:
    err = capsys.readouterr().err
    assert code == expected_code, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("robo-rl: "), err
    assert fragment in err, err
    return err


def snapshot(folder: Path) -> dict[str, str]:
    """Every file (hidden ones included) under `folder` -> sha256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A finished 2-iteration arm-reach run with 4 worlds (checkpoints 1 and 2)."""
    log_dir = tmp_path_factory.mktemp("runs")
    code = call(["train", "--task", "arm-reach", "--num-envs", "4", "--max-iterations", "2", "--run-name", "tiny",
                 "--set", f"runner.log_dir={log_dir}", "--set", "runner.save_interval=1", *TINY])
    assert code == 0
    return log_dir / "tiny"


@pytest.fixture
def files(tmp_path):
    """A not-a-checkpoint torch file, a plain file, a directory named like an output, broken MJCF/YAML."""
    torch.save(torch.zeros(3), tmp_path / "x.pt")
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "d.onnx").mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken.xml").write_text("<mujoco><worldbody><body></mujoco>")
    (tmp_path / "broken.yaml").write_text("task: arm-reach\nsim: [1,\n")
    return tmp_path


ARM = ["train", "--task", "arm-reach", "--num-envs", "4", "--max-iterations", "1", "--run-name", "r"]
QUAD = ["train", "--task", "quadruped-walk-flat", "--num-envs", "4", "--max-iterations", "1", "--run-name", "r"]

TRAIN_MISTAKES = [
    (ARM + ["--set", "env.target_low=[0.7,0,0]"], "env.target_low = [0.7, 0.0, 0.0]: must not exceed"),
    (ARM + ["--set", "env.target_low=[1,2]"], "env.target_low = [1.0, 2.0]: expected 3 numbers"),
    (QUAD + ["--set", "env.lin_vel_x=[1,-1]"], "env.lin_vel_x = [1.0, -1.0]: expected [low, high]"),
    (ARM + ["--set", "env.target_high=[.inf,0.25,0.55]"], "env.target_high[0] = inf: must be a finite number"),
    (QUAD + ["--set", "env.ang_vel_z=[.nan,1]"], "env.ang_vel_z[0] = nan: must be a finite number"),
    (ARM + ["--set", "algo.entropy_coef=.nan"], "algo.entropy_coef = nan: must be a finite number"),
    (ARM + ["--set", "algo.learning_rate=nan"], "algo.learning_rate = 'nan': must be a finite number"),
    (ARM + ["--set", "policy.init_noise_std=.inf"], "policy.init_noise_std = inf: must be a finite number"),
    (ARM + ["--set", "env.rewards.position_error=-.inf"], "env.rewards.position_error = -inf: must be a finite"),
    (ARM + ["--max-time", "inf"], "runner.max_time_s = 'inf': must be a finite number"),
    (ARM + ["--set", "algo.num_mini_batches=17"], "algo.num_mini_batches = 17: must be <= the batch size"),
    (ARM + ["--set", "policy.actor_hidden_dims=[-3]"], "policy.actor_hidden_dims[0] = -3: hidden widths must be"),
    (ARM + ["--set", "policy.critic_hidden_dims=[64,0]"], "policy.critic_hidden_dims[1] = 0"),
    (ARM + ["--set", "env.model=nope.xml"], "env.model = 'nope.xml': MJCF file"),
    (ARM + ["--set", "env.model=envs"], "env.model = 'envs': MJCF file"),
    (ARM + ["--set", "env.model={tmp}/broken.xml"], "MuJoCo cannot load it"),
    (ARM + ["--set", "algo.gamma=[1"], "override algo.gamma = '[1': not a valid YAML value"),
    (ARM + ["--set", "device=cuda"], "device = 'cuda': the learner must be on sim.device ('cpu')"),
    (ARM + ["--set", "sim.backend=isaaclab"],
     "sim.backend = 'isaaclab': unknown physics backend; valid: mujoco_cpu, mujoco_warp"),
    (ARM + ["--set", "sim.backend=mujoco_warp", "--set", "sim.device=cuda:0"],  # the pinned torch is a CPU build
     "sim.device = 'cuda:0': this torch has no CUDA device"),
    (ARM + ["--num-envs", "0"], "sim.num_envs = 0: must be >= 1"),
    (ARM + ["--num-envs", "abc"], "argument --num-envs: invalid int value"),
    (ARM + ["--max-iterations", "-1"], "runner.max_iterations = -1: must be >= 1"),
    (ARM + ["--seed", "-1"], "seed = -1: must be >= 0"),
    (ARM + ["--set", "algo.num_steps_per_env=0.5"], "algo.num_steps_per_env = 0.5: expected an integer"),
    (ARM + ["--set", "sim.num_envs="], "sim.num_envs = '': expected an integer"),
    (ARM + ["--run-name", "a/b"], "runner.run_name = 'a/b': must be a single folder name"),
    (ARM + ["--run-name", ".."], "runner.run_name = '..'"),
    (["train", "--config", "{tmp}"], "is a directory; expected a YAML file"),
    (["train", "--config", "{tmp}/broken.yaml"], "is not valid YAML"),
    (["train", "--resume", "{tmp}/empty"], "holds no config.yaml"),
    (["train", "--task", ""], "task is not set"),
    (["train", "--task", "arm-reach", "--set", "runner.log_dir=/proc/nope"], "cannot create run directory"),
    (["trian"], "invalid choice: 'trian'"),
]


@pytest.mark.parametrize("argv, fragment", TRAIN_MISTAKES, ids=[" ".join(a[-2:]) for a, _ in TRAIN_MISTAKES])
def test_train_mistake_is_one_line_and_writes_nothing(capsys, files, argv, fragment):
    log_dir = files / "runs"
    argv = [a.replace("{tmp}", str(files)) for a in argv]
    if argv[0] == "train":  # the test's settings first: a case's own `--set` comes later and wins
        argv = [argv[0], "--set", f"runner.log_dir={log_dir}", *TINY, *argv[1:]]
    one_line_error(capsys, call(argv), fragment)
    assert not log_dir.exists()  # no half-made run folder


PLAY_EXPORT_MISTAKES = [
    (["play", "{tmp}/x.pt"], "is not a robo_rl training checkpoint (it holds a Tensor)"),
    (["export", "{tmp}/x.pt", "--out", "{tmp}/o.onnx"], "is not a robo_rl training checkpoint"),
    (["play", "{tmp}/empty"], "holds no checkpoint"),
    (["export", "{run}", "--out", "{tmp}/d.onnx"], "--out '{tmp}/d.onnx' is a directory"),
    (["export", "{run}", "--out", "{tmp}/afile/o.onnx"], "'{tmp}/afile' is not a directory"),
    (["export", "{run}", "--out", "/proc/nope/o.onnx"], "--out '/proc/nope/o.onnx' cannot be written"),
    (["export", "{run}", "--out", "{tmp}/o.txt"], "must end in .onnx"),
    (["play", "{run}", "--video", "{tmp}/afile/v.mp4"], "--video '{tmp}/afile/v.mp4' cannot be written"),
    (["play", "{run}", "--video", "/proc/v.mp4"], "--video '/proc/v.mp4' cannot be written"),
    (["play", "{run}", "--video", "{tmp}/v.avi"], "must end in .mp4"),
    (["play", "{run}", "--episodes", "0"], "--episodes 0: must be 1 .."),
    (["play", "{run}", "--seed", "-1"], "--seed -1: must be 0 .."),
]


@pytest.mark.parametrize("argv, fragment", PLAY_EXPORT_MISTAKES, ids=[" ".join(a) for a, _ in PLAY_EXPORT_MISTAKES])
def test_play_export_mistake_is_one_line_and_writes_nothing(capsys, files, tiny_run, argv, fragment):
    def fill(text):
        return text.replace("{tmp}", str(files)).replace("{run}", str(tiny_run))

    before_run, before_tmp = snapshot(tiny_run), snapshot(files)
    one_line_error(capsys, call([fill(a) for a in argv]), fill(fragment))
    assert snapshot(tiny_run) == before_run
    assert snapshot(files) == before_tmp  # no video, ONNX or contract file


RESUME_MISTAKES = [
    (["--num-envs", "8"], "cannot change sim.num_envs (4 -> 8)"),
    (["--set", "policy.actor_hidden_dims=[16]"], "cannot change policy.actor_hidden_dims ([8] -> [16])"),
    (["--set", "algo.learning_rate=1e-4"], "cannot change algo.learning_rate"),
    (["--seed", "3"], "cannot change seed (0 -> 3)"),
    (["--set", "env.rewards.action_rate=-1"], "cannot change env.rewards.action_rate"),
    (["--set", "env.target_low=[0.7,0,0]"], "env.target_low = [0.7, 0.0, 0.0]: must not exceed"),
    (["--set", "device=cuda"], "device = 'cuda'"),
    (["--set", "algo.num_mini_batches=1000"], "algo.num_mini_batches = 1000"),
    (["--set", "algo.entropy_coef=.nan"], "algo.entropy_coef = nan"),
    (["--task", "quadruped-walk-flat"], "does not match the resumed run's task arm-reach"),
    (["--config", "sim_configs/arm-reach.yaml"], "--config cannot be combined with --resume"),
    (["--max-iterations", "0"], "runner.max_iterations = 0"),
]


@pytest.mark.parametrize("extra, fragment", RESUME_MISTAKES, ids=[" ".join(e) for e, _ in RESUME_MISTAKES])
def test_failed_resume_leaves_the_run_byte_identical(capsys, tiny_run, tmp_path, extra, fragment):
    run = tmp_path / "tiny"
    shutil.copytree(tiny_run, run)
    before = snapshot(run)
    one_line_error(capsys, call(["train", "--resume", str(run), "--max-iterations", "4", *extra]), fragment)
    assert snapshot(run) == before  # config.yaml, checkpoints, events and the lock file untouched


def test_resume_with_an_unreadable_checkpoint_changes_nothing(capsys, tiny_run, tmp_path):
    run = tmp_path / "tiny"
    shutil.copytree(tiny_run, run)
    latest = run / "model_000002.pt"
    latest.write_bytes(latest.read_bytes()[:100])
    before = snapshot(run)
    one_line_error(capsys, call(["train", "--resume", str(run), "--max-iterations", "4"]), "cannot be read")
    assert snapshot(run) == before


def test_allowed_resume_changes_only_runner_fields(capsys, tiny_run, tmp_path):
    run = tmp_path / "tiny"
    shutil.copytree(tiny_run, run)
    code = call(["train", "--resume", str(run), "--max-iterations", "3", "--set", "runner.save_interval=7",
                 "--set", "runner.progress_bar=true", "--seed", "0", "--num-envs", "4"])  # same seed/envs: allowed
    assert code == 0, capsys.readouterr().err
    assert "resuming" in capsys.readouterr().out
    state = load_run_checkpoint(run / "model_000003.pt")
    assert state["config"]["runner"]["save_interval"] == 7 and state["config"]["sim"]["num_envs"] == 4


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["train", "--task", "arm-reach", "--set", "env.target_low=[0.7,0,0]"], "env.target_low"),
        (["train", "--task", "arm-reach", "--set", "device=cuda"], "device = 'cuda'"),
        (["play", "{tmp}/x.pt"], "not a robo_rl training checkpoint"),
        (["train", "--resume", "{run}", "--num-envs", "8"], "cannot change sim.num_envs"),
    ],
)
def test_real_exit_code_is_2(files, tiny_run, argv, fragment):
    argv = [a.replace("{tmp}", str(files)).replace("{run}", str(tiny_run)) for a in argv]
    before = snapshot(tiny_run)
    result = run_cli(*argv, cwd=files)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr
    assert not (files / "runs").exists() and snapshot(tiny_run) == before


# ---------------------------------------------------------------------------------------------- NaN guard
def test_nan_reward_stops_training_and_keeps_the_last_good_checkpoint(capsys, tmp_path, monkeypatch):
    from robo_rl.tasks.arm_reach import ArmReachEnv

    steps_per_iteration, poisoned_iteration = 4, 3
    original = ArmReachEnv._reward_terms
    calls = {"n": 0}

    def reward_terms(self):
        terms = original(self)
        calls["n"] += 1
        if calls["n"] > steps_per_iteration * (poisoned_iteration - 1) + 1:  # 2nd step of iteration 3
            terms["position_error"] = torch.full_like(terms["position_error"], float("nan"))
        return terms

    monkeypatch.setattr(ArmReachEnv, "_reward_terms", reward_terms)
    code = call(["train", "--task", "arm-reach", "--num-envs", "4", "--max-iterations", "5", "--run-name", "nan",
                 "--set", f"runner.log_dir={tmp_path}", "--set", "runner.save_interval=1", *TINY])
    run = tmp_path / "nan"
    err = one_line_error(capsys, code, "training stopped at iteration 3: non-finite reward in 4 of 4 worlds",
                         expected_code=1)
    assert f"last good checkpoint: {run / 'model_000002.pt'}" in err
    assert sorted(p.name for p in run.glob("model_*.pt")) == ["model_000001.pt", "model_000002.pt"]
    state = load_run_checkpoint(run / "model_000002.pt")
    assert all(torch.isfinite(t).all() for t in state["algo"]["policy"].values())
    monkeypatch.undo()
    assert call(["play", str(run), "--episodes", "2"]) == 0  # the last good checkpoint still plays


def test_overflowing_loss_stops_training_with_exit_1(tmp_path):
    """A huge but finite reward scale overflows the value loss in float32: caught after the update."""
    result = run_cli("train", "--task", "arm-reach", "--num-envs", "4", "--max-iterations", "3", "--run-name", "big",
                     "--set", f"runner.log_dir={tmp_path}", "--set", "env.rewards.position_error=1e38", *TINY,
                     cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert "training stopped at iteration 1: non-finite value_loss" in result.stderr
    assert "no checkpoint was written" in result.stderr
    assert not list((tmp_path / "big").glob("model_*.pt"))
