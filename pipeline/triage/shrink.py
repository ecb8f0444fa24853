"""Shrink a failing case: the smallest geometry, by MACs, that still fails the same way (same
stage, same bucket signature) on the same target and compiler.

"The same way" is a predicate on an attempt. For a timeout bucket (`compile: timeout`,
`run: timeout`) it is "anomalously slow" (pipeline/triage/slow.py): the stage took more than
SLOW_FACTOR times its typical seconds, whether it finished that slowly or was cut at a limit
past that point. A cut says only that the tool ran past its limit, and most small
cases' limits are their floor, far above their prediction: shrinking on the cut itself would
end at the smallest case still needing the floor, one that never finishes, where this ends
at one that still finishes anomalously slowly, whose passes can be timed. Where the original
cannot be told anomalous (no prediction covers it, or its budget cut it before SLOW_FACTOR
times its prediction), the predicate is the cut itself. Each attempt is still bounded by its
limit; attempts are timed, so the store of stage outputs is off, and a finished attempt does
not widen the limits of the attempts after it.

The geometry is a vector of integer dimensions: batch, groups, input and output channels per
group, then per spatial axis kernel, dilation, stride and input size, and explicit pads (each
side of each axis, down to 0); a fused activation and SAME or explicit padding are dropped
first where the failure stays without them. One
pass takes the dimensions in that order; for each it tries the dimension's minimum first,
then 2, 3, 4 and the powers of two from the bottom up (a failure only in a window of values is
found at its bottom), then one less than the current value where none of those failed (if that
passes, the dimension is minimal already), then bisects between the largest value known not to
fail that way and the smallest known to. A
candidate the geometry rules or the frontend refuse counts as not failing. Passes repeat
until one changes nothing. Then, since a failure may depend on several dimensions at once
(non-monotone in each), moves that change several together are tried (every size scaled by
1/2 or 3/4, every pair halved); after one that still fails, the passes start again. The search
ends when neither moves, and is deterministic for deterministic tools.

Every attempt is an ordinary case chain (model, import, compile, and run and verify when the
failure is there) run by the sweep's own stage functions (pipeline/run/runner.py: run_chain),
with the sweep's timeout and isolation, in a folder of its own: <build>/shrink/<target>/<case>/
(no `@` in it: IREE's run tools read `@` in a path as a separator). The sweep's artifacts
and results are never touched. The attempts that are neither the original nor the minimum
are deleted as the search goes; shrink.json lists every attempt.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.space.cases import Case
from pipeline.config import Config
from pipeline.core.errors import ConfigError
from pipeline.core.chain import TASK_OF_STAGE, tasks_until
from pipeline.space.refusal import refusal
from pipeline.space.geometry import Geometry, macs
from pipeline.results.report import signature
from pipeline.outcome.result import CHANGED, ERROR, FAIL, TIMEOUT, XFAIL, Result, read_result
from pipeline.outcome.verdict import outcome as raw_outcome
from pipeline.core.tools import write_text
from pipeline.run.runner import run_chain
from pipeline.targets.cost import OBSERVED
from pipeline.triage.slow import Slow, stage_seconds, typical_seconds


@dataclass(frozen=True)
class Attempt:
    geometry: Geometry
    # "same" (fails the same way), "other" (fails otherwise), "pass", "invalid"; for the slow
    # predicate also "undecided" (cut at a limit below SLOW_FACTOR x its prediction)
    outcome: str
    signature: str
    seconds: float
    compiled: bool  # whether the attempt reached the compiler
    # with the slow predicate: the timed stage's seconds where it ended by itself, the limit it
    # had (cut: it ran at least that long), and its typical seconds
    timed: float | None = None
    limit: float | None = None
    typical: float | None = None

    def to_dict(self) -> dict:
        timing = {k: round(v, 3) for k, v in (("timed", self.timed), ("limit", self.limit),
                                                ("typical", self.typical)) if v is not None}
        return {"case": self.geometry.id, "geometry": self.geometry.to_dict(), "macs": macs(self.geometry),
                "outcome": self.outcome, "signature": self.signature, "seconds": round(self.seconds, 3), **timing}


# --- the geometry as a vector of dimensions ----------------------------------------------------

PADS = ("pad_before", "pad_after")  # an explicit pad's sides, as dimensions (pad_before0 is axis 0's)


def dimensions(g: Geometry) -> list[str]:
    """The dimensions a pass moves along, in order (explicit pads last, where there are some)."""
    axes = [f"{name}{i}" for name in ("kernel", "dilation", "stride", "spatial") for i in range(g.rank)]
    pads = [f"{side}{i}" for i in range(g.rank) for side in PADS] if g.padding == "explicit" else []
    return ["batch", "groups", "c_in_per_group", "c_out_per_group", *axes, *pads]


def value(g: Geometry, dim: str) -> int:
    if dim == "c_in_per_group":
        return g.c_in // g.groups
    if dim == "c_out_per_group":
        return g.c_out // g.groups
    if dim[:-1] in PADS:
        return g.explicit_pads[int(dim[-1])][PADS.index(dim[:-1])]
    if dim[-1].isdigit():
        return getattr(g, dim[:-1])[int(dim[-1])]
    return getattr(g, dim)


def plain_padding(g: Geometry) -> Geometry:
    """`g` unpadded: padding "valid", no explicit pads."""
    return replace(g, padding="valid", explicit_pads=None)


def with_value(g: Geometry, dim: str, v: int) -> Geometry:
    if dim[:-1] in PADS:
        pads = [list(p) for p in g.explicit_pads]
        pads[int(dim[-1])][PADS.index(dim[:-1])] = v
        return replace(g, explicit_pads=tuple(tuple(p) for p in pads))
    if dim == "groups":
        return replace(g, groups=v, c_in=g.c_in // g.groups * v, c_out=g.c_out // g.groups * v)
    if dim == "c_in_per_group":
        return replace(g, c_in=v * g.groups)
    if dim == "c_out_per_group":
        return replace(g, c_out=v * g.groups)
    if dim[-1].isdigit():
        field, axis = dim[:-1], int(dim[-1])
        values = list(getattr(g, field))
        values[axis] = v
        return replace(g, **{field: tuple(values)})
    return replace(g, **{dim: v})


def minimum(g: Geometry, dim: str) -> int:
    """The dimension's smallest value with every other dimension as it is."""
    if dim[:-1] in PADS:  # a side's pad: 0, or what the window needs to fit the input and the other side
        axis = int(dim[-1])
        other = g.explicit_pads[axis][1 - PADS.index(dim[:-1])]
        return max(0, g.window[axis] - g.spatial[axis] - other)
    if dim.startswith("spatial") and g.padding != "same":  # the window fits the input and its given pads
        axis = int(dim[-1])
        return max(1, g.window[axis] - sum(g.pads[axis]))
    return 1


