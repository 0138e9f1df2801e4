"""Whole-environment adapters: gymnasium (both ways), SB3, Isaac Lab / mjlab, chunked execution."""
