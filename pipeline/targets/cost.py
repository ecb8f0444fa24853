"""Time limits that follow a case's cost: a stage's predicted seconds from its MACs and convs, measured.

A tool that hangs on a 270-MAC case should not hold a core for the ten minutes a c512 compile
may legitimately need. Each target profile names, per timed stage (compile, run), a budget (its hard limit)
and the rule for a case's own limit (`timeouts` in pipeline/targets/targets.json):

    limit = min(CONV_SWEEP_TIMEOUT, budget, max(floor, margin × predicted(MACs, convs)))

predicted(MACs) comes from the target's calibration (pipeline/targets/costs/<target>.json),
written by `doit calibrate` from a measured run: the upper envelope of the stage's measured
wall time against MACs. Every completed invocation counts, passing or failing with a message
(a compile that fails after 40 s must still fail with its message, not be cut); a timed-out
one does not (its time says nothing but the limit). The envelope is kept as its corner points
(MACs, seconds), each the slowest time of any case with at most that many MACs, so it never
falls as MACs grow:

    predicted(M) = the slowest measured time of any case with at most SPAN × M MACs

(the slowest of cases up to half a decade larger, SPAN = 10 ** 0.5: a stage's time grows at
most in proportion to its MACs, so a case up to SPAN times larger than the envelope's nearest
point is covered by the margin). A case larger than SPAN × the largest calibrated one has no
prediction: it gets the budget. The margin (a multiple of the slowest time seen at that
size, for a loaded machine) and the floor (seconds no case is cut before, for a tool's
start-up under load) are in the profile, with their reasons in docs/targets.md.

A case whose model holds several convs (Case.convs: the TFLite converter writes a grouped conv
as one conv per group) is predicted as that many convs of its MACs / convs each:

    predicted(MACs, convs) = convs × predicted(MACs / convs)

since a tool does the work of each op in turn, and each takes at most what a one-conv case of
its size takes (start-up included, so this errs long). By its MACs alone, such a case's limit
sat at the floor, near its compile time, where load decided its verdict (docs/measurements.md,
2026-12-07 (morning)). Samples enter an envelope the same way, per conv: (MACs / convs,
seconds / convs).

Where the compiler estimates the module's execution (torq-compile's profiling timeline: its NPU
cycles, Config.estimated_cycles), the run's prediction is also the envelope of run seconds
against those cycles, and the larger of the two counts:

    predicted_run = max(predicted(MACs, convs), predicted_cycles(cycles))

torq's simulator runs for as long as the NPU program it simulates, which its estimated cycles
follow far more closely than its MACs (docs/measurements.md, 2026-12-07 (morning)). The cycles
only ever raise a limit; a case past SPAN × the largest calibrated cycles has no prediction,
as by MACs.

A build folder's completed invocations widen the envelope, never narrow it (`observe`, per
build folder): a slow case the calibration did not see raises the limits of every case at
least its size, from the next run on. One run's limits come from one `LimitBook`: the
calibration and the invocations recorded before the run started, so that the planner, the
progress line, the stages and every Dask worker give a case one limit for the whole run,
whichever cases finished first.

A case cut at a limit is a `timeout` at its stage (pipeline/outcome/result.py): its reason says
which limit cut it (the budget, or the prediction below it), the prediction and the case's MACs,
and what it would have had without the budget; its bucket is `<stage>: timeout` whatever the
limit (pipeline/outcome/bucket.py).
"""
from __future__ import annotations

import bisect
import json
import os
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pipeline.core.errors import ConfigError, load_json
from pipeline.core.tools import write_text

COSTS_DIR = Path(__file__).parent / "costs"
TIMED = ("compile", "run")  # the stages whose limit follows the case's cost
BY_CYCLES = ("run",)  # the stages also predicted from the compiler's estimated cycles, where it gives them
# How much slower the same tool on the same input runs on a slow day than on a fast one
# (docs/targets.md, budgets; docs/measurements.md): a stage that took more than
# budget / DAY_SPREAD may be cut on another day, so `doit accept_failures` lists it as a
# timeout, which may also finish.
DAY_SPREAD = 3.0
SPAN = 10 ** 0.5
OBSERVED = "observed-costs.jsonl"  # in <build>/report/<target>/: this folder's completed invocations
_RULE_FIELDS = {"limit", "margin", "floor"}