def buildable(g: Geometry, backend: str | None = None, flavor: str | None = None) -> bool:
    """Whether `g` is a geometry (its rules hold) and, given a backend, one its frontend builds
    (in `flavor`, where given): what a shrink attempt or a hunt's candidate must be."""
    try:
        g.validate()
    except ConfigError:
        return False
    return backend is None or refusal(g, backend, flavor) is None


# --- attempts ------------------------------------------------------------------------------------

class Shrinker:
    """Runs attempts for one failing case in its own build folder, remembering each geometry's outcome."""

    def __init__(self, case: Case, cfg: Config, folder: Path, log=print, keep_data: bool = False):
        # with keep_data, every attempt crops the original case's weights and input
        # (pipeline/space/data.py) instead of drawing its own
        # (a model's own weights fit its geometry only: kept with keep_data, cropped like the seeded ones)
        self.case = replace(case, category="shrink", expected=None, data_from=case.geometry if keep_data else None,
                            weights=case.weights if keep_data else None)
        self.cfg = cfg.scratch(folder)
        self.folder = Path(folder)
        self.log = log
        self.attempts: list[Attempt] = []
        self.seen: dict[Geometry, Attempt] = {}
        self.target: tuple[str, str] | None = None  # (stage, signature) of the failure to keep
        self.slow: Slow | None = None  # the predicate of a timeout bucket, where it is one
        self.predict = lambda g: None  # a geometry's typical seconds at the slow predicate's stage
        self.path: list[Geometry] = [case.geometry]  # the geometries the search moved to, in order
        self.deadline: float | None = None  # time.monotonic() after which no attempt starts
        self.best: Geometry = case.geometry  # the smallest geometry known to fail the same way
        self.stopped = False  # the budget ran out before the search ended

    def case_for(self, g: Geometry) -> Case:
        return replace(self.case, geometry=g)

    def run_chain(self, g: Geometry, last_task: str) -> dict:
        """Run the case chain of `g` up to `last_task`; its result entry (status, stage, reason)."""
        return run_chain(self.case_for(g), self.cfg, tasks_until(last_task))

    def timed(self) -> None:
        """Time every attempt from now on: no stage outputs from the store (one taken from it
        takes no time). With the slow predicate, attempt() also forgets the limits the attempts
        before it widened (an anomalously slow one that finished would raise them)."""
        self.cfg = replace(self.cfg, cache_dir=None)

    def use_slow(self, slow: Slow, predict) -> bool:
        """Judge attempts by `slow` from now on, the first one again; whether it still fails."""
        self.timed()
        self.slow, self.predict = slow, predict
        first = self.attempts[0]
        result = read_result(self.cfg.case_dir(self.case_for(first.geometry))) or {}
        judged = replace(first, **self._timing(first.geometry, result))
        judged = replace(judged, outcome=slow.judge(result, judged.timed, judged.limit, judged.typical))
        if judged.outcome != "same":
            self.slow = None
            return False
        self.attempts[0] = self.seen[first.geometry] = judged
        return True

    def _timing(self, g: Geometry, result: dict) -> dict:
        """The slow predicate's facts of an attempt: its stage's seconds, limit and prediction."""
        case, stage = self.case_for(g), self.slow.stage
        cut = result.get("status") == TIMEOUT and result.get("stage") == stage
        return {"timed": None if cut else stage_seconds(self.cfg, case, stage),
                "limit": self.cfg.limit(case, stage).seconds if cut else None, "typical": self.predict(g)}

    def attempt(self, g: Geometry) -> Attempt:
        if g in self.seen:
            return self.seen[g]
        if not buildable(g, self.case.backend, self.case.flavor):
            found = Attempt(g, "invalid", "", 0.0, False)
            self.seen[g] = found
            return found
        start = time.monotonic()
        last_task = TASK_OF_STAGE[self.target[0]] if self.target else "verify"
        if self.slow:  # no limit widened by the attempts before (they write the folder's observations)
            (self.cfg.report_dir(self.case.target) / OBSERVED).unlink(missing_ok=True)
        result = self.run_chain(g, last_task)
        sig = signature(result) if result["status"] != "pass" else ""
        stage = result.get("stage")
        compiled = result["status"] == "pass" or stage in ("compile", "run", "oracle", "verify")
        timing = self._timing(g, result) if self.slow else {}
        if self.slow:
            outcome = self.slow.judge(result, timing["timed"], timing["limit"], timing["typical"])
        elif self.target is None:
            outcome = "same" if result["status"] != "pass" else "pass"
        else:
            outcome = "pass" if result["status"] == "pass" else \
                "same" if (stage, sig) == self.target else "other"
        found = Attempt(g, outcome, sig, time.monotonic() - start, compiled, **timing)
        self.attempts.append(found)
        self.seen[g] = found
        self.log(f"  attempt {len(self.attempts):3d}: {self.case_for(g).name}  {macs(g):,} MACs  "
                 f"{outcome}{' (' + sig + ')' if outcome == 'other' else ''}  {found.seconds:.1f} s"
                 + (f" ({self.slow.stage} {_timed_text(found)})" if self.slow else ""))
        return found

    def fails(self, g: Geometry) -> bool:
        if g not in self.seen and self.deadline is not None and time.monotonic() > self.deadline:
            raise OutOfTime()
        return self.attempt(g).outcome == "same"

    def discard(self, g: Geometry, keep: set) -> None:
        """Delete an attempt's folders unless they are kept (the original, the current minimum)."""
        if g in keep:
            return
        case = self.case_for(g)
        shutil.rmtree(self.cfg.model_dir(case), ignore_errors=True)


