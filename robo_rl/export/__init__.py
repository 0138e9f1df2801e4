"""ONNX export of a trained policy with its deploy contract and a parity check."""
