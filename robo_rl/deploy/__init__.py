"""The robot side: runs exported policies with numpy and onnxruntime only (never torch or mujoco).

One wiring path (`runtime.PolicyRuntime`, run live by `session`) over any transport of the open registry
`robot.TRANSPORTS`. Only `transports/sim.py` (the MuJoCo twin) imports mujoco, and only the `transports/dds/`
package imports cyclonedds, each only when that transport is chosen.
"""
