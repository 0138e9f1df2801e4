"""Batched physics backends (mujoco_cpu is the embedded default)."""
