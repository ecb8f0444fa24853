"""Boundary facts of a failure bucket: from the bucket's minimal case, move one dimension at a
time to neighbouring values, run each probe through the sweep's stages, and record where it
stops failing the same way: what a person would find by hand.

A probe is `(dimension, value, geometry)`; `dimension` is a geometry field name (c_in, c_out,
groups, spatial, kernel, stride, dilation, padding, pads, batch) or "flavor". A per-axis field's
value is the whole field as a list (e.g. stride [1, 2] is stride_h 1, stride_w 2; explicit pads
[[1, 0], [0, 0]] are each axis's [before, after]): one dimension, one table line, and a probe
moves one axis of it (one side of one axis by one, for pads). A flavor probe keeps the geometry
and its value is the variant (`onnx_bf16`). A probe changes only its own field, with two
exceptions that keep the convolution's kind: a depthwise case's c_in probe keeps it depthwise
(groups and c_out follow, c_out = c_in x the depth multiplier), and a grouped case's c_in and
c_out probes move the channels per group (c_out of a depthwise case: its depth multiplier).
Only buildable probes are kept (pipeline/triage/shrink.py: buildable), at most MAX_PROBES: each
dimension-axis lists its candidates nearest first, and they are taken round-robin until the
bound, so that every dimension keeps its nearest neighbours.

Each probe runs as an ordinary case chain of the minimal case's target (pipeline/run/runner.py:
run_cases), in a scratch build folder of its own, with the run's store and time limits. Its
outcome is "pass", "same" (the bucket's signature) or "other: <signature>". A probe not started
by the deadline is left out. The minimal case itself is not run again: it fails the same way
by construction (its bucket's shrink found it so).

A region rule (pipeline/results/region.py) may be shown beside the table only where
`rule_holds`: it is true on the minimal case, true on every "same" probe and false on every
other probe, and every feature it names varies over those cases (a rule on a feature no probe
moved says nothing the probes tested).
"""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

from pipeline.config import Config
from pipeline.core.tools import write_text
from pipeline.results.region import features, matches
from pipeline.results.report import signature
from pipeline.run.runner import run_cases
from pipeline.space.cases import VARIANTS, Case
from pipeline.space.geometry import ACTIVATIONS, Geometry
from pipeline.triage.shrink import buildable

MAX_PROBES = 40  # probes of one minimal case at most
BOUNDARY = "boundary.json"
AXES = ("spatial", "kernel", "stride", "dilation")  # per-axis fields: a probe's value is the whole field
ORDER = ("c_in", "c_out", "groups", "spatial", "kernel", "stride", "dilation", "padding", "pads", "activation",
         "batch", "flavor")
# a depthwise case's channel lines say what their probes kept (a reader takes c_out for the channels)
DEPTHWISE = {"c_in": "c_in (depthwise kept: groups = c_in)", "c_out": "c_out (depthwise: c_in x the depth multiplier)"}
# the round-robin's order within a round: the dimensions of few probes and much information first
PRIORITY = ("flavor", "groups", "padding", "activation", "c_in", "c_out", "kernel", "stride", "dilation", "pads",
            "spatial", "batch")


# --- the probes -----------------------------------------------------------------------------------

