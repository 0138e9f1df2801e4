"""Training: algorithms, networks, runner, storage, checkpoints, logging, evaluation."""
