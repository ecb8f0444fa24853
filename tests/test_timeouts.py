"""Time limits through `doit` (pipeline/targets/cost.py, the profile's `timeouts`): a run tool
that hangs on a tiny case is cut at that case's predicted limit, seconds, not the budget, and is
a `timeout` whose reason says so; a slow but legitimate case, well over the floor, is not cut;
the run's completed invocations are observed; with CONV_SWEEP_TIMEOUTS=fixed the same hang runs
to the budget. A compile past its budget (CONV_SWEEP_BUDGET) is a `timeout` too: listed, it is
`xfail` and the run is green; listed but finishing within a larger budget, it runs on and passes.
A torq run's limit follows torq-compile's estimated cycles where the calibration has them."""
import json
import pytest

from helpers import clean_env, doit, results, write_spec

pytestmark = pytest.mark.slow
TINY = {"category": "tiny", "rank": 1, "spatial": [8], "kernel": [3], "stride": [1], "c_in": 1, "c_out": 1}
SLOW = {"category": "slow", "rank": 2, "spatial": [24, 24], "kernel": [3, 3], "stride": [1, 1], "c_in": 16,
        "c_out": 16}
# The run tool: hangs on the tiny case, takes 4 s more than the real one on the slow one.
RUNNER = """#!/bin/sh
case "$*" in
  *_c1_r1_*) sleep 600;;
  *_c16_*) sleep 4;;
esac
exec {real} "$@"
"""
# A calibration that says a run of the tiny case takes 0.3 s and one of the slow case 10 s; with
# margin 3 and floor 3 s the tiny case's limit is max(3 s, 3 x 0.3 s) = 3 s, the slow one's
# 3 x 10 s = 30 s, which its 4 s of sleep plus the real run stays well within, however busy the
# machine.
RULES = {"run": {"limit": 600, "margin": 3, "floor": 3}}


def _macs(geometry: dict) -> int:
    from pipeline.space.geometry import Geometry, macs

    return macs(Geometry.from_dict({k: v for k, v in geometry.items() if k != "category"}, "test"))


def _env(tmp_path, **knobs):
    from helpers import real_compiler  # noqa: F401  (the toolchain must resolve)
    from pipeline.config import Config

    real_runner = Config.from_env(clean_env()).target("llvm-cpu").runner
    runner = tmp_path / "hanging-run-module"
    runner.write_text(RUNNER.format(real=real_runner))
    runner.chmod(0o755)
    calibration = {"measured": "by hand", "stages": {"run": {"points": [[_macs(TINY), 0.3], [_macs(SLOW), 10]]}}}
    (tmp_path / "cal.json").write_text(json.dumps(calibration))
    profile = {"base": "llvm-cpu", "runner": str(runner), "flavors": ["onnx_f32"], "calibration": "cal.json",
               "timeouts": RULES}
    (tmp_path / "targets.json").write_text(json.dumps({"targets": {"cut": profile}}))
    # a store of its own: the store remembers a cut with its limit, and the hang cut by one of these
    # tests would be the other's result wherever both ran in one test process (the tests' store)
    return clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [TINY, SLOW]), CONV_SWEEP_N=0,
                     CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGETS_FILE=tmp_path / "targets.json",
                     CONV_SWEEP_TARGET="cut", CONV_SWEEP_CACHE_DIR=tmp_path / "store", **knobs)


def test_a_hang_on_a_tiny_case_is_cut_at_its_predicted_limit(tmp_path):
    run = doit("-n", "2", "sweep", env=_env(tmp_path), timeout=900)
    assert run.returncode != 0  # the hang is not listed: a red case
    found = {r["category"]: r for r in results(tmp_path / "build", "cut").values()}
    tiny, slow = found["tiny"], found["slow"]
    assert (tiny["status"], tiny["stage"]) == ("timeout", "run")
    # cut at 3 s, not at the 600 s budget; the reason says which limit and why
    assert tiny["reason"] == ("hanging-run-module timed out after 3 s: its predicted limit (max(floor 3 s, "
                              f"3 x 0.3 s predicted for {_macs(TINY)} MACs)), under its run budget of 600 s"), \
        tiny["reason"]
    assert "run TIMEOUT: hanging-run-module timed out after 3 s" in run.stderr + run.stdout
    assert slow["status"] == "pass", slow["reason"]
    assert slow["stages"]["run"]["seconds"] > 4  # slow, and not cut: its limit is 3 x 10 s
    report = json.loads((tmp_path / "build" / "report" / "cut" / "results.json").read_text())
    assert [b["signature"] for b in report["buckets"]] == ["run: timeout"]
    observed = [json.loads(line) for line in
                (tmp_path / "build" / "report" / "cut" / "observed-costs.jsonl").read_text().splitlines()]
    seen = {(o["stage"], o["macs"]) for o in observed}
    # a cut run says nothing of its cost; compile has no rule in this profile, so is not observed
    assert seen == {("run", _macs(SLOW))}