class OutOfTime(Exception):
    """The shrink's time budget is spent."""


def search(shrinker: Shrinker, start: Geometry) -> Geometry:
    """Move along every dimension to the smallest value still failing the same way, repeating
    passes until one changes nothing, or until the time budget is spent: the smallest geometry
    found so far is then the answer (every step to it failed the same way)."""
    shrinker.best = start
    try:
        while True:
            changed = True
            while changed:
                changed = _one_pass(shrinker, start)
            if not _joint_move(shrinker, start):
                break
    except OutOfTime:
        shrinker.stopped = True
    return shrinker.best


SIZES = ("batch", "c_in_per_group", "c_out_per_group", "kernel", "spatial")  # what scaling all together moves


def _scaled(g: Geometry, dims: list[str], factor: float) -> Geometry:
    """`g` with each of `dims` times `factor` (rounded down), never below its minimum; in the
    order of dimensions(), so that a spatial size is clamped to the window of the new kernel."""
    for dim in dimensions(g):
        if dim in dims:
            g = with_value(g, dim, max(minimum(g, dim), int(value(g, dim) * factor)))
    return g


def joint_moves(g: Geometry) -> list[Geometry]:
    """The moves that change several dimensions at once, tried when no single dimension can
    move (a failure that needs, say, c_in == c_out, or a product of sizes in a range): every
    size dimension scaled together by 1/2, then by 3/4; then every pair of dimensions halved
    together, the pairs that remove the most MACs first."""
    movable = [d for d in dimensions(g) if value(g, d) > minimum(g, d)]
    sizes = [d for d in movable if d.rstrip("0123456789") in SIZES]
    out = [_scaled(g, sizes, f) for f in (0.5, 0.75)] if len(sizes) > 1 else []
    pairs = [_scaled(g, [a, b], 0.5) for i, a in enumerate(movable) for b in movable[i + 1:]]
    out += sorted(pairs, key=macs)
    seen, moves = {g}, []
    for candidate in out:
        if candidate not in seen:
            seen.add(candidate)
            moves.append(candidate)
    return moves


