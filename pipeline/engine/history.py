"""What a chain costs, and the order the chains start in (`start_order`): the costliest
first, so that both cores stay busy to the end. A chain's cost is the last run's measured
duration, where its results file has the case, else the cost model.

The last run's figures come from each target's `report/<target>/results.json` (one file per
target, read once): the case's recorded stage seconds, and for a tool cut at a limit the
limit it ran to. A case it does not hold, or whose failing stage recorded no time, takes what
its chain took in the run the target's calibration was measured on (`chains` in
pipeline/targets/costs/<target>.json), else an estimate: the per-flavor estimate sharding
uses (pipeline/space/shard.py) plus the target's predicted compile and run seconds
(pipeline/targets/cost.py), where its calibration covers the case.
"""
from __future__ import annotations

import json
import re

from pipeline.space import shard
from pipeline.targets import cost

_CUT = re.compile(r"timed out after ([\d.]+) s")


def _measured(entry: dict, retry_timeouts: bool = False) -> float | None:
    """Seconds the case's chain takes, as its last run measured it, or None where a stage's time
    is unknown. A cut stage counts at its limit; one the store remembered (no time spent) counts
    nothing, unless this run runs known timeouts again."""
    stages = [s for s in (entry.get("stages") or {}).values() if isinstance(s, dict)]
    seconds = sum(float((retry_timeouts and s.get("cut") and s.get("limit")) or s.get("seconds", 0.0))
                  for s in stages)
    outcome = (entry.get("notes") or {}).get("outcome") or entry.get("status")  # before judging, if judged
    failing = (entry.get("stages") or {}).get(entry.get("stage") or "")
    if outcome in ("pass", "fail", "compiled") or any(s.get("cut") for s in stages) or \
            (outcome == "error" and isinstance(failing, dict) and "seconds" in failing):
        return seconds  # every stage ran to its end (or failed there), or to its limit, and recorded its time
    cut = _CUT.search(entry.get("reason") or "")  # a result written before cut stages recorded their time
    return seconds + float(cut.group(1)) if cut else None


def last_run(cfg) -> dict[str, float]:
    """case key -> the chain's measured seconds, from each selected target's last report."""
    found = {}
    for target in cfg.targets:
        try:
            document = json.loads((cfg.report_dir(target.name) / "results.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        for entry in document.get("cases", []) if isinstance(document, dict) else []:
            seconds = _measured(entry, cfg.retry_timeouts) if isinstance(entry, dict) else None
            if seconds is not None:
                found[f"{entry.get('case')}@{target.name}"] = seconds
    return found


def _envelopes(cfg, target: str) -> list:
    return [cost.calibrated(cfg.target(target).profile.calibration_file, stage) for stage in cost.TIMED]


def estimate(case, envelopes) -> float:
    """The cost model's seconds for the case's chain, with its target's envelopes."""
    count = shard.macs(case)
    predicted = (envelope.predict(count, case.convs) for envelope in envelopes)
    return shard.cost(case) + sum(p for p in predicted if p is not None)


def estimator(cfg):
    """case -> the cost model's seconds for its chain (estimate), with each selected target's
    envelopes read once."""
    envelopes = {target.name: _envelopes(cfg, target.name) for target in cfg.targets}
    return lambda case: estimate(case, envelopes[case.target])


def chain_costs(cfg, cases) -> dict[str, float]:
    """case key -> expected seconds of its chain: measured by this folder's last run, else by
    the run its target's calibration was measured on, else estimated; never more than its
    compile and run can take under today's limits (a calibration measured under larger
    budgets, or a larger CONV_SWEEP_BUDGET last run, plans a cut chain at what it costs now)."""
    measured = last_run(cfg)
    calibrated = {target.name: cost.measured_chains(target.profile.calibration_file) for target in cfg.targets}
    estimated = estimator(cfg)

    def seconds(case):
        if case.key in measured:
            return measured[case.key]
        if case.name in calibrated[case.target]:
            return calibrated[case.target][case.name]
        return estimated(case)

    def capped(case):
        return min(seconds(case), shard.cost(case) + sum(cfg.limit(case, stage).seconds for stage in cost.TIMED))

    return {case.key: capped(case) for case in cases}


def start_order(keys: list[str], costs: dict[str, float], lanes: int, first: tuple[str, ...] = ()) -> list[str]:
    """The order chains start in on `lanes` workers, each taking the next chain as it frees up.

    `first` (e.g. the cheapest chain expected to fail and the cheapest expected to pass) start
    at once, in that order: a first failure and a first pass within seconds. Every other chain
    follows costliest first (longest processing time first), so that the long chains run
    while short ones remain to fill the other lanes, and none starts near the end with a lane
    left idle: the run ends within 4/3 - 1/(3 x lanes) of the best possible on the planned
    costs (Graham's bound for this rule), and within the longest short chain of it where a few
    long chains stand among many short ones (a sweep's usual shape). The price is the stream
    of results: while the longest chains run, results come from the lanes they leave free.
    On one lane the order changes nothing but when results arrive: cheapest first."""
    keys = list(dict.fromkeys(keys))
    firsts = [k for k in dict.fromkeys(first) if k in set(keys)]
    rest = [k for k in keys if k not in set(firsts)]
    if lanes < 2:
        return firsts + sorted(rest, key=lambda k: (costs[k], k))
    return firsts + sorted(rest, key=lambda k: (-costs[k], k))
