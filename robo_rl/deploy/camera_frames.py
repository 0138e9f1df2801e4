"""Camera frames on the wire: sensor_msgs/CompressedImage to and from (H, W, 3) uint8 RGB.

A robot's camera driver (or image_transport) publishes JPEG; the twin publishes PNG, which is lossless, so a frame
read over DDS equals the frame the twin drew. A decoded frame is fitted to the size its reader asks for (a policy's
image input, a reward classifier's) the way `success_classifier.preprocess_frame` fits one: centre crop to the aspect
ratio, then cv2.INTER_AREA. `compressed_image_message` / `read_compressed_image` build and read the message by its ROS
field names in any binding (the DDS struct, rosbags', rclpy's). OpenCV (opencv-python-headless) is imported when the
first frame is encoded or decoded: a robot without cameras needs none. `CameraFrames` keeps the newest frame of each
camera a robot's state carries, for every transport that brings them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from robo_rl.deploy.robot import RobotState
from robo_rl.deploy.ros_messages import MessageTypes, make_header, stamp_seconds

FORMATS = ("png", "jpeg")


def load_cv2() -> Any:
    """The cv2 module; ValueError (one line) without opencv."""
    try:
        import cv2
    except ImportError:
        raise ValueError("camera frames need OpenCV: pip install opencv-python-headless") from None
    return cv2


def centre_crop(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """The largest centred window of `frame` (H, W, C) with the aspect ratio width / height (a view)."""
    fh, fw = frame.shape[:2]
    if fw * height > fh * width:  # too wide: trim columns
        keep = max(1, round(fh * width / height))
        left = (fw - keep) // 2
        return frame[:, left:left + keep]
    keep = max(1, round(fw * height / width))
    top = (fh - keep) // 2
    return frame[top:top + keep]


def fit_frame(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """`rgb` (H, W, 3) uint8 as (height, width, 3): itself at that size, else centre-cropped and resized."""
    if rgb.shape[:2] == (height, width):
        return rgb
    cv2 = load_cv2()
    return cv2.resize(np.ascontiguousarray(centre_crop(rgb, height, width)), (width, height),
                      interpolation=cv2.INTER_AREA)


def encode_frame(rgb: np.ndarray, image_format: str = "png", quality: int = 90) -> bytes:
    """An RGB frame (H, W, 3) uint8 as PNG or JPEG (at `quality`) bytes; ValueError (one line) otherwise."""
    if image_format not in FORMATS:
        raise ValueError(f"image format {image_format!r}: allowed values are {', '.join(FORMATS)}")
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"camera frames are (H, W, 3) uint8 RGB, got {rgb.dtype} of shape {tuple(rgb.shape)}")
    cv2 = load_cv2()
    bgr = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR)
    params = [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)] if image_format == "jpeg" else []
    ok, buf = cv2.imencode(".jpg" if image_format == "jpeg" else ".png", bgr, params)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {rgb.shape} frame as {image_format}")
    return buf.tobytes()


def decode_frame(data: bytes, size: tuple[int, int] | None = None) -> np.ndarray:
    """(H, W, 3) uint8 RGB of PNG / JPEG bytes, fitted to `size` (height, width) when given; ValueError (one line)
    for bytes OpenCV cannot decode."""
    cv2 = load_cv2()
    bgr = cv2.imdecode(np.frombuffer(bytes(data), np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError(f"a camera frame of {len(data)} bytes could not be decoded (not PNG or JPEG?)")
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return rgb if size is None else fit_frame(rgb, *size)


def compressed_image_message(types: MessageTypes, cls: Any, rgb: np.ndarray, stamp: float, frame_id: str = "",
                             image_format: str = "png", data: Any = bytes) -> Any:
    """sensor_msgs/CompressedImage of `rgb` in the binding of `types` (`cls`: its CompressedImage class; `data`: what
    its uint8[] field holds, given the encoded bytes)."""
    return cls(header=make_header(types, stamp, frame_id), format=image_format,
               data=data(encode_frame(rgb, image_format)))


def read_compressed_image(msg: Any, size: tuple[int, int] | None = None) -> tuple[np.ndarray, float]:
    """(frame (H, W, 3) uint8 RGB, fitted to `size` when given; header stamp in s) of a CompressedImage."""
    raw = msg.data if isinstance(msg.data, (bytes, bytearray)) else bytes(np.asarray(msg.data, np.uint8))
    return decode_frame(raw, size), stamp_seconds(msg.header.stamp)


class CameraFrames:
    """The newest frame of each camera a robot's state carries, as its CompressedImage topics deliver them (any
    transport's listener threads: DdsRobot's readers, RosRobot's subscriptions).

    Args:
        cameras: (name, height, width) of each camera: frames are fitted to that size as they arrive.
        topic: the topic of a camera name (the hardware file's `transport.dds.camera_topics`, else
            `<camera>/image/compressed`).
    """

    def __init__(self, cameras: tuple[tuple[str, int, int], ...], topic: Callable[[str], str]):
        self.sizes = {name: (int(h), int(w)) for name, h, w in cameras}
        self.topics = {name: topic(name) for name in self.sizes}
        self._frames: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        if self.sizes:
            load_cv2()  # one line now when OpenCV is missing, not a count of failed frames later

    def on_message(self, camera: str, msg: Any) -> None:
        """Decode one CompressedImage of `camera` (listener thread); ValueError (one line) for bytes that are no
        image, left to the listener to count."""
        rgb, _ = read_compressed_image(msg, self.sizes[camera])  # (H, W, 3) uint8 at the size asked for
        with self._lock:
            self._frames[camera] = rgb

    def attach(self, state: RobotState) -> RobotState:
        """`state` with the newest frame of each camera as its `images` (itself when there are no cameras)."""
        if not self.sizes:
            return state
        with self._lock:
            frames = dict(self._frames)
        return dataclasses.replace(state, images=frames)

    def missing(self) -> list[str]:
        """Topics of the cameras no frame has come from yet."""
        with self._lock:
            return [self.topics[c] for c in self.sizes if c not in self._frames]