def _joint_move(shrinker, start: Geometry) -> bool:
    """Take the first joint move that still fails the same way; whether one did."""
    for candidate in joint_moves(shrinker.best):
        if macs(candidate) < macs(shrinker.best) and shrinker.fails(candidate):
            _move(shrinker, candidate, start)
            return True
        shrinker.discard(candidate, {start})
    return False


def _one_pass(shrinker: Shrinker, start: Geometry) -> bool:
    """The fused activation, padding, then every dimension in turn; whether anything moved."""
    changed = False
    for field, plain in (("activation", "none"), ("padding", "valid")):
        best = shrinker.best
        simpler = plain_padding(best) if field == "padding" else replace(best, **{field: plain})
        if getattr(best, field) != plain and shrinker.fails(simpler):
            _move(shrinker, simpler, start)
            changed = True
    for dim in dimensions(shrinker.best):
        best = shrinker.best
        current, low = value(best, dim), minimum(best, dim)
        if current <= low:
            continue
        found = low if shrinker.fails(with_value(best, dim, low)) else _lowest(shrinker, best, dim, low, current)
        for g in {with_value(best, dim, v) for v in range(low, current)} & set(shrinker.seen):
            if g != with_value(best, dim, found):
                shrinker.discard(g, {start})
        if found != current:
            _move(shrinker, with_value(best, dim, found), start)
            changed = True
    return changed


