"""Torch modules: actor-critic MLPs and the observation normaliser."""
