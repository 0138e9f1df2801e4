"""MuJoCo's OpenGL for processes without a display, chosen before `mujoco` is imported.

MuJoCo picks its OpenGL when it is first imported and aborts the process when it renders through glfw without a
display. The training side (`robo_rl.sim.mjmodel`) and the deploy side's twin (`robo_rl.deploy.transports.sim`)
both call `choose_headless_gl` first. Only an environment variable is set here: no mujoco import.
"""

from __future__ import annotations

import ctypes.util
import os


def choose_headless_gl() -> None:
    """Set MUJOCO_GL to egl (else osmesa) unless it is set already."""
    if "MUJOCO_GL" not in os.environ:
        os.environ["MUJOCO_GL"] = "egl" if ctypes.util.find_library("EGL") else "osmesa"
