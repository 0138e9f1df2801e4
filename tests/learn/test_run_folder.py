"""The run folder records where a run came from: commit, uncommitted changes, versions, command, resumes."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from robo_rl.learn.run_folder import (
    DIFF_FILE,
    PROVENANCE_FILE,
    RunLock,
    collect_provenance,
    create_run_dir,
    find_run_dir,
    git_state,
    provenance_line,
    read_provenance,
    record_resume,
)
from tests.conftest import REPO

CHANGE = "# an uncommitted change, recorded by the run's provenance"


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` with a throwaway identity; its stdout."""
    return subprocess.run(["git", "-c", "user.name=robo_rl test", "-c", "user.email=test@example.org", *args],
                          cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> str:
    """A git repository at `path` with `files` committed; returns the commit."""
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return git(path, "rev-parse", "HEAD")


def test_git_state_records_commit_diff_and_untracked_files(tmp_path):
    commit = make_repo(tmp_path / "repo", {"a.py": "x = 1\n"})
    (tmp_path / "repo" / "a.py").write_text(f"x = 2\n{CHANGE}\n")
    (tmp_path / "repo" / "new.py").write_text("y = 1\n")
    record, diff = git_state(tmp_path / "repo")
    assert record["repository"] == str((tmp_path / "repo").resolve())
    assert record["commit"] == commit and record["dirty"] is True and record["diff_file"] == DIFF_FILE
    assert record["untracked"] == ["new.py"]
    assert f"+{CHANGE}" in diff and "-x = 1" in diff and "+x = 2" in diff

    git(tmp_path / "repo", "commit", "-q", "-am", "second")
    record, diff = git_state(tmp_path / "repo")
    assert record["commit"] != commit and record["dirty"] is False and diff == "" and "diff_file" not in record


def test_outside_a_repository_it_says_so(tmp_path):
    record, diff = git_state(tmp_path)
    assert record == {"repository": None, "reason": f"{tmp_path} is not in a git checkout"} and diff == ""
    # a package installed into a venv inside some project's checkout: in its folder, but not its code
    make_repo(tmp_path / "project", {"README": "a project\n", ".gitignore": "venv/\n"})
    installed = tmp_path / "project" / "venv" / "robo_rl"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    record, diff = git_state(installed)
    assert record["repository"] is None and "not tracked by the git checkout around it" in record["reason"]
    assert provenance_line_of(tmp_path / "run", record) == f"run trained at no git commit ({record['reason']})"


def provenance_line_of(run: Path, git_record: dict) -> str:
    run.mkdir()
    (run / PROVENANCE_FILE).write_text(json.dumps({"version": 1, "git": git_record}))
    return provenance_line(run)


def test_run_lock_is_exclusive_and_released(tmp_path):
    from robo_rl.learn.run_folder import RunInUse

    with RunLock(tmp_path):
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
        with pytest.raises(RunInUse, match=rf"is in use by another process \(pid {os.getpid()}\)"):
            RunLock(tmp_path)  # a second open file description conflicts even within one process
    RunLock(tmp_path).release()  # released: lockable again


def test_create_run_dir_writes_config_provenance_and_holds_the_lock(tmp_path):
    from robo_rl.learn.builders import resolve_config
    from robo_rl.learn.run_folder import RunInUse

    cfg = resolve_config({"task": "arm-reach"})
    run = tmp_path / "runs" / "r"
    lock = create_run_dir(run, cfg, ["robo-rl", "train", "--task", "arm-reach", "--run-name", "my run"])
    try:
        with pytest.raises(RunInUse):
            RunLock(run)
    finally:
        lock.release()
    assert find_run_dir("r", tmp_path / "runs") == run
    record = read_provenance(run)
    assert record["command"] == "robo-rl train --task arm-reach --run-name 'my run'"  # copy-pastable
    assert record["cwd"] == os.getcwd() and record["packages"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["packages"]["torch"] and record["packages"]["numpy"] and "resumes" not in record
    # the commit of the checkout this robo_rl was imported from, when it is one
    assert record["git"] == git_state()[0]
    assert (run / DIFF_FILE).exists() == bool(record["git"].get("dirty"))


def test_resume_of_a_run_without_provenance_records_the_resume(tmp_path):
    from robo_rl.learn.builders import resolve_config

    cfg = resolve_config({"task": "arm-reach"})
    record_resume(tmp_path, cfg, 7, ["robo-rl", "train", "--resume", str(tmp_path)])
    record = read_provenance(tmp_path)
    assert "git" not in record and [r["iteration"] for r in record["resumes"]] == [7]
    assert provenance_line(tmp_path).startswith("run started before provenance was recorded; resumed 1x, last at "
                                                "iteration 7 with ")
    assert (tmp_path / "config.yaml").is_file()
    assert provenance_line(tmp_path / "nothing").startswith("run provenance unknown (")


def test_collect_provenance_has_every_field():
    record, _ = collect_provenance(["robo-rl", "tasks"], folder=REPO / "robo_rl")
    assert set(record) == {"version", "time", "command", "cwd", "python_executable", "platform", "git", "packages"}
    assert {"robo_rl", "torch", "mujoco", "numpy", "onnx", "onnxruntime", "python"} <= set(record["packages"])


def test_a_run_trained_in_a_git_repository_records_its_commit_and_diff(tmp_path):
    """Train with a robo_rl in a temporary git repository holding an uncommitted change; play prints the
    commit; a resume after committing the change is appended and export prints it."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "robo_rl", repo / "robo_rl", ignore=shutil.ignore_patterns("__pycache__"))
    first = make_repo(repo, {})
    init = repo / "robo_rl" / "__init__.py"
    init.write_text(init.read_text() + CHANGE + "\n")
    work = tmp_path / "work"  # the user's folder, outside the repository
    work.mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "ROBO_RL_DATA"} | {"PYTHONPATH": str(repo)}
        out = subprocess.run([sys.executable, "-m", "robo_rl.cli", *args], cwd=work, env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out

    tiny = ["--set", "algo.num_steps_per_env=4", "--set", "runner.eval_episodes=0", "--set",
            "runner.progress_bar=false", "--set", "policy.actor_hidden_dims=[8]", "--set",
            "policy.critic_hidden_dims=[8]"]
    cli("train", "--task", "arm-reach", "--num-envs", "4", "--max-iterations", "1", "--run-name", "r", *tiny)
    run = work / "runs" / "r"
    started = read_provenance(run)
    assert started["git"]["repository"] == str(repo.resolve()) and started["git"]["commit"] == first
    assert started["git"]["dirty"] is True and started["command"].startswith("robo-rl train --task arm-reach")
    diff = (run / DIFF_FILE).read_text()
    assert f"+{CHANGE}" in diff and "robo_rl/__init__.py" in diff

    play = cli("play", str(run), "--episodes", "1")
    assert f"run trained at commit {first[:7]} (+diff)\n" in play.stdout

    git(repo, "commit", "-q", "-am", "the change")
    second = git(repo, "rev-parse", "HEAD")
    cli("train", "--resume", str(run), "--max-iterations", "2")
    resumed = read_provenance(run)
    assert {k: v for k, v in resumed.items() if k != "resumes"} == started  # the first record is kept
    (entry,) = resumed["resumes"]
    assert entry["iteration"] == 1 and entry["git"]["commit"] == second and entry["git"]["dirty"] is False
    assert entry["command"].startswith("robo-rl train --resume")
    assert (run / DIFF_FILE).read_text() == diff and not list(run.glob("git.resume-*.diff"))

    export = cli("export", str(run), "--out", str(work / "r.onnx"))
    line = f"run trained at commit {first[:7]} (+diff); resumed 1x, last at iteration 1 with commit {second[:7]}"
    assert line in export.stdout.splitlines()
    contract = json.loads((work / "r.json").read_text())
    assert contract["extra"]["commit"] == first and contract["extra"]["commit_dirty"] is True  # the first start's
