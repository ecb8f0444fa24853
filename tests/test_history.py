"""The order chains start in (pipeline/engine/history.py, used by pipeline/engine/tasks.py):
the last run's measured chain durations where its results file has the case (a tool cut at a
limit counts at the limit it ran to; a failure that recorded no time is estimated), else the
cost model; a first failure and a first pass before all, the costliest at once, the other
slow chains spaced by short work so that two never run at once while short ones wait, on
the plan and when they run up to 3 times longer. Orders are checked by simulating workers
that take the next chain as they free up, on planned and on overrun costs: no clock."""
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


def _slow_beside_slow(order: list[str], slow: set, costs: dict, workers: int) -> list[tuple[str, str]]:
    """(running, starting): a slow chain that starts while another runs and a short chain
    is still waiting (listed after it)."""
    spans = _pull(order, costs, workers)
    last_short = max((i for i, k in enumerate(order) if k not in slow), default=-1)
    return [(a, b) for b in slow for a in slow
            if a != b and spans[a][0] <= spans[b][0] < spans[a][1] and order.index(b) < last_short]


def _sweep(seed: int, shorts: int = 1000, giants: int = 4) -> dict[str, float]:
    """A sweep's shape: many chains of 1-10 s and a few giants of 500 s."""
    rng = random.Random(seed)
    return {**{f"s{i:04d}": rng.uniform(1, 10) for i in range(shorts)}, **{f"g{i}": 500.0 for i in range(giants)}}


def test_slow_chains_take_over_a_twentieth_of_a_lane_s_share():
    costs = {"a": 1.0, "b": 2.0, **{f"s{i}": 1.0 for i in range(37)}, "big": 3.0}  # 43 s, 21.5 a lane
    assert history.slow_chains(costs, 2) == {"big", "b"}  # above 43 / 2 / 20 = 1.075
    assert history.slow_chains(costs, 4) == {"big", "b", "a"} | {f"s{i}" for i in range(37)}  # above 0.54
    assert history.slow_chains(costs, 1) == set()


def test_the_slow_chains_are_spaced_by_short_work():
    """g1 starts at once beside the cheapest; g2 only after 3 x 6 = 18 s of short chains
    listed since g1, so that it cannot start beside g1 unless g1 runs past 3 times its plan."""
    costs = {"g1": 6.0, "g2": 5.0, **{f"s{i:02d}": 1.0 for i in range(40)}}
    assert history.slow_chains(costs, 2) == {"g1", "g2"}
    order = history.start_order(list(costs), costs, 2)
    assert order == ["s00", "g1", *[f"s{i:02d}" for i in range(1, 19)], "g2", *[f"s{i:02d}" for i in range(19, 40)]]
    assert _makespan(order, costs, 2) == 26  # the best possible: 51 s of whole seconds on two lanes
    assert history.start_order(list(costs), costs, 1) == sorted(costs, key=lambda k: (costs[k], k))


def test_slow_chains_the_short_work_cannot_space_come_after_it_longest_first():
    """g3 after 18 s of short chains, g2 would need 16.5 s after g3 and 11 are left: it comes last."""
    costs = {"g1": 6.0, "g2": 5.0, "g3": 5.5, **{f"s{i:02d}": 1.0 for i in range(30)}}
    assert history.slow_chains(costs, 2) == {"g1", "g2", "g3"}
    order = history.start_order(list(costs), costs, 2)
    assert order == ["s00", "g1", *[f"s{i:02d}" for i in range(1, 19)], "g3",
                     *[f"s{i:02d}" for i in range(19, 30)], "g2"]
    huge = {"x": 100, "y": 1, "z": 1}
    assert history.start_order(list(huge), huge, 2) == ["y", "x", "z"]
    assert history.start_order(["c", "a", "b"], {"a": 1, "b": 2, "c": 3}, 1) == ["a", "b", "c"]


