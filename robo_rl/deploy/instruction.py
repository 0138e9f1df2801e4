"""The robot side of language: an instruction text -> its sentence embedding, through the exported encoder.

The files `robo_rl.export.instruction_export` writes, side by side:

    <name>.onnx             input_ids (B, L) int64, attention_mask (B, L) int64 -> instruction_embedding (B, D) float32
                            (all-MiniLM-L6-v2's token states, their mean over the mask or a policy's learned
                            attention pooling, L2-normalised; D = 384); metadata key `robo_rl.instruction_encoder`:
                            JSON {model, max_length L, dim D, tokenizer_sha256, pooling}
    <name>.tokenizer.json   the encoder's WordPiece tokenizer (Hugging Face `tokenizers` format)

`InstructionTokenizer` is also what the training side tokenizes with (`robo_rl.learn.networks.text_encoder`),
so both sides feed the encoder the same ids. numpy + onnxruntime + tokenizers (an optional dependency: the
`vla` extra) only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# The file format shared with the exporter (robo_rl.export.instruction_export): metadata key and tensor names.
ENCODER_KEY = "robo_rl.instruction_encoder"
INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
EMBEDDING = "instruction_embedding"
"""The output (not "embedding": the exporter names the graph's token-embedding lookups so)."""
MAX_TOKENS = 32
"""Tokens per instruction (with [CLS] and [SEP]), padded to this fixed length: the graph's L. The task
instructions take at most 16."""


def tokenizer_path(graph: str | Path) -> Path:
    """The tokenizer file beside an encoder graph: `<name>.onnx` -> `<name>.tokenizer.json`."""
    return Path(graph).with_suffix(".tokenizer.json")


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (ties a graph to the tokenizer it was exported with)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class InstructionTokenizer:
    """Texts -> token ids and attention mask, each (B, L) int64, padded to a fixed length L.

    Args:
        path: a tokenizer.json (Hugging Face `tokenizers` format).
        max_length: L; a text of more tokens is refused, never cut (a cut instruction means something else).

    Raises:
        ValueError: the file is missing or unreadable, or `tokenizers` is not installed (one line each).
    """

    def __init__(self, path: str | Path, max_length: int = MAX_TOKENS):
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"tokenizer file {str(p)!r} does not exist (it is written beside the encoder graph "
                             "as <name>.tokenizer.json)")
        try:
            from tokenizers import Tokenizer  # optional dependency: tokenizers (pip install 'robo_rl[vla]')
        except ImportError:
            raise ValueError("instructions need the `tokenizers` package: pip install 'robo_rl[vla]'") from None
        try:
            tok = Tokenizer.from_file(str(p))
        except Exception as exc:  # tokenizers raises its own exception type for a malformed file
            raise ValueError(f"tokenizer file {p} cannot be read: {str(exc).strip()[:160]}") from None
        pad = tok.padding or {"pad_id": 0, "pad_token": "[PAD]"}
        tok.no_truncation()
        tok.enable_padding(length=max_length, pad_id=pad["pad_id"], pad_token=pad["pad_token"])
        self.tokenizer, self.max_length, self.path = tok, max_length, p

    def __call__(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), each (B, L) int64, of `texts`.

        Raises:
            ValueError: a text is empty or longer than L tokens.
        """
        encodings = self.tokenizer.encode_batch([str(t) for t in texts])
        for text, enc in zip(texts, encodings, strict=True):
            if not str(text).strip():
                raise ValueError(f"instruction {text!r} is empty")
            if len(enc.ids) > self.max_length:
                raise ValueError(f"instruction {text!r} is {len(enc.ids)} tokens long: at most {self.max_length}")
        ids = np.array([e.ids for e in encodings], dtype=np.int64).reshape(len(encodings), self.max_length)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64).reshape(ids.shape)
        return ids, mask  # (B, L), (B, L)


class InstructionEncoder:
    """An exported instruction encoder graph and its tokenizer: text -> (D,) float32 embedding.

    Raises ValueError (one line) if the graph or its tokenizer file is missing, the graph is corrupt or not an
    instruction encoder, or the tokenizer is not the one it was exported with.
    """

    def __init__(self, graph: str | Path):
        import onnxruntime as ort

        p = Path(graph)
        if not p.is_file():
            raise ValueError(f"instruction encoder graph {str(p)!r} does not exist")
        tok = tokenizer_path(p)
        if not tok.is_file():
            raise ValueError(f"instruction encoder tokenizer {str(tok)!r} does not exist (expected beside {p.name})")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # encoded once per instruction: leave the cores to the control loop
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises several types for corrupt files
            reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"instruction encoder graph {p} cannot be loaded (corrupt or truncated?): {reason}") \
                from None
        meta = self.session.get_modelmeta().custom_metadata_map
        if ENCODER_KEY not in meta:
            raise ValueError(f"{p} is not an instruction encoder graph (no metadata key {ENCODER_KEY!r})")
        self.info = json.loads(meta[ENCODER_KEY])
        """{model, max_length, dim, tokenizer_sha256, pooling} as exported."""
        inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        if inputs != [INPUT_IDS, ATTENTION_MASK] or outputs != [EMBEDDING]:
            raise ValueError(f"instruction encoder graph {p} has inputs {inputs} and outputs {outputs}; expected "
                             f"{[INPUT_IDS, ATTENTION_MASK]} and {[EMBEDDING]}")
        if file_sha256(tok) != self.info["tokenizer_sha256"]:
            raise ValueError(f"instruction encoder tokenizer {tok} is not the one {p.name} was exported with "
                             "(sha256 differs)")
        self.tokenizer = InstructionTokenizer(tok, int(self.info["max_length"]))
        self.dim = int(self.info["dim"])
        self.path = p

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings (B, D) float32 of `texts` (unit length)."""
        ids, mask = self.tokenizer(texts)  # (B, L), (B, L)
        (out,) = self.session.run([EMBEDDING], {INPUT_IDS: ids, ATTENTION_MASK: mask})
        return out  # (B, D)

    def __call__(self, text: str) -> np.ndarray:
        """The (D,) float32 embedding of one instruction."""
        return self.encode([text])[0]
