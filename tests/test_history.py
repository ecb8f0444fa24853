"""The order chains start in (pipeline/results/history.py, used by pipeline/engine/tasks.py):
the last run's measured chain durations where its results file has the case (a tool cut at a
limit counts at the limit it ran to; a failure that recorded no time is estimated), else the
cost model; the cheapest chain first, then the costliest."""
import json

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
    rest = [costs[c.key] for c in order[1:]]
    assert rest == sorted(rest, reverse=True) and rest[0] == max(costs.values())


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
    order = _costliest_first(run)
    assert [c.key for c in order[1:3]] == [small.key, cut.key]
