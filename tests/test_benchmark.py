"""The benchmark script runs, at its smallest size, so that it cannot rot (figures are not checked);
its pieces (the tool-time floor from result.json files, counting started tasks) on their own."""
import json
import subprocess
import sys

import pytest

from helpers import ROOT, clean_env, write_spec

from pipeline.dev import benchmark


@pytest.mark.slow
def test_benchmark_runs_and_reports_every_figure(tmp_path):
    spec = write_spec(tmp_path / "spec.json", [
        {"category": "tiny", "rank": 1, "spatial": [16], "kernel": [3], "stride": [1], "c_in": 2, "c_out": 2}])
    out = tmp_path / "bench.json"
    run = subprocess.run([sys.executable, "-m", "pipeline.dev.benchmark", "--n", "0", "--spec", str(spec),
                          "--out", str(out), "--work", str(tmp_path / "work"), "--pairs", "2"],
                         cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["cases"] == 5
    runs = figures["runs"]
    assert runs["cold doit -n 2 sweep"]["executed_tasks"] == 20 and runs["cold doit -n 2 sweep"]["returncode"] == 0
    assert runs["no-op rerun"]["executed_tasks"] == 0
    assert runs["second empty build folder, warm store"]["executed_tasks"] == 20
    assert figures["built_not_taken_from_the_store"]["cold"] == {"model": 5, "import": 5, "compile": 5, "oracle": 5,
                                                                 "run": 5}
    assert figures["built_not_taken_from_the_store"]["warm store"] == {"model": 0, "import": 0, "compile": 0,
                                                                       "oracle": 0, "run": 0}
    assert figures["built_not_taken_from_the_store"]["compile-flag A/B, warm store"]["model"] == 0
    assert figures["built_not_taken_from_the_store"]["compile-flag A/B, warm store"]["import"] == 0
    assert runs["rerun after CONV_SWEEP_COMPILE_FLAGS change"]["executed_tasks"] >= 5
    assert runs["verify rerun, CONV_SWEEP_BENCHMARK=1"]["executed_tasks"] == 5
    assert runs["verify rerun, CONV_SWEEP_BENCHMARK=0"]["executed_tasks"] == 5
    assert runs["naive serial loop"]["returncode"] == 0
    assert runs["cold sweep on Dask (local:2)"]["executed_tasks"] == 20
    assert runs["cold sweep on Dask (local:2)"]["returncode"] == 0
    assert all(r["peak_rss_mb"] > 0 for r in runs.values())
    assert figures["intrinsic_floor_seconds"] > 0
    assert set(figures["ratios"]) == {"cold / intrinsic floor", "cold / naive", "naive / cold (speed-up)",
                                      "no-op / cold", "Dask local:2 / cold doit -n 2 (overhead)",
                                      "second folder on a warm store / cold",
                                      "verify rerun with / without CONV_SWEEP_BENCHMARK=1",
                                      "CONV_SWEEP_BENCHMARK=1 cost per case (s, wall, 2 cores)"}
    assert "cold / intrinsic floor" in run.stdout and "peak RSS MB" in run.stdout
    pairs = figures["cold_pairs"]  # the first pair is the runs above, the second ran on its own
    assert len(pairs) == 2 and all(p["returncodes"] == [0, 0] and p["floor_seconds"] > 0 for p in pairs)
    assert pairs[0]["cold_seconds"] == runs["cold doit -n 2 sweep"]["seconds"]
    assert "cold pairs, one right after the other (2):" in run.stdout and "dask / cold: median" in run.stdout


def test_intrinsic_sums_every_stage_of_every_result(tmp_path):
    for case, target, seconds in [("a", "llvm-cpu", 1.0), ("a", "torq", 2.0), ("b", "llvm-cpu", 0.5)]:
        folder = tmp_path / "cases" / case / target
        folder.mkdir(parents=True)
        stages = {"compile": {"seconds": seconds}, "run": {"seconds": seconds / 2}}
        (folder / "result.json").write_text(json.dumps({"stages": stages}))
    totals = benchmark.intrinsic(tmp_path)
    assert totals["compile"] == 3.5 and totals["run"] == 1.75 and totals["model"] == 0.0


def test_intrinsic_counts_the_tools_of_the_stage_a_case_failed_at(tmp_path):
    """A failing stage records no duration: its logged tool invocations count, a cut one at
    its limit, so that a sweep with failures (torq: 655 of 1,250) has its whole floor."""
    failed = tmp_path / "cases" / "c" / "torq"
    failed.mkdir(parents=True)
    (failed / "result.json").write_text(json.dumps({"stage": "compile", "stages": {"model": {"seconds": 0.25}}}))
    (failed / "compile.log").write_text("$ torq-compile a.mlir\n# exit status 1 after 0.75 s\n--- stderr ---\nerror\n\n")
    cut = tmp_path / "cases" / "d" / "torq"
    cut.mkdir(parents=True)
    (cut / "result.json").write_text(json.dumps({"stage": "run", "stages": {"compile": {"seconds": 1.5}}}))
    (cut / "run.log").write_text("$ iree-dump-module m\n# exit status 0 after 0.01 s\n\n"
                                 "$ torq-run-module --module=m\n# timed out after 20 s: cut at its predicted limit\n\n")
    totals = benchmark.intrinsic(tmp_path)
    assert totals["model"] == 0.25 and totals["compile"] == 2.25 and abs(totals["run"] - 20.01) < 1e-9


def test_executed_counts_the_lines_of_started_tasks():
    assert benchmark._executed(".  model:conv_a\n-- mlir:conv_a\n.  vmfb:conv_a@llvm-cpu\nother\n") == 2


def test_measure_ends_when_the_process_exits_not_when_its_children_close_its_output():
    # the child keeps the inherited stdout and stderr open for 3 s after its parent has exited
    child = "import time; time.sleep(3)"
    parent = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {child!r}]); print('done')"
    figures = benchmark.measure([sys.executable, "-c", parent], env=clean_env())
    assert figures["returncode"] == 0 and figures["stdout"] == "done\n"
    assert figures["seconds"] < 2.5


