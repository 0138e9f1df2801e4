"""ONNX export of a trained policy with its deploy contract and a parity check."""

OPSET = 18
"""The ONNX opset every graph of ours is written with (policies, the instruction encoder)."""
