"""What a chain costs, and the order the chains start in (`start_order`): results keep
arriving, the slowest chains never two at once while short ones wait, both cores busy to the
end. A chain's cost is the last run's measured duration, where its results file has the case,
else the cost model.

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
from collections import deque

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


SLOW_SHARE = 20  # a chain is slow when it alone takes more than 1/SLOW_SHARE of a lane's share of the work
SAFETY = 3.0  # how many times its plan a slow chain may run before the next one can start beside it


def slow_chains(costs: dict[str, float], lanes: int) -> set[str]:
    """The chains predicted to be among the slowest: each alone planned to take more than a
    twentieth of a lane's share of the work (the sum of all chains over the lanes). Two of
    them at once leave no lane to deliver results for a stretch that shows as a stall on the
    progress line; two shorter ones pause the stream for no longer than the chains a lane
    runs anyway. The threshold is relative, so one rule serves a 50-case check and a full
    sweep, and at most 20 chains per lane can be slow: always a few of the costliest, never
    most of the sweep. On one lane nothing runs beside anything: none is slow."""
    if lanes < 2 or not costs:
        return set()
    threshold = sum(costs.values()) / lanes / SLOW_SHARE
    return {key for key, seconds in costs.items() if seconds > threshold}


def start_order(keys: list[str], costs: dict[str, float], lanes: int, first: tuple[str, ...] = ()) -> list[str]:
    """The order chains start in on `lanes` workers, each taking the next chain as it frees
    up, so that results keep arriving: while short chains remain, at most one lane runs a slow
    chain (`slow_chains`), even when a slow chain runs up to SAFETY times its plan (against
    the short chains' plans).

    The cheapest chain comes first (a first result within seconds) and the costliest beside
    it, at once; then the short chains, cheapest first (the most results early), with the
    other slow chains among them, longest first, each after enough short work to keep the
    other lanes busy for SAFETY times the previous slow chain's plan: SAFETY x its cost x
    (lanes - 1) seconds of short chains listed since it, plus the costliest short chain for
    each of the lanes - 2 other workers that may be inside one when a worker reaches the next
    slow chain. A worker reaches a slow chain only once every chain listed before it has
    started, so it cannot start beside the previous slow one unless that one overran more.
    Slow chains the remaining short work cannot space come after the last short chain,
    longest first: no short chain waits behind them, and they share the lanes at the end.

    The trade-off against the end of the run: spacing makes the later slow chains start
    later, and the last one may run alone at the end with a lane idle. Starting the costliest
    at once and the others longest first leaves the cheapest of them for last; where short
    work is ample (a few giants among many short chains: a sweep's usual shape) all are
    spaced and short chains still run beside the last one, both lanes busy to the end (tested
    within a tenth of the best possible). Where it is scarce, the spacing wins and the slow
    chains left over share the lanes longest first after the short ones. SAFETY is how far a
    tool's time varies between days on one machine: a slow chain that overruns more lets the
    next one start beside it with short chains still waiting, which no static order can
    prevent (doit's workers pull from one queue).

    `first`: chains that start at once, in that order, whatever their cost: the first before
    all others, the rest right after the costliest, e.g. the cheapest chain expected to fail
    and the cheapest expected to pass: a first failure and a first passing case within
    seconds (every failing chain can be cheaper than any passing one)."""
    keys = list(dict.fromkeys(keys))
    listed = set(keys)
    firsts = [k for k in dict.fromkeys(first) if k in listed]

    def cheap(key):
        return costs[key], key

    if lanes < 2 or len(keys) < 2:
        return firsts + sorted(listed - set(firsts), key=cheap)
    slow = slow_chains({k: costs[k] for k in keys}, lanes)
    firsts = firsts or [min(keys, key=cheap)]
    rest = listed - set(firsts)
    shorts = deque(sorted(rest - slow, key=cheap))
    slows = sorted(rest & slow, key=lambda k: (-costs[k], k))
    # lanes - 2 workers can be inside a short chain when one reaches the next slow chain
    margin = (lanes - 2) * max((costs[k] for k in keys if k not in slow), default=0.0)
    order: list[str] = []
    spacing = [0.0, 0.0]  # short work listed since the last slow chain, and what the next one needs

    def put(key: str) -> None:
        order.append(key)
        if key in slow:
            spacing[:] = [0.0, SAFETY * costs[key] * (lanes - 1) + margin]
        else:
            spacing[0] += costs[key]

    put(firsts[0])
    if slows:
        put(slows.pop(0))  # the costliest starts at once: the longest chain never starts late
    for key in firsts[1:]:
        put(key)
    late = []
    for key in slows:
        while spacing[0] < spacing[1] and shorts:
            put(shorts.popleft())
        if spacing[0] < spacing[1]:
            late.append(key)  # too little short work left to space it: after the last short one
        else:
            put(key)
    return order + list(shorts) + late
