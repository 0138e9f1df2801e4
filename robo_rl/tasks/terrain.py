"""Generated terrain for legged tasks: one heightfield made of a grid of sub-terrains (pure numpy).

Rows of the grid are difficulty levels (row 0 the easiest), columns are terrain types in configured
proportions: pyramid slopes and pyramid stairs (each "up": the robot starts in the pit at the centre
and climbs on its way out, or "down": it starts on the top platform), random rough ground (uniform
noise) and discrete obstacles (random boxes). Difficulty d = level / (levels - 1) in [0, 1] moves each
type's parameter (slope, step height, noise amplitude, box height) linearly across its range. A flat
border surrounds the grid. Every cell is drawn from its own generator seeded with (seed, level,
column), so one terrain seed always gives the same field.

Layout: `heights[r, c]` is the ground height (m) at world x = c * spacing, y = r * spacing, the layout
of a MuJoCo hfield (its rows run along y, its columns along x). Sub-terrain (level l, column j) covers
x in border + [j, j + 1) * size and y in border + [l, l + 1) * size.

This module imports neither torch nor mujoco; `write_hfield` fills a compiled MjModel's arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from robo_rl.core.config import MAX_SEED, ConfigError, _f

TERRAIN_TYPES = ("slope_up", "slope_down", "stairs_up", "stairs_down", "rough", "obstacles")
"""Sub-terrain types, in the order their columns are laid out."""


@dataclass(frozen=True, kw_only=True)
class TerrainConfig:
    """The generated heightfield: grid, resolution, terrain types and their difficulty ranges."""

    seed: int = _f(0, ge=0, le=MAX_SEED)
    """Seed of the terrain (the same seed always gives the same field)."""
    num_levels: int = _f(10, ge=1, le=100)
    """Difficulty levels: rows of sub-terrains, row 0 the easiest."""
    num_columns: int = _f(10, ge=1, le=100)
    """Columns of sub-terrains; each column holds one terrain type at every level."""
    proportions: dict[str, float] = _f(
        {"slope_up": 0.1, "slope_down": 0.1, "stairs_up": 0.2, "stairs_down": 0.2, "rough": 0.2, "obstacles": 0.2}
    )
    """Share of the columns given to each terrain type (normalised; 0 leaves a type out)."""
    sub_terrain_size: float = _f(6.0, gt=0.0, le=100.0)
    """Side of one square sub-terrain (m); a multiple of `horizontal_scale`."""
    border: float = _f(4.0, ge=0.0, le=100.0)
    """Width of the flat border around the grid (m); a multiple of `horizontal_scale`."""
    horizontal_scale: float = _f(0.05, gt=0.0, le=1.0)
    """Distance between heightfield samples (m). MuJoCo interpolates between samples, so a stair
    riser is a ramp one sample wide."""
    platform_size: float = _f(2.0, ge=0.0)
    """Side of the flat square at the centre of pyramids and obstacle fields, where robots start (m)."""
    slope: tuple[float, ...] = _f((0.0, 0.4), ge=0.0, le=2.0)
    """Pyramid slope (rise over run) at difficulty 0 and 1."""
    step_height: tuple[float, ...] = _f((0.03, 0.18), ge=0.0, le=1.0)
    """Stair step height (m) at difficulty 0 and 1."""
    step_width: float = _f(0.3, gt=0.0)
    """Stair tread depth (m)."""
    rough_amplitude: tuple[float, ...] = _f((0.01, 0.06), ge=0.0, le=1.0)
    """Half-width of the uniform height noise of rough ground (m) at difficulty 0 and 1."""
    rough_cell: float = _f(0.1, gt=0.0)
    """Spacing of the rough ground's noise samples (m); heights in between are interpolated."""
    obstacle_height: tuple[float, ...] = _f((0.03, 0.15), ge=0.0, le=1.0)
    """Largest box height (m) at difficulty 0 and 1; each box rises or sinks by 0.5 to 1 times it."""
    obstacle_size: tuple[float, ...] = _f((0.4, 1.0), gt=0.0)
    """Range of the side lengths of the boxes (m)."""
    num_obstacles: int = _f(30, ge=0, le=10_000)
    """Boxes per obstacle sub-terrain."""

    def validate(self, path: str = "env.terrain") -> None:
        for name, value in self.proportions.items():
            if name not in TERRAIN_TYPES:
                raise ConfigError(f"config error: {path}.proportions.{name}: unknown terrain type; "
                                  f"types: {', '.join(TERRAIN_TYPES)}")
            if not (math.isfinite(value) and value >= 0.0):
                raise ConfigError(f"config error: {path}.proportions.{name} = {value!r}: must be a number >= 0")
        if sum(self.proportions.values()) <= 0.0:
            raise ConfigError(f"config error: {path}.proportions = {self.proportions!r}: at least one must be > 0")
        for name in ("slope", "step_height", "rough_amplitude", "obstacle_height", "obstacle_size"):
            lo_hi = getattr(self, name)
            if len(lo_hi) != 2 or lo_hi[0] > lo_hi[1]:
                raise ConfigError(
                    f"config error: {path}.{name} = {list(lo_hi)!r}: expected [low, high] with low <= high"
                )
        for name in ("sub_terrain_size", "border", "rough_cell"):
            _check_multiple(getattr(self, name), self.horizontal_scale, f"{path}.{name}")
        if self.platform_size > self.sub_terrain_size:
            raise ConfigError(f"config error: {path}.platform_size = {self.platform_size!r}: must be <= "
                              f"{path}.sub_terrain_size = {self.sub_terrain_size!r}")
        if self.samples_per_side > 20_000:
            raise ConfigError(f"config error: {path}: the heightfield would have {self.samples_per_side} samples "
                              "per side; allowed at most 20000 (raise horizontal_scale or shrink the grid)")

    @property
    def samples_per_side(self) -> int:
        """Samples along the longer side of the whole field."""
        side = 2 * self.border + max(self.num_levels, self.num_columns) * self.sub_terrain_size
        return round(side / self.horizontal_scale) + 1


