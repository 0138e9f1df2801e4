"""The ROS 2 package ros_ws/src/robo_rl_ros, checked without ROS: manifest, launch files, parameters, what
its sdist and wheel install, and that its nodes use only names the deploy core really has.

Launch files are Python that imports ROS 2's `launch`, which is not on PyPI: they are read with `ast`
(declared arguments and their defaults, parameters passed), never executed here. The launch_testing
test that brings the package up runs under `colcon test` in a ROS 2 workspace and skips here.
"""

import ast
import importlib
import importlib.util
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
import yaml

from robo_rl.deploy import ros_interface as names
from tests.conftest import REPO

PKG = REPO / "ros_ws" / "src" / "robo_rl_ros"
LAUNCH_FILES = sorted((PKG / "launch").glob("*.launch.py"))
MODULES = sorted((PKG / "robo_rl_ros").glob("*.py"))
TESTS = sorted((PKG / "test").glob("*.py"))
TEST_MODULES = [p for p in TESTS if p.name.startswith("test_")]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
NOT_ROS = {"robo_rl", "robo_rl_ros", "launch_helpers", "numpy", "yaml", "pytest",  # pip / package-local
           "rosbags", "cv2"}  # installed with robo_rl[demos] (cv2 is also rosdep's python3-opencv, declared)


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def declared_arguments(path: Path) -> dict[str, str]:
    """{name: default_value} of every DeclareLaunchArgument call in a launch file."""
    out = {}
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "DeclareLaunchArgument":
            name = node.args[0].value
            default = next(k.value.value for k in node.keywords if k.arg == "default_value")
            out[name] = default
    return out


def manifest() -> ET.Element:
    return ET.parse(PKG / "package.xml").getroot()


def test_package_xml_is_format_3_with_every_ros_dependency():
    root = manifest()
    assert root.get("format") == "3" and root.findtext("name") == "robo_rl_ros"
    assert root.find("export/build_type").text == "ament_python"
    exec_deps = {e.text for e in root.findall("exec_depend")}
    test_deps = {e.text for e in root.findall("test_depend")}
    for path in MODULES + LAUNCH_FILES:
        missing = imported_roots(path) - STDLIB - NOT_ROS - exec_deps
        assert not missing, f"{path.name} imports ROS package(s) {missing} missing from package.xml exec_depend"
    for path in TESTS:
        missing = imported_roots(path) - STDLIB - NOT_ROS - exec_deps - test_deps
        assert not missing, f"{path.name} imports {missing} missing from package.xml"
    assert {"python3-numpy", "python3-yaml", "python3-opencv", "rclpy", "launch_ros", "std_srvs",
            "lifecycle_msgs", "rcl_interfaces", "rosbag2_storage_mcap"} <= exec_deps
    assert "robo_rl" not in exec_deps  # not a rosdep key: pip, into the venv (docs/deploy.md)
    (unitree,) = [e for e in root.findall("exec_depend") if e.text == "unitree_go"]
    assert unitree.get("condition") == "$ROBO_RL_UNITREE == 1"  # unitree_ros2 is built from source, on request
    (franka,) = [e for e in root.findall("exec_depend") if e.text == "franka_msgs"]
    assert franka.get("condition") == "$ROBO_RL_FRANKA == 1"  # franka_ros2: for a Franka Hand only


def test_setup_installs_nodes_where_ros2_run_finds_them():
    cfg = (PKG / "setup.cfg").read_text()
    assert "script_dir=$base/lib/robo_rl_ros" in cfg and "install_scripts=$base/lib/robo_rl_ros" in cfg
    assert "[build_scripts]\nexecutable=/usr/bin/env python3" in cfg  # the venv's python3 when it is active
    setup = (PKG / "setup.py").read_text()
    for script in ("policy_node", "sim_robot_node", "demo_recorder_node"):
        assert f"{script} = {{PACKAGE}}.{script}:main" in setup
        module = tree(PKG / "robo_rl_ros" / f"{script}.py")
        assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in module.body)
    assert (PKG / "resource" / "robo_rl_ros").is_file()


def launch_reads() -> dict[str, set[str]]:
    """{public function of launch_nodes.py: the launch arguments it (and the functions it names) reads}."""
    module = tree(PKG / "robo_rl_ros" / "launch_nodes.py")
    functions = {f.name: f for f in module.body if isinstance(f, ast.FunctionDef)}

    def reads(name: str, seen: set[str]) -> set[str]:
        seen.add(name)
        out = set()
        for node in ast.walk(functions[name]):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("LaunchConfiguration", "_text") \
                    and isinstance(node.args[0], ast.Constant):
                out.add(node.args[0].value)
            if isinstance(node, ast.Name) and node.id in functions and node.id not in seen:
                out |= reads(node.id, seen)
        return out

    return {name: reads(name, set()) for name in functions if not name.startswith("_")}


