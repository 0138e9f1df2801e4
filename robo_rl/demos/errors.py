"""The demos package's one error type (a module of its own: the dataset and video modules both raise it)."""

from __future__ import annotations

from robo_rl.core.config import UserError


class DatasetError(UserError, ValueError):
    """A dataset path, feature or frame that is not what it must be (one line, names what is wrong)."""
