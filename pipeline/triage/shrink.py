"""Shrink a failing case: the smallest geometry, by MACs, that still fails the same way (same
stage, same bucket signature) on the same target and compiler.

The geometry is a vector of integer dimensions: batch, groups, input and output channels per
group, then per spatial axis kernel, dilation, stride and input size, and the padding. One
pass takes the dimensions in that order; for each it tries the dimension's minimum first,
then one less than the current value (if that passes, the dimension is minimal already), then
bisects between the largest value known not to fail that way and the smallest known to. A
candidate the geometry rules or the frontend refuse counts as not failing. Passes repeat
until one changes nothing. Then, since a failure may depend on several dimensions at once
(non-monotone in each), moves that change several together are tried (every size scaled by
1/2 or 3/4, every pair halved); after one that still fails, the passes start again. The search
ends when neither moves, and is deterministic for deterministic tools.

Every attempt is an ordinary case chain (model, import, compile, and run and verify when the
failure is there) run by the sweep's own stage functions, with the sweep's timeout and
isolation, in a folder of its own: <build>/shrink/<target>/<case>/ (no `@` in it: IREE's run
tools read `@` in a path as a separator). The sweep's artifacts
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
from pipeline.core.chain import SHARED_TASKS, TASK_OF_STAGE, tasks_until
from pipeline.space.refusal import refusal
from pipeline.space.geometry import Geometry, macs
from pipeline.results.report import signature
from pipeline.outcome.result import CHANGED, ERROR, FAIL, HARNESS, XFAIL, read_result
from pipeline.core.tools import write_text

SHRINK_DIR = "shrink"


@dataclass(frozen=True)
class Attempt:
    geometry: Geometry
    outcome: str  # "same" (fails the same way), "other" (fails otherwise), "pass", "invalid"
    signature: str
    seconds: float
    compiled: bool  # whether the attempt reached the compiler

    def to_dict(self) -> dict:
        return {"case": self.geometry.id, "geometry": self.geometry.to_dict(), "macs": macs(self.geometry),
                "outcome": self.outcome, "signature": self.signature, "seconds": round(self.seconds, 3)}


# --- the geometry as a vector of dimensions ----------------------------------------------------

def dimensions(g: Geometry) -> list[str]:
    """The dimensions a pass moves along, in order."""
    axes = [f"{name}{i}" for name in ("kernel", "dilation", "stride", "spatial") for i in range(g.rank)]
    return ["batch", "groups", "c_in_per_group", "c_out_per_group", *axes]


def value(g: Geometry, dim: str) -> int:
    if dim == "c_in_per_group":
        return g.c_in // g.groups
    if dim == "c_out_per_group":
        return g.c_out // g.groups
    if dim[-1].isdigit():
        return getattr(g, dim[:-1])[int(dim[-1])]
    return getattr(g, dim)


def with_value(g: Geometry, dim: str, v: int) -> Geometry:
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
    if dim.startswith("spatial") and g.padding == "valid":
        return g.window[int(dim[-1])]
    return 1


def buildable(g: Geometry, backend: str) -> bool:
    try:
        g.validate()
    except ConfigError:
        return False
    return refusal(g, backend) is None


# --- attempts ------------------------------------------------------------------------------------

class Shrinker:
    """Runs attempts for one failing case in its own build folder, remembering each geometry's outcome."""

    def __init__(self, case: Case, cfg: Config, folder: Path, log=print, keep_data: bool = False):
        # with keep_data, every attempt crops the original case's weights and input
        # (pipeline/space/data.py) instead of drawing its own
        self.case = replace(case, category="shrink", expected=None, data_from=case.geometry if keep_data else None)
        self.cfg = replace(cfg, build_dir=Path(folder), scheduler=None, shard=None)
        self.folder = Path(folder)
        self.log = log
        self.attempts: list[Attempt] = []
        self.seen: dict[Geometry, Attempt] = {}
        self.target: tuple[str, str] | None = None  # (stage, signature) of the failure to keep
        self.deadline: float | None = None  # time.monotonic() after which no attempt starts
        self.best: Geometry = case.geometry  # the smallest geometry known to fail the same way
        self.stopped = False  # the budget ran out before the search ended

    def case_for(self, g: Geometry) -> Case:
        return replace(self.case, geometry=g)

    def run_chain(self, g: Geometry, last_task: str) -> dict:
        """Run the case chain of `g` up to `last_task`; its result entry (status, stage, reason)."""
        from pipeline.run import stages

        case = self.case_for(g)
        case_dir = self.cfg.case_dir(case)
        for task in tasks_until(last_task):
            subject = [case] if task in SHARED_TASKS else case
            if stages.TASK_FUNCTIONS[task](subject, self.cfg):
                break
        result = read_result(case_dir) or {}
        if result.get("status") in (ERROR, FAIL, HARNESS):
            return result
        return {"status": "pass", "stage": None, "reason": ""}

    def attempt(self, g: Geometry) -> Attempt:
        if g in self.seen:
            return self.seen[g]
        if not buildable(g, self.case.backend):
            found = Attempt(g, "invalid", "", 0.0, False)
            self.seen[g] = found
            return found
        start = time.monotonic()
        last_task = TASK_OF_STAGE[self.target[0]] if self.target else "verify"
        result = self.run_chain(g, last_task)
        sig = signature(result) if result["status"] != "pass" else ""
        stage = result.get("stage")
        compiled = result["status"] == "pass" or stage in ("compile", "run", "oracle", "verify")
        if self.target is None:
            outcome = "same" if result["status"] != "pass" else "pass"
        else:
            outcome = "pass" if result["status"] == "pass" else \
                "same" if (stage, sig) == self.target else "other"
        found = Attempt(g, outcome, sig, time.monotonic() - start, compiled)
        self.attempts.append(found)
        self.seen[g] = found
        self.log(f"  attempt {len(self.attempts):3d}: {self.case_for(g).name}  {macs(g):,} MACs  "
                 f"{outcome}{' (' + sig + ')' if outcome == 'other' else ''}  {found.seconds:.1f} s")
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
    """Padding, then every dimension in turn; whether anything moved."""
    changed = False
    best = shrinker.best
    if best.padding == "same" and shrinker.fails(replace(best, padding="valid")):
        _move(shrinker, replace(best, padding="valid"), start)
        changed = True
    for dim in dimensions(shrinker.best):
        best = shrinker.best
        current, low = value(best, dim), minimum(best, dim)
        if current <= low:
            continue
        if shrinker.fails(with_value(best, dim, low)):
            found = low
        elif not shrinker.fails(with_value(best, dim, current - 1)):
            found = current  # already minimal along this dimension (the usual case in later passes)
        else:
            good, bad = current - 1, low  # fails at good, does not at bad
            while good - bad > 1:
                mid = (good + bad) // 2
                if shrinker.fails(with_value(best, dim, mid)):
                    good = mid
                else:
                    bad = mid
            found = good
        for g in {with_value(best, dim, v) for v in range(low, current)} & set(shrinker.seen):
            if g != with_value(best, dim, found):
                shrinker.discard(g, {start})
        if found != current:
            _move(shrinker, with_value(best, dim, found), start)
            changed = True
    return changed