def launch_calls(path: Path) -> set[str]:
    """The launch_nodes functions a launch file calls."""
    return {n.func.id for n in ast.walk(tree(path)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in launch_reads()}


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_parses_and_declares_the_documented_arguments(path):
    module = tree(path)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in module.body)
    args = declared_arguments(path)
    assert set(names.LAUNCH_ARGUMENTS) <= set(args), f"{path.name} declares {sorted(args)}"
    assert (REPO / args["policy"]).is_file() and (REPO / args["robot"]).is_file()  # robo_rl data: one source
    assert args["use_sim"] in ("true", "false") and args["dry_run"] == "true"  # dry run by default, everywhere
    assert args["command_interface"] in ("",) + names.COMMAND_INTERFACES  # "": the hardware file's
    assert args["namespace"] == "" and args["remappings"] == "" and float(args["estop_timeout_s"]) > 0
    reads = launch_reads()
    for function in launch_calls(path):
        assert reads[function] <= set(args), f"{function} reads {reads[function] - set(args)} that {path.name} " \
                                             "does not declare"
    if path.name == "sim_twin.launch.py":
        assert args["use_sim"] == "true"


def test_record_demos_takes_camera_topics():
    args = declared_arguments(PKG / "launch" / "record_demos.launch.py")
    assert args["camera_topics"] == "" and "recorder_node" in launch_calls(PKG / "launch" / "record_demos.launch.py")
    assert "camera_topics" in launch_reads()["recorder_node"]


REAL_CONTROLLERS = {
    ("unitree", None): "unitree_ros2's lowcmd (the Go2's low-level driver)",
    ("ros2", "joint_trajectory"): "joint_trajectory_controller (franka_ros2's franka_bringup controllers.yaml)",
    ("ros2", "forward_position"): "forward_command_controller on position interfaces (ros2_controllers)",
}
"""What the real-robot launch files may default to: (profile, interface) -> the controller that consumes it.
pd_targets is consumed by the twin node and robo_rl's own drivers only."""


@pytest.mark.parametrize("name", ["legged.launch.py", "manipulator.launch.py"])
def test_real_robot_launch_defaults_name_a_real_controller_and_agree_with_the_hardware_file(name):
    from robo_rl.deploy.dds_settings import for_ros_node
    from robo_rl.deploy.hardware import load_hardware

    args = declared_arguments(PKG / "launch" / name)
    assert args["command_interface"] == "" and args["use_sim"] == "false"  # the hardware file decides: one source
    settings = for_ros_node(load_hardware(REPO / args["robot"]), None)
    key = (settings.profile, None if settings.profile == "unitree" else settings.command_interface)
    assert key in REAL_CONTROLLERS, f"{name} defaults to {key}, which no real controller consumes"
    expected = {"legged.launch.py": ("unitree", None), "manipulator.launch.py": ("ros2", "joint_trajectory")}
    assert key == expected[name]


def test_launch_parameters_and_config_files_match_the_nodes():
    nodes = tree(PKG / "robo_rl_ros" / "launch_nodes.py")
    given = [kw.value for kw in ast.walk(nodes) if isinstance(kw, ast.keyword) and kw.arg == "parameters"]
    keys = {k.value for g in given for d in ast.walk(g) if isinstance(d, ast.Dict) for k in d.keys}
    sim_params = _node_parameters("sim_robot_node.py")
    recorder_params = _node_parameters("demo_recorder_node.py")
    assert {"policy_path", "hardware_config", "command_interface", "dry_run", "estop_timeout_s"} <= keys
    assert {"camera_topics", "dataset_path", "bag_path"} <= keys
    assert keys <= set(names.PARAMETERS) | set(sim_params) | set(recorder_params)
    for config, node, allowed in (("policy_node.yaml", names.POLICY_NODE, names.PARAMETERS),
                                  ("sim_robot_node.yaml", names.SIM_ROBOT_NODE, sim_params)):
        data = yaml.safe_load((PKG / "config" / config).read_text())
        params = data[f"/**/{node}"]["ros__parameters"]  # the node in any namespace
        assert set(params) <= set(allowed), f"{config}: unknown parameters {set(params) - set(allowed)}"
        assert not {"joint_names", "kp", "kd", "joint_lower"} & set(params)  # those live in hardware/*.yaml