@dataclass(frozen=True)
class Rule:
    """One stage's limit rule in a profile."""

    limit: float  # the stage's budget on this target: its hard limit, seconds (CONV_SWEEP_TIMEOUT caps it too)
    margin: float = 0.0  # limit = margin × predicted; 0: no predicted limit, the hard one only
    floor: float = 0.0  # no predicted limit is below this many seconds

    def to_dict(self) -> dict:
        return {"limit": self.limit, "margin": self.margin, "floor": self.floor}


def parse_rules(value, where: str) -> tuple[tuple[str, Rule], ...]:
    """A profile's `timeouts` field: {stage: {limit, margin, floor}} for stages of TIMED."""
    if not isinstance(value, dict):
        raise ConfigError(where, value, "must be an object of {stage: {limit, margin, floor}}")
    rules = []
    for stage, raw in sorted(value.items()):
        here = f"{where}.{stage}"
        if stage not in TIMED:
            raise ConfigError(here, raw, f"is not a timed stage; known: {', '.join(TIMED)}")
        if not isinstance(raw, dict) or set(raw) - _RULE_FIELDS or "limit" not in raw:
            raise ConfigError(here, raw, "must be an object with limit (and margin, floor)")
        for field, number in raw.items():
            if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0 \
                    or (field == "limit" and number <= 0):
                raise ConfigError(f"{here}.{field}", number, "must be a positive number of seconds"
                                  if field != "margin" else "must be a number >= 0")
        rules.append((stage, Rule(**{k: float(v) for k, v in raw.items()})))
    return tuple(rules)


@dataclass(frozen=True)
class Envelope:
    """The corner points of measured seconds against MACs: MACs ascending, seconds rising, and
    the largest case measured last (where the calibrated range ends)."""

    points: tuple[tuple[int, float], ...] = ()

    @classmethod
    def of(cls, samples) -> "Envelope":
        """The envelope of (macs, seconds) samples."""
        corners, slowest, largest = [], -1.0, 0
        for count, seconds in sorted(samples, key=lambda s: (s[0], -s[1])):
            largest = int(count)
            if seconds > slowest:
                corners.append((int(count), float(seconds)))
                slowest = seconds
        if corners and largest > corners[-1][0]:  # the range ends at the largest case measured
            corners.append((largest, slowest))
        return cls(tuple(corners))

    def widened(self, samples) -> "Envelope":
        """The envelope with more samples, never predicting less than this one anywhere: a
        sample counts at least at what this envelope predicts for its size (a fast small case
        must not lower the limit of a case smaller still)."""
        if not samples:
            return self
        raised = [(m, max(s, self.predict(m) or 0.0)) for m, s in samples]
        return Envelope.of([*self.points, *raised])

    def predict(self, count: int, convs: int = 1) -> float | None:
        """Seconds predicted for a case of `count` MACs in `convs` convs (each of count / convs
        MACs), or None beyond the calibrated range."""
        each = -(-count // convs)
        if not self.points or each > SPAN * self.points[-1][0]:
            return None
        macs = [m for m, _ in self.points]
        index = bisect.bisect_right(macs, SPAN * each) - 1
        return convs * self.points[max(index, 0)][1]


def per_conv(count: int, seconds: float, convs: int = 1) -> tuple[int, float]:
    """One invocation's (MACs, seconds) as an envelope sample: those of one of its convs."""
    return -(-count // convs), seconds / convs


@dataclass(frozen=True)
class Limit:
    """The seconds one tool invocation of a case is allowed, and why."""

    seconds: float
    hard: float  # the stage's budget: what the limit would be without a prediction
    predicted: float | None = None  # the stage's predicted seconds, where the calibration covers the case
    macs: int = 0
    margin: float = 0.0
    floor: float = 0.0
    stage: str = "compile"
    unbudgeted: float | None = None  # what the limit would be without the budget (CONV_SWEEP_TIMEOUT caps it)
    convs: int = 1  # the conv ops of its model (Case.convs): the prediction is per conv
    cycles: float | None = None  # the compiler's estimated cycles of the module, where the calibration predicts from them
    unpredicted: str = ""  # why the budget stands where the run chose it (CONV_SWEEP_TIMEOUTS=fixed), not the range

    @property
    def cut_early(self) -> bool:
        """Whether the prediction, not the budget, sets the limit."""
        return self.seconds < self.hard

    def cut_note(self) -> str:
        """Why the limit was what it was, for the reason of a cut at it: the budget, the
        prediction, and the time the case would have had without the budget."""
        size = f"{self.macs} MACs" + (f" in {self.convs} convs" if self.convs > 1 else "") + \
            (f" and {self.cycles:.0f} estimated cycles" if self.cycles else "")
        if self.predicted is None:
            return f"its {self.stage} budget is {self.hard:g} s ({self.unpredicted or f'no prediction for {size}'})"
        predicted = f"{self.predicted:.3g} s predicted for {size}"
        if self.cut_early:
            return (f"its predicted limit (max(floor {self.floor:g} s, {self.margin:g} x {predicted})), "
                    f"under its {self.stage} budget of {self.hard:g} s")
        return (f"its {self.stage} budget is {self.hard:g} s ({predicted}; without the budget: "
                f"{self.unbudgeted:g} s = max(floor {self.floor:g} s, {self.margin:g} x predicted))")


def limit(rule: Rule | None, envelope: Envelope, count: int, timeout: float, stage: str = "compile",
          convs: int = 1, cycles: float | None = None, by_cycles: Envelope = Envelope()) -> Limit:
    """The limit of one invocation of a case of `count` MACs in `convs` convs: the budget (the
    profile's hard limit, CONV_SWEEP_TIMEOUT at most), lowered to the case's predicted cost
    where the profile has a margin and the calibration covers it; with the compiler's estimated
    `cycles` and an envelope of seconds against them (`by_cycles`), the larger prediction."""
    hard = min(timeout, rule.limit) if rule else timeout
    predicted = envelope.predict(count, convs) if rule and rule.margin and envelope.points else None
    cycles = cycles if cycles and by_cycles.points and predicted is not None else None
    if cycles:
        by_them = by_cycles.predict(int(cycles))
        predicted = None if by_them is None else max(predicted, by_them)
    if predicted is None:
        return Limit(hard, hard, macs=count, stage=stage, convs=convs, cycles=cycles)
    unbudgeted = round(min(timeout, max(rule.floor, rule.margin * predicted)), 1)
    return Limit(min(hard, unbudgeted), hard, predicted, count, rule.margin, rule.floor, stage, unbudgeted, convs,
                 cycles)


# ------------------------------------------------------------------ calibration files

def calibration_path(target: str) -> Path:
    return COSTS_DIR / f"{target}.json"


def _points(value) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) for v in p) for p in value)


