"""Demonstrations: LeRobot v3.0 datasets (`dataset`), recording (`recorder`) and sim expert demos.

Only numpy, pyarrow and PyAV are needed to write and read datasets (no `lerobot` package): the robot
side can record without torch. `robo_rl.demos.torch_dataset` adds a torch `Dataset` for training.
"""
