"""ros_ws/Dockerfile and ros_ws/run_tests.sh, checked without Docker or ROS (neither runs here): every file, path,
extra and package they name exists, the two agree with each other, and the script parses."""

import fnmatch
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import REPO

ROS_WS = REPO / "ros_ws"
DOCKERFILE = (ROS_WS / "Dockerfile").read_text()
SCRIPT = ROS_WS / "run_tests.sh"
PACKAGE = ET.parse(ROS_WS / "src" / "robo_rl_ros" / "package.xml").getroot().findtext("name")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in joined.splitlines() if line.strip()]


def test_dockerfile_builds_from_the_official_ros_image_jazzy_or_humble():
    steps = instructions(DOCKERFILE)
    assert steps[0] == ("ARG", "ROS_DISTRO=jazzy") and steps[1] == ("FROM", "ros:${ROS_DISTRO}")
    assert "--build-arg ROS_DISTRO=humble" in DOCKERFILE and "docker build -f ros_ws/Dockerfile" in DOCKERFILE
    runs = " ".join(arg for op, arg in steps if op == "RUN")
    assert "python3 -m venv --system-site-packages" in runs and 'COLCON_IGNORE' in runs
    assert "rosdep install --from-paths ros_ws/src --ignore-src" in runs
    assert (REPO / "ros_ws" / "src").is_dir()


def test_dockerfile_installs_extras_that_exist_and_runs_the_script():
    steps = instructions(DOCKERFILE)
    section = (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^(\w+) = \[", section, flags=re.M))
    (pip,) = [arg for op, arg in steps if op == "RUN" and "/bin/pip" in arg]
    wanted = set(re.search(r'-e "\.\[([^\]]+)\]"', pip).group(1).split(","))
    assert wanted <= extras and {"deploy", "dds", "demos"} <= wanted
    assert '"numpy>=1.26,<2"' in pip  # ROS's compiled modules are built against numpy 1
    (cmd,) = [arg for op, arg in steps if op == "CMD"]
    script = REPO / cmd.strip('[]"')
    assert script == SCRIPT and os.access(script, os.X_OK)
    venv = re.search(r"VENV=(\S+)", DOCKERFILE).group(1)
    assert venv.startswith("/opt/") and '"$VENV/bin/activate"' in SCRIPT.read_text()  # the script activates it


def test_dockerignore_keeps_what_the_image_needs():
    ignored = [line.strip() for line in (ROS_WS / "Dockerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    assert {".venv", ".git"} <= set(ignored)
    needed = ["pyproject.toml", "README.md", "robo_rl", "policies", "hardware", "envs", "ros_ws/src",
              "ros_ws/run_tests.sh"]
    for path in needed:
        assert (REPO / path).exists(), path
        hits = [p for p in ignored if fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p + "/*")]
        assert not hits, (path, hits)


def test_run_tests_script_parses_and_names_what_exists():
    text = SCRIPT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -eo pipefail" in text
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    assert f"--packages-select {PACKAGE}" in text and f"build/{PACKAGE}" in text
    assert "colcon test-result" in text and "SignalHandlerOptions" not in text
    launch_tests = sorted((ROS_WS / "src" / PACKAGE / "test").glob("test_*_launch.py"))
    assert {p.name for p in launch_tests} >= {"test_sim_twin_launch.py", "test_sim_twin_sigint_launch.py",
                                              "test_record_demos_launch.py"}
    for distro in ("humble", "jazzy"):
        assert distro in text


def test_run_tests_without_ros_says_so_in_one_line_and_exits_2(tmp_path):
    if shutil.which("bash") is None or any(os.path.isdir(f"/opt/ros/{d}") for d in ("humble", "jazzy")):
        pytest.skip("ROS 2 is installed here (or no bash)")
    env = {k: v for k, v in os.environ.items() if k != "ROS_DISTRO"}
    out = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "no ROS 2 in /opt/ros" in out.stderr
