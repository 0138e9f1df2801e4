"""The `robo-rl` command."""