def test_fixed_timeouts_wait_for_the_budget(tmp_path):
    # a run budget (the other tools keep theirs) that the slow case's 4 s of sleep plus the real
    # run stays well within
    run = doit("-n", "2", "sweep", env=_env(tmp_path, CONV_SWEEP_TIMEOUTS="fixed", CONV_SWEEP_BUDGET="run=15"),
               timeout=900)
    assert run.returncode != 0
    found = {r["category"]: r for r in results(tmp_path / "build", "cut").values()}
    assert found["tiny"]["status"] == "timeout"
    assert found["tiny"]["reason"] == ("hanging-run-module timed out after 15 s: its run budget is 15 s "
                                       "(CONV_SWEEP_TIMEOUTS=fixed)"), \
        found["tiny"]["reason"]
    assert found["slow"]["status"] == "pass"


# A compiler that takes 12 s more than the real one on the ONNX f32 Conv1D case, none on the others
# (it compiles in the case's folder, with relative paths): past a compile budget of 10 s, which the
# real compiles stay well within, however busy the machine.
SLOW_COMPILER = """#!/bin/sh
case "$PWD" in
  *conv_onnx_f32_*_c1_r1_*) sleep 12;;
esac
exec {real} "$@"
"""


def _slow_compile_env(tmp_path, budget: str, listed: bool):
    from helpers import real_compiler

    compiler = tmp_path / "slowcc"  # another name than the target's compiler
    compiler.write_text(SLOW_COMPILER.format(real=real_compiler()))
    compiler.chmod(0o755)
    entries = [{"case": "conv_onnx_f32_*_c1_r1_*", "stage": "compile", "bucket": "compile: timeout"}] if listed else []
    (tmp_path / "xfails.json").write_text(json.dumps({"expected_failures": entries}))
    return clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [TINY, SLOW]), CONV_SWEEP_N=0,
                     CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_IREE_COMPILE=compiler,
                     CONV_SWEEP_COMPILE_ONLY="tflite_f32,tflite_w8if32,tflite_w8i8,onnx_bf16",
                     CONV_SWEEP_EXPECTED_FAILURES=tmp_path / "xfails.json", CONV_SWEEP_BUDGET=budget,
                     CONV_SWEEP_TIMEOUTS="fixed", CONV_SWEEP_CACHE_DIR="off")


