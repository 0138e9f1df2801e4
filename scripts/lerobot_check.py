"""Load a dataset with LeRobot's own loader (`lerobot-dataset`, offline) and print what it read, as JSON.

Run it with the LeRobot virtualenv's Python (not the project's: LeRobot needs its own torch, torchvision,
torchcodec and an older PyAV):

    .venv-lerobot/bin/python scripts/lerobot_check.py DATASET [--indices 0,45,119 | --indices all] [--dump out.npz]

stdout: {"fps", "num_frames", "num_episodes", "features", "video_backend", "versions", "frames": [{"index",
"episode_index", "frame_index", "timestamp", "task", <numeric feature>: value, ..., "images": {<camera>:
{"shape": [C, H, W], "mean": mean in [0, 1]}}}], "video_error"}. --dump writes the decoded images of those frames
as uint8 (N, H, W, 3) arrays (one per camera, plus "index") to an .npz file.

Exit status: 0 all loaded; 2 the dataset did not load (one line on stderr says why, nothing on stdout); 3 its
numeric columns loaded through LeRobot but its videos did not decode (the JSON is printed, numerics read from
LeRobot's `hf_dataset` without images, and "video_error" plus a line on stderr say why).

The same file knows how to build that virtualenv (`python3 scripts/lerobot_check.py --ensure-venv PATH`, or
`ensure_venv` from Python): the install steps and their pinned versions are `install_steps` below, the one
place they are written.
"""

from __future__ import annotations

import argparse
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

# ---------------------------------------------------------------------------------------------- the venv
TORCH = ["torch==2.14.1", "torchvision==0.29.1"]
"""On x86_64 with Python 3.11 pip takes both from this machine's disk (a CUDA build, ~5.5 GB; runs on the CPU).
PyPI's torchvision does not load beside the local CPU torch 2.13.0, so that one is not an option."""
LEROBOT = [
    "lerobot-dataset==0.4.4", "torchcodec==0.17.0", "av==15.1.0", "datasets==4.1.1", "pyarrow==26.0.1",
    "numpy==2.2.6", "pandas==3.1.1", "huggingface-hub==0.35.3", "fsspec==2025.9.0",
]
"""torchcodec decodes the videos: torchvision 0.29 has no `torchvision.io.VideoReader`, so LeRobot's "pyav"
backend fails there (AttributeError) and torchcodec is the only backend that works."""
FFMPEG_DEBS = ["libavcodec59", "libavformat59", "libavutil57", "libswscale6", "libswresample4", "libavfilter8",
               "libavdevice59"]
"""torchcodec's wheel does not ship FFmpeg: it dlopens the system's libavutil.so.{56..60} (Debian 12: FFmpeg 5.1)."""


def install_steps(venv: Path) -> list[list[str]]:
    """The commands that build the LeRobot venv at `venv`, in order (apt only as root when FFmpeg is missing)."""
    # --no-compile: byte-compiling every module (torch's included) is most of the build's CPU time; Python compiles
    # the modules it imports when it imports them
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check"]
    steps = []
    if not ffmpeg_present() and shutil.which("apt-get") and os.geteuid() == 0:
        steps += [["apt-get", "update", "-qq"],
                  ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *FFMPEG_DEBS]]
    steps += [[sys.executable, "-m", "venv", str(venv)], [*pip, *TORCH], [*pip, *LEROBOT, *TORCH]]
    return steps


def ffmpeg_present() -> bool:
    return ctypes.util.find_library("avutil") is not None


def venv_pins() -> bytes:
    """The pinned versions the venv is built from (what a cache of built venvs is keyed by)."""
    return "\n".join([*TORCH, *LEROBOT]).encode()


def venv_ready(venv: Path) -> bool:
    return (venv / ".lerobot-ready").is_file() and (venv / "bin" / "python").is_file()


