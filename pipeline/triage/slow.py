"""Anomalously slow: the predicate of a timeout bucket (`compile: timeout`, `run: timeout`),
for `doit shrink` and `doit bugreport`. A stage is anomalously slow when it takes more than
SLOW_FACTOR times its typical seconds, whether it finished that slowly or was cut at a limit
past that point. Why SLOW_FACTOR is what it is: docs/triage.md.

Typical is not the limit's prediction. The limits follow the target's calibration, an upper
envelope that must never cut a legitimate case, so it holds every slow case the calibration
run saw, the anomaly under report included (torq's giant compile made it predict that
compile's time for every case with at least 1/√10 of its MACs: docs/measurements.md). What
the stage normally takes at a size is what this sweep's other cases took: the envelope of the
build folder's completed invocations of the stage (pipeline/targets/cost.py), without the
case's own and those of the cases listed as timeouts at that stage. Only where the sweep
measured nothing near the case's size does the target's calibration stand in.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.config import Config
from pipeline.space.expected import match
from pipeline.space.geometry import macs
from pipeline.targets import cost
from pipeline.outcome.result import TIMEOUT, read_all_stages, read_result
from pipeline.space.cases import Case

SLOW_FACTOR = 4.0  # past this many times its typical seconds, a stage is anomalously slow
# What typical means, kept with a shrink's predicate: a shrink judged against another meaning
# (the calibration's prediction, before) is not reused
TYPICAL = "the sweep's other cases"


@dataclass(frozen=True)
class Slow:
    """The predicate of a timeout bucket: the `stage` (compile or run) took more than `factor`
    times its typical seconds."""

    stage: str
    factor: float = SLOW_FACTOR

    def judge(self, result: dict, timed: float | None, limit: float | None, predicted: float | None) -> str:
        """An attempt's outcome from its chain's result, its stage's seconds (None: it did not
        end by itself) and limit, and its typical seconds (None: the cut itself is the only sign)."""
        status, stage = result["status"], result.get("stage")
        if status == TIMEOUT and stage == self.stage:
            if predicted is None or (limit or 0.0) >= self.factor * predicted:
                return "same"
            return "undecided"  # cut before it could be told slow
        if timed is None:
            return "other"  # failed before the stage, or in it
        if predicted is not None and timed > self.factor * predicted:
            return "same"  # slow, whatever came after
        return "pass" if status == "pass" else "other"

    def to_dict(self) -> dict:
        return {"kind": "slow", "stage": self.stage, "factor": self.factor, "typical": TYPICAL}


def predicted_seconds(cfg: Config, case: Case, stage: str) -> float | None:
    """The stage's predicted seconds for the case (cfg.limit's prediction, whether or not the
    limits follow it), None where no calibration covers it."""
    return replace(cfg, predicted_timeouts=True).limit(case, stage).predicted


def typical_seconds(cfg: Config, case: Case, stage: str, exclude: tuple[str, ...] = ()) -> float | None:
    """The stage's typical seconds at the case's size (this module's docstring): the slowest of
    this sweep's other completed invocations of cases up to cost.SPAN times its MACs (per conv,
    times its convs: cost.Envelope.predict), without
    those of the cases named in `exclude` (a shrink's original); the calibration's prediction
    where the sweep measured none that large; None without either."""
    timeouts = tuple(e for e in cfg.target(case.target).expectations if e.may_finish and e.stage == stage)
    normal = [(count, seconds) for name, count, seconds in cost.observations(cfg.report_dir(case.target), stage)
              if name != case.name and name not in exclude and not (name and match(name, timeouts))]
    seconds = cost.Envelope.of(normal).predict(macs(case.geometry), case.convs)
    return seconds if seconds is not None else predicted_seconds(cfg, case, stage)


def stage_seconds(cfg: Config, case: Case, stage: str) -> float | None:
    """How long the case's `stage` ran where it ended by itself (stages.json, result.json): None
    where it was taken from the store or cut at its limit (a cut records the limit's seconds)."""
    result = read_result(cfg.case_dir(case)) or {}
    stages = {**read_all_stages(cfg.model_dir(case), cfg.case_dir(case)), **(result.get("stages") or {})}
    entry = stages.get(stage) or {}
    return None if entry.get("store") or entry.get("cut") else entry.get("seconds")
