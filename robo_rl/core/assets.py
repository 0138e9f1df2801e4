"""Where the data folders live: `envs/`, `sim_configs/`, `hardware/`, `policies/`.

One lookup with one search order, so a source checkout, an installed wheel and (later) an
ament_python install all find the same files:

1. the path as given, when it exists (absolute, or relative to the working directory);
2. each folder listed in the environment variable `ROBO_RL_DATA` (separated by `os.pathsep`);
3. the source checkout this package was imported from (the folder holding `robo_rl/` and `envs/`);
4. the data installed with the package: `<prefix>/share/robo_rl` (the wheel's data files; the same
   place an ament_python package puts its share files).

A relative name such as `envs/go2.xml` or `hardware/panda.yaml` is looked up under each root in
turn. Imports nothing beyond the standard library (the robot side uses it too).
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from pathlib import Path

DATA_ENV_VAR = "ROBO_RL_DATA"
"""Extra data roots, searched before the checkout and the installed data."""
DATA_FOLDERS = ("envs", "sim_configs", "hardware", "policies")
"""The top-level data folders (DESIGN.md, fixed layout)."""
SHARE_SUBDIR = Path("share") / "robo_rl"
"""Where the wheel installs the data folders, relative to an installation prefix."""


def checkout_root() -> Path | None:
    """The source checkout holding this package, or None when the package is installed elsewhere."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "envs").is_dir() and (root / "pyproject.toml").is_file() else None


def installed_roots() -> list[Path]:
    """`share/robo_rl` under the prefixes a wheel may have been installed into (venv, system, --user)."""
    prefixes = [Path(sysconfig.get_path("data")), Path(sys.prefix)]
    user_base = getattr(site, "USER_BASE", None)
    if user_base:
        prefixes.append(Path(user_base))
    out: list[Path] = []
    for prefix in prefixes:
        root = prefix / SHARE_SUBDIR
        if root.is_dir() and root not in out:
            out.append(root)
    return out


def data_roots() -> list[Path]:
    """Search roots in order: $ROBO_RL_DATA entries, the source checkout, the installed data."""
    roots = [Path(p) for p in os.environ.get(DATA_ENV_VAR, "").split(os.pathsep) if p]
    checkout = checkout_root()
    if checkout is not None:
        roots.append(checkout)
    roots += installed_roots()
    return roots


def find_asset(path: str | Path, *, what: str = "file") -> Path:
    """Resolve a data file by the search order of this module.

    Args:
        path: a path as the user or a config gives it, e.g. "envs/go2.xml", "hardware/go2.yaml",
            or an absolute path.
        what: what the file is, for the error message ("MJCF file", "hardware file", ...).

    Returns:
        The first existing match.

    Raises:
        ValueError: one line naming the file and every place searched.
    """
    p = Path(path).expanduser()
    if p.is_file():
        return p
    searched = [str(p)]
    if not p.is_absolute():
        for root in data_roots():
            candidate = root / p
            if candidate.is_file():
                return candidate
            searched.append(str(candidate))
    hint = f"; set {DATA_ENV_VAR} to a folder holding {p}" if not p.is_absolute() else ""
    raise ValueError(f"{what} {str(path)!r} not found (searched: {', '.join(searched)}){hint}")


def find_data_file(folder: str, name: str) -> Path | None:
    """`<root>/<folder>/<name>` in the first data root that has it, or None (e.g. a task's preset YAML)."""
    for root in data_roots():
        candidate = root / folder / name
        if candidate.is_file():
            return candidate
    return None
