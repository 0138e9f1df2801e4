"""`python -m robo_rl.cli` runs the `robo-rl` command."""

from robo_rl.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
