"""What a chain costs, so that the most expensive ones start first and both cores stay busy to
the end: the last run's measured durations, where its results file has the case, else the
cost model.

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


def _measured(entry: dict) -> float | None:
    """Seconds the case's chain took in its last run, or None where a stage's time is unknown."""
    seconds = sum(float(s.get("seconds", 0.0)) for s in (entry.get("stages") or {}).values())
    outcome = (entry.get("notes") or {}).get("outcome") or entry.get("status")  # before judging, if judged
    if outcome in ("pass", "fail", "compiled"):  # every stage ran to its end and recorded its time
        return seconds
    cut = _CUT.search(entry.get("reason") or "")
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
            seconds = _measured(entry) if isinstance(entry, dict) else None
            if seconds is not None:
                found[f"{entry.get('case')}@{target.name}"] = seconds
    return found


def _envelopes(cfg, target: str) -> list:
    return [cost.calibrated(cfg.target(target).profile.calibration_file, stage) for stage in cost.TIMED]


def estimate(case, envelopes) -> float:
    """The cost model's seconds for the case's chain, with its target's envelopes."""
    count = shard.macs(case)
    predicted = (envelope.predict(count) for envelope in envelopes)
    return shard.cost(case) + sum(p for p in predicted if p is not None)


def chain_costs(cfg, cases) -> dict[str, float]:
    """case key -> expected seconds of its chain: measured by this folder's last run, else by
    the run its target's calibration was measured on, else estimated."""
    measured = last_run(cfg)
    calibrated = {target.name: cost.measured_chains(target.profile.calibration_file) for target in cfg.targets}
    envelopes = {target.name: _envelopes(cfg, target.name) for target in cfg.targets}

    def seconds(case):
        if case.key in measured:
            return measured[case.key]
        if case.name in calibrated[case.target]:
            return calibrated[case.target][case.name]
        return estimate(case, envelopes[case.target])

    return {case.key: seconds(case) for case in cases}


# the share of a lane's planned work one lane spends streaming the cheapest chains first
STREAM_SHARE = 1 / 3


def start_order(keys: list[str], costs: dict[str, float], lanes: int, first: tuple[str, ...] = ()) -> list[str]:
    """The order chains start in on `lanes` workers, each free worker taking the next, so that
    results stream in from the first seconds and no costly chain starts late.

    The cheapest chain goes first, then the `lanes - 1` costliest, which start at once. The
    worker left over streams the cheapest chains, cheapest first, for STREAM_SHARE of a lane's
    planned work (on torq most chains fail to compile within seconds: about 1,000 of 1,250
    results in the first third of the run). Then every worker takes the rest longest first
    (longest processing time first), so the next costliest chain starts after that third at
    the latest, and the cheap chains left for the end even the lanes out. A chain that takes
    longer than planned (a busier machine, a slower compiler) then lengthens the run by itself
    alone: planned to start late on a lane of its own, it would start later still and end
    the run with the other lanes idle.

    `first`: chains that start before all others, in that order (the cheapest one expected to
    fail and the cheapest one expected to pass: a first failure and a first passing case
    within seconds, where on torq about 300 cheaper failing chains would come first)."""
    firsts = [k for k in dict.fromkeys(first) if k in costs]
    keys = [k for k in keys if k not in set(firsts)]
    cheapest_first = sorted(keys, key=lambda k: (costs[k], k))
    if lanes < 2 or len(keys) < 2:
        return firsts + cheapest_first
    budget = STREAM_SHARE * sum(costs.values()) / lanes
    stream, spent = [], 0.0
    for key in cheapest_first[:len(keys) - (lanes - 1)]:  # never one of the costliest
        if stream and spent + costs[key] > budget:
            break
        stream.append(key)
        spent += costs[key]
    streamed = set(stream)
    longest = [k for k in reversed(cheapest_first) if k not in streamed]
    if firsts:  # the streaming lane starts with them
        return firsts[:1] + longest[:lanes - 1] + firsts[1:] + stream + longest[lanes - 1:]
    return stream[:1] + longest[:lanes - 1] + stream[1:] + longest[lanes - 1:]
