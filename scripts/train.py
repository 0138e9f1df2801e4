"""Thin wrapper: `python scripts/train.py ARGS` is `robo-rl train ARGS`."""

import sys

from robo_rl.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
