"""robo_rl: a robotics RL stack for simulation and real hardware.

Importing the package is cheap: it pulls in neither torch nor mujoco, so the robot side can use
`robo_rl.deploy` with only numpy and onnxruntime installed.
"""

import os

# torch's OpenMP workers spin-wait after each parallel op and then steal the cores that MuJoCo's
# physics threads need (measured: env/raw rollout 0.81 -> 0.90 on 2 cores). Sleeping workers cost
# nothing measurable in the PPO update. Takes effect only if torch is imported after robo_rl;
# an explicit OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