def point_scripts_at(build: Path, venv: Path) -> None:
    """Rewrite the `#!build/bin/...` lines of build's bin/ scripts to name `venv`, the folder it is renamed to."""
    for script in (build / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if data.startswith(f"#!{build}/".encode()):
            script.write_bytes(data.replace(f"#!{build}/".encode(), f"#!{venv}/".encode(), 1))


def ensure_venv(venv: str | Path, log=None, steps=install_steps) -> tuple[Path | None, str]:
    """(venv's python, "") once the venv exists (built now if missing), else (None, the reason it could not be).

    `steps(folder)` gives the commands that build a venv in `folder` (this file's `install_steps`; another venv's,
    e.g. scripts/lerobot_vla_env.py's for LeRobot's policies).

    A venv counts as built when its `.lerobot-ready` marker exists. It is built in a temporary folder beside `venv`
    (`*.tmp`) and renamed to `venv` when complete, so a build killed half-way is never taken for a venv; a `venv`
    without the marker (left by an older build) is removed first.
    """
    venv = Path(venv).absolute()
    if venv_ready(venv):
        return venv / "bin" / "python", ""
    if venv.exists():
        if not (venv / "pyvenv.cfg").is_file():
            return None, f"{venv} exists and is not a virtualenv; not touching it"
        shutil.rmtree(venv)  # a build that stopped half-way
    venv.parent.mkdir(parents=True, exist_ok=True)
    for stale in venv.parent.glob(f"{venv.name}.*.tmp"):  # builds killed more than a day ago left these behind
        if time.time() - stale.stat().st_mtime > 86400:
            shutil.rmtree(stale, ignore_errors=True)
    build = Path(tempfile.mkdtemp(prefix=f"{venv.name}.", suffix=".tmp", dir=venv.parent))
    build.chmod(0o755)
    t = time.perf_counter()
    try:
        for cmd in steps(build):
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no output)"]
                if cmd[0] == "apt-get":  # without FFmpeg only the videos fail; go on for the numerics
                    print(f"lerobot venv: {' '.join(cmd)} failed: {tail[0]}", file=log or sys.stderr)
                    continue
                return None, f"building {venv} failed at `{' '.join(cmd)}`: {tail[0]}"
        point_scripts_at(build, venv)
        (build / ".lerobot-ready").write_text(f"built in {time.perf_counter() - t:.0f} s\n")
        try:
            build.rename(venv)
        except OSError:  # another process finished the same venv first
            if not venv_ready(venv):
                raise
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return venv / "bin" / "python", ""


# ---------------------------------------------------------------------------------------------- the check
def _value(x):
    """A tensor / number from LeRobot's item as plain JSON (scalars stay scalars)."""
    if hasattr(x, "tolist"):
        return x.tolist()
    return x


def _fail(reason: str, code: int = 2) -> None:
    print(" ".join(reason.split())[:500], file=sys.stderr)
    sys.exit(code)


def _video_files(ds, video_keys: list[str]) -> list[dict]:
    """Each video file the episodes point at: LeRobot's own duration of it (what `aggregate_datasets` offsets the
    next file's timestamps by) beside the end of the last episode in it."""
    from ledataset.datasets.video_utils import get_video_duration_in_s

    files: dict[tuple[str, str], float] = {}
    for ep in range(ds.meta.total_episodes):
        for key in video_keys:
            rel = str(ds.meta.get_video_file_path(ep, key))
            end = float(ds.meta.episodes[ep][f"videos/{key}/to_timestamp"])
            files[(key, rel)] = max(files.get((key, rel), 0.0), end)
    out = []
    for (key, rel), end in files.items():
        try:
            duration = get_video_duration_in_s(Path(ds.root) / rel)
        except Exception as exc:  # noqa: BLE001
            duration = f"{type(exc).__name__}: {exc}"
        out.append({"key": key, "path": rel, "duration_s": duration, "last_to_timestamp": end})
    return out


