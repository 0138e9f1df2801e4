"""Write a PNG grid of what the `scene` camera of arm-pick-place-vision sees in a few worlds, at policy size.

The worlds are the benchmark's mid-episode worlds (`bench_render.mid_episode_backend`: 1 s of the
scripted expert), each rendered by `backend.render_cameras` exactly as a policy would get it, then
enlarged by whole pixels (no smoothing) so the picture can be read.

    python scripts/camera_picture.py docs/img/scene_camera.png
    python scripts/camera_picture.py /tmp/view.png --worlds 4 --size 96 --scale 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_render import CAMERA, mid_episode_backend  # scripts/, next to this file

from robo_rl.learn.policy_video import image_grid


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="PNG file to write")
    p.add_argument("--worlds", type=int, default=8, help="worlds shown, 4 per row")
    p.add_argument("--size", type=int, default=64, help="square camera image size in pixels")
    p.add_argument("--scale", type=int, default=3, help="each camera pixel becomes scale x scale pixels")
    args = p.parse_args()
    for name in ("worlds", "size", "scale"):
        if getattr(args, name) < 1:
            sys.exit(f"camera_picture: --{name} = {getattr(args, name)}: must be >= 1")

    from PIL import Image

    b = mid_episode_backend(args.worlds)
    images = b.render_cameras(CAMERA, args.size, args.size)  # (K, 3, H, W)
    b.close()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image_grid(images, columns=min(4, args.worlds), scale=args.scale)).save(out)
    print(f"wrote {out}: {args.worlds} worlds, {args.size}x{args.size} camera {CAMERA!r}")


if __name__ == "__main__":
    main()
