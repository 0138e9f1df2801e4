"""The robot side: runs exported policies with numpy and onnxruntime only (never torch or mujoco).

Only `transports/sim.py` (the MuJoCo twin) imports mujoco, and only when that transport is chosen.
"""