@lru_cache(maxsize=None)
def _calibration(path: str, mtime: float) -> tuple[dict, dict]:
    """A calibration file's envelopes per (stage, measure: "macs" or "cycles") and its chains'
    seconds per case, read once per mtime."""
    data = load_json(path, f"calibration {path}")
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, dict):
        raise ConfigError(f"{path}.stages", stages, "must be an object of {stage: {points: [[macs, seconds], ...]}}")
    envelopes = {}
    for stage, entry in stages.items():
        points = entry.get("points") if isinstance(entry, dict) else None
        if stage not in TIMED or not _points(points) or not _points(entry.get("cycles", [])):
            raise ConfigError(f"{path}.stages.{stage}", entry, "must be {points: [[macs, seconds], ...]} "
                              f"(and cycles: [[cycles, seconds], ...]) for a stage of {', '.join(TIMED)}")
        envelopes[stage, "macs"] = Envelope.of(points)
        envelopes[stage, "cycles"] = Envelope.of(entry.get("cycles", []))
    chains = data.get("chains", {})
    if not isinstance(chains, dict) or not all(isinstance(v, (int, float)) for v in chains.values()):
        raise ConfigError(f"{path}.chains", "...", "must be an object of {case: seconds}")
    return envelopes, {k: float(v) for k, v in chains.items()}


def _read(path: Path) -> tuple[dict, dict]:
    try:
        mtime = Path(path).stat().st_mtime
    except OSError:
        return {}, {}
    return _calibration(str(path), mtime)


def calibrated(path: Path, stage: str, measure: str = "macs") -> Envelope:
    """The envelope of a stage's seconds against a measure ("macs", per conv, or "cycles") in a
    calibration file (empty where the file, or that measure, does not exist)."""
    return _read(path)[0].get((stage, measure), Envelope())


def measured_chains(path: Path) -> dict[str, float]:
    """case name -> seconds its chain took in the calibration's run ({} without a file)."""
    return _read(path)[1]


