"""Learning algorithms, one per file, each registering itself in `robo_rl.learn.algorithm_registry.ALGORITHMS`."""
