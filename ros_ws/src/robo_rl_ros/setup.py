"""ament_python package: installs the nodes, launch files, config files and the ament index marker."""

from glob import glob

from setuptools import setup

PACKAGE = "robo_rl_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", sorted(glob("launch/*.launch.py"))),
        (f"share/{PACKAGE}/config", sorted(glob("config/*.yaml"))),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="robo_rl maintainers",
    maintainer_email="robo-rl@example.org",
    description="ROS 2 lifecycle policy node, sim-twin node and demonstration recorder for robo_rl policies",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            f"policy_node = {PACKAGE}.policy_node:main",
            f"sim_robot_node = {PACKAGE}.sim_robot_node:main",
            f"demo_recorder_node = {PACKAGE}.demo_recorder_node:main",
        ],
    },
)