def write_calibration(target: str, samples: dict[str, list], measured: str, path: Path | None = None,
                      chains: dict[str, float] | None = None, cycles: dict[str, list] | None = None) -> Path:
    """Write a target's calibration from (macs, seconds) samples per stage, the (estimated
    cycles, seconds) samples of the stages of BY_CYCLES where the compiler gave them, and what
    each case's chain took in the measured run."""
    path = path or calibration_path(target)
    stages = {}
    for stage in TIMED:
        envelope = Envelope.of(samples.get(stage, []))
        stages[stage] = {"invocations": len(samples.get(stage, [])),
                         "points": [[m, round(s, 3)] for m, s in envelope.points]}
        if (cycles or {}).get(stage):
            stages[stage]["cycles"] = [[round(c), round(s, 3)] for c, s in Envelope.of(cycles[stage]).points]
    document = {"measured": measured, "stages": stages, "chains": dict(sorted((chains or {}).items()))}
    write_text(path, json.dumps(document, indent=1) + "\n")
    return path


# ------------------------------------------------------------------ a run's own observations

def observe(report_dir: Path, stage: str, count: int, seconds: float, case: str = "", convs: int = 1,
            cycles: float | None = None) -> None:
    """Record one completed invocation of `case` (`count` MACs in `convs` convs, `cycles` the
    compiler's estimate where it gave one) in the build folder (one appended line: concurrent
    writers do not interleave within a line this short)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    entry = {"stage": stage, "macs": count, **({"convs": convs} if convs > 1 else {}),
             **({"cycles": round(cycles)} if cycles else {}), "seconds": round(seconds, 3),
             **({"case": case} if case else {}), "at": round(time.time(), 3)}
    line = json.dumps(entry) + "\n"
    fd = os.open(report_dir / OBSERVED, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class LimitBook:
    """One run's time limits, and the one place that answers them (Config.limit asks it). Each
    stage's envelope (per measure: MACs, or the compiler's estimated cycles) is its target's
    calibration widened by the invocations the build folder recorded before `before` (a
    time.time(): the run's start), read once per (calibration, folder, stage, measure); what
    this run records counts from the next run on. The book travels with
    its Config to Dask workers (it pickles without its lock), and gives the same answers there."""

    def __init__(self, before: float | None):
        self.before = before
        self._envelopes: dict[tuple[str, str, str, str], Envelope] = {}
        self._lock = threading.Lock()

    def envelope(self, calibration: Path, report_dir: Path, stage: str, measure: str = "macs") -> Envelope:
        key = (str(calibration), str(report_dir), stage, measure)
        with self._lock:
            if key not in self._envelopes:
                samples = [sample for e in _read_observed(report_dir)
                           if e.stage == stage and (self.before is None or e.at < self.before)
                           and (sample := e.sample(measure))]
                self._envelopes[key] = calibrated(calibration, stage, measure).widened(samples)
            return self._envelopes[key]

    def __getstate__(self):
        with self._lock:
            return {"before": self.before, "envelopes": dict(self._envelopes)}

    def __setstate__(self, state):
        self.before, self._envelopes, self._lock = state["before"], state["envelopes"], threading.Lock()


@dataclass(frozen=True)
class Observed:
    """One line of a build folder's observed costs."""

    stage: str
    count: int  # MACs of one of its convs (per_conv)
    seconds: float  # seconds per conv (per_conv)
    case: str  # "" in lines written without it
    at: float  # when it was recorded; 0 in lines written without it
    cycles: int | None  # the compiler's estimated cycles of the module, where it gave them
    took: float  # the invocation's seconds

    def sample(self, measure: str) -> tuple[float, float] | None:
        """The invocation as an envelope sample against `measure`: (MACs, seconds) per conv, or
        (cycles, seconds); None where the line has no cycles."""
        if measure == "macs":
            return self.count, self.seconds
        return (self.cycles, self.took) if self.cycles else None


def _read_observed(report_dir: Path) -> list[Observed]:
    """Each recorded invocation of the build folder."""
    try:
        return list(_entries((Path(report_dir) / OBSERVED).read_text(errors="replace")))
    except OSError:
        return []


def observations(report_dir: Path, stage: str) -> list[tuple[str, int, float]]:
    """(case name, MACs, seconds) of each completed invocation of `stage` recorded in this build
    folder, per conv (per_conv; the name is "" in lines written without it)."""
    return [(e.case, e.count, e.seconds) for e in _read_observed(report_dir) if e.stage == stage]


def _entries(text: str):
    """Each well-formed line of an observation file as Observed (a torn last line is skipped;
    `convs` is 1 in lines written without it)."""
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            took = float(entry["seconds"])
            count, seconds = per_conv(int(entry["macs"]), took, max(int(entry.get("convs", 1)), 1))
            cycles = int(entry["cycles"]) if entry.get("cycles") else None
            yield Observed(entry["stage"], count, seconds, str(entry.get("case", "")), float(entry.get("at", 0.0)),
                           cycles, took)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            continue
