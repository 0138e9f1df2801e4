#!/usr/bin/env bash
# Set up mjlab beside robo_rl in a second virtual environment, ./.venv-mjlab (or $ROBO_RL_MJLAB_VENV), with the
# pinned versions of constraints-mjlab.txt. Safe to run again: a complete venv built from the same constraints
# is left as it is (its .complete holds their sha256); otherwise a new one is built and replaces it.
#   - mjlab pins mujoco 3.11, mujoco-warp 3.11 and rsl-rl-lib 5.4.2, so it cannot share .venv (mujoco 4);
#   - the CPU build of torch goes in first, and the constraints keep it (nothing pulls a CUDA build);
#   - robo_rl goes in editable, with the train extra, plus pytest for the adapter tests;
#   - it is built in a temporary folder beside $VENV (*.tmp) and renamed when complete, so a build that is
#     killed half-way leaves no venv that a later run would take for a complete one.
# Then: .venv-mjlab/bin/robo-rl train --task mjlab:Mjlab-Velocity-Flat-Unitree-Go1
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=$(realpath -m "${ROBO_RL_MJLAB_VENV:-.venv-mjlab}")
PY=${PYTHON:-python3}
STAMP=$(sha256sum constraints-mjlab.txt | cut -d' ' -f1)
complete() { [ "$(cat "$VENV/.complete" 2>/dev/null)" = "$STAMP" ]; }
if complete; then
  echo "mjlab is set up in $VENV"
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
# builds killed more than a day ago left these behind
find "$(dirname "$VENV")" -maxdepth 1 -name "$(basename "$VENV").*.tmp" -mmin +1440 -exec rm -rf {} +
BUILD=$(mktemp -d "$VENV.XXXXXX" --suffix=.tmp)
chmod 755 "$BUILD"
log=$(mktemp --tmpdir setup_mjlab.XXXXXX.log)
trap 'rm -rf "$BUILD"' EXIT
"$PY" -m venv "$BUILD"
pip_install() {  # quiet unless it fails; the full output stays in $log. --no-compile: byte-compiling every module
  # (torch's included) is most of the build's CPU time; Python compiles the modules it imports when it imports them
  if ! "$BUILD/bin/python" -m pip install -q --no-compile --disable-pip-version-check -c constraints-mjlab.txt "$@" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup failed: pip install $* (full log: $log)" >&2
    exit 1
  fi
}
pip_install torch==2.13.0
pip_install mjlab -e ".[train]" pytest hypothesis
# the scripts in bin/ name the folder they were installed in: point them at the one the venv is renamed to
grep -lIs "^#!$BUILD/" "$BUILD"/bin/* | xargs -r sed -i "1s|^#!$BUILD/|#!$VENV/|"
echo "$STAMP" >"$BUILD/.complete"
if complete; then  # another run finished the same venv first
  echo "mjlab is set up in $VENV"
  exit 0
fi
rm -rf "$VENV"  # a venv of other constraints, or an old half-built one
mv -T "$BUILD" "$VENV"
trap - EXIT
rm -f "$log"
echo "mjlab is set up in $VENV ($("$VENV/bin/python" -c 'import importlib.metadata as m; print("mjlab", m.version("mjlab"), "mujoco", m.version("mujoco"), "torch", m.version("torch"))'))"
