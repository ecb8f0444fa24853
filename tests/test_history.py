"""The order chains start in (pipeline/engine/history.py, used by pipeline/engine/tasks.py):
the last run's measured chain durations where its results file has the case (a tool cut at a
limit counts at the limit it ran to; a failure that recorded no time is estimated), else the
cost model; a first failure and a first pass before all, then the costliest first. Orders are
checked by simulating workers that take the next chain as they free up: no clock."""
import dataclasses
import itertools
import json
import random

import pytest

from pipeline.config import Config
from pipeline.engine.tasks import Run, _costliest_first
from pipeline.engine import history

from helpers import write_spec

GEOMETRIES = [{"category": "g", "rank": 1, "spatial": [8 + 4 * i], "kernel": [3], "stride": [1], "c_in": 2 ** i,
               "c_out": 4} for i in range(4)]


def _run(tmp_path) -> Run:
    cfg = Config.from_env({"CONV_SWEEP_SPEC": str(write_spec(tmp_path / "spec.json", GEOMETRIES)),
                           "CONV_SWEEP_N": "0", "CONV_SWEEP_BUILD_DIR": str(tmp_path / "build")})
    return Run(cfg, cfg.cases())


def _start_order(run: Run, lanes: int = 2) -> list[str]:
    """The case keys in the order their chains start on `lanes` (doit -n 2)."""
    return [name.split(":", 1)[1] for name in _costliest_first(run, lanes)]


def test_without_a_last_run_the_cost_model_orders_the_chains(tmp_path):
    run = _run(tmp_path)
    order = _start_order(run)
    costs = history.chain_costs(run.cfg, run.cases)
    assert sorted(order) == sorted(c.key for c in run.cases)
    assert costs[order[0]] == min(costs.values())  # a first result within seconds
    assert max(costs.values()) in [costs[k] for k in order[:2]]  # the costliest starts at once too


def _pull(order: list[str], costs: dict, workers: int) -> dict[str, tuple[float, float]]:
    """key -> (start, end), each free worker taking the next chain in `order` (the lowest
    numbered of those free at once)."""
    free, spans = [0.0] * workers, {}
    for key in order:
        start = min(free)
        free[free.index(start)] = start + costs[key]
        spans[key] = (start, start + costs[key])
    return spans


def _makespan(order: list[str], costs: dict, workers: int) -> float:
    """When the last chain ends, each free worker taking the next chain in `order`."""
    return max(end for _, end in _pull(order, costs, workers).values())


def _sweep(seed: int, shorts: int = 1000, giants: int = 4) -> dict[str, float]:
    """A sweep's shape: many chains of 1-10 s and a few giants of 500 s."""
    rng = random.Random(seed)
    return {**{f"s{i:04d}": rng.uniform(1, 10) for i in range(shorts)}, **{f"g{i}": 500.0 for i in range(giants)}}


def _best(costs: dict, workers: int) -> float:
    """The best possible end on `workers` lanes, by trying every assignment (small sets only)."""
    values = list(costs.values())
    return min(max(sum(v for v, lane in zip(values, lanes) if lane == w) for w in range(workers))
               for lanes in itertools.product(range(workers), repeat=len(values)))


def test_after_the_first_chains_the_costliest_start_first():
    costs = {"a": 1, "b": 2, "c": 3, "d": 10, "e": 10, "f": 1, **{f"s{i:02d}": 0.5 for i in range(50)}}
    order = history.start_order(list(costs), costs, 2, first=("f", "c"))
    assert order[:4] == ["f", "c", "d", "e"]  # the first ones, then the costliest (ties by name)
    assert [costs[k] for k in order[2:]] == sorted((costs[k] for k in order[2:]), reverse=True)
    assert sorted(order) == sorted(costs)
    # on one lane the end is the same in any order: cheapest first, the most results early
    assert history.start_order(list(costs), costs, 1, first=("c",))[:3] == ["c", "s00", "s01"]
    assert history.start_order(["c", "a", "b"], {"a": 1, "b": 2, "c": 3}, 1) == ["a", "b", "c"]


def test_the_order_ends_within_graham_s_bound_of_the_best_possible():
    """On 300 random cost sets of up to 11 chains (minutes and seconds mixed) and the cheapest
    one first, the plan ends within 4/3 - 1/6 = 7/6 of the best possible on 2 lanes, plus the
    first chain's cost (it starts before the rule applies)."""
    for seed in range(300):
        rng = random.Random(seed)
        costs = {f"c{i}": rng.choice([rng.uniform(0.1, 2), rng.uniform(1, 600)]) for i in range(rng.randint(2, 11))}
        cheapest = min(costs, key=costs.get)
        order = history.start_order(list(costs), costs, 2, first=(cheapest,))
        assert order[0] == cheapest  # the first result as early as can be
        assert _makespan(order, costs, 2) <= 7 / 6 * _best(costs, 2) + costs[cheapest] + 1e-9, seed


@pytest.mark.parametrize("seed", range(5))
def test_in_a_sweep_s_shape_the_giants_start_at_once_and_the_lanes_end_together(seed):
    """1,000 chains of 1-10 s and 4 of 500 s: every giant starts before any short chain, and
    both lanes end within the longest short chain of each other (within 1% of the best)."""
    planned = _sweep(seed)
    order = history.start_order(list(planned), planned, 2, first=("s0000",))
    assert order[1:5] == ["g0", "g1", "g2", "g3"]
    assert _makespan(order, planned, 2) <= sum(planned.values()) / 2 + 10
    assert _makespan(order, planned, 2) <= 1.01 * sum(planned.values()) / 2