def test_the_first_chains_start_before_all_others():
    costs = {"a": 1, "b": 2, "c": 3, "d": 10, "e": 10, "f": 1, **{f"s{i:02d}": 0.5 for i in range(50)}}
    order = history.start_order(list(costs), costs, 2, first=("f", "c"))
    assert order[:3] == ["f", "d", "c"]  # the first, the costliest at once, the other first
    assert sorted(order) == sorted(costs)
    assert history.start_order(list(costs), costs, 1, first=("c",))[:3] == ["c", "s00", "s01"]


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
    assert order.index(passing.key) <= 2  # the first pass, once the costliest started
    assert history.start_order(order, costs, 2).index(passing.key) > 2  # without it: later


def test_the_order_ends_within_four_thirds_of_the_best_possible():
    """On 200 random cost sets, mostly chains of minutes with too little short work to space
    them (they then share the lanes at the end), the plan ends within 4/3 of the best."""
    for seed in range(200):
        rng = random.Random(seed)
        costs = {f"c{i}": rng.choice([rng.uniform(0.1, 2), rng.uniform(1, 600)]) for i in range(rng.randint(3, 60))}
        order = history.start_order(list(costs), costs, 2)
        best = max(max(costs.values()), sum(costs.values()) / 2)
        assert order[0] == min(costs, key=costs.get)  # the first result as early as can be
        assert _makespan(order, costs, 2) <= 4 / 3 * best + 1e-9, seed
        assert not _slow_beside_slow(order, history.slow_chains(costs, 2), costs, 2), seed


@pytest.mark.parametrize("seed", range(5))
def test_while_short_chains_wait_two_slow_chains_never_run_at_once(seed):
    """1,000 chains of 1-10 s and 4 of 500 s on 2 workers taking the next chain: on the
    planned costs, and with the slow chains running 3 times their plan, no slow chain starts
    beside another while a short one waits; on the planned costs both workers stay busy to
    within a tenth of the best possible end."""
    planned = _sweep(seed)
    slow = history.slow_chains(planned, 2)
    assert slow == {"g0", "g1", "g2", "g3"}
    order = history.start_order(list(planned), planned, 2)
    assert sorted(order) == sorted(planned) and order.index("g0") == 1  # the costliest at once
    assert not _slow_beside_slow(order, slow, planned, 2)
    assert _makespan(order, planned, 2) <= 1.1 * sum(planned.values()) / 2
    overrun = {**planned, **{k: 3 * planned[k] for k in slow}}
    assert not _slow_beside_slow(order, slow, overrun, 2)


@pytest.mark.parametrize("lanes", [3, 4])
def test_on_more_lanes_too_two_slow_chains_never_run_at_once(lanes):
    planned = _sweep(0)
    order = history.start_order(list(planned), planned, lanes)
    slow = history.slow_chains(planned, lanes)
    for factor in (1, 2, 3):
        assert not _slow_beside_slow(order, slow, {**planned, **{k: factor * planned[k] for k in slow}}, lanes)


def test_the_spacing_holds_for_any_overrun_up_to_three_times():
    """Random sweeps of short chains and a few slow ones, each slow chain running its own
    factor of 1-3 times its plan: none starts beside another while a short one waits."""
    for seed in range(50):
        rng = random.Random(seed)
        lanes = rng.choice([2, 3])
        planned = {**{f"s{i:03d}": rng.uniform(0.5, 12) for i in range(rng.randint(100, 600))},
                   **{f"g{i}": rng.uniform(100, 600) for i in range(rng.randint(1, 6))}}
        slow = history.slow_chains(planned, lanes)
        order = history.start_order(list(planned), planned, lanes, first=("s005",))
        actual = {**planned, **{k: planned[k] * rng.uniform(1, 3) for k in slow}}
        assert not _slow_beside_slow(order, slow, actual, lanes), seed


def test_the_last_run_s_durations_come_first(tmp_path):
    run = _run(tmp_path)
    small = next(c for c in run.cases if c.geometry.c_in == 1 and c.variant == "onnx_f32")
    cut = next(c for c in run.cases if c.geometry.c_in == 2 and c.variant == "onnx_bf16")
    unknown = next(c for c in run.cases if c.geometry.c_in == 4 and c.variant == "tflite_f32")
    entries = [
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
    envelopes = history._envelopes(run.cfg, "llvm-cpu")
    assert costs[unknown.key] == history.estimate(unknown, envelopes)  # its compile recorded no time
    order = _start_order(run)
    assert small.key in order[:2]  # the costliest starts at once, on a lane of its own
