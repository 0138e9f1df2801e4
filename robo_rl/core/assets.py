"""Where the data folders live: `envs/`, `sim_configs/`, `hardware/`, `policies/`.

One lookup with one search order, so a source checkout, an installed wheel (venv, `--user`,
`--target`) and an ament_python node using the package all find the same files:

1. the path as given, when it exists (absolute, or relative to the working directory);
2. each folder listed in the environment variable `ROBO_RL_DATA` (separated by `os.pathsep`);
3. the source checkout this package was imported from (the folder holding `robo_rl/` and `envs/`);
4. the data shipped inside the package, `robo_rl/data/` (found with `importlib.resources`, so it
   is wherever the package itself was installed).

The files live once, in `robo_rl/data/{envs,sim_configs,hardware,policies}`; a checkout's
top-level `envs/`, `sim_configs/`, `hardware/`, `policies/` are symbolic links to them (the
user-facing folders), and a wheel carries them as package data. A relative name such as
`envs/go2.xml` or `hardware/panda.yaml` is looked up under each root in turn. Imports nothing
beyond the standard library (the robot side uses it too).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

DATA_ENV_VAR = "ROBO_RL_DATA"
"""Extra data roots, searched before the checkout and the installed data."""
DATA_FOLDERS = ("envs", "sim_configs", "hardware", "policies")
"""The top-level data folders (DESIGN.md, fixed layout)."""
PACKAGE_DATA = "data"
"""The folder inside the `robo_rl` package that holds the data folders."""


def checkout_root() -> Path | None:
    """The source checkout holding this package, or None when the package is installed elsewhere."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "envs").is_dir() and (root / "pyproject.toml").is_file() else None


def package_data_root() -> Path | None:
    """`robo_rl/data` of the imported package, or None when it is not a folder on disk (e.g. a zip import)."""
    root = resources.files("robo_rl") / PACKAGE_DATA
    return root if isinstance(root, Path) and root.is_dir() else None


def data_roots() -> list[Path]:
    """Search roots in order: $ROBO_RL_DATA entries, the source checkout, the data inside the package."""
    roots = [Path(p) for p in os.environ.get(DATA_ENV_VAR, "").split(os.pathsep) if p]
    for root in (checkout_root(), package_data_root()):
        if root is not None and root not in roots:
            roots.append(root)
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
