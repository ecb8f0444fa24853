"""The sweep: named categories of geometries, sampled with one seeded generator each.

To extend the default sweep, add or widen a category in DEFAULT_CATEGORIES; the case
names, tasks and tests follow from it. A JSON spec file (CONV_SWEEP_SPEC) can replace
the defaults without editing code; see docs/extending.md for its format.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, fields
from pathlib import Path

from pipeline.core.errors import ConfigError, load_json
from pipeline.space.geometry import ACTIVATIONS, PADDINGS, Geometry
from pipeline.space.given import GivenWeights
from pipeline.space import given as given_weights


GROUPINGS = ("none", "grouped", "depthwise", "any")
CHANNEL_VALUES = ("pow2", "any")
LANES = (4, 8, 16, 32, 64, 128)  # vector and NPU lane widths: a count one off them leaves a remainder


@dataclass(frozen=True)
class Category:
    """A region of geometry space and the seed that samples it.

    The fields after `padding` widen the space; at their defaults a category draws exactly as
    the seed sweep always has (same random stream, same geometries).
    """

    name: str  # short name, e.g. "sqsq"; recorded with every case
    seed: int  # seed of this category's own random.Random
    rank: int  # 1 for Conv1D, 2 for Conv2D
    spatial: tuple[int, int]  # inclusive range of each spatial size (H and W, or L)
    kernel: tuple[int, int]  # inclusive range of the kernel size per axis, clamped to the axis
    stride: tuple[int, int]  # inclusive range of the stride per axis
    channels: tuple[int, int] = (1, 512)  # inclusive range of c_in and c_out (depthwise: of c_in)
    square_kernel: bool = True  # one kernel draw for all axes, clamped to the smallest axis
    isotropic_stride: bool = True  # one stride draw for all axes
    padding: str = "valid"  # "valid", "same", or "any" (one of the two per geometry)
    channel_values: str = "pow2"  # "pow2": powers of two; "any": any integer, weighted toward awkward ones
    dilation: tuple[int, int] = (1, 1)  # inclusive range per axis, clamped so the window fits the input
    groups: str = "none"  # "none", "grouped" (a common divisor > 1), "depthwise", or "any" of the three
    depth_multiplier: tuple[int, int] = (1, 4)  # depthwise: inclusive range of c_out / c_in
    batch: tuple[int, int] = (1, 1)  # inclusive range of the batch size
    activation: str = "none"  # fused activation: one of ACTIVATIONS, or "any" (one of the three per geometry)

    def validate(self, where: str | None = None) -> "Category":
        where = where or f"category {self.name}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ConfigError(f"{where}.name", self.name, "must be a short identifier")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"{where}.seed", self.seed, "must be an integer")
        if self.rank not in (1, 2):
            raise ConfigError(f"{where}.rank", self.rank, "must be 1 (Conv1D) or 2 (Conv2D)")
        for field in ("spatial", "kernel", "stride", "channels", "dilation", "depth_multiplier", "batch"):
            value = getattr(self, field)
            if (not isinstance(value, (tuple, list)) or len(value) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
                raise ConfigError(f"{where}.{field}", value, "must be an inclusive range [lo, hi] of integers")
            lo, hi = value
            if lo < 1:
                raise ConfigError(f"{where}.{field}", value, "lower bound must be at least 1")
            if lo > hi:
                raise ConfigError(f"{where}.{field}", value, "range is empty or inverted (lo > hi)")
        for field, allowed in (("padding", (*PADDINGS, "any")), ("channel_values", CHANNEL_VALUES),
                               ("groups", GROUPINGS), ("activation", (*ACTIVATIONS, "any"))):
            if getattr(self, field) not in allowed:
                raise ConfigError(f"{where}.{field}", getattr(self, field), f"must be one of {', '.join(allowed)}")
        if self.channel_values == "pow2" and not self.powers_of_two():
            raise ConfigError(f"{where}.channels", self.channels, "holds no power of two")
        if self.groups in ("grouped", "depthwise") and self.channels[1] < (4 if self.groups == "grouped" else 2):
            raise ConfigError(f"{where}.channels", self.channels,
                              f"groups '{self.groups}' needs channels up to at least {4 if self.groups == 'grouped' else 2}")
        return self

    def powers_of_two(self, multiple_of: int = 1) -> list[int]:
        lo, hi = self.channels
        return [1 << i for i in range(hi.bit_length()) if lo <= (1 << i) <= hi and (1 << i) % multiple_of == 0]

    def _channel(self, rng: random.Random, multiple_of: int = 1, minimum: int = 1) -> int:
        """One channel count in range, a multiple of `multiple_of` (and >= minimum when it can be)."""
        lo, hi = max(self.channels[0], minimum), self.channels[1]
        if self.channel_values == "pow2":
            pows = [v for v in self.powers_of_two(multiple_of) if v >= minimum]
            return rng.choice(pows or self.powers_of_two())
        # any integer: a third primes, a third one off a lane width, a third uniform
        a, b = -(-lo // multiple_of), max(hi // multiple_of, 1)
        a = min(a, b)
        kind = rng.randrange(3)
        pool = [v for v in range(a, b + 1) if _is_prime(v)] if kind == 0 else \
            [v for lane in LANES for v in (lane - 1, lane + 1) if a <= v <= b] if kind == 1 else []
        return multiple_of * (rng.choice(pool) if pool else rng.randint(a, b))

    def sample(self, n: int) -> list[Geometry]:
        """The first n geometries of this category; raising n only appends."""
        rng = random.Random(self.seed)
        axes = self.rank
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
            grouping = self.groups if self.groups != "any" else rng.choice(GROUPINGS[:3])
            groups = 1
            if grouping == "depthwise":
                c_in = self._channel(rng, minimum=2)
                groups, c_out = c_in, c_in * rng.randint(*self.depth_multiplier)
            elif grouping == "grouped":
                choices = (2, 4, 8, 16) if self.channel_values == "pow2" else (2, 3, 4, 5, 7, 8, 16)
                groups = rng.choice([g for g in choices if 2 * g <= self.channels[1]] or [1])
                # c_in >= 2 groups: one channel per group would be depthwise
                c_in, c_out = self._channel(rng, groups, minimum=2 * groups), self._channel(rng, groups)
            elif self.channel_values == "pow2":
                pows = self.powers_of_two()
                c_in, c_out = rng.choice(pows), rng.choice(pows)
            else:
                c_in, c_out = self._channel(rng), self._channel(rng)
            padding = self.padding if self.padding != "any" else rng.choice(PADDINGS)
            dilation = None
            if self.dilation != (1, 1):
                dilation = tuple(1 if k == 1 else min(rng.randint(*self.dilation), (size - 1) // (k - 1))
                                 for k, size in zip(kernel, spatial))
            batch = rng.randint(*self.batch) if self.batch != (1, 1) else 1
            activation = self.activation if self.activation != "any" else rng.choice(ACTIVATIONS)
            out.append(Geometry(axes, spatial, kernel, stride, c_in, c_out, padding, dilation, groups, batch,
                                activation))
        return out


def _is_prime(v: int) -> bool:
    return v > 1 and all(v % p for p in range(2, int(v ** 0.5) + 1))


DEFAULT_CATEGORIES = (
    Category("sqsq", 11, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 5)),
    Category("nsqsq", 22, rank=2, spatial=(16, 64), kernel=(1, 9), stride=(1, 9), square_kernel=False),
    Category("nsqns", 33, rank=2, spatial=(16, 64), kernel=(1, 9), stride=(1, 9),
             square_kernel=False, isotropic_stride=False),
    Category("c1ds1", 44, rank=1, spatial=(16, 128), kernel=(1, 9), stride=(1, 1)),
    Category("c1ds9", 55, rank=1, spatial=(16, 128), kernel=(1, 9), stride=(1, 9)),
)
# The extended profile's own categories: each widens one dimension of a seed category
# (channels up to 256 rather than 512, to keep a run of them near the seed's cost per case),
# and the two mixes widen all of them at once.
EXTENDED_CATEGORIES = (
    Category("psame", 66, rank=2, spatial=(16, 64), kernel=(1, 9), stride=(1, 5), channels=(1, 256),
             square_kernel=False, isotropic_stride=False, padding="same"),
    Category("psame1d", 77, rank=1, spatial=(16, 128), kernel=(1, 9), stride=(1, 9), channels=(1, 256),
             padding="same"),
    Category("dil", 88, rank=2, spatial=(16, 64), kernel=(2, 5), stride=(1, 1), channels=(1, 256),
             square_kernel=False, dilation=(1, 4)),
    Category("dil1d", 99, rank=1, spatial=(16, 128), kernel=(2, 9), stride=(1, 1), channels=(1, 256),
             dilation=(1, 4)),
    Category("grp", 111, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 5), channels=(2, 256),
             groups="grouped"),
    Category("dw", 122, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 5), channels=(2, 128),
             groups="depthwise"),
    Category("batch", 133, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 5), channels=(1, 256),
             batch=(2, 4)),
    Category("odd", 144, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 5), channels=(1, 256),
             channel_values="any"),
    Category("mix2d", 155, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 4), channels=(1, 128),
             square_kernel=False, isotropic_stride=False, padding="any", channel_values="any",
             dilation=(1, 4), groups="any", batch=(1, 4)),
    Category("mix1d", 166, rank=1, spatial=(16, 128), kernel=(1, 9), stride=(1, 4), channels=(1, 128),
             padding="any", channel_values="any", dilation=(1, 4), groups="any", batch=(1, 4)),
    Category("act", 177, rank=2, spatial=(16, 64), kernel=(1, 5), stride=(1, 4), channels=(1, 256),
             padding="any", groups="any", activation="any"),
)
# profile -> its categories; the networks profile has none, only the conv layers of its networks
# (pipeline/space/networks.py), one geometry each
PROFILES = {"seed": DEFAULT_CATEGORIES, "extended": DEFAULT_CATEGORIES + EXTENDED_CATEGORIES, "networks": ()}
DEFAULT_N = 50


@dataclass(frozen=True)
class SweepSpec:
    """What to sample: categories (n geometries each) plus explicitly listed geometries."""

    categories: tuple[Category, ...] = DEFAULT_CATEGORIES
    # (category name, geometry) or (category name, geometry, a model's own weights), always included
    geometries: tuple[tuple, ...] = ()

    def sample(self, n: int) -> list[tuple[str, Geometry, GivenWeights | None]]:
        """(category, geometry, given weights or None) in sweep order; a repeated geometry (with
        the same weights) keeps its first category."""
        seen: set[tuple] = set()
        out = []
        drawn = [(c.name, g.validate(f"category {c.name} geometry {i} ({g.id})"))
                 for c in self.categories for i, g in enumerate(c.sample(n))]
        for name, geometry, *given in [*drawn, *self.geometries]:
            weights = given[0] if given else None
            if (geometry, weights) not in seen:
                seen.add((geometry, weights))
                out.append((name, geometry, weights))
        return out


def profile_spec(profile: str) -> SweepSpec:
    """A built-in profile's spec (CONV_SWEEP_PROFILE)."""
    from pipeline.space import networks

    return SweepSpec(PROFILES[profile], networks.geometries() if profile == "networks" else ())


