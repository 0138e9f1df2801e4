"""Demonstrations: LeRobot v3.0 datasets, recording (`recorder`), replay and sim expert demos.

A dataset is split as LeRobot splits it: `dataset_metadata` (layout, features, meta/), `dataset_writer`,
`dataset_reader`, `dataset_stats` (compute_stats) and `dataset_recovery` (staging, commit, repair after a
kill). Only numpy, pyarrow and PyAV are needed to write and read datasets (no `lerobot` package): the robot
side can record without torch. `robo_rl.demos.torch_dataset` adds a torch `Dataset` for training.
"""
