"""Learning algorithms, one per file, each registering itself in `robo_rl.learn.algorithms.registry.ALGORITHMS`."""
