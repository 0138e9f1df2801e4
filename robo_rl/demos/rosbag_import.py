"""A rosbag2 bag (MCAP or sqlite3) -> a new LeRobot v3.0 dataset, through a mapping (`rosbag_mapping`). numpy, rosbags,
OpenCV.

Resampling: every stream is resampled onto the frame grid `start + k / fps` (`rosbag_format.frame_offset_ns`) by
holding its last value (a frame at time t takes the newest message with bag timestamp <= t); frames before
every stream has had a first message are skipped (values are held across episode boundaries). Episodes come
from the events topic ("start ..." to the matching "end ...", both frame times included; a start without an
end runs to the next start or the bag's last mapped message), else the whole bag is one episode from the
first mapped message to the last. Every mapped message is read into memory (images stay compressed until a
frame uses them).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.demos.dataset_metadata import camera
from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.demos.errors import DatasetError
from robo_rl.demos.rosbag_format import (
    COMPRESSED_IMAGE,
    frame_offset_ns,
    label_names,
    load_cv2,
    load_rosbags,
    parse_event,
)
from robo_rl.demos.rosbag_mapping import FeatureSource, events_topic, load_mapping, mapping_fps, parse_sources
from robo_rl.deploy import ros_interface as ri
from robo_rl.deploy import ros_messages as rm

Segment = tuple[int, int, str]
"""One episode of the bag: (start ns, end ns inclusive, task)."""
Events = list[tuple[int, str]]
"""Episode events: (bag time ns, text) each, in bag time order."""


# ---------------------------------------------------------------------------------------------- values
def _reorder(values: np.ndarray, have: Sequence[str], want: Sequence[str], what: str, cache: dict) -> np.ndarray:
    """`values` (one per name in `have`) in the order of `want`; DatasetError naming a missing name."""
    key = tuple(have)
    idx = cache.get(key)
    if idx is None:
        pos = {n: i for i, n in enumerate(have)}
        missing = [n for n in want if n not in pos]
        if missing:
            raise DatasetError(f"{what}: joint(s) {', '.join(missing)} not in its names ({', '.join(have)})")
        idx = cache[key] = np.array([pos[n] for n in want], dtype=np.int64)
    return values[idx]


def _numeric(src: FeatureSource, msg: Any, t_ns: int, cache: dict) -> np.ndarray:
    """One message's values as the feature's flat float64 vector (in the feature's name order)."""
    what = f"{src.topic} at {t_ns * 1e-9:.3f} s"
    if src.msgtype == ri.JOINT_STATE:
        names = [str(n) for n in msg.name]
        values = np.asarray(getattr(msg, src.field), dtype=np.float64)
        if values.shape != (len(names),):
            raise DatasetError(f"{what}: {values.size} {src.field} values for {len(names)} joint names")
        return _reorder(values, names, src.names, what, cache)
    if src.msgtype == ri.JOINT_TRAJECTORY:
        names = [str(n) for n in msg.joint_names]
        if not msg.points:
            raise DatasetError(f"{what}: a JointTrajectory without points")
        values = np.asarray(getattr(msg.points[0], src.field), dtype=np.float64)
        if values.shape != (len(names),):
            raise DatasetError(f"{what}: {values.size} {src.field} for {len(names)} joint names")
        return _reorder(values, names, src.names, what, cache)
    try:
        labels, data = rm.read_multi_array(msg)
    except ValueError as exc:
        raise DatasetError(f"{what}: {exc}") from None
    if src.field is not None or (data.ndim == 2 and labels[:1] == ("command",)):
        if data.ndim != 2 or data.shape[0] != len(ri.PD_TARGET_ROWS):
            raise DatasetError(f"{what}: field {src.field} needs a ({len(ri.PD_TARGET_ROWS)}, J) pd_targets array, "
                               f"got shape {data.shape}")
        data = data[ri.PD_TARGET_ROWS.index(src.field or "q")]
        labels = labels[1:]
    flat = data.reshape(-1)
    have = label_names(labels, flat.size)
    if src.names is None:
        if have is not None and src.joints and set(have) & set(src.joints):
            src.names = list(src.joints)  # a command array naming the joints: into the dataset's joint order
        else:
            if src.label_names is None:
                src.label_names = have
            return flat
    if have is not None:
        return _reorder(flat, have, src.names, what, cache)
    if flat.size != len(src.names):
        raise DatasetError(f"{what}: {flat.size} values for the {len(src.names)} names of {src.key}")
    return flat


def decode_image(cv2: Any, src: FeatureSource, msg: Any, t_ns: int) -> np.ndarray:
    what = f"{src.topic} at {t_ns * 1e-9:.3f} s"
    if src.msgtype == COMPRESSED_IMAGE:
        bgr = cv2.imdecode(np.frombuffer(bytes(np.asarray(msg.data, np.uint8)), np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            raise DatasetError(f"{what}: the image (format {msg.format!r}) could not be decoded")
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    else:
        channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}.get(str(msg.encoding))
        if channels is None:
            raise DatasetError(f"{what}: image encoding {msg.encoding!r} is not one of rgb8, bgr8, rgba8, bgra8, mono8")
        h, w, step = int(msg.height), int(msg.width), int(msg.step)
        raw = np.asarray(msg.data, np.uint8)
        if raw.size < h * step or step < w * channels:
            raise DatasetError(f"{what}: {raw.size} bytes for a {w}x{h} {msg.encoding} image (step {step})")
        img = raw[: h * step].reshape(h, step)[:, : w * channels].reshape(h, w, channels)
        conv = {"rgb8": None, "bgr8": cv2.COLOR_BGR2RGB, "rgba8": cv2.COLOR_RGBA2RGB, "bgra8": cv2.COLOR_BGRA2RGB,
                "mono8": cv2.COLOR_GRAY2RGB}[str(msg.encoding)]
        rgb = img if conv is None else cv2.cvtColor(np.ascontiguousarray(img), conv)
    if rgb.shape[:2] != (src.height, src.width):
        rgb = cv2.resize(rgb, (src.width, src.height), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(rgb, dtype=np.uint8)


# ---------------------------------------------------------------------------------------------- episodes
def episodes_from_events(events: Events, topic: str, last_ns: int) -> list[Segment]:
    """(start ns, end ns inclusive, task) of each episode the events (bag time ns, text) on `topic` describe."""
    out: list[Segment] = []
    open_: tuple[int, str] | None = None
    for t_ns, text in events:
        event = parse_event(text)
        if event is None:
            raise DatasetError(f"{topic} at {t_ns * 1e-9:.3f} s: event {text.strip()[:60]!r} is not "
                               f"'start <index> <task>' or 'end <index>'")
        if event[0] == "start":
            if open_ is not None:
                out.append((open_[0], t_ns - 1, open_[1]))
            open_ = (t_ns, event[1])
        else:
            if open_ is None:
                raise DatasetError(f"{topic} at {t_ns * 1e-9:.3f} s: 'end' without a 'start' before it")
            out.append((open_[0], t_ns, open_[1]))
            open_ = None
    if open_ is not None:
        out.append((open_[0], max(open_[0], last_ns), open_[1]))
    return out


def frame_grid(start_ns: int, end_ns: int, fps: float) -> np.ndarray:
    """(F,) int64 bag times of the frames of an episode from `start_ns` to `end_ns` (inclusive) at `fps`."""
    count = int(math.floor((end_ns - start_ns) * 1e-9 * fps + 1e-6)) + 1 if end_ns >= start_ns else 0
    grid = start_ns + frame_offset_ns(np.arange(count), fps)  # (F,)
    return grid[grid <= end_ns]


# ---------------------------------------------------------------------------------------------- import
def _read_bag(bag_path: Path, mapping: Mapping[str, Any]) -> tuple[list[FeatureSource], str | None, Events]:
    """(sources, events topic, events): the mapping's sources, each filled with its messages (sorted by bag time,
    numeric values decoded), and the episode events (bag time ns, text) of the mapping's events topic (None and
    no events when it names none)."""
    Reader, _, _, ts = load_rosbags()
    try:
        bag = Reader(bag_path)
        bag.open()
    except Exception as exc:  # rosbags' own errors (ReaderError, ...): one line
        raise DatasetError(f"{bag_path}: cannot be read as a rosbag2 bag ({type(exc).__name__}: {exc})") from None
    try:
        topics = {c.topic: c.msgtype for c in bag.connections}
        sources = parse_sources(mapping, topics)
        events = events_topic(mapping, topics)  # None: no events topic
        wanted = {s.topic for s in sources} | ({events} if events else set())
        raw: dict[str, list[tuple[int, Any]]] = {t: [] for t in wanted}
        for conn, t_ns, data in bag.messages(connections=[c for c in bag.connections if c.topic in wanted]):
            raw[conn.topic].append((int(t_ns), ts.deserialize_cdr(data, conn.msgtype)))
    finally:
        bag.close()
    for msgs in raw.values():
        msgs.sort(key=lambda m: m[0])
    for src in sources:
        _fill(src, raw[src.topic])
    return sources, events, [(t, str(m.data)) for t, m in raw[events]] if events else []


def _fill(src: FeatureSource, msgs: list[tuple[int, Any]]) -> None:
    """Set `src.stamps` (M,) and `src.values` ((M, D) float64, or the M image messages) from its messages."""
    if not msgs:
        raise DatasetError(f"mapping: feature {src.key}: topic {src.topic} has no messages in the bag")
    src.stamps = np.array([t for t, _ in msgs], dtype=np.int64)  # (M,)
    if src.is_image:
        src.values = [m for _, m in msgs]
        return
    cache: dict = {}
    vals = [_numeric(src, m, t, cache) for t, m in msgs]
    sizes = {v.size for v in vals}
    if len(sizes) != 1:
        raise DatasetError(f"{src.topic}: messages of {sorted(sizes)} values; feature {src.key} needs one size")
    src.values = np.stack(vals)  # (M, D)
    size = src.values.shape[1]
    if src.shape is None:
        src.shape = [size]
    elif math.prod(src.shape) != size:
        raise DatasetError(f"mapping: feature {src.key}: shape {src.shape} for {size} values on {src.topic}")
    if src.names is None and len(src.shape) == 1:
        src.names = src.label_names


def bag_to_dataset(bag_path: str | Path, out_root: str | Path, mapping: Mapping[str, Any] | str | Path, *,
                   fps: float | None = None) -> dict[str, Any]:
    """Import a rosbag2 bag into a new dataset at `out_root`; see the module docstring.

    Args:
        bag_path: the bag folder (metadata.yaml and its MCAP or sqlite3 files).
        out_root: a new (or empty) folder.
        mapping: topics -> features (a dict, or the path of a YAML file; see `rosbag_mapping`).
        fps: the dataset rate; default the mapping's `fps`.

    Returns:
        {"episodes": count, "frames": count, "skipped": frames skipped before every stream started,
        "empty": episodes with no complete frame (not written)}.

    Raises:
        DatasetError: one line naming the missing topic, joint, field or key, or a message that does not fit.
    """
    mapping = load_mapping(mapping)
    fps = mapping_fps(mapping, fps)
    bag_path = Path(bag_path)
    if not (bag_path / "metadata.yaml").is_file():
        raise DatasetError(f"{bag_path}: not a rosbag2 bag (no metadata.yaml)")
    out_root = Path(out_root)
    if out_root.exists() and any(out_root.iterdir()):
        raise DatasetError(f"{out_root}: exists and is not empty; choose a new folder")
    sources, event_topic, events = _read_bag(bag_path, mapping)
    first_ns = min(int(s.stamps[0]) for s in sources)
    last_ns = max(int(s.stamps[-1]) for s in sources)
    if event_topic is not None:
        segments = episodes_from_events(events, event_topic, last_ns)
    else:
        segments = [(first_ns, last_ns, "")]
    if mapping.get("task") is not None:
        segments = [(start, end, str(mapping["task"])) for start, end, _ in segments]
    features: dict[str, Any] = {}
    for src in sources:
        if src.is_image:
            features[src.key] = camera(src.height, src.width, fps)
        else:
            features[src.key] = {"dtype": src.dtype, "shape": list(src.shape), "names": src.names}
    cv2 = load_cv2() if any(s.is_image for s in sources) else None
    for src in sources:  # a camera whose images OpenCV cannot read fails here, before anything is written
        if src.is_image:
            decode_image(cv2, src, src.values[0], int(src.stamps[0]))
    existed = out_root.exists()  # and is empty (checked above)
    w = DatasetWriter(out_root, fps=fps, features=features, robot_type=str(mapping.get("robot_type") or ""))
    try:
        report = _write_episodes(w, sources, segments, fps, cv2)
    except BaseException:  # no partial dataset left behind
        w.discard_episode()
        try:
            w.close()
        except DatasetError:
            pass  # the worker's error, if any; the original exception is the one reported
        shutil.rmtree(out_root, ignore_errors=True)
        if existed:
            out_root.mkdir()
        raise
    w.close()
    return report


def _write_episodes(w: DatasetWriter, sources: list[FeatureSource], segments: list[Segment], fps: float,
                    cv2: Any) -> dict[str, Any]:
    """Add each segment's frames (the newest message of every source at each frame time) as an episode."""
    last_image: dict[str, tuple[int, np.ndarray]] = {}  # per camera: (message index, decoded image)
    frames = skipped = empty = written = 0
    for start_ns, end_ns, task in segments:
        grid = frame_grid(start_ns, end_ns, fps)  # (F,)
        idx = {s.key: np.searchsorted(s.stamps, grid, side="right") - 1 for s in sources}  # (F,) each
        ok = np.all(np.stack([idx[s.key] >= 0 for s in sources]), axis=0) if len(grid) else np.zeros(0, bool)
        skipped += int((~ok).sum())
        kept = np.flatnonzero(ok)
        if not len(kept):
            empty += 1
            continue
        for k in kept:
            frame: dict[str, Any] = {}
            for src in sources:
                j = int(idx[src.key][k])
                if src.is_image:
                    if src.key not in last_image or last_image[src.key][0] != j:
                        last_image[src.key] = (j, decode_image(cv2, src, src.values[j], int(src.stamps[j])))
                    frame[src.key] = last_image[src.key][1]
                else:
                    frame[src.key] = src.values[j].reshape(src.shape).astype(src.dtype)
            w.add_frame(frame, task=task)
        w.end_episode()
        frames += len(kept)
        written += 1
    return {"episodes": written, "frames": frames, "skipped": skipped, "empty": empty}
