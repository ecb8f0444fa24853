"""The sweep: named categories of geometries, sampled with one seeded generator each.

To extend the default sweep, add or widen a category in DEFAULT_CATEGORIES; the case
names, tasks and tests follow from it. A JSON spec file (CONV_SWEEP_SPEC) can replace
the defaults without editing code; see README.md for its format.

Low-level module: imports only geometry and errors.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, fields
from pathlib import Path

from .errors import ConfigError, load_json
from .geometry import PADDINGS, Geometry


@dataclass(frozen=True)
class Category:
    """A region of geometry space and the seed that samples it."""

    name: str  # short name, e.g. "sqsq"; recorded with every case
    seed: int  # seed of this category's own random.Random
    rank: int  # 1 for Conv1D, 2 for Conv2D
    spatial: tuple[int, int]  # inclusive range of each spatial size (H and W, or L)
    kernel: tuple[int, int]  # inclusive range of the kernel size per axis, clamped to the axis
    stride: tuple[int, int]  # inclusive range of the stride per axis
    channels: tuple[int, int] = (1, 512)  # inclusive range; c_in and c_out are powers of two in it
    square_kernel: bool = True  # one kernel draw for all axes, clamped to the smallest axis
    isotropic_stride: bool = True  # one stride draw for all axes
    padding: str = "valid"  # "valid" or "same" ("same" with a stride > 1 becomes "valid")

    def validate(self, where: str | None = None) -> "Category":
        where = where or f"category {self.name}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ConfigError(f"{where}.name", self.name, "must be a short identifier")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"{where}.seed", self.seed, "must be an integer")
        if self.rank not in (1, 2):
            raise ConfigError(f"{where}.rank", self.rank, "must be 1 (Conv1D) or 2 (Conv2D)")
        for field in ("spatial", "kernel", "stride", "channels"):
            value = getattr(self, field)
            if (not isinstance(value, (tuple, list)) or len(value) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
                raise ConfigError(f"{where}.{field}", value, "must be an inclusive range [lo, hi] of integers")
            lo, hi = value
            if lo < 1:
                raise ConfigError(f"{where}.{field}", value, "lower bound must be at least 1")
            if lo > hi:
                raise ConfigError(f"{where}.{field}", value, "range is empty or inverted (lo > hi)")
        if not self.powers_of_two():
            raise ConfigError(f"{where}.channels", self.channels, "holds no power of two")
        if self.padding not in PADDINGS:
            raise ConfigError(f"{where}.padding", self.padding, f"must be one of {', '.join(PADDINGS)}")
        return self

    def powers_of_two(self) -> list[int]:
        lo, hi = self.channels
        return [1 << i for i in range(hi.bit_length()) if lo <= (1 << i) <= hi]

    def sample(self, n: int) -> list[Geometry]:
        """The first n geometries of this category; raising n only appends."""
        rng = random.Random(self.seed)
        axes = self.rank
        pows = self.powers_of_two()
        out = []
        for _ in range(n):
            spatial = tuple(rng.randint(*self.spatial) for _ in range(axes))
            if self.square_kernel:
                k = min(rng.randint(*self.kernel), min(spatial))
                kernel = (k,) * axes
            else:
                kernel = tuple(min(rng.randint(*self.kernel), size) for size in spatial)
            if self.isotropic_stride:
                stride = (rng.randint(*self.stride),) * axes
            else:
                stride = tuple(rng.randint(*self.stride) for _ in range(axes))
            c_in, c_out = rng.choice(pows), rng.choice(pows)
            out.append(Geometry(axes, spatial, kernel, stride, c_in, c_out, self.padding))
        return out


DEFAULT_CATEGORIES = (
    Category("sqsq", 11, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 5)),
    Category("nsqsq", 22, rank=2, spatial=(16, 64), kernel=(1, 9), stride=(1, 9), square_kernel=False),
    Category("nsqns", 33, rank=2, spatial=(16, 64), kernel=(1, 9), stride=(1, 9),
             square_kernel=False, isotropic_stride=False),
    Category("c1ds1", 44, rank=1, spatial=(16, 128), kernel=(1, 9), stride=(1, 1)),
    Category("c1ds9", 55, rank=1, spatial=(16, 128), kernel=(1, 9), stride=(1, 9)),
)
DEFAULT_N = 50


@dataclass(frozen=True)
class SweepSpec:
    """What to sample: categories (n geometries each) plus explicitly listed geometries."""

    categories: tuple[Category, ...] = DEFAULT_CATEGORIES
    geometries: tuple[tuple[str, Geometry], ...] = ()  # (category name, geometry), always included

    def sample(self, n: int) -> list[tuple[str, Geometry]]:
        """(category, geometry) pairs in sweep order; a repeated geometry keeps its first category."""
        seen: set[Geometry] = set()
        out = []
        drawn = [(c.name, g.validate(f"category {c.name} geometry {i} ({g.id})"))
                 for c in self.categories for i, g in enumerate(c.sample(n))]
        for name, geometry in [*drawn, *self.geometries]:
            if geometry not in seen:
                seen.add(geometry)
                out.append((name, geometry))
        return out


_CATEGORY_FIELDS = {f.name for f in fields(Category)}


def load_spec(path: str | Path) -> SweepSpec:
    """Read a JSON sweep spec: {"categories": [...], "geometries": [{"category": ..., ...}]}."""
    where = f"CONV_SWEEP_SPEC ({path})"
    data = load_json(path, "CONV_SWEEP_SPEC")
    if not isinstance(data, dict) or set(data) - {"categories", "geometries"}:
        raise ConfigError(where, data if not isinstance(data, dict) else sorted(data),
                          'must be an object with keys "categories" and/or "geometries"')
    categories = []
    for i, raw in enumerate(data.get("categories", [])):
        here = f"{where}.categories[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(here, raw, "must be an object")
        unknown = set(raw) - _CATEGORY_FIELDS
        if unknown:
            key = sorted(unknown)[0]
            raise ConfigError(f"{here}.{key}", raw[key], "is not a category field")
        missing = {"name", "seed", "rank", "spatial", "kernel", "stride"} - set(raw)
        if missing:
            raise ConfigError(f"{here}.{sorted(missing)[0]}", None, "is required")
        fixed = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
        categories.append(Category(**fixed).validate(f"{here} ({raw['name']})"))
    geometries = []
    for i, raw in enumerate(data.get("geometries", [])):
        here = f"{where}.geometries[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(here, raw, "must be an object")
        raw = dict(raw)
        name = raw.pop("category", "custom")
        geometries.append((name, Geometry.from_dict(raw, here)))
    names = [c.name for c in categories]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.categories", names, "category names must be unique")
    return SweepSpec(tuple(categories), tuple(geometries))
