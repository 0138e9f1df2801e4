"""The precision a learner's layers run in: float32, or bfloat16 under `torch.autocast` where the hardware has it.

A learner's config carries `precision` (one of `PRECISIONS`); the learner resolves it once for its device
(`resolve_precision`) and runs its networks' forward passes inside `autocast(...)`. Parameters, optimiser state and
losses stay float32: autocast casts each matrix product's inputs to bfloat16 and its output stays bfloat16 until a
float32 op (or `.float()`) takes it back.
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("float32", "bfloat16", "auto")
"""`auto`: bfloat16 where it is native (`bfloat16_is_native`), float32 elsewhere."""


def bfloat16_is_native(device: torch.device) -> bool:
    """Whether bfloat16 matrix products run in hardware here: a CUDA device that supports them, or a CPU with
    AMX tiles (Intel Sapphire Rapids and later; torch's CPU probe, False where this torch lacks it)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return device.type == "cpu" and probe is not None and bool(probe())


def resolve_precision(precision: str, device: torch.device) -> str:
    """A config's `precision` with `auto` decided for this device: "float32" or "bfloat16"."""
    if precision == "auto":
        return "bfloat16" if bfloat16_is_native(device) else "float32"
    return precision


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context the layers run in for a resolved `precision` ("float32": none).

    bfloat16 on a CPU also picks the math kernel of `scaled_dot_product_attention`: torch's CPU flash-attention
    backward is 6x slower in bfloat16 than the math one (and than itself in float32) for a transformer's short
    sequences (256 x 4 heads x 40 tokens x 32: 87 against 16 ms)."""
    if precision != "bfloat16":
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast(device.type, dtype=torch.bfloat16))
    if device.type == "cpu":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
    return stack