_CATEGORY_FIELDS = {f.name for f in fields(Category)}


def load_spec(path: str | Path, knob: str = "CONV_SWEEP_SPEC") -> SweepSpec:
    """Read a JSON sweep spec: {"categories": [...], "geometries": [{"category": ..., ...}]}. A
    geometry may list the model layers that use it (`layers`), and the file may say where it
    came from (`source`) and what it left out (`skipped`), as `doit extract` writes them: read
    by people, not by the sweep. A geometry's `weights` names an .npz of a model's own weights
    for it (pipeline/space/given.py), relative to the spec file's folder."""
    where = f"{knob} ({path})"
    data = load_json(path, knob)
    if not isinstance(data, dict) or set(data) - {"categories", "geometries", "source", "skipped"}:
        raise ConfigError(where, data if not isinstance(data, dict) else sorted(data),
                          'must be an object with keys "categories" and/or "geometries" (and "source", "skipped")')
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
        if not isinstance(raw.pop("layers", []), list):
            raise ConfigError(f"{here}.layers", data["geometries"][i]["layers"], "must be a list of the layers using it")
        weights = raw.pop("weights", None)
        geometry = Geometry.from_dict(raw, here)
        if weights is None:
            geometries.append((name, geometry))
        else:
            geometries.append((name, geometry, given_weights.load(weights, Path(path).parent, geometry,
                                                                  f"{here}.weights")))
    names = [c.name for c in categories]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.categories", names, "category names must be unique")
    return SweepSpec(tuple(categories), tuple(geometries))


def joined(spec: SweepSpec, included: list[tuple[str, SweepSpec]]) -> SweepSpec:
    """`spec` with the categories and geometries of each included spec file (CONV_SWEEP_INCLUDE:
    `doit hunt`'s found.json, say) after its own; a category name may not repeat."""
    categories, geometries = list(spec.categories), list(spec.geometries)
    for where, extra in included:
        names = {c.name for c in categories}
        for c in extra.categories:
            if c.name in names:
                raise ConfigError(f"{where}.categories", c.name, "repeats a category name of the sweep")
        categories += extra.categories
        geometries += extra.geometries
    return SweepSpec(tuple(categories), tuple(geometries))
