"""`doit hunt`: a guided search for the failure buckets the sweep's sample misses.

The sweep is a fixed sample of its categories. The hunt spends a time budget on geometries it
chooses itself, each evaluated as ordinary cases (every flavor of every selected target),
looking for buckets that are new: absent from the sweep's results in this build folder and
from the target's expected failures.

Where it looks (`--strategy hunt`, the default). Its space is the box of the run's categories
(ranks, sizes, kernels, strides, channels), widened by the extended profile's dimensions
(dilation up to 4, groups and depthwise, batch up to 4, SAME padding) and explicit pads (each
side 0, 1, half the window or the window less one: torch's and ONNX's pads, which TFLite's conv
has not, so those geometries are ONNX cases only). Each geometry it
evaluates is the best of a few candidates from three generators:

- boundary: each dimension at one of its boundary values: sizes at 2^k - 1, 2^k, 2^k + 1 and
  the range's ends, a kernel equal to the input, a stride larger than the kernel, one channel,
  counts one off a lane width and the largest counts;
- near a new bucket: one or two dimensions of a case in a bucket found by this hunt moved to a
  neighbouring or boundary value, to find where the bucket ends (and to give its region rule
  cases on both sides);
- near any case: the same moves from any case evaluated, failing or passing.

Candidates are ranked by how many pairs of coarse features (kernel class, stride against
kernel, channel parity, dilation, groups, padding, ...) they cover that no case evaluated has
covered yet (pairwise coverage), over the square root of their predicted cost: cheap
geometries that combine dimensions in untried ways come first, each weighted by the share of
its cases not predicted to land in a known bucket (KnownMap, from the hunt's own cases); of
the chosen geometry, a case whose nearest cases evaluated in its flavor all landed in a known
bucket runs only with a small chance. Two baselines the hunt is measured against
(pipeline/dev/benchmark.py, side by side): `--strategy cost`, the same search without that
weighting and without explicit pads (the hunt as it was before both), and `--strategy sample`,
further draws of the run's own categories, past the sweep's N, evaluated the same way.

Why not Hypothesis: its search runs one example at a time (a geometry's cases here run on
every lane at once), ends at the first failure of each exception origin and shrinks it there
(a hunt wants every bucket, and the shrink here is `doit shrink`'s, per bucket and predicate),
and has no wall-clock budget; its example database is what the journal below does for a
resumed hunt.

Cases stay normal cases. Every case is named as a sweep case (category hunt_<generator>), built
by the sweep's own stage functions in the hunt's build folder (<build>/hunt/), so its model,
MLIR and module are in the store; <build>/hunt/hunt.json is a spec file of every geometry
evaluated, and found.json of those in new buckets: `CONV_SWEEP_INCLUDE=build/hunt/found.json
doit sweep` adds them to the sweep, and `doit verify:<name>` then runs one of them.

Resuming. Each finished case is appended to journal.jsonl once its result.json is written (the
runner's journal, pipeline/run/runner.py); a hunt started again in the same folder reads it and
evaluates none of those cases again (a case cut off by the kill, without a journal line, runs
again).

The budget is the hunt's wall-clock seconds, over its resumes (the journal records the seconds
spent at each case): the search starts no case after SEARCH_SHARE of it (cases running then
finish, each within its time limits), and the rest goes to the new buckets' bug reports (pipeline/triage/bugreport.py: shrink, toggle flags, and the
region rule learned from every case evaluated, the hunt's and the sweep's).
"""
from __future__ import annotations

import json
import math
import random
import resource
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.config import Config
from pipeline.core.chain import TASKS
from pipeline.core.errors import ConfigError
from pipeline.core.tools import write_text
from pipeline.results.region import features
from pipeline.results.report import TOOL_FAILURES, causes, collect, signature, tool_versions, write_report
from pipeline.run.runner import Journal, run_cases, run_chain
from pipeline.space.cases import Case, make_cases
from pipeline.space.geometry import Geometry, macs
from pipeline.space.sweep import LANES, Category
from pipeline.triage.shrink import PADS, buildable, dimensions, minimum, value, with_value

