"""Thin wrapper: `python scripts/play.py ARGS` is `robo-rl play ARGS`."""

import sys

from robo_rl.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["play", *sys.argv[1:]]))