@pytest.mark.parametrize("lanes", [3, 4])
def test_on_more_lanes_too_no_long_chain_starts_in_the_last_third(lanes):
    planned = _sweep(0)
    spans = _pull(history.start_order(list(planned), planned, lanes), planned, lanes)
    end = max(e for _, e in spans.values())
    assert all(spans[f"g{i}"][0] < end / 3 for i in range(4))
    assert end <= 1.01 * sum(planned.values()) / lanes


def test_a_first_failure_and_a_first_pass_start_at_once(tmp_path):
    """On torq about 300 failing chains are cheaper than the cheapest passing one: the
    cheapest chain expected to fail (listed) and the cheapest expected to pass go first."""
    run = _run(tmp_path)
    costs = history.chain_costs(run.cfg, run.cases)
    cheapest = sorted(run.cases, key=lambda c: (costs[c.key], c.key))
    listed = tmp_path / "expected.json"
    passing = cheapest[len(cheapest) // 2]  # the one case expected to pass: of middling cost
    listed.write_text(json.dumps({"expected_failures": [{"case": c.name, "stage": "compile", "bucket": "compile: x"}
                                                        for c in cheapest if c is not passing]}))
    cfg = Config.from_env({"CONV_SWEEP_SPEC": str(tmp_path / "spec.json"), "CONV_SWEEP_N": "0",
                           "CONV_SWEEP_BUILD_DIR": str(tmp_path / "build"),
                           "CONV_SWEEP_EXPECTED_FAILURES": str(listed)})
    order = _start_order(Run(cfg, cfg.cases()))
    assert order[0] == cheapest[0].key  # the first failure
    assert order[1] == passing.key  # the first pass, right after it
    assert history.start_order(order, costs, 2).index(passing.key) > 2  # without it: later


def test_the_last_run_s_durations_come_first(tmp_path):
    run = _run(tmp_path)
    small = next(c for c in run.cases if c.geometry.c_in == 1 and c.variant == "onnx_f32")
    cut = next(c for c in run.cases if c.geometry.c_in == 2 and c.variant == "onnx_bf16")
    unknown = next(c for c in run.cases if c.geometry.c_in == 4 and c.variant == "tflite_f32")
    recorded = next(c for c in run.cases if c.geometry.c_in == 8 and c.variant == "onnx_f32")
    remembered = next(c for c in run.cases if c.geometry.c_in == 8 and c.variant == "tflite_f32")
    failed = next(c for c in run.cases if c.geometry.c_in == 4 and c.variant == "onnx_f32")
    entries = [
        {"case": failed.name, "status": "xfail", "stage": "compile", "reason": "iree-compile exit status 1: error: x",
         "stages": {"model": {"seconds": 1.0}, "compile": {"seconds": 2.5}},
         "notes": {"outcome": "error"}},  # a compile that failed by itself recorded its time: the chain ended there
        {"case": recorded.name, "status": "fail", "stage": "compile", "reason": "iree-compile timed out after 30 s",
         "stages": {"model": {"seconds": 1.0}, "compile": {"seconds": 30.0, "cut": True}},
         "notes": {"outcome": "timeout"}},  # a cut stage records its limit: counted once
        {"case": remembered.name, "status": "fail", "stage": "compile", "reason": "iree-compile timed out after 50 s",
         "stages": {"model": {"seconds": 1.0}, "compile": {"seconds": 0.0, "store": True, "cut": True, "limit": 50.0}},
         "notes": {"outcome": "timeout"}},  # a cut the store remembered: no time, unless run again
        {"case": small.name, "status": "pass", "stages": {"model": {"seconds": 1.0}, "run": {"seconds": 40.0}}},
        {"case": cut.name, "status": "xfail", "stage": "run", "stages": {"model": {"seconds": 1.0}},
         "reason": "iree-run-module timed out after 20 s: its predicted limit (max(...)), under its run budget of 600 s",
         "notes": {"outcome": "error"}},
        {"case": unknown.name, "status": "xfail", "stage": "compile", "stages": {"model": {"seconds": 1.0}},
         "reason": "iree-compile exit status 1: error: boom", "notes": {"outcome": "error"}},
    ]
    report = run.cfg.report_dir("llvm-cpu")
    report.mkdir(parents=True)
    (report / "results.json").write_text(json.dumps({"cases": entries}))
    costs = history.chain_costs(run.cfg, run.cases)
    assert costs[small.key] == 41.0 and costs[cut.key] == 21.0
    assert costs[recorded.key] == 31.0 and costs[remembered.key] == 1.0 and costs[failed.key] == 3.5
    retried = history.chain_costs(dataclasses.replace(run.cfg, retry_timeouts=True), run.cases)
    assert retried[remembered.key] == 51.0 and retried[recorded.key] == 31.0
    envelopes = history._envelopes(run.cfg, "llvm-cpu")
    assert costs[unknown.key] == history.estimate(unknown, envelopes)  # its compile recorded no time
    order = _start_order(run)
    assert small.key in order[:2]  # the costliest starts at once, on a lane of its own
