"""robo_rl: a robotics RL stack for simulation and real hardware.

Importing the package is cheap: it pulls in neither torch nor mujoco, so the robot side can use
`robo_rl.deploy` with only numpy and onnxruntime installed.
"""

__version__ = "0.1.0"