def test_a_compile_past_its_budget_is_a_timeout_and_listed_it_is_xfail(tmp_path):
    env = _slow_compile_env(tmp_path, "compile=10", listed=False)
    run = doit("-n", "2", "sweep", env=env, timeout=900)
    assert run.returncode != 0  # not listed: red
    found = list(results(tmp_path / "build").values())
    cut = next(r for r in found if r["category"] == "tiny" and r["backend"] == "onnx" and r["flavor"] == "f32")
    assert (cut["status"], cut["stage"]) == ("timeout", "compile"), cut
    assert cut["reason"] == "slowcc timed out after 10 s: its compile budget is 10 s (CONV_SWEEP_TIMEOUTS=fixed)", \
        cut["reason"]
    others = [r for r in found if r is not cut]
    assert others and all(r["status"] in ("pass", "compiled") for r in others), [(r["case"], r["status"]) for r in others]

    listed = _slow_compile_env(tmp_path, "compile=10", listed=True)
    run = doit("-n", "2", "sweep", env=listed, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]  # green
    cut = results(tmp_path / "build")[cut["case"]]
    assert cut["status"] == "xfail" and cut["notes"]["outcome"] == "timeout", cut
    assert cut["notes"]["observed_bucket"] == "compile: timeout"

    # a budget the compile finishes within: the listed case runs on, is checked and passes
    finished = _slow_compile_env(tmp_path, "compile=120", listed=True)
    run = doit("-n", "2", "sweep", env=finished, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    case = results(tmp_path / "build")[cut["case"]]
    assert case["status"] == "pass", case
    assert "finished within its budget" in case["notes"]["listed_timeout"]
    assert case["stages"]["run"]["seconds"] > 0 and case["metrics"]


def test_a_known_timeout_is_a_result_until_its_budget_rises_or_it_is_retried(tmp_path):
    """A compile cut at its budget records the budget as its time; a rerun takes the cut from the
    store (the compiler does not run); a raised budget runs it again and records the new cut;
    `--retry-timeouts` runs it again at the same budget."""
    store = tmp_path / "store"

    def sweep(budget: str, *options: str):
        env = {**_slow_compile_env(tmp_path, budget, listed=True), "CONV_SWEEP_CACHE_DIR": str(store)}
        # that case's chain alone (doit's own selection): the budgets of 4 and 6 s bind no real
        # compile, which a busy machine could push past them
        run = doit(*options, "-n", "2", "verify:conv_onnx_f32_*_c1_r1_*", env=env, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]  # listed: green every time
        case = next(r for r in results(tmp_path / "build").values()
                    if r["category"] == "tiny" and r["backend"] == "onnx" and r["flavor"] == "f32")
        assert case["status"] == "xfail" and case["notes"]["outcome"] == "timeout", case
        log = next((tmp_path / "build" / "cases" / case["case"]).glob("*/compile.log")).read_text()
        return case["stages"]["compile"], log

    stage, log = sweep("compile=4")
    assert stage == {"seconds": 4.0, "cut": True} and "taken from the store" not in log
    stage, log = sweep("compile=4")  # nothing changed: the cut is a result
    assert stage == {"seconds": 0.0, "store": True, "cut": True, "limit": 4.0}, stage
    assert log.startswith("# taken from the store") and "timed out after 4 s" in log
    stage, log = sweep("compile=6")  # a raised budget: run again, cut again, at 6 s
    assert stage == {"seconds": 6.0, "cut": True} and "taken from the store" not in log
    assert sweep("compile=6")[0]["store"]
    stage, log = sweep("compile=6", "--retry-timeouts")
    assert stage == {"seconds": 6.0, "cut": True} and "taken from the store" not in log


# torq's simulator behind a wrapper that adds 6 s to every run
SLOW_SIMULATOR = """#!/bin/sh
sleep 6
exec {real} "$@"
"""
TORQ_CASE = {"category": "torq", "rank": 2, "spatial": [12, 10], "kernel": [3, 3], "stride": [1, 1], "c_in": 16,
             "c_out": 8}


@pytest.mark.parametrize("by_cycles", [False, True], ids=["macs only", "with the estimated cycles"])
def test_a_torq_run_s_limit_follows_the_compiler_s_estimated_cycles(tmp_path, by_cycles):
    """A calibration whose runs by MACs say 0.3 s at this size, and by torq-compile's estimated
    cycles 10 s at any count up to 10^9: with margin 3 and floor 3 s, the case's run may take
    3 s by its MACs alone, and is cut (its 6 s of sleep); with the cycles its limit is 3 x 10 s,
    and it passes. Its observed run carries the cycles of the module's own timeline, and
    `doit calibrate` calibrates its run against them."""
    from pipeline.config import Config
    from pipeline.space.cases import Case
    from pipeline.space.geometry import Geometry
    from pipeline.targets.compiler import PROFILE, estimated_time

    real = Config.from_env(clean_env(CONV_SWEEP_TARGET="torq")).target("torq").runner
    runner = tmp_path / "slow-run-module"
    runner.write_text(SLOW_SIMULATOR.format(real=real))
    runner.chmod(0o755)
    stages = {"run": {"points": [[_macs(TORQ_CASE), 0.3]], **({"cycles": [[10**9, 10.0]]} if by_cycles else {})}}
    (tmp_path / "cal.json").write_text(json.dumps({"measured": "by hand", "stages": stages}))
    profile = {"base": "torq", "runner": str(runner), "flavors": ["tflite_w8i8"], "calibration": "cal.json",
               "timeouts": RULES}
    (tmp_path / "targets.json").write_text(json.dumps({"targets": {"torqcut": profile}}))
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [TORQ_CASE]), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGETS_FILE=tmp_path / "targets.json",
                    CONV_SWEEP_TARGET="torqcut")
    run = doit("sweep", env=env, timeout=900)
    (found,) = results(tmp_path / "build", "torqcut").values()
    cfg = Config.from_env(env)
    case = Case(Geometry.from_dict({k: v for k, v in TORQ_CASE.items() if k != "category"}), "tflite", "w8i8",
                target="torqcut")
    cycles = estimated_time(cfg.case_dir(case) / PROFILE)
    assert cycles and cfg.estimated_cycles(case) == cycles
    if not by_cycles:
        assert run.returncode != 0 and (found["status"], found["stage"]) == ("timeout", "run"), found
        assert found["reason"] == ("slow-run-module timed out after 3 s: its predicted limit (max(floor 3 s, "
                                   f"3 x 0.3 s predicted for {_macs(TORQ_CASE)} MACs)), under its run budget of 600 s")
        return
    assert run.returncode == 0 and found["status"] == "pass", found
    assert found["stages"]["run"]["seconds"] > 6
    assert cfg.limit(case, "run").seconds == 30 and cfg.limit(case, "run").cycles == cycles
    (observed,) = [json.loads(line) for line in
                   (tmp_path / "build" / "report" / "torqcut" / "observed-costs.jsonl").read_text().splitlines()
                   if json.loads(line)["stage"] == "run"]
    assert observed["cycles"] == round(cycles) and observed["case"] == found["case"]
    calibrated = doit("calibrate", "--out", str(tmp_path / "recalibrated"), env=env)  # from this run, the same
    assert calibrated.returncode == 0, calibrated.stderr[-2000:]
    (point,) = json.loads((tmp_path / "recalibrated" / "torqcut.json").read_text())["stages"]["run"]["cycles"]
    assert point[0] == round(cycles) and point[1] > 6