def _move(shrinker: Shrinker, smaller: Geometry, start: Geometry) -> None:
    previous, shrinker.best = shrinker.best, smaller
    shrinker.discard(previous, {start})


def shrink_dir(cfg: Config, case: Case) -> Path:
    return cfg.build_dir / SHRINK_DIR / case.target / case.name


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
    log(f"conv-sweep: shrinking {case.key} ({macs(case.geometry):,} MACs); attempts in {folder}")
    first = shrinker.attempt(case.geometry)
    if first.outcome != "same":
        raise ConfigError("case", case.key, f"does not fail now on {case.target}: nothing to shrink")
    original = read_result(shrinker.cfg.case_dir(shrinker.case_for(case.geometry))) or {}
    shrinker.target = (original.get("stage"), first.signature)
    swept_signature = signature(swept) if swept.get("status") in (ERROR, FAIL, XFAIL, CHANGED) else None
    if swept_signature and swept_signature != first.signature:
        log(f"conv-sweep: note: the sweep recorded {swept_signature}\n"
            f"  it fails differently now, and that failure is the one kept: {first.signature}")
    minimal = search(shrinker, case.geometry)
    minimal_case = shrinker.case_for(minimal)
    if read_result(shrinker.cfg.case_dir(minimal_case)) is None:  # its folder went with a discarded attempt
        shrinker.run_chain(minimal, TASK_OF_STAGE[shrinker.target[0]])
    summary = {
        "case": case.key, "target": case.target, "stage": shrinker.target[0], "signature": first.signature,
        "swept_signature": swept_signature,
        "original": {"case": case.name, "geometry": case.geometry.to_dict(), "macs": macs(case.geometry)},
        "minimal": {"case": minimal_case.name, "geometry": minimal.to_dict(), "macs": macs(minimal),
                    "folder": str(shrinker.cfg.case_dir(minimal_case)),
                    "repro": str(shrinker.cfg.case_dir(minimal_case) / "repro.sh")},
        "attempts": len(shrinker.attempts),
        "compile_attempts": sum(a.compiled for a in shrinker.attempts),
        "seconds": round(time.monotonic() - start, 1),
        "stopped_by_budget": shrinker.stopped,
        "timeout": cfg.timeout,
        "keep_data": keep_data,  # the attempts cropped the original's weights and input
        "tools": tool_identity(cfg, cfg.target(case.target)),  # what the answer holds for (doit bugreport)
        "tried": [a.to_dict() for a in shrinker.attempts],
    }
    write_text(folder / "shrink.json", json.dumps(summary, indent=1) + "\n")
    return summary


def tool_identity(cfg: Config, target) -> dict:
    """What a shrink's answer depends on beyond the geometry: the tools' content and flags."""
    from pipeline.core.fingerprint import tool_digest
    from pipeline.targets.profiles import toolchain_identity

    return {"compiler": tool_digest(target.compiler), "runner": tool_digest(target.runner),
            "toolchain": toolchain_identity(target.toolchain), "flags": list(target.profile.flags + target.extra_flags)}


def describe(summary: dict) -> str:
    o, m = summary["original"], summary["minimal"]
    return "\n".join([
        f"failure kept: {summary['signature']}",
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
