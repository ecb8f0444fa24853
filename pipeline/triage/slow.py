"""Anomalously slow: the predicate of a timeout bucket (`compile: timeout`, `run: timeout`),
for `doit shrink` and `doit bugreport`. A stage is anomalously slow when it takes more than
SLOW_FACTOR times its predicted seconds (pipeline/targets/cost.py: the target's calibration,
widened by the sweep's own observations), whether it finished that slowly or was cut at a limit
past that point. Why SLOW_FACTOR is what it is: docs/triage.md.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.config import Config
from pipeline.outcome.result import TIMEOUT, read_all_stages, read_result
from pipeline.space.cases import Case

SLOW_FACTOR = 4.0  # past this many times its predicted seconds, a stage is anomalously slow


@dataclass(frozen=True)
class Slow:
    """The predicate of a timeout bucket: the `stage` (compile or run) took more than `factor`
    times its predicted seconds."""

    stage: str
    factor: float = SLOW_FACTOR

    def judge(self, result: dict, timed: float | None, limit: float | None, predicted: float | None) -> str:
        """An attempt's outcome from its chain's result, its stage's seconds (None: it did not
        end by itself) and limit, and its prediction (None: the cut itself is the only sign)."""
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
        return {"kind": "slow", "stage": self.stage, "factor": self.factor}


def predicted_seconds(cfg: Config, case: Case, stage: str) -> float | None:
    """The stage's predicted seconds for the case (cfg.limit's prediction, whether or not the
    limits follow it), None where no calibration covers it."""
    return replace(cfg, predicted_timeouts=True).limit(case, stage).predicted


def stage_seconds(cfg: Config, case: Case, stage: str) -> float | None:
    """How long the case's `stage` ran where it ended by itself (stages.json, result.json)."""
    result = read_result(cfg.case_dir(case)) or {}
    stages = {**read_all_stages(cfg.model_dir(case), cfg.case_dir(case)), **(result.get("stages") or {})}
    entry = stages.get(stage) or {}
    return None if entry.get("store") else entry.get("seconds")
