"""The progress line's time left (pipeline/engine/reporter.py): planned from each chain's cost
where the run planned its order on them (costliest first, so the first tasks' durations say
little of the rest), else from the measured task durations."""
import io
import time

import pytest

from pipeline.engine.reporter import Progress


def _progress(costs: dict) -> Progress:
    progress = Progress(io.StringIO(), interval=5)
    tasks = {f"{stage}:{case}": None for case in costs for stage in ("vmfb", "verify")}
    progress.pending = {case: {f"vmfb:{case}", f"verify:{case}"} for case in costs}
    progress.totals = {"model": 0, "mlir": 0, "vmfb": len(costs), "verify": len(costs)}
    progress.total = len(costs)
    progress.owners = {}  # no shared model/mlir tasks here
    progress.costs = dict(costs)
    return progress, tasks


def test_time_left_is_the_planned_work_not_done_over_the_workers():
    progress, _ = _progress({"conv_big@t": 600.0, "conv_a@t": 1.0, "conv_b@t": 3.0})
    progress.executing("vmfb:conv_big@t")
    progress.executing("vmfb:conv_a@t")
    progress.started["vmfb:conv_big@t"] -= 100  # it has run for 100 s
    left = progress.left()
    assert 250 < left < 252  # (604 - 100 - a's fraction of a second) / 2 workers
    progress.finished("vmfb:conv_a@t", failed=False)
    progress.finished("verify:conv_a@t", failed=False)
    assert 250 < progress.left() < 251.5


def test_without_planned_costs_the_measured_durations_estimate():
    progress, _ = _progress({"conv_x@t": 1.0, "conv_y@t": 1.0})
    progress.costs = {}
    progress.executing("vmfb:conv_x@t")
    progress.started["vmfb:conv_x@t"] = time.monotonic() - 2
    progress.finished("vmfb:conv_x@t", failed=False)
    assert 5.9 < progress.left() < 6.1  # three tasks left, each at the 2 s measured, one worker


def test_the_line_names_the_longest_running_tasks_against_their_limits():
    progress, _ = _progress({"conv_big@t": 600.0, "conv_a@t": 1.0})
    progress.limit_of = {"vmfb:conv_big@t": 600.0, "vmfb:conv_a@t": 60.0}.get
    progress.executing("vmfb:conv_big@t")
    progress.executing("vmfb:conv_a@t")
    progress.started["vmfb:conv_big@t"] -= 312
    assert progress.line().endswith("; running: vmfb:conv_big@t 5m12s of 10m00s")  # a's 0 s is not news
    progress.started["vmfb:conv_a@t"] -= 7
    assert progress.line().endswith("; running: vmfb:conv_big@t 5m12s of 10m00s, vmfb:conv_a@t 0m07s of 1m00s")
    progress.stop()


def test_the_line_keeps_ticking_while_nothing_finishes():
    progress, _ = _progress({"conv_hang@t": 10.0})
    progress.interval = 0  # off a terminal: a line whenever it is drawn
    progress.executing("vmfb:conv_hang@t")
    progress.started["vmfb:conv_hang@t"] -= 6
    time.sleep(2.5)
    progress.stop()
    lines = progress.stream.getvalue().splitlines()
    assert len(lines) >= 2 and all("running: vmfb:conv_hang@t 0m0" in line for line in lines), lines


def test_without_planned_costs_a_running_task_counts_what_it_still_needs():
    progress, _ = _progress({"conv_x@t": 1.0, "conv_y@t": 1.0})
    progress.costs = {}
    progress.executing("vmfb:conv_x@t")
    progress.started["vmfb:conv_x@t"] = time.monotonic() - 2
    progress.finished("vmfb:conv_x@t", failed=False)  # a measured 2 s per task
    progress.executing("vmfb:conv_y@t")
    progress.started["vmfb:conv_y@t"] -= 1.5
    assert 4.4 < progress.left() < 4.6  # three tasks left at 2 s, less the 1.5 s the running one has run
    progress.stop()


SLOW_COMPILE = """#!/bin/sh
case "$PWD" in *conv_onnx_f32_*) sleep 8;; esac  # the compiler runs in the case's folder
exec {real} "$@"
"""


@pytest.mark.slow
def test_a_long_compile_keeps_the_line_moving_and_is_named_with_its_limit(tmp_path):
    from helpers import clean_env, doit, real_compiler, write_spec, write_wrapper

    wrapper = write_wrapper(tmp_path / "iree-compile", SLOW_COMPILE, real_compiler())
    geometry = {"category": "one", "rank": 1, "spatial": [20], "kernel": [5], "stride": [2], "c_in": 4, "c_out": 8}
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [geometry]), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_IREE_COMPILE=wrapper,
                    CONV_SWEEP_PROGRESS_INTERVAL=1, CONV_SWEEP_CACHE_DIR="off")
    run = doit("-n", "2", "sweep", env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    case = "vmfb:conv_onnx_f32_w20_h1_f8_k5_c4_r1_s1x2_pvalid@llvm-cpu"
    ticking = [l for l in run.stderr.splitlines() if f"; running: {case} 0m0" in l]
    assert len(ticking) >= 2, run.stderr[-3000:]
    assert all(l.endswith("of 1m00s") for l in ticking)  # llvm-cpu's compile floor: its predicted limit