def _near(v: int, extra=()) -> list[int]:
    """Neighbours of a count, nearest first: ±1, half, double, four times, then `extra`."""
    out = []
    for x in (v - 1, v + 1, v // 2, 2 * v, 4 * v, *extra):
        if x >= 1 and x != v and x not in out:
            out.append(x)
    return out


def _channels(g: Geometry, field: str) -> list[tuple[int, Geometry]]:
    """(value, geometry) of the c_in or c_out probes, nearest first."""
    per_group = getattr(g, field) // g.groups
    if field == "c_in" and g.depthwise:  # stays depthwise, with its depth multiplier
        return [(v, replace(g, c_in=v, groups=v, c_out=v * g.depth_multiplier)) for v in _near(g.c_in, (1,))]
    if g.groups > 1:  # the channels per group move (c_out of a depthwise case: the depth multiplier)
        return [(m * g.groups, replace(g, **{field: m * g.groups})) for m in _near(per_group, (1,))]
    return [(v, replace(g, **{field: v})) for v in _near(getattr(g, field), (1,))]


def _groups(g: Geometry) -> list[tuple[int, Geometry]]:
    """Other group counts dividing both channel counts (kept as they are): 1 first, then nearest."""
    common = math.gcd(g.c_in, g.c_out)
    divisors = [d for d in range(1, common + 1) if common % d == 0 and d != g.groups]
    divisors.sort(key=lambda d: (d != 1, abs(math.log(d / g.groups))))
    return [(d, replace(g, groups=d)) for d in divisors]


def _axis(g: Geometry, field: str, axis: int) -> list[tuple[list[int], Geometry]]:
    v = getattr(g, field)[axis]
    candidates = {"spatial": (v + 1, v - 1, 2 * v, v // 2), "kernel": (v + 1, v - 1, 1, 3),
                  "stride": (v + 1, v - 1), "dilation": (v + 1, v - 1)}[field]
    out = []
    for x in candidates:
        if x >= 1 and x != v and x not in [c[axis] for c, _ in out]:
            values = list(getattr(g, field))
            values[axis] = x
            out.append((values, replace(g, **{field: tuple(values)})))
    return out


def _pads(g: Geometry, axis: int) -> list[tuple[list[list[int]], Geometry]]:
    """Explicit pads with one side of `axis` one more or one less, nearest first: the value is
    every axis's [before, after]."""
    out = []
    for side in (0, 1):
        for delta in (-1, 1):
            pads = [list(p) for p in g.explicit_pads]
            pads[axis][side] += delta
            if pads[axis][side] >= 0:
                out.append((pads, replace(g, explicit_pads=tuple(tuple(p) for p in pads))))
    return out


def _candidates(g: Geometry, flavor_variant: str, variants) -> list[tuple[tuple, list]]:
    """(key, [(dimension, value, geometry, variant), ...] nearest first) per dimension-axis."""
    def of(dim, pairs, variant=flavor_variant):
        return [(dim, value, geometry, variant) for value, geometry in pairs]

    keys = [(("c_in", 0), of("c_in", _channels(g, "c_in"))), (("c_out", 0), of("c_out", _channels(g, "c_out"))),
            (("groups", 0), of("groups", _groups(g)))]
    keys += [((field, axis), of(field, _axis(g, field, axis))) for field in AXES for axis in range(g.rank)]
    keys.append((("padding", 0), of("padding", [(mode, replace(g, padding=mode, explicit_pads=None))
                                                for mode in ("valid", "same") if mode != g.padding])))
    keys += [(("pads", axis), of("pads", _pads(g, axis))) for axis in range(g.rank) if g.padding == "explicit"]
    keys.append((("activation", 0), of("activation", [(a, replace(g, activation=a)) for a in ACTIVATIONS
                                                       if a != g.activation])))
    keys.append((("batch", 0), of("batch", [(v, replace(g, batch=v)) for v in _near(g.batch)[:2]])))
    keys.append((("flavor", 0), [("flavor", v, g, v) for v in variants if v != flavor_variant]))
    return keys


def probes(minimal: Geometry, backend: str, flavor: str, variants=VARIANTS) -> list[tuple[str, object, Geometry]]:
    """The probes around `minimal` (a case in `backend`_`flavor`): (dimension, value, geometry),
    buildable, at most MAX_PROBES (taken round-robin over the dimension-axes in PRIORITY order,
    nearest values first), listed in the order of ORDER, then by value; deterministic. Flavor
    probes are the other `variants` that build the geometry; their value is the variant."""
    variant = f"{backend}_{flavor}"
    keys = []
    for key, items in _candidates(minimal, variant, variants):
        kept = [item for item in items if item[2] != minimal or item[0] == "flavor"]
        kept = [item for item in kept if buildable(item[2], *item[3].split("_", 1))]
        keys.append((key, kept))
    chosen: dict[tuple, list] = {key: [] for key, _ in keys}
    total, depth = 0, 0
    while total < MAX_PROBES and any(depth < len(items) for _, items in keys):
        for key, items in sorted(keys, key=lambda k: (PRIORITY.index(k[0][0]), k[0][1])):
            if depth < len(items) and total < MAX_PROBES:
                chosen[key].append(items[depth])
                total += 1
        depth += 1
    out = []
    for key, _ in keys:
        out += [(dim, value, geometry) for dim, value, geometry, _ in sorted(chosen[key], key=lambda i: i[1])]
    return out


# --- running them ---------------------------------------------------------------------------------

def probe_folder(cfg: Config, case: Case) -> Path:
    """Where the probes of a minimal case build: beside the shrinks (`doit clean` removes both)."""
    return cfg.layout.shrink_dir(case.target) / "boundary" / case.name


def outcome(result: dict, bucket: str, signature_fn=signature) -> str:
    """A probe's outcome from its result entry: "pass", "same" or "other: <signature>"."""
    if result.get("status") == "pass":
        return "pass"
    found = signature_fn(result)
    return "same" if found == bucket else f"other: {found}"


def run_probes(cfg: Config, minimal_case: Case, bucket: str, signature_fn=signature, lanes: int = 2,
               deadline: float | None = None, folder: Path | None = None, report_folder: Path | None = None,
               variants=None) -> list[dict]:
    """Run the probes of `minimal_case` (a case of `bucket`) on its target, on `lanes` lanes, none
    starting after `deadline` (time.monotonic()); each probe's {"dimension", "value", "case",
    "outcome"} (plus its "geometry", "backend" and "flavor", for rule_holds), in the order of
    probes(). They build in `folder` (default probe_folder()); boundary.json is written to
    `report_folder` (default `folder`). Flavor probes: `variants` (default the target's flavors)."""
    target = cfg.target(minimal_case.target)
    variants = tuple(variants if variants is not None else target.profile.flavors)
    compile_only = cfg.compile_only | frozenset(target.profile.compile_only)
    folder = Path(folder) if folder is not None else probe_folder(cfg, minimal_case)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    base = replace(minimal_case, category="boundary", expected=None, data_from=None)
    found = []
    for dimension, value, geometry in probes(minimal_case.geometry, minimal_case.backend, minimal_case.flavor,
                                             variants):
        backend, flavor = value.split("_", 1) if dimension == "flavor" else (base.backend, base.flavor)
        case = replace(base, geometry=geometry, backend=backend, flavor=flavor,
                       compile_only=f"{backend}_{flavor}" in compile_only)
        found.append((dimension, value, case))
    results = dict((case.key, value) for case, value in
                   run_cases(cfg.scratch(folder), [case for _, _, case in found], lanes=lanes, deadline=deadline))
    out = [{"dimension": dimension, "value": value, "case": case.name,
            "outcome": outcome(results[case.key], bucket, signature_fn),
            "geometry": case.geometry.to_dict(), "backend": case.backend, "flavor": case.flavor}
           for dimension, value, case in found if case.key in results]
    write_boundary(report_folder if report_folder is not None else folder, out)
    return out


def write_boundary(folder: Path, found: list[dict]) -> Path:
    """Write the probes to <folder>/boundary.json (atomically); its path."""
    path = Path(folder) / BOUNDARY
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(found, indent=1) + "\n")
    return path


# --- reading them ---------------------------------------------------------------------------------

def _text(value) -> str:
    """A probe's value as the case id writes it: HxW, and explicit pads before-after per axis (1-0x0-0)."""
    if isinstance(value, (list, tuple)):
        return "x".join("-".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v) for v in value)
    return str(value)