STRATEGIES = ("hunt", "cost", "sample")
SEARCH_SHARE = 0.75  # of the budget, what the search may use; bug reports get the rest
CANDIDATES = 12  # candidates drawn per geometry chosen
EDGE_CASES = 8  # cases of a new bucket past which the search stops exploring near it
EDGE_BONUS = 4  # pairs of features a move near a new bucket counts as, besides the ones it covers
NEIGHBOURS = 5  # cases seen whose outcomes predict a candidate's (KnownMap)
UNKNOWN_FLOOR = 0.1  # a candidate every one of whose cases is predicted to land in a known bucket keeps this share
# (and a case surely in one, by its nearest cases seen, still runs with this chance)
PROPOSALS = 50  # geometries proposed in a row whose cases all look known, after which the last runs whole
EXTENDED = {"dilation": 4, "batch": 4}  # the extended profile's widest dilation and batch
EXPLICIT_SHARE = 0.35  # of the boundary geometries drawn unpadded, those given explicit pads instead
# A failure there is this tool's model builder's (tf.keras, torch), not a compiler's: a geometry
# its frontend cannot build belongs in pipeline/space/refusal.py; the hunt lists such cases
# apart and counts no bucket of theirs as new.
FRONTEND_STAGES = ("model",)
REPORTED = "@bugreport:"  # the journal key of a bug report written (then its path), with the hunt's seconds so far
JOURNAL, SPEC, FOUND, SUMMARY = "journal.jsonl", "hunt.json", "found.json", "summary.json"


# --- the space -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Space:
    """The box the hunt searches: the categories' ranges, per rank for the sizes."""

    spatial: dict  # rank -> (lo, hi)
    kernel: tuple[int, int]
    stride: tuple[int, int]
    channels: tuple[int, int]
    explicit: bool = True  # explicit pads too (ONNX cases only); not for the `cost` baseline, the space as it was

    @classmethod
    def of(cls, categories: tuple[Category, ...]) -> "Space":
        if not categories:
            raise ConfigError("doit hunt", "no categories", "the run's sweep has no categories to take its space from")
        spatial: dict[int, tuple[int, int]] = {}
        for c in categories:
            lo, hi = spatial.get(c.rank, c.spatial)
            spatial[c.rank] = (min(lo, c.spatial[0]), max(hi, c.spatial[1]))

        def span(field):
            return min(getattr(c, field)[0] for c in categories), max(getattr(c, field)[1] for c in categories)

        return cls(spatial, span("kernel"), span("stride"), span("channels"))

    def sizes(self, rank: int) -> list[int]:
        lo, hi = self.spatial[rank]
        near = {v for k in range(1, hi.bit_length() + 1) for v in ((1 << k) - 1, 1 << k, (1 << k) + 1)}
        return sorted({lo, hi} | {v for v in near if lo <= v <= hi})

    def channel_values(self) -> list[int]:
        lo, hi = self.channels
        near = {v for lane in LANES for v in (lane - 1, lane, lane + 1)}
        return sorted({lo, hi, hi - 1, 1, 2, 3} & set(range(lo, hi + 1)) | {v for v in near if lo <= v <= hi})