def _check_multiple(value: float, step: float, path: str) -> None:
    if abs(value / step - round(value / step)) > 1e-6:
        raise ConfigError(f"config error: {path} = {value!r}: must be a multiple of horizontal_scale = {step!r}")


@dataclass(frozen=True)
class Terrain:
    """A generated heightfield and where robots start on it."""

    heights: np.ndarray
    """(R, C) float32 ground height (m) at x = c * spacing, y = r * spacing."""
    spacing: float
    """Distance between samples (m)."""
    origins: np.ndarray
    """(L, J, 3) float32 spawn point (x, y, ground z) at the centre of each (level, column) cell."""
    column_types: tuple[str, ...]
    """(J,) terrain type of each column."""
    difficulty_values: np.ndarray
    """(L, J) float32 the type's parameter of each cell: slope, step height, noise amplitude or box height."""
    sub_terrain_size: float
    """Side of one sub-terrain (m)."""

    @property
    def num_levels(self) -> int:
        return self.origins.shape[0]


def column_types(proportions: dict[str, float], num_columns: int) -> tuple[str, ...]:
    """Terrain type of each column: column j takes the type whose cumulative share holds (j + 0.5) / J.

    Types are laid out in `TERRAIN_TYPES` order; a type with share p gets about p * J columns.
    """
    names = [t for t in TERRAIN_TYPES if proportions.get(t, 0.0) > 0.0]
    shares = np.array([proportions[t] for t in names], dtype=np.float64)
    edges = np.cumsum(shares / shares.sum())  # (T,)
    centres = (np.arange(num_columns) + 0.5) / num_columns  # (J,)
    picks = np.minimum(np.searchsorted(edges, centres, side="right"), len(names) - 1)
    return tuple(names[i] for i in picks)


def difficulty(level: int, num_levels: int) -> float:
    """Difficulty in [0, 1] of a level: 0 for row 0, 1 for the last row."""
    return level / (num_levels - 1) if num_levels > 1 else 0.0


def _lerp(lo_hi: tuple[float, ...], d: float) -> float:
    return lo_hi[0] + d * (lo_hi[1] - lo_hi[0])


def distance_to_edge(dx: np.ndarray, dy: np.ndarray, half: float) -> np.ndarray:
    """Distance of local points (offsets from the cell centre) to the cell's square outline (m), >= 0."""
    return np.clip(half - np.maximum(np.abs(dx), np.abs(dy)), 0.0, None)


def pyramid_slope(dx: np.ndarray, dy: np.ndarray, *, slope: float, half: float, platform: float) -> np.ndarray:
    """Heights of a square pyramid rising at `slope` from 0 at the cell edge to a flat top platform."""
    top = slope * max(half - platform / 2, 0.0)
    return np.minimum(slope * distance_to_edge(dx, dy, half), top)


def pyramid_stairs(
    dx: np.ndarray, dy: np.ndarray, *, step_height: float, step_width: float, half: float, platform: float
) -> np.ndarray:
    """Heights of square stairs: ring k (counted from the cell edge, k >= 0) stands k steps high.

    Rings are `step_width` deep; the platform at the centre is the last, highest ring.
    """
    steps = math.floor(max(half - platform / 2, 0.0) / step_width + 1e-9)
    ring = np.minimum(np.floor(distance_to_edge(dx, dy, half) / step_width + 1e-9), steps)
    return ring * step_height


