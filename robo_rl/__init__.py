"""robo_rl: a robotics RL stack for simulation and real hardware.

Importing the package is cheap and has no side effects: it pulls in neither torch nor mujoco and
leaves the process environment alone, so the robot side (a ROS 2 node, a deploy process) can use
`robo_rl.deploy` with only numpy and onnxruntime installed. Process-wide defaults that training
needs are set by the training entry points (`robo_rl.sim.set_training_process_defaults`).
"""

__version__ = "0.1.0"