def ladder(low: int, high: int) -> list[int]:
    """The values strictly between `low` and `high` tried from the bottom up before bisecting:
    2, 3 and 4, then the powers of two."""
    return sorted({v for v in (2, 3, 4) if low < v < high} | {1 << k for k in range(high.bit_length())
                                                              if low < 1 << k < high})


def _lowest(shrinker: Shrinker, best: Geometry, dim: str, low: int, current: int) -> int:
    """The smallest value of `dim` that still fails, knowing it fails at `current` and not at
    `low`. The ladder goes first: a failure that holds only in a window of values (an abort at 4
    and 8 channels, not at 3 or 16) is found at the window's bottom, where bisecting down from
    `current` stops at the first passing value it meets. Between the last passing rung and the
    first failing one (or `current`), it bisects."""
    bad, good = low, current  # passes at bad, fails at good
    for v in ladder(low, current):
        if shrinker.fails(with_value(best, dim, v)):
            good = v
            break
        bad = v
    if good == current:
        if not shrinker.fails(with_value(best, dim, current - 1)):
            return current  # minimal along this dimension (the usual case in later passes)
        good = current - 1
    while good - bad > 1:
        mid = (good + bad) // 2
        if shrinker.fails(with_value(best, dim, mid)):
            good = mid
        else:
            bad = mid
    return good


def _move(shrinker: Shrinker, smaller: Geometry, start: Geometry) -> None:
    previous, shrinker.best = shrinker.best, smaller
    getattr(shrinker, "path", []).append(smaller)
    shrinker.discard(previous, {start})


def _timed_text(a: Attempt) -> str:
    """An attempt's timed stage: its seconds, or the limit it was cut at; against its prediction."""
    took = f"{a.timed:.2f} s" if a.timed is not None else f"cut at {a.limit:g} s" if a.limit else "not reached"
    return took + (f", typical {a.typical:.3g} s" if a.typical is not None else "")


def shrink_dir(cfg: Config, case: Case) -> Path:
    return cfg.layout.shrink_dir(case.target) / case.name