def random_rough(
    shape: tuple[int, int], *, amplitude: float, spacing: float, cell: float, rng: np.random.Generator
) -> np.ndarray:
    """Uniform noise in [-amplitude, amplitude] drawn every `cell` metres, bilinearly interpolated to `shape`."""
    stride = max(1, round(cell / spacing))
    coarse = rng.uniform(-amplitude, amplitude, size=((shape[0] - 1) // stride + 2, (shape[1] - 1) // stride + 2))
    return bilinear_upsample(coarse, shape, stride)


def bilinear_upsample(coarse: np.ndarray, shape: tuple[int, int], stride: int) -> np.ndarray:
    """(R, C) samples of a grid given every `stride` samples (coarse (R', C')), bilinear in between."""
    r = np.arange(shape[0]) / stride  # (R,) coarse coordinates
    c = np.arange(shape[1]) / stride  # (C,)
    r0, c0 = np.floor(r).astype(int), np.floor(c).astype(int)
    fr, fc = (r - r0)[:, None], (c - c0)[None, :]
    g = coarse
    top = g[r0][:, c0] * (1 - fc) + g[r0][:, c0 + 1] * fc  # (R, C)
    bottom = g[r0 + 1][:, c0] * (1 - fc) + g[r0 + 1][:, c0 + 1] * fc
    return top * (1 - fr) + bottom * fr


def discrete_obstacles(
    dx: np.ndarray,
    dy: np.ndarray,
    *,
    height: float,
    size_range: tuple[float, ...],
    count: int,
    half: float,
    platform: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Random axis-aligned boxes that rise or sink by 0.5 to 1 times `height`; the centre platform stays at 0.

    Later boxes cover earlier ones where they overlap.
    """
    out = np.zeros(np.broadcast_shapes(dx.shape, dy.shape))
    for _ in range(count):
        w, d = rng.uniform(size_range[0], size_range[1], size=2)
        cx, cy = rng.uniform(-half, half, size=2)
        h = rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0) * height
        inside = (np.abs(dx - cx) <= w / 2) & (np.abs(dy - cy) <= d / 2)
        out = np.where(inside, h, out)
    return np.where(np.maximum(np.abs(dx), np.abs(dy)) <= platform / 2, 0.0, out)


def sub_terrain(
    kind: str, value: float, dx: np.ndarray, dy: np.ndarray, cfg: TerrainConfig, rng: np.random.Generator
) -> np.ndarray:
    """Heights (m) of one sub-terrain of type `kind` with parameter `value` at local offsets dx (1, S), dy (S, 1)."""
    half, platform = cfg.sub_terrain_size / 2, cfg.platform_size
    if kind in ("slope_up", "slope_down"):
        h = pyramid_slope(dx, dy, slope=value, half=half, platform=platform)
    elif kind in ("stairs_up", "stairs_down"):
        h = pyramid_stairs(dx, dy, step_height=value, step_width=cfg.step_width, half=half, platform=platform)
    elif kind == "rough":
        shape = (dy.shape[0], dx.shape[1])
        return random_rough(shape, amplitude=value, spacing=cfg.horizontal_scale, cell=cfg.rough_cell, rng=rng)
    elif kind == "obstacles":
        return discrete_obstacles(dx, dy, height=value, size_range=cfg.obstacle_size, count=cfg.num_obstacles,
                                  half=half, platform=platform, rng=rng)
    else:
        raise ValueError(f"terrain type {kind!r}: allowed types are {', '.join(TERRAIN_TYPES)}")
    return -h if kind.endswith("_up") else h  # "up": the centre is a pit the robot climbs out of


def type_value(kind: str, d: float, cfg: TerrainConfig) -> float:
    """The parameter of a terrain type at difficulty d: slope, step height, noise amplitude or box height."""
    ranges = {"slope": cfg.slope, "stairs": cfg.step_height, "rough": cfg.rough_amplitude,
              "obstacles": cfg.obstacle_height}
    return _lerp(ranges[kind.split("_")[0]], d)


def generate_terrain(cfg: TerrainConfig) -> Terrain:
    """The heightfield of `cfg`: sub-terrains in a (levels x columns) grid inside a flat border.

    Returns:
        The heights (R, C) in metres, the spawn origin of every cell and each cell's parameter.
    """
    s = cfg.horizontal_scale
    per_cell = round(cfg.sub_terrain_size / s)  # samples per sub-terrain side
    border = round(cfg.border / s)
    levels, cols = cfg.num_levels, cfg.num_columns
    heights = np.zeros((2 * border + levels * per_cell + 1, 2 * border + cols * per_cell + 1))  # (R, C)
    types = column_types(cfg.proportions, cols)
    offsets = (np.arange(per_cell) - (per_cell - 1) / 2) * s  # (S,) sample offsets from the cell centre
    dx, dy = offsets[None, :], offsets[:, None]  # (1, S), (S, 1)
    values = np.zeros((levels, cols))
    origins = np.zeros((levels, cols, 3))
    centre = per_cell // 2
    patch = max(1, round(0.3 / s))  # spawn height: the highest ground within 0.3 m of the centre
    for level in range(levels):
        d = difficulty(level, levels)
        for col, kind in enumerate(types):
            rng = np.random.default_rng([cfg.seed, level, col])
            values[level, col] = type_value(kind, d, cfg)
            cell = sub_terrain(kind, values[level, col], dx, dy, cfg, rng)  # (S, S)
            r0, c0 = border + level * per_cell, border + col * per_cell
            heights[r0 : r0 + per_cell, c0 : c0 + per_cell] = cell
            z = cell[centre - patch : centre + patch + 1, centre - patch : centre + patch + 1].max()
            origins[level, col] = ((c0 + centre) * s, (r0 + centre) * s, z)
    return Terrain(
        heights=heights.astype(np.float32),
        spacing=s,
        origins=origins.astype(np.float32),
        column_types=types,
        difficulty_values=values.astype(np.float32),
        sub_terrain_size=per_cell * s,
    )


# ---------------------------------------------------------------------------------------------- MuJoCo
HFIELD_BASE_DEPTH = 0.5
"""Depth of the solid below the lowest point of the heightfield (m; MuJoCo's hfield size[3])."""


def hfield_layout(terrain: Terrain) -> dict[str, Any]:
    """What a MuJoCo hfield needs to show `terrain`: nrow, ncol, size (4,), normalised data (R*C,), geom pos (3,).

    MuJoCo spans the samples over [-size[0], size[0]] x [-size[1], size[1]] around the geom and
    raises sample v in [0, 1] to size[2] * v, so the geom sits at the field's centre and at its lowest
    height, and the data are the heights scaled to [0, 1].
    """
    h = terrain.heights.astype(np.float64)
    nrow, ncol = h.shape
    low, high = float(h.min()), float(h.max())
    span = max(high - low, 1e-6)  # a flat field still needs a positive elevation range
    half_x, half_y = (ncol - 1) * terrain.spacing / 2, (nrow - 1) * terrain.spacing / 2
    return {
        "nrow": nrow,
        "ncol": ncol,
        "size": np.array([half_x, half_y, span, HFIELD_BASE_DEPTH]),
        "data": ((h - low) / span).astype(np.float32).ravel(),
        "geom_pos": np.array([half_x, half_y, low]),
    }


def size_hfield(spec: Any, terrain: Terrain, *, hfield: str = "terrain", geom: str = "terrain") -> None:
    """Give hfield `hfield` of an MjSpec the terrain's sample counts and size and place its geom `geom`.

    Must happen before compilation: the compiler derives the geom's bounding box from the size, and
    collisions outside a stale box are missed (a size written into a compiled model lets bodies fall
    through the ground beyond the old extent).

    Raises:
        ValueError: when the scene has no such hfield or geom.
    """
    field, ground = spec.hfield(hfield), spec.geom(geom)
    if field is None or ground is None:
        missing = f"hfield {hfield!r}" if field is None else f"geom {geom!r}"
        raise ValueError(f"the scene has no {missing} to hold the terrain")
    layout = hfield_layout(terrain)
    field.nrow, field.ncol = layout["nrow"], layout["ncol"]
    field.size = layout["size"]
    field.userdata = np.zeros(layout["data"].size)  # flat until `write_hfield` fills the compiled model
    ground.pos = layout["geom_pos"]


def write_hfield(model: Any, hfield_id: int, terrain: Terrain) -> None:
    """Write `terrain`'s heights into hfield `hfield_id` of a compiled MjModel (`hfield_data`, 0..1).

    MuJoCo reads `hfield_data` whenever it collides or ray-casts, so data written after compilation
    and before any MjData exists is what the physics sees (a renderer uploads it when it is created).
    Sample counts and size are fixed at compilation (`size_hfield` sets them); they must already match.

    Raises:
        ValueError: when the model's hfield has other sample counts or another size than the terrain.
    """
    layout = hfield_layout(terrain)
    shape = (int(model.hfield_nrow[hfield_id]), int(model.hfield_ncol[hfield_id]))
    if shape != (layout["nrow"], layout["ncol"]):
        raise ValueError(f"hfield {hfield_id} has {shape[0]} x {shape[1]} samples; the terrain needs "
                         f"{layout['nrow']} x {layout['ncol']}")
    if not np.allclose(model.hfield_size[hfield_id], layout["size"], rtol=1e-6, atol=1e-9):
        raise ValueError(f"hfield {hfield_id} has size {model.hfield_size[hfield_id].tolist()}; the terrain needs "
                         f"{layout['size'].tolist()} (set it before compiling, see size_hfield)")
    adr = int(model.hfield_adr[hfield_id])
    model.hfield_data[adr : adr + layout["data"].size] = layout["data"]
