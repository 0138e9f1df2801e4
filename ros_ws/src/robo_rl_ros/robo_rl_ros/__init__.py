"""ROS 2 shell of robo_rl's deploy core: every bit of logic lives in robo_rl.deploy (tested without ROS)."""
