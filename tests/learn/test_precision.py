"""robo_rl.learn.precision: the context a learner's layers run in."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from robo_rl.learn.precision import autocast


def _attention_ops(precision: str) -> tuple[set[str], torch.dtype]:
    q = torch.randn(2, 2, 5, 8, requires_grad=True)
    with torch.profiler.profile() as prof, autocast(precision, torch.device("cpu")):
        out = F.scaled_dot_product_attention(q, q, q)
    out.float().sum().backward()
    return {e.key for e in prof.key_averages()}, out.dtype


def test_bfloat16_on_a_cpu_runs_attention_in_bfloat16_with_the_math_kernel():
    """torch's CPU flash-attention backward is several times slower in bfloat16 than the math kernel."""
    ops, dtype = _attention_ops("bfloat16")
    assert dtype == torch.bfloat16
    assert not any("flash_attention" in op for op in ops)


def test_float32_leaves_attention_alone():
    ops, dtype = _attention_ops("float32")
    assert dtype == torch.float32
    assert any("flash_attention" in op for op in ops)