def check(path: str, indices: str, dump: str | None, backend: str | None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a missing file must fail here, not be fetched from a hub
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import logging
    logging.disable(logging.WARNING)  # LeRobot warns on stderr when it falls back from torchcodec
    try:
        import numpy as np
        from ledataset.datasets.lerobot_dataset import LeRobotDataset
    except Exception as exc:  # noqa: BLE001 - any import failure is the one-line reason
        _fail(f"cannot import LeRobot's loader: {type(exc).__name__}: {exc}")
    if not Path(path, "meta", "info.json").is_file():  # LeRobot would mkdir it and ask the hub
        _fail(f"{path}: no meta/info.json")
    try:
        ds = LeRobotDataset("robo_rl/compat-check", root=path, video_backend=backend)
    except Exception as exc:  # noqa: BLE001
        _fail(f"LeRobotDataset({path!r}) failed: {type(exc).__name__}: {exc}")

    n = ds.num_frames
    picked = list(range(n)) if indices == "all" else [int(i) for i in indices.split(",") if i.strip()]
    if any(not 0 <= i < n for i in picked):
        _fail(f"frame index out of range: the dataset has {n} frames")
    video_keys = list(ds.meta.video_keys)
    versions = {}
    for pkg in ("lerobot-dataset", "torch", "torchvision", "torchcodec", "av", "datasets"):
        try:
            versions[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            versions[pkg] = None
    out = {"fps": ds.fps, "num_frames": n, "num_episodes": ds.num_episodes, "features": list(ds.features),
           "video_keys": video_keys, "video_backend": ds.video_backend, "versions": versions, "frames": [],
           "video_error": None}
    images: dict[str, list] = {k: [] for k in video_keys}

    def record(item, with_images: bool) -> None:
        frame = {"task": item.get("task")}
        for key, v in item.items():
            if key in video_keys or key == "task":
                continue
            frame[key] = _value(v)
        if with_images:
            frame["images"] = {}
            for key in video_keys:
                img = item[key]  # (C, H, W) float32 in [0, 1]
                frame["images"][key] = {"shape": list(img.shape), "mean": float(img.mean())}
                images[key].append((img.permute(1, 2, 0).numpy() * 255.0).round().clip(0, 255).astype(np.uint8))
        out["frames"].append(frame)

    try:
        for i in picked:
            record(ds[i], True)
    except Exception as exc:  # noqa: BLE001 - numerics alone, from LeRobot's own table
        if not video_keys:
            _fail(f"LeRobotDataset[{i}] failed: {type(exc).__name__}: {exc}")
        out["video_error"] = f"decoding videos with backend {ds.video_backend!r} failed at frame {i}: " \
                             f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        out["frames"], images = [], {}
        try:
            for i in picked:
                item = dict(ds.hf_dataset[i])
                item["task"] = ds.meta.tasks.iloc[int(item["task_index"])].name
                record(item, False)
        except Exception as exc2:  # noqa: BLE001
            _fail(f"{out['video_error']}; and the numeric columns failed too: {type(exc2).__name__}: {exc2}")
    out["video_files"] = _video_files(ds, video_keys)
    if dump and images:
        np.savez_compressed(dump, index=np.array(picked), **{k: np.stack(v) for k, v in images.items()})
    print(json.dumps(out))
    if out["video_error"]:
        print(out["video_error"], file=sys.stderr)
        return 3
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", nargs="?", help="dataset folder (meta/info.json inside)")
    p.add_argument("--indices", default="0,1,-1", help="comma-separated frame indices, -1 for the last, or 'all'")
    p.add_argument("--dump", help="write the decoded images of those frames to this .npz")
    p.add_argument("--backend", help="LeRobot video backend (torchcodec, pyav); default: LeRobot's own choice")
    p.add_argument("--ensure-venv", metavar="VENV", help="build the LeRobot venv at VENV if missing, then exit")
    a = p.parse_args()
    if a.ensure_venv:
        python, reason = ensure_venv(a.ensure_venv)
        if python is None:
            _fail(reason)
        print(python)
        return
    if not a.dataset:
        p.error("a dataset folder is needed")
    indices = a.indices
    if indices != "all" and "-1" in indices.split(","):
        info = Path(a.dataset, "meta", "info.json")
        last = json.loads(info.read_text()).get("total_frames", 1) - 1 if info.is_file() else 0
        indices = ",".join(str(last) if s.strip() == "-1" else s for s in indices.split(","))
    sys.exit(check(a.dataset, indices, a.dump, a.backend))


if __name__ == "__main__":
    main()