def boundary(rng: random.Random, space: Space) -> Geometry:
    """A geometry with each dimension at one of its boundary values (sometimes anywhere in range)."""
    rank = rng.choice(sorted(space.spatial))

    def pick(values, lo, hi):
        return rng.choice(values) if rng.random() < 0.75 else rng.randint(lo, hi)

    klo, khi = space.kernel
    kernel = tuple(pick(sorted({klo, min(klo + 1, khi), min(3, khi), khi}), klo, khi) for _ in range(rank))
    if rng.random() < 0.5:
        kernel = (kernel[0],) * rank
    dilation = tuple(rng.randint(2, EXTENDED["dilation"]) if k > 1 and rng.random() < 0.2 else 1 for k in kernel)
    window = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    slo, shi = space.spatial[rank]
    spatial = tuple(w if rng.random() < 0.15 else max(w, pick(space.sizes(rank), slo, shi)) for w in window)
    tlo, thi = space.stride
    stride = tuple(pick(sorted({tlo, min(2, thi), min(k + 1, thi), thi}), tlo, thi) for k in kernel)
    if rng.random() < 0.5:
        stride = (stride[0],) * rank
    channels = space.channel_values()
    c_in, c_out = pick(channels, *space.channels), pick(channels, *space.channels)
    groups, roll = 1, rng.random()
    if roll < 0.12 and c_in > 1:  # depthwise
        groups, c_out = c_in, c_in * rng.choice((1, 2))
    elif roll < 0.24:  # grouped: a common divisor
        common = [g for g in (2, 3, 4, 8) if c_in % g == 0 and c_out % g == 0 and c_in // g > 1]
        groups = rng.choice(common) if common else 1
    batch = rng.randint(2, EXTENDED["batch"]) if rng.random() < 0.15 else 1
    padding = "same" if rng.random() < 0.3 else "valid"
    activation = rng.choice(("relu", "relu6")) if rng.random() < 0.2 else "none"
    g = Geometry(rank, spatial, kernel, stride, c_in, c_out, padding, dilation, groups, batch, activation)
    if space.explicit and padding == "valid" and rng.random() < EXPLICIT_SHARE:
        g = explicit(rng, g)
    return g


def explicit(rng: random.Random, g: Geometry) -> Geometry:
    """`g` with explicit pads: per axis, each side one of 0, 1, half the window and the window
    less one, the same on both sides half the time (torch's `padding=p`)."""
    pads = []
    for window in g.window:
        values = sorted(pad_values(window))
        before = rng.choice(values)
        pads.append((before, before if rng.random() < 0.5 else rng.choice(values)))
    return replace(g, padding="explicit", explicit_pads=tuple(pads))


def pad_values(window: int) -> set[int]:
    """A side's boundary pads for a window: 0, 1, half the window, the window less one."""
    return {0, 1, window // 2, max(window - 1, 1)}


def neighbour(rng: random.Random, g: Geometry, space: Space) -> Geometry:
    """`g` with one or two dimensions moved: by one, doubled or halved, or to a boundary value;
    or its padding switched."""
    out = g
    for _ in range(rng.choice((1, 1, 2))):
        if rng.random() < 0.1:
            if space.explicit:  # to either other mode
                mode = rng.choice([m for m in ("valid", "same", "explicit") if m != out.padding])
                out = explicit(rng, out) if mode == "explicit" else replace(out, padding=mode, explicit_pads=None)
            else:
                out = replace(out, padding="same" if out.padding == "valid" else "valid")
            continue
        dim = rng.choice(dimensions(out))
        v = value(out, dim)
        bounds = _bounds(out, dim, space)
        choices = {v - 1, v + 1, v * 2, max(v // 2, 1), *bounds}
        if dim.startswith("stride"):
            choices.add(value(out, "kernel" + dim[-1]) + 1)  # a stride larger than the kernel
        if dim.startswith("spatial"):
            choices.add(out.window[int(dim[-1])])  # the kernel's window equal to the input
        lo, hi = _range(out, dim, space)
        choices = sorted(c for c in choices if lo <= c <= hi and c != v)
        if choices:
            out = with_value(out, dim, rng.choice(choices))
    return out


def _range(g: Geometry, dim: str, space: Space) -> tuple[int, int]:
    base = dim.rstrip("0123456789")
    if base == "spatial":
        return minimum(g, dim), space.spatial[g.rank][1]
    if base in ("kernel", "stride"):
        return getattr(space, base)
    if base == "dilation":
        return 1, EXTENDED["dilation"]
    if base == "batch":
        return 1, EXTENDED["batch"]
    if base in PADS:  # a side's pad: up to the window less one
        return minimum(g, dim), max(g.window[int(dim[-1])] - 1, 1)
    if base == "groups":
        return 1, max(space.channels[1] // max(value(g, "c_in_per_group"), value(g, "c_out_per_group")), 1)
    return 1, max(space.channels[1] // g.groups, 1)  # channels per group


def _bounds(g: Geometry, dim: str, space: Space) -> set[int]:
    base = dim.rstrip("0123456789")
    if base == "spatial":
        return set(space.sizes(g.rank))
    if base in ("c_in_per_group", "c_out_per_group"):
        return {v // g.groups for v in space.channel_values() if v % g.groups == 0}
    if base in PADS:
        return pad_values(g.window[int(dim[-1])])
    return set(_range(g, dim, space))


# --- coverage: pairs of coarse features ---------------------------------------------------------

def coarse(g: Geometry) -> dict[str, str]:
    """A geometry's classes: what makes two geometries alike to a compiler's special cases."""
    (h, w), (kh, kw), (sh, sw) = g.hw, g.khw, g.shw

    def kernel_class(k, n):
        return "1" if k == 1 else "input" if k == n else "small" if k <= 3 else "large"

    def stride_class(s, k):
        return "1" if s == 1 else "<k" if s < k else "=k" if s == k else ">k"

    def count_class(c):
        return "1" if c == 1 else "pow2" if c & (c - 1) == 0 else "lane±1" if any(abs(c - l) == 1 for l in LANES) \
            else "odd" if c % 2 else "even"

    def size_class(n):
        return "pow2" if n & (n - 1) == 0 else "pow2±1" if (n - 1) & (n - 2) == 0 or (n + 1) & n == 0 else "other"

    return {"rank": str(g.rank), "kw": kernel_class(kw, w), "kh": kernel_class(kh, h),
            "square": str(kh == kw), "sw": stride_class(sw, kw), "sh": stride_class(sh, kh),
            "c_in": count_class(g.c_in), "c_out": count_class(g.c_out), "w": size_class(w),
            "dilation": str(g.dhw != (1, 1)), "groups": "depthwise" if g.depthwise else "grouped" if g.groups > 1
            else "none", "batch": str(g.batch > 1), "padding": padding_class(g),
            "activation": g.activation}


def padding_class(g: Geometry) -> str:
    """valid, same, or explicit pads: the same on both sides of every axis, or not."""
    if g.padding != "explicit":
        return g.padding
    return "explicit symmetric" if all(b == a for b, a in g.explicit_pads) else "explicit asymmetric"


def pairs(g: Geometry) -> set[tuple]:
    items = sorted(coarse(g).items())
    return {(a, b) for i, a in enumerate(items) for b in items[i + 1:]}


# --- the hunt ------------------------------------------------------------------------------------

@dataclass
class Found:
    """A new bucket: its target, its cases so far, the first one."""

    target: str
    bucket: str
    first: str
    cases: list  # case names
    geometries: list  # their geometries
    at: float = 0.0  # the hunt's seconds (over its resumes) when its first case finished


class KnownMap:
    """Where the hunt met the known buckets: every case it evaluated, per target and variant, as a
    point of its region features (pipeline/results/region.py, each as sign(x) log(1 + |x|), so
    that sizes and ratios weigh alike), marked by whether it landed in a known bucket (the
    sweep's or a listed one). A candidate case's chance of landing in one is the share of its
    NEIGHBOURS nearest cases evaluated that did; with none, 0.

    The sweep's cases are not points. Seeded with them (their results, or the target's listing,
    which on the pinned release says the same), the map sent the torq hunt where the sweep
    passed, and it found fewer new buckets than the cost baseline (docs/measurements.md,
    2026-12-06 (late night), "the map seeded from the listing"). Known from its own cases, it
    weighs down only the regions it has itself found known."""

    def __init__(self):
        self.points: dict[tuple[str, str], tuple[list, list]] = {}  # (target, variant) -> (vectors, known)
        self._stacked: dict[tuple[str, str], tuple] = {}  # the same as arrays, made when first asked after a change

    @staticmethod
    def _vector(geometry: dict, variant: str):
        import numpy as np

        backend, flavor = variant.split("_", 1)
        values = np.array(list(features(geometry, backend, flavor).values()))
        return np.sign(values) * np.log1p(np.abs(values))

    def add(self, target: str, variant: str, geometry: dict, known: bool) -> None:
        vectors, marks = self.points.setdefault((target, variant), ([], []))
        vectors.append(self._vector(geometry, variant))
        marks.append(known)
        self._stacked.pop((target, variant), None)

    def surely_known(self, case: Case) -> bool:
        """Whether each of the case's NEIGHBOURS nearest cases seen (at least that many seen in
        its flavor) landed in a known bucket."""
        seen = self.points.get((case.target, case.variant), ([], []))[0]
        return len(seen) >= NEIGHBOURS and self.p_known(case) == 1.0

    def p_known(self, case: Case) -> float:
        import numpy as np

        key = (case.target, case.variant)
        if key not in self.points:
            return 0.0
        if key not in self._stacked:  # asked for every candidate's cases: one array per change
            self._stacked[key] = tuple(map(np.array, self.points[key]))
        vectors, marks = self._stacked[key]
        distances = ((vectors - self._vector(case.geometry.to_dict(), case.variant)) ** 2).sum(axis=1)
        return float(marks[np.argsort(distances, kind="stable")[:NEIGHBOURS]].mean())


class Hunt:
    """The search's state: what was evaluated (from the journal too), what is covered, what is new."""

    def __init__(self, cfg: Config, folder: Path, swept: list[dict], strategy: str, seed: int,
                 estimate, flavors: frozenset[str] | None, log=print):
        self.cfg, self.folder, self.strategy, self.log = cfg, folder, strategy, log
        self.estimate = estimate  # case -> predicted seconds of its chain
        self.flavors = flavors
        self.space = replace(Space.of(cfg.spec.categories), explicit=strategy == "hunt")
        self.sampled = {g for _, g, _ in cfg.sampled}  # the sweep's own geometries
        self.passed_over: set[Geometry] = set()  # proposed, but every case of it looked surely known
        self.known = known_buckets(cfg, swept)
        self.map = KnownMap()  # where the hunt met known buckets: a candidate predicted in one is weighted down
        self.entries: dict[str, dict] = {}  # case key -> journal entry
        self.geometries: dict[Geometry, str] = {}  # geometry -> its generator
        self.covered: set = set()
        self.found: dict[tuple[str, str], Found] = {}
        self.frontend: dict[str, str] = {}  # case -> bucket of a failure in this tool's frontends
        self.spent = 0.0  # seconds the journal's hunts spent, searching and reporting (the budget is the hunt's, over resumes)
        self.reported: set[str] = set()  # report.md of each new bucket the journal's hunts reported
        self.journal = Journal(folder / JOURNAL)
        self._resume()
        self.rng = random.Random(seed * 1_000_003 + len(self.entries))
        self.drawn = {c.name: 0 for c in cfg.spec.categories}  # sample strategy: draws past N per category

    # the journal
    def _resume(self) -> None:
        for entry in self.journal.entries.values():
            self.spent = max(self.spent, float(entry.get("elapsed", 0.0)))
            if entry["key"].startswith(REPORTED):  # a bug report written: not written again
                self.reported.add(entry["report"])
                continue
            try:
                geometry = Geometry.from_dict(entry["geometry"])
            except (ValueError, KeyError, TypeError, ConfigError):
                continue
            self.record(entry, geometry, quiet=True)
        if self.entries:
            self.log(f"hunt: resuming: {len(self.entries)} cases of {len(self.geometries)} geometries from "
                     f"{self.journal.path}, not evaluated again; {self.spent:.0f} s of the budget spent")

    def record(self, entry: dict, geometry: Geometry, quiet: bool = False) -> None:
        self.entries[entry["key"]] = entry
        self.geometries.setdefault(geometry, entry.get("source", ""))
        self.covered |= pairs(geometry)
        bucket = entry.get("bucket")
        if entry.get("variant"):
            self.map.add(entry["target"], entry["variant"], geometry.to_dict(), (entry["target"], bucket) in self.known)
        if not bucket or (entry["target"], bucket) in self.known:
            return
        if entry.get("stage") in FRONTEND_STAGES:  # this tool's model builders, not the target's tools
            self.frontend[entry["case"]] = bucket
            return
        found = self.found.get((entry["target"], bucket))
        if found is None:
            found = self.found[(entry["target"], bucket)] = Found(entry["target"], bucket, entry["case"], [], [],
                                                                  float(entry.get("elapsed", 0.0)))
            if not quiet:
                self.log(f"hunt: NEW bucket on {entry['target']} ({len(self.found)} so far): {bucket}\n"
                         f"      first case: {entry['case']}")
        found.cases.append(entry["case"])
        found.geometries.append(geometry)

    # choosing the next geometry
    def cases_of(self, g: Geometry, source: str) -> list[Case]:
        out = []
        for target in self.cfg.targets:
            flavors = [v for v in target.profile.flavors if self.flavors is None or v in self.flavors]
            out += make_cases([(f"hunt_{source}", g)], self.cfg.compile_only, (), target.name, tuple(flavors),
                              self.cfg.data)
        return out

    def _usable(self, g: Geometry) -> bool:
        """Not evaluated (nor one of the sweep's), a geometry, and built in a flavor the hunt runs
        (cases_of leaves out the flavors whose frontend refuses it)."""
        return g not in self.geometries and g not in self.sampled and g not in self.passed_over and buildable(g) \
            and bool(self.cases_of(g, "x"))

    def propose(self) -> tuple[Geometry, str] | None:
        """The next geometry and its generator, or None when none can be found."""
        if self.strategy == "sample":
            return self._sample()
        candidates = []
        # a new bucket is explored near its cases until it has EDGE_CASES of them (its edge, and
        # cases on both sides for its region rule), then the search moves on
        new = [f for f in self.found.values() if len(f.cases) < EDGE_CASES]
        evaluated = list(self.geometries)
        for attempt in range(CANDIDATES * 20):
            if len(candidates) >= CANDIDATES:
                break
            roll = self.rng.random()
            if new and roll < 0.3:
                g, source = neighbour(self.rng, self.rng.choice(self.rng.choice(new).geometries), self.space), "edge"
            elif evaluated and roll < 0.6:
                g, source = neighbour(self.rng, self.rng.choice(evaluated), self.space), "near"
            else:
                g, source = boundary(self.rng, self.space), "boundary"
            if self._usable(g) and g not in {c[0] for c in candidates}:
                candidates.append((g, source))
        if not candidates:
            return None

        def score(item):
            """Untried pairs of coarse features per square root of predicted seconds, weighted by
            the share of its cases not predicted to land in a known bucket (KnownMap; not for
            the `cost` baseline)."""
            g, source = item
            cases = self.cases_of(g, source)
            gain = len(pairs(g) - self.covered) + (EDGE_BONUS if source == "edge" else 0)
            seconds = sum(self.estimate(c) for c in cases) or 1.0
            if self.strategy == "cost":
                return (gain + 0.5) / math.sqrt(seconds)
            unknown = 1.0 - sum(self.map.p_known(c) for c in cases) / max(len(cases), 1)
            return (gain + 0.5) / math.sqrt(seconds) * (UNKNOWN_FLOOR + unknown)

        return max(candidates, key=score)

    def _sample(self) -> tuple[Geometry, str] | None:
        categories = list(self.cfg.spec.categories)
        for _ in range(len(categories) * 50):
            c = categories[sum(self.drawn.values()) % len(categories)]
            self.drawn[c.name] += 1
            g = c.sample(self.cfg.n + self.drawn[c.name])[-1]
            if self._usable(g):
                return g, "sample"
        return None

    def worth_running(self, cases: list[Case]) -> list[Case]:
        """The hunt's cases of a geometry without those surely in a known bucket (KnownMap), each
        of which still runs with chance UNKNOWN_FLOOR (a new bucket may sit beside a known one);
        every case for the baselines."""
        if self.strategy != "hunt":
            return cases
        return [c for c in cases if not self.map.surely_known(c) or self.rng.random() < UNKNOWN_FLOOR]

    def in_known(self) -> dict:
        """How many of the hunt's cases failed in a known bucket (the sweep's or a listed one),
        of how many, and the share."""
        known = sum(1 for e in self.entries.values() if e.get("bucket") and (e["target"], e["bucket"]) in self.known)
        return {"cases": known, "of": len(self.entries), "share": round(known / len(self.entries), 3) if self.entries else 0.0}

    def progress(self, start: float, budget: float, running: int) -> str:
        new = ", ".join(f"{f.target}: {f.bucket[:70]} ({len(f.cases)})" for f in self.found.values())
        return (f"hunt: {self.spent + time.monotonic() - start:.0f} s of {budget:g} s, {len(self.geometries)} geometries, "
                f"{len(self.entries)} cases ({running} running), {len(self.found)} new buckets"
                + (f": {new}" if new else ""))


def known_buckets(cfg: Config, swept: list[dict]) -> set[tuple[str, str]]:
    """(target, bucket) of every failure the sweep's results in this build folder hold (`swept`:
    their entries), and of every listed failure: what a hunt does not count as new."""
    known = {(e["target"], signature(e)) for e in swept if e["status"] in TOOL_FAILURES}
    known |= {(t.name, e.bucket) for t in cfg.targets for e in t.expectations}
    return known


def evaluate(case: Case, cfg: Config, call=None) -> dict:
    """The case's chain (each stage run by `call`, where given: run_chain), then its result entry
    (as the report reads it)."""
    run_chain(case, cfg, TASKS, call)
    return collect([case], cfg.case_dir)[0]


def hunt(cfg: Config, cases: list[Case], budget: float, seed: int = 0, strategy: str = "hunt", lanes: int = 2,
         estimate=lambda case: 1.0, flavors: frozenset[str] | None = None, log=print, remote=None,
         limit: int = 0) -> dict:
    """Search within 3/4 of `budget` seconds on `lanes` lanes, starting no case once `limit`
    cases (if not 0; over resumes) have started; then the new buckets' bug reports, within what
    is left of the budget, at most its last quarter. Returns
    the summary (also written to <build>/hunt/summary.json). `remote(hunt_cfg)`, where given,
    gives the function that runs a stage of the search's cases elsewhere (the Dask cluster, as
    the sweep's tasks run there: run_chain's `call`)."""
    folder = cfg.layout.hunt
    hunt_cfg = cfg.scratch(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # the cluster is the run's (a scratch Config has no scheduler of its own), building in the hunt's folder
    call = remote(replace(hunt_cfg, scheduler=cfg.scheduler)) if remote is not None else None
    swept = collect(cases, cfg.case_dir)  # the sweep's results: what is known, and cases to learn regions from
    state = Hunt(cfg, folder, swept, strategy, seed, estimate, flavors, log)
    start, usage = time.monotonic(), _cpu()
    deadline = start + budget * SEARCH_SHARE - state.spent  # a resumed hunt goes on with the same budget
    log(f"hunt: {strategy} on {', '.join(t.name for t in cfg.targets)}, {lanes} lanes, search until "
        f"{budget * SEARCH_SHARE:.0f} s of {budget:g} s; {len(state.known)} buckets known (the sweep's and the "
        f"listed); cases in {folder}")

    started = len(state.entries)  # cases started, over resumes: the case limit's count

    def more() -> list[Case] | None:
        """The cases of the next geometry worth running, whenever a lane is free (none once
        the case limit is reached)."""
        nonlocal started
        if limit and started >= limit:
            return None
        chosen = _next()
        started += len(chosen or ())
        return chosen

    def _next() -> list[Case] | None:
        for _ in range(PROPOSALS):
            proposal = state.propose()
            if proposal is None:
                return None
            g, source = proposal
            cases = state.cases_of(g, source)
            kept = state.worth_running(cases)
            if kept:
                state.geometries.setdefault(g, source)  # not proposed twice while it runs
                return kept
            state.passed_over.add(g)  # not proposed again; not evaluated
        state.geometries.setdefault(g, source)
        return cases  # every recent proposal looked known: this one runs whole

    def note(case: Case, entry: dict) -> dict:
        """A finished case's journal line, after its key, name, target, flavor and geometry."""
        return {"source": state.geometries[case.geometry], "status": entry["status"], "stage": entry["stage"],
                "bucket": signature(entry) if entry["status"] in TOOL_FAILURES else None,
                "seconds": round(sum(float(s.get("seconds", 0)) for s in (entry.get("stages") or {}).values()), 3),
                "elapsed": round(state.spent + time.monotonic() - start, 1)}

    run_cases(hunt_cfg, more, lanes, work=lambda case, config: evaluate(case, config, call), journal=state.journal,
              note=note, deadline=deadline,
              on_done=lambda case, entry, line: state.record(line, case.geometry),
              tick=lambda running: log(state.progress(start, budget, running)), interval=cfg.progress_interval)
    searched = state.spent + time.monotonic() - start
    cpu = _cpu() - usage
    log(state.progress(start, budget, 0))
    hunt_cases = [c for g, source in state.geometries.items() for c in state.cases_of(g, source)
                  if c.key in state.entries]
    entries = collect(hunt_cases, hunt_cfg.case_dir)
    _write_specs(folder, state, hunt_cases)
    for target in cfg.targets:  # the hunt's own report: results.json and report.html, with region rules
        mine = [e for e, c in zip(entries, hunt_cases) if c.target == target.name]
        write_report(mine, hunt_cfg.report_dir(target.name), tool_versions(hunt_cfg, target))
    reports = {}
    if state.found:
        from pipeline.triage.bugreport import bugreports, report_md

        # what is left of the budget, at most its last quarter (a search that ended early, at the
        # case limit or out of proposals, does not lengthen the reports)
        remaining = min(max(budget - (state.spent + time.monotonic() - start), 0.0), budget * (1 - SEARCH_SHARE))
        left = [f for f in state.found.values() if str(report_md(hunt_cfg, f.target, f.bucket)) not in state.reported]
        per_bucket = remaining / max(len(left), 1)
        log(f"hunt: {len(state.found)} new buckets: bug reports ({len(left)} to write), {per_bucket:.0f} s each")

        def reported(bucket: str, path: Path) -> None:  # journaled: a resumed hunt neither redoes nor re-spends it
            state.journal.append({"key": f"{REPORTED}{path}", "bucket": bucket, "report": str(path),
                                  "elapsed": round(state.spent + time.monotonic() - start, 1)})

        for path in bugreports(hunt_cfg, hunt_cases, [f.bucket for f in state.found.values()], per_bucket,
                               log=log, region_entries=entries + swept, reported=state.reported, on_report=reported):
            reports[path.parent.name] = str(path)
    summary = {
        "strategy": strategy, "seed": seed, "budget": budget, "case_limit": limit, "lanes": lanes,
        "search_seconds": round(searched, 1), "cpu_seconds": round(cpu, 1),
        "geometries": len(state.geometries), "cases": len(state.entries),
        "known_buckets": len(state.known),
        "in_known_buckets": state.in_known(),
        "new_root_causes": new_root_causes(list(zip(hunt_cases, entries)), state.found),
        "new_buckets": [{"target": f.target, "bucket": f.bucket, "first_case": f.first, "found_at_s": f.at,
                         "cases": len(f.cases), "examples": f.cases[:5]} for f in state.found.values()],
        "bugreports": reports,
        "frontend_failures": [{"case": c, "bucket": b} for c, b in sorted(state.frontend.items())],
        "spec": str(folder / SPEC), "found": str(folder / FOUND),
    }
    write_text(folder / SUMMARY, json.dumps(summary, indent=1) + "\n")
    log(f"hunt: {len(state.found)} new buckets in {len(state.geometries)} geometries ({len(state.entries)} cases), "
        f"search {searched:.0f} s; summary {folder / SUMMARY}; cases in {folder / SPEC}, new buckets' in {folder / FOUND}")
    return summary


def new_root_causes(evaluated: list[tuple[Case, dict]], found: dict) -> list[dict]:
    """The root causes (the report's: pipeline/results/causes.py) of the new buckets, per target,
    from the hunt's cases in them (`evaluated`: each case with its result entry)."""
    out = []
    for target in sorted({f.target for f in found.values()}):
        new = {f.bucket for f in found.values() if f.target == target}
        mine = [e for c, e in evaluated if c.target == target and signature(e) in new]
        out += [{"target": target, "buckets": cause["buckets"], "joined_by": cause["joined_by"]}
                for cause in causes(mine)]
    return out


def _write_specs(folder: Path, state: Hunt, cases: list[Case]) -> None:
    """hunt.json: every geometry evaluated; found.json: those with a case in a new bucket."""
    new_cases = {name for f in state.found.values() for name in f.cases}
    every, found = [], []
    for g, source in state.geometries.items():
        names = {c.name for c in cases if c.geometry == g}
        if not names:
            continue  # proposed, not run (the search ended first)
        item = {"category": f"hunt_{source}", **g.to_dict()}
        every.append(item)
        if names & new_cases:
            found.append(item)
    write_text(folder / SPEC, json.dumps({"geometries": every}, indent=1) + "\n")
    write_text(folder / FOUND, json.dumps({"geometries": found}, indent=1) + "\n")


def _cpu() -> float:
    """CPU seconds of this process, its finished children and its live helpers (the model
    builders and oracles, alive for the whole hunt)."""
    from pipeline.core.isolate import helpers_cpu

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + helpers_cpu()
