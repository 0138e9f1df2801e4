"""The robot side: runs exported policies with numpy and onnxruntime only (never torch or mujoco).

Only `transports/sim.py` (the MuJoCo twin) imports mujoco, and only `transports/dds.py`,
`dds_types.py` and `unitree.py` import cyclonedds, each only when that transport is chosen.
"""
