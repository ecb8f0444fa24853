"""The order chains start in (pipeline/results/history.py, used by pipeline/engine/tasks.py):
the last run's measured chain durations where its results file has the case (a tool cut at a
limit counts at the limit it ran to; a failure that recorded no time is estimated), else the
cost model; planned on lanes, one streaming the cheapest chains, the others the costliest
first; a first failure and a first pass before all."""
import json
import os

from pipeline.config import Config
from pipeline.engine.tasks import Run, _costliest_first
from pipeline.results import history

from helpers import write_spec

GEOMETRIES = [{"category": "g", "rank": 1, "spatial": [8 + 4 * i], "kernel": [3], "stride": [1], "c_in": 2 ** i,
               "c_out": 4} for i in range(4)]


def _run(tmp_path) -> Run:
    cfg = Config.from_env({"CONV_SWEEP_SPEC": str(write_spec(tmp_path / "spec.json", GEOMETRIES)),
                           "CONV_SWEEP_N": "0", "CONV_SWEEP_BUILD_DIR": str(tmp_path / "build")})
    return Run(cfg, cfg.cases())


def test_without_a_last_run_the_cost_model_orders_the_chains(tmp_path):
    run = _run(tmp_path)
    order = _costliest_first(run)
    costs = history.chain_costs(run.cfg, run.cases)
    assert sorted(c.key for c in order) == sorted(c.key for c in run.cases)
    assert costs[order[0].key] == min(costs.values())  # a first result within seconds
    assert max(costs.values()) in [costs[c.key] for c in order[:2]]  # the costliest starts at once too


def _makespan(order: list[str], costs: dict, workers: int) -> float:
    """When the last chain ends, each free worker taking the next chain in `order`."""
    free = [0.0] * workers
    for key in order:
        start = min(free)
        free[free.index(start)] = start + costs[key]
    return max(free)


def test_one_lane_streams_the_cheapest_the_others_take_the_longest_first():
    costs = {"a": 1, "b": 2, "c": 3, "d": 10, "e": 10}
    # planned longest first: d, c on one lane, e, b, a on the other; the first (longest chain
    # 10, a tie) streams and takes a: a, c, d; the other runs e, b
    assert history.start_order(list(costs), costs, 2) == ["a", "e", "c", "d", "b"]
    assert history.start_order(list(costs), costs, 1) == ["a", "b", "c", "d", "e"]
    huge = {"x": 100, "y": 1, "z": 1}
    assert history.start_order(list(huge), huge, 2) == ["y", "x", "z"]


def test_the_first_chains_start_before_all_others():
    costs = {"a": 1, "b": 2, "c": 3, "d": 10, "e": 10, "f": 1}
    assert history.start_order(list(costs), costs, 2, first=("f", "c")) == ["f", "e", "c", "a", "b", "d"]
    assert history.start_order(list(costs), costs, 1, first=("c",)) == ["c", "a", "f", "b", "d", "e"]


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
    order = [c.key for c in _costliest_first(Run(cfg, cfg.cases()))]
    assert order[0] == cheapest[0].key  # the first failure
    assert order.index(passing.key) <= max(2, os.cpu_count() or 1)  # the first pass, once the costliest started
    assert history.start_order(order, costs, 2).index(passing.key) > 2  # without it: later


def test_the_order_ends_within_four_thirds_of_the_best_possible():
    import random

    for seed in range(200):
        rng = random.Random(seed)
        costs = {f"c{i}": rng.choice([rng.uniform(0.1, 2), rng.uniform(1, 600)]) for i in range(rng.randint(3, 60))}
        order = history.start_order(list(costs), costs, 2)
        best = max(max(costs.values()), sum(costs.values()) / 2)
        assert order[0] == min(costs, key=costs.get)  # the first result as early as can be
        assert _makespan(order, costs, 2) <= 4 / 3 * best + 1e-9, seed


def test_long_chains_that_run_longer_than_planned_still_start_early():
    """The two costliest chains planned at 6 and 5 run 4 times longer (a busy machine, a
    slower compiler): each still starts as soon as a worker is free of the streaming lane's
    chains, not behind the chains planned after the other, and the sweep ends as early as it
    can. Merged by planned start, the second would start behind four of those: 34, not 32."""
    planned = {"g1": 6.0, "g2": 5.0, **{f"s{i:02d}": 1.0 for i in range(20)}}
    actual = {**planned, "g1": 24.0, "g2": 20.0}
    order = history.start_order(list(planned), planned, 2)
    best = max(max(actual.values()), sum(actual.values()) / 2)
    assert best == 32
    assert _makespan(order, actual, 2) == best
    assert _makespan(order, planned, 2) <= 4 / 3 * max(6, sum(planned.values()) / 2)
    assert order[:2] == ["s00", "g1"] and order.index("g2") == 11  # after the streaming lane's ten


def test_the_last_run_s_durations_come_first(tmp_path):
    run = _run(tmp_path)
    small = next(c for c in run.cases if c.geometry.c_in == 1 and c.variant == "onnx_f32")
    cut = next(c for c in run.cases if c.geometry.c_in == 2 and c.variant == "onnx_bf16")
    unknown = next(c for c in run.cases if c.geometry.c_in == 4 and c.variant == "tflite_f32")
    entries = [
        {"case": small.name, "status": "pass", "stages": {"model": {"seconds": 1.0}, "run": {"seconds": 40.0}}},
        {"case": cut.name, "status": "xfail", "stage": "run", "stages": {"model": {"seconds": 1.0}},
         "reason": "iree-run-module timed out after 20 s: cut at its predicted limit (...)",
         "notes": {"outcome": "error"}},
        {"case": unknown.name, "status": "xfail", "stage": "compile", "stages": {"model": {"seconds": 1.0}},
         "reason": "iree-compile exit status 1: error: boom", "notes": {"outcome": "error"}},
    ]
    report = run.cfg.report_dir("llvm-cpu")
    report.mkdir(parents=True)
    (report / "results.json").write_text(json.dumps({"cases": entries}))
    costs = history.chain_costs(run.cfg, run.cases)
    assert costs[small.key] == 41.0 and costs[cut.key] == 21.0
    envelopes = history._envelopes(run.cfg, "llvm-cpu")
    assert costs[unknown.key] == history.estimate(unknown, envelopes)  # its compile recorded no time
    order = [c.key for c in _costliest_first(run)]
    assert small.key in order[:2]  # the costliest starts at once, on a lane of its own