def _node_parameters(module_name: str) -> dict:
    module = tree(PKG / "robo_rl_ros" / module_name)
    for node in module.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "PARAMETERS":
            return ast.literal_eval(node.value)
    raise AssertionError(f"{module_name} defines no PARAMETERS")


@pytest.mark.parametrize("path", MODULES + LAUNCH_FILES + TESTS, ids=lambda p: p.name)
def test_ros_side_uses_only_names_the_deploy_core_has(path):
    """The thin ROS shell must not drift from robo_rl: every `from robo_rl... import X` exists, and every
    `names.X` it reads is in ros_interface."""
    module = tree(path)
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "robo_rl":
            target = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(target, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                    f"{path.name}: {node.module} has no {alias.name}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "names":
            assert hasattr(names, node.attr), f"{path.name}: ros_interface has no {node.attr}"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The package's wheel (pip) and sdist (setuptools), built from a copy of its folder."""
    root = tmp_path_factory.mktemp("ros_pkg")
    src = root / "robo_rl_ros"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "wheels"), str(src)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(root / "sdist")], cwd=src, check=True,
                   capture_output=True)
    (wheel,) = (root / "wheels").glob("robo_rl_ros-*.whl")
    (sdist,) = (root / "sdist").glob("robo_rl_ros-*.tar.gz")
    prefix = root / "prefix"
    subprocess.run([*pip, "install", "--no-deps", "--no-compile", "--prefix", str(prefix), str(wheel)], check=True,
                   capture_output=True)
    return {"wheel": wheel, "sdist": sdist, "prefix": prefix}


def _data_files() -> list[str]:
    files = [p.relative_to(PKG).as_posix() for p in LAUNCH_FILES + sorted((PKG / "config").glob("*.yaml"))]
    return files + ["package.xml", "resource/robo_rl_ros"]


def test_wheel_installs_every_launch_config_and_resource_file(built):
    share = built["prefix"] / "share"
    for f in _data_files():
        if f.startswith("resource/"):
            assert (share / "ament_index" / "resource_index" / "packages" / "robo_rl_ros").is_file()
        else:
            assert (share / "robo_rl_ros" / f).read_bytes() == (PKG / f).read_bytes(), f
    names_in_wheel = zipfile.ZipFile(built["wheel"]).namelist()
    for module in MODULES:
        assert f"robo_rl_ros/{module.name}" in names_in_wheel
    entry_points = zipfile.ZipFile(built["wheel"]).read(
        next(n for n in names_in_wheel if n.endswith("entry_points.txt"))).decode()
    assert "policy_node = robo_rl_ros.policy_node:main" in entry_points
    assert "sim_robot_node = robo_rl_ros.sim_robot_node:main" in entry_points


def test_sdist_carries_every_file_the_install_needs(built):
    with tarfile.open(built["sdist"]) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    needed = _data_files() + ["setup.py", "setup.cfg"] + [p.relative_to(PKG).as_posix() for p in MODULES + TESTS]
    missing = sorted(set(needed) - members)
    assert not missing, f"sdist lacks {missing}"


def test_launch_testing_test_skips_here_with_its_reason():
    if importlib.util.find_spec("rclpy") is not None:
        pytest.skip("rclpy is installed: run the launch test with `colcon test` instead")
    out = subprocess.run([sys.executable, "-m", "pytest", str(PKG / "test"), "-q", "-rs", "-p", "no:cacheprovider"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 5, out.stdout + out.stderr  # pytest's "no test ran": the module skipped itself
    assert f"{len(TEST_MODULES)} skipped" in out.stdout and "needs ROS 2 (rclpy): run with `colcon test`" in out.stdout


def test_colcon_style_install_gives_the_nodes_a_venv_friendly_shebang(tmp_path):
    """colcon builds an ament_python package with `setup.py install --single-version-externally-managed`; the
    nodes' shebang must then be `/usr/bin/env python3` (setup.cfg [build_scripts]), not the building python."""
    src = tmp_path / "robo_rl_ros"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    subprocess.run([sys.executable, "setup.py", "-q", "install", "--prefix", str(tmp_path / "install"),
                    "--single-version-externally-managed", "--record", str(tmp_path / "record.txt")],
                   cwd=src, check=True, capture_output=True, timeout=120)
    for script in ("policy_node", "sim_robot_node", "demo_recorder_node"):
        first = (tmp_path / "install" / "lib" / "robo_rl_ros" / script).read_text().splitlines()[0]
        assert first == "#!/usr/bin/env python3", (script, first)
