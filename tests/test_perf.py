"""Performance per case (pipeline/targets/perf.py): reading the benchmark tool's report, the rule that
calls a change real only beyond the measured noise, and a failing benchmark tool."""
import json
import math

import pytest

from helpers import clean_env, doit, results, write_spec
from pipeline.space.geometry import Geometry
from pipeline.space.geometry import macs
from pipeline.targets.perf import RUN_TO_RUN_NOISE, changes, parse_benchmark, run_to_run


def _run(median, low, high):
    return {"execution": {"median_s": median, "min_s": low, "max_s": high, "spread": (high - low) / median}}


@pytest.mark.parametrize("old, new, expected", [
    (_run(1.0, 0.9, 1.1), _run(1.5, 1.4, 1.6), ["slower"]),  # log 1.5 = 0.41 > 20% spread + 10% floor
    (_run(1.0, 0.9, 1.1), _run(1.15, 1.12, 1.2), []),  # log 1.15 = 0.14: within 20% + 10%
    (_run(1.0, 0.99, 1.01), _run(1.08, 1.07, 1.09), []),  # tight spreads, but 8% is run-to-run noise here
    (_run(1.0, 0.6, 1.6), _run(1.5, 1.3, 1.7), []),  # +50%, but one run spread 100%: noise
    (_run(2.0, 1.9, 2.1), _run(1.0, 0.95, 1.05), ["faster"]),
    ({"estimated_npu_cycles": 1000}, {"estimated_npu_cycles": 1001}, ["slower"]),  # a deterministic estimate
    ({"estimated_npu_cycles": 1000}, {"estimated_npu_cycles": 1000}, []),
    ({}, _run(1.0, 0.9, 1.1), []),  # timed on one side only: nothing to compare
])
def test_changes_beyond_noise(old, new, expected):
    assert [c["direction"] for c in changes(old, new)] == expected


def test_noise_floor_is_the_machines():
    old, new = _run(1.0, 0.99, 1.01), _run(1.08, 1.07, 1.09)
    assert changes(old, new, floor=0.0)[0]["direction"] == "slower"  # a quiet machine's floor
    assert changes(old, new, floor=RUN_TO_RUN_NOISE) == []
    moved = run_to_run([(old, new), (new, old), ({}, new)])
    assert moved["cases"] == 2 and moved["max"] == pytest.approx(math.log(1.08))


def test_parse_benchmark_reads_repetitions_not_aggregates():
    document = {"benchmarks": [
        *({"run_type": "iteration", "real_time": t, "time_unit": "us", "iterations": 100} for t in (30, 10, 20)),
        {"run_type": "aggregate", "aggregate_name": "mean", "real_time": 20, "time_unit": "us"},
    ]}
    measured = parse_benchmark(document)
    assert measured["repetitions"] == 3
    assert (measured["min_s"], measured["median_s"], measured["max_s"]) == pytest.approx((10e-6, 20e-6, 30e-6))
    assert measured["spread"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        parse_benchmark({"benchmarks": []})


def test_macs_count_every_product():
    # same padding at stride 2 and dilation 2, two groups, batch 3: 3 x 4x4 outputs x 6 channels x (4/2 x 3x3)
    g = Geometry(2, (8, 7), (3, 3), (2, 2), 4, 6, "same", dilation=(2, 2), groups=2, batch=3)
    assert g.out_spatial == (4, 4) and macs(g) == 3 * 16 * 6 * 18


CRASHING_TOOL = "#!/bin/sh\necho 'iree-benchmark-module: internal error' >&2\nkill -SEGV $$\n"


@pytest.mark.slow
def test_a_failing_benchmark_tool_leaves_the_case_passing(tmp_path):
    tool = tmp_path / "crashing-benchmark"
    tool.write_text(CRASHING_TOOL)
    tool.chmod(0o755)
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"targets": {"llvm-cpu": {"benchmark_tool": str(tool)}}}))
    spec = write_spec(tmp_path / "spec.json", [{"rank": 1, "spatial": [8], "kernel": [3], "stride": [1],
                                                 "c_in": 2, "c_out": 2}])
    env = clean_env(CONV_SWEEP_SPEC=spec, CONV_SWEEP_N=0, CONV_SWEEP_BUILD_DIR=tmp_path / "build",
                    CONV_SWEEP_TARGETS_FILE=targets, CONV_SWEEP_BENCHMARK=1)
    run = doit("-n", "2", "verify:conv_onnx_f32*", env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    (name, result), = results(tmp_path / "build").items()
    assert result["status"] == "pass"
    x = result["perf"]["execution"]
    assert "killed by signal SIGSEGV" in x["error"] and "median_s" not in x
    assert "internal error" in (tmp_path / "build" / "cases" / name / "llvm-cpu" / "benchmark.log").read_text()
    page = (tmp_path / "build" / "report" / "llvm-cpu" / "report.html").read_text()
    assert "<td>onnx_f32</td><td>0</td><td></td>" in page and "<td>1</td></tr>" in page  # 1 benchmark error


def test_bad_benchmark_switch_is_a_clear_error(tmp_path):
    run = doit("list", env=clean_env(CONV_SWEEP_BENCHMARK="yes", CONV_SWEEP_BUILD_DIR=tmp_path / "b"))
    assert run.returncode != 0 and "CONV_SWEEP_BENCHMARK='yes': must be 1" in run.stderr
