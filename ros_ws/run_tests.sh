#!/usr/bin/env bash
# Build robo_rl_ros with colcon and run its launch_testing tests (ros_ws/src/robo_rl_ros/test): sim_twin.launch.py
# brought up, configure / activate, ~/start, commands flow, an e-stop and a lost e-stop heartbeat stop them, SIGINT
# sends the last damping command; record_demos.launch.py records a dataset.
#
# Needs ROS 2 Humble or Jazzy (/opt/ros/$ROS_DISTRO) and robo_rl importable by the same python3 as rclpy: a venv made
# with --system-site-packages ($VENV, activated here if set; docs/deploy.md, "ROS 2: install"). The Dockerfile next
# to this script sets all of that up. Exit status: colcon test-result's (0 when every test passed).
set -eo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
distro="${ROS_DISTRO:-}"
if [[ -z "$distro" ]]; then
    for candidate in jazzy humble; do
        [[ -f "/opt/ros/$candidate/setup.bash" ]] && distro="$candidate" && break
    done
fi
if [[ -z "$distro" || ! -f "/opt/ros/$distro/setup.bash" ]]; then
    echo "run_tests.sh: no ROS 2 in /opt/ros (Humble or Jazzy); or use ros_ws/Dockerfile" >&2
    exit 2
fi
# shellcheck disable=SC1090
source "/opt/ros/$distro/setup.bash"
if [[ -n "${VENV:-}" && -f "$VENV/bin/activate" ]]; then
    # shellcheck disable=SC1091
    source "$VENV/bin/activate"
fi
if ! python3 -c "import rclpy, robo_rl" 2>/dev/null; then
    echo "run_tests.sh: rclpy and robo_rl do not import in one python3 ($(command -v python3)): docs/deploy.md" >&2
    exit 2
fi

# Keep the tests' DDS traffic on this machine and off other runs' domains.
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$((RANDOM % 100 + 1))}"
if [[ "$distro" == humble ]]; then
    export ROS_LOCALHOST_ONLY=1
else
    export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST  # Jazzy's replacement of ROS_LOCALHOST_ONLY
fi

cd "$here"
python3 -m colcon build --packages-select robo_rl_ros --event-handlers console_direct+
# shellcheck disable=SC1091
source install/setup.bash
python3 -m colcon test --packages-select robo_rl_ros --event-handlers console_direct+ --return-code-on-test-failure \
    || true  # the summary below says what failed and sets the exit status
python3 -m colcon test-result --verbose --test-result-base build/robo_rl_ros
