"""Torch modules: Gaussian actor-critic, squashed Gaussian actor and Q ensemble (SAC), observation normaliser."""