def _set(values: list) -> str:
    texts = [_text(v) for v in sorted(values, key=lambda v: (isinstance(v, str), v))]
    return texts[0] if len(texts) == 1 else "{" + ", ".join(texts) + "}"


def _minimal_value(minimal: Geometry, dimension: str, variant: str | None):
    if dimension == "flavor":
        return variant
    value = getattr(minimal, dimension)
    if dimension == "pads":
        return [list(p) for p in value]
    return list(value) if isinstance(value, tuple) else value


def table(found: list[dict], minimal: Geometry, variant: str | None = None) -> list[str]:
    """One markdown line per probed dimension, in ORDER: where it fails the same way (the minimal
    case's value among them), passes, and fails otherwise, e.g. "c_in: fails at {4, 8}; passes at
    {2, 3, 16}". A per-axis value prints as HxW (Conv1D: L). The flavor line names the minimal
    case's variant where `variant` is given (default: the flavor of a probe that is not a
    flavor probe). A depthwise case's channel lines are labelled as DEPTHWISE says."""
    if variant is None:
        variant = next((f"{p['backend']}_{p['flavor']}" for p in found if p["dimension"] != "flavor"), None)
    lines = []
    for dimension in ORDER:
        mine = [p for p in found if p["dimension"] == dimension]
        if not mine:
            continue
        at = "in" if dimension == "flavor" else "at"
        same = [p["value"] for p in mine if p["outcome"] == "same"]
        first = _minimal_value(minimal, dimension, variant)
        if first is not None and first not in same:
            same.insert(0, first)
        parts = [f"fails {at} {_set(same)}"] if same else []
        passes = [p["value"] for p in mine if p["outcome"] == "pass"]
        if passes:
            parts.append(f"passes {at} {_set(passes)}")
        others: dict[str, list] = {}
        for p in mine:
            if p["outcome"].startswith("other: "):
                others.setdefault(p["outcome"][len("other: "):], []).append(p["value"])
        parts += [f"fails otherwise {at} {_set(values)} (`{sig}`)" for sig, values in others.items()]
        label = DEPTHWISE.get(dimension, dimension) if minimal.depthwise else dimension
        lines.append(f"{label}: " + "; ".join(parts))
    return lines


def _used(conditions: list) -> set[str]:
    return {name for conjunction in conditions for name, _, _ in conjunction}


def rule_holds(conditions: list, minimal_entry: dict, found: list[dict]) -> bool:
    """Whether a region rule (region.py conditions) may be shown beside the probes: true on the
    minimal case (an entry with "geometry", "backend", "flavor"), and on every probe true exactly
    where it failed the same way; and every feature it names takes more than one value over the
    minimal case and the probes. An empty rule never holds."""
    if not conditions:
        return False
    cases = [(minimal_entry, True)] + [(p, p["outcome"] == "same") for p in found]
    values = []
    for entry, same in cases:
        f = features(entry["geometry"], entry["backend"], entry["flavor"])
        if matches(conditions, f) != same:
            return False
        values.append(f)
    return all(len({f[name] for f in values}) > 1 for name in _used(conditions))
