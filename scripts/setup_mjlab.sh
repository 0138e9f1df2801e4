#!/usr/bin/env bash
# Set up mjlab beside robo_rl in a second virtual environment, ./.venv-mjlab (or $ROBO_RL_MJLAB_VENV), with the
# pinned versions of constraints-mjlab.txt. Safe to run again (a complete venv is left as it is).
#   - mjlab pins mujoco 3.11, mujoco-warp 3.11 and rsl-rl-lib 5.4.2, so it cannot share .venv (mujoco 4);
#   - the CPU build of torch goes in first, and the constraints keep it (nothing pulls a CUDA build);
#   - robo_rl goes in editable, with the train extra, plus pytest for the adapter tests.
# Then: .venv-mjlab/bin/robo-rl train --task mjlab:Mjlab-Velocity-Flat-Unitree-Go1
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${ROBO_RL_MJLAB_VENV:-.venv-mjlab}
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if [ -f "$VENV/.complete" ] && [ "$VENV/.complete" -nt constraints-mjlab.txt ] && [ "$VENV/.complete" -nt pyproject.toml ]; then
  echo "mjlab is set up in $VENV"
  exit 0
fi
log=$VENV/setup.log
: >"$log"
pip_install() {  # quiet unless it fails; the full output stays in $log
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints-mjlab.txt "$@" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup failed: pip install $* (full log: $log)" >&2
    exit 1
  fi
}
pip_install torch==2.13.0
pip_install mjlab -e ".[train]" pytest hypothesis
touch "$VENV/.complete"
echo "mjlab is set up in $VENV ($("$VENV/bin/python" -c 'import importlib.metadata as m; print("mjlab", m.version("mjlab"), "mujoco", m.version("mujoco"), "torch", m.version("torch"))'))"