def shrink(case: Case, cfg: Config, log=print, budget: float | None = None, keep_data: bool = False) -> dict:
    """Shrink `case` (a case of the sweep, on its target); return the summary shrink.json holds.
    With a `budget` (seconds), no attempt starts after it is spent; with `keep_data`, every
    attempt keeps the original's data, cropped (a failure that depends on the values)."""
    folder = shrink_dir(cfg, case)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    start = time.monotonic()
    shrinker = Shrinker(case, cfg, folder, log, keep_data)
    shrinker.deadline = start + budget if budget else None
    swept = read_result(cfg.case_dir(case)) or {}
    if swept and raw_outcome(Result.from_dict(swept)) == TIMEOUT:
        shrinker.timed()  # the original too: a compile the store remembers would take no time
    log(f"conv-sweep: shrinking {case.key} ({macs(case.geometry):,} MACs); attempts in {folder}")
    first = shrinker.attempt(case.geometry)
    if first.outcome != "same":
        raise ConfigError("case", case.key, f"does not fail now on {case.target}: nothing to shrink")
    original = read_result(shrinker.cfg.case_dir(shrinker.case_for(case.geometry))) or {}
    shrinker.target = (original.get("stage"), first.signature)
    predicate = {"kind": "same"}
    if original.get("status") == TIMEOUT and original.get("stage") in ("compile", "run"):
        stage = original["stage"]
        slow = Slow(stage)
        if shrinker.use_slow(slow, lambda g: typical_seconds(cfg, shrinker.case_for(g), stage, (case.name,))):
            predicate = slow.to_dict()
            log(f"conv-sweep: a timeout: kept is a {stage} more than {slow.factor:g} x its typical seconds "
                f"({_timed_text(shrinker.attempts[0])})")
        else:
            predicate = {**slow.to_dict(), "kind": "timeout"}
            log(f"conv-sweep: a timeout, cut before {slow.factor:g} x its typical seconds: kept is the cut itself")
    swept_signature = signature(swept) if swept.get("status") in (ERROR, FAIL, TIMEOUT, XFAIL, CHANGED) else None
    if swept_signature and swept_signature != first.signature:
        log(f"conv-sweep: note: the sweep recorded {swept_signature}\n"
            f"  it fails differently now, and that failure is the one kept: {first.signature}")
    minimal = search(shrinker, case.geometry)
    minimal_case = shrinker.case_for(minimal)
    if not shrinker.cfg.case_dir(minimal_case).is_dir():  # its folder went with a discarded attempt
        shrinker.run_chain(minimal, TASK_OF_STAGE[shrinker.target[0]])
    kept = shrinker.seen[minimal].to_dict()
    summary = {
        "case": case.key, "target": case.target, "stage": shrinker.target[0], "signature": first.signature,
        "swept_signature": swept_signature, "predicate": predicate,
        "original": {"case": case.name, "geometry": case.geometry.to_dict(), "macs": macs(case.geometry)},
        "minimal": {"case": minimal_case.name, "geometry": minimal.to_dict(), "macs": macs(minimal),
                    "folder": str(shrinker.cfg.case_dir(minimal_case)),
                    "repro": str(shrinker.cfg.case_dir(minimal_case) / "repro.sh"),
                    **{k: kept[k] for k in ("timed", "limit", "typical") if k in kept}},
        "attempts": len(shrinker.attempts),
        "compile_attempts": sum(a.compiled for a in shrinker.attempts),
        "seconds": round(time.monotonic() - start, 1),
        "stopped_by_budget": shrinker.stopped,
        "timeout": cfg.timeout,
        "keep_data": keep_data,  # the attempts cropped the original's weights and input
        "tools": tool_identity(cfg, cfg.target(case.target)),  # what the answer holds for (doit bugreport)
        "tried": [a.to_dict() for a in shrinker.attempts],
        "path": [shrinker.seen[g].to_dict() for g in shrinker.path],  # the moves, the original first
    }
    write_text(folder / "shrink.json", json.dumps(summary, indent=1) + "\n")
    return summary


def tool_identity(cfg: Config, target) -> dict:
    """What a shrink's answer depends on beyond the geometry: the tools' content and flags."""
    from pipeline.core.fingerprint import tool_digest
    from pipeline.targets.profiles import toolchain_identity

    return {"compiler": tool_digest(target.compiler, **target.launchers),
            "runner": tool_digest(target.runner, **target.launchers),
            "toolchain": toolchain_identity(target.toolchain), "flags": list(target.profile.flags + target.extra_flags)}


def describe(summary: dict) -> str:
    o, m = summary["original"], summary["minimal"]
    kept = summary.get("predicate") or {}
    how = (f", as a {kept['stage']} more than {kept['factor']:g} x its typical seconds"
           if kept.get("kind") == "slow" else "")
    return "\n".join([
        f"failure kept: {summary['signature']}{how}",
        f"original: {o['case']}  {o['macs']:,} MACs  {json.dumps(o['geometry'])}",
        f"minimal:  {m['case']}  {m['macs']:,} MACs  {json.dumps(m['geometry'])}"
        + ("  (the original's data, cropped)" if summary.get("keep_data") else ""),
        f"{summary['attempts']} attempts ({summary['compile_attempts']} compiles) in {summary['seconds']:.1f} s"
        + (" (stopped by the time budget: the smallest found so far)" if summary["stopped_by_budget"] else ""),
        f"minimal case folder: {m['folder']}",
        f"repro: {m['repro']}",
    ])


def find_cases(cases: list[Case], text: str) -> list[Case]:
    """The cases named `text`: its name@target, or its name (that case on every selected target)."""
    matches = [c for c in cases if text in (c.key, c.name)]
    if matches:
        return matches
    raise ConfigError("case", text, "is not a case of this run's selection (CONV_SWEEP_PROFILE, CONV_SWEEP_N, "
                      "CONV_SWEEP_SPEC, CONV_SWEEP_TARGET choose it); `doit list --all verify` lists them")