def test_a_false_cut_is_a_predicted_cut_whose_tool_ended_by_itself_under_the_fixed_limit(tmp_path):
    reasons = {"predicted": {"hang": "t timed out after 20 s: its predicted limit (max(...)), under its run budget of 240 s",
                             "slow": "t timed out after 20 s: its predicted limit (max(...)), under its run budget of 240 s", "ok": "3 checks"},
               "fixed": {"hang": "t timed out after 600 s", "slow": "t exit status 1: error: x", "ok": "3 checks"}}
    for mode, cases in reasons.items():
        for case, reason in cases.items():
            folder = tmp_path / mode / "cases" / case / "torq"
            folder.mkdir(parents=True)
            (folder / "result.json").write_text(json.dumps({"reason": reason}))
    assert benchmark.false_cuts(tmp_path / "predicted", tmp_path / "fixed", "torq") == ["slow"]


def _pair(cold, dask):
    return {"cold_seconds": cold, "floor_seconds": 10.0, "dask_seconds": dask, "returncodes": [0, 0],
            "cold / floor": round(cold / 10.0, 3), "dask / cold": round(dask / cold, 3)}


@pytest.mark.parametrize("pairs,median", [
    ([(100.0, 149.7), (100.0, 101.2)], "median 1.255, max 1.497"),  # two: the mean of the middle two, not the larger
    ([(100.0, 149.7), (100.0, 101.2), (100.0, 120.0)], "median 1.200, max 1.497"),
])
def test_the_table_prints_the_median_of_the_cold_pairs(pairs, median):
    figures = {"runs": {}, "intrinsic_tool_seconds": {}, "cases": 0, "intrinsic_floor_seconds": 0.0,
               "full_sweep_artifacts": 1250, "ratios": {}, "cold_pairs": [_pair(*p) for p in pairs]}
    lines = benchmark.table(figures).splitlines()
    assert f"  dask / cold: {median}" in lines, lines
    assert "  cold / floor: median 10.000, max 10.000" in lines


def test_hunt_figures_count_root_causes_and_known_share_per_cpu_hour_of_search():
    summary = {"geometries": 3, "cases": 10, "in_known_buckets": {"cases": 4, "of": 10, "share": 0.4},
               "cpu_seconds": 1800.0, "new_buckets": [{"bucket": "a", "found_at_s": 12.5}, {"bucket": "b", "found_at_s": 40.0}, {"bucket": "c"}],
               "new_root_causes": [{"buckets": ["a", "b"]}, {"buckets": ["c"]}], "bugreports": {"a": "r"}}
    figures = benchmark.hunt_figures(summary)
    assert figures["new buckets per CPU-hour"] == 6.0 and figures["new root causes per CPU-hour"] == 4.0
    assert figures["in_known_buckets"]["share"] == 0.4 and figures["bugreports"] == 1
    assert figures["found_at_s"] == [12.5, 40.0, None]  # a summary from before it was recorded has none
    assert benchmark.hunt_figures(None)["new root causes per CPU-hour"] == 0.0  # a hunt that wrote no summary
