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


def start_order(keys: list[str], costs: dict[str, float], lanes: int, first: tuple[str, ...] = ()) -> list[str]:
    """The order chains start in on `lanes` workers, so that no long chain starts late and
    results still stream in from the first seconds. The chains are planned on lanes longest
    first, each on the least loaded lane so far (longest processing time first, within 4/3 of
    the shortest possible end). The lane whose longest chain is the shortest streams results:
    it takes the cheapest chain of all too, and runs its chains cheapest first; the others run
    theirs longest first. The streaming lane's cheapest chain comes first, then every other
    lane's costliest chain, then the streaming lane's chains, then the other lanes' remaining
    chains by the time each would start on its lane; doit's workers take the next chain as
    they free up. When the costs are right this follows the plan; when the long chains run
    longer than planned (a busy machine, a slower compiler), no long chain waits behind the
    chains planned after another: each starts as soon as a worker is free of the streams.

    `first`: chains that start at once, in that order, the first of them before all others
    and the rest right after the other lanes' first (costliest) chains: the cheapest one
    expected to fail and the cheapest one expected to pass, a first failure and a first
    passing case within seconds, where on torq about 300 failing chains are cheaper than any
    passing one."""
    firsts = [k for k in dict.fromkeys(first) if k in costs]
    if firsts:  # the first one, the other lanes' first chains (the costliest), the other firsts
        base = start_order([k for k in keys if k not in set(firsts)], costs, lanes)
        return firsts[:1] + base[1:lanes] + firsts[1:] + base[:1] + base[lanes:]
    if lanes < 2 or len(keys) < 2:
        return sorted(keys, key=lambda k: (costs[k], k))
    plan = [[0.0, []] for _ in range(lanes)]
    for key in sorted(keys, key=lambda k: (-costs[k], k)):
        lane = min(plan, key=lambda entry: entry[0])
        lane[0] += costs[key]
        lane[1].append(key)
    # the lane whose longest chain is the shortest streams, with the cheapest chain of all
    lanes_ = [chains for _, chains in plan]
    streaming = min(lanes_, key=lambda chains: max(costs[k] for k in chains))
    cheapest = min(keys, key=lambda k: (costs[k], k))
    for chains in lanes_:
        if cheapest in chains and chains is not streaming:
            chains.remove(cheapest)
            streaming.append(cheapest)
    streams = sorted(streaming, key=lambda k: (costs[k], k))
    others = [chains for chains in lanes_ if chains is not streaming]
    starts = {}
    for chains in others:
        clock = 0.0
        for key in chains:
            starts[key] = clock
            clock += costs[key]
    # every lane's costliest chain starts at once, whatever the plan says comes after it: a
    # chain that runs longer than planned must not let a free worker eat into the chains
    # planned after another lane's long one
    rest = sorted((k for chains in others for k in chains[1:]), key=lambda k: (starts[k], k))
    return streams[:1] + [chains[0] for chains in others] + streams[1:] + rest
