"""The progress line's time left (pipeline/engine/reporter.py): planned from each chain's cost
where the run planned its order on them, scaled by how far this run's finished chains ran
past their plan, a running task past its prediction counting as long again as it has run (up
to its limit); else from the measured task durations. It never falls while nothing finishes.
Unit tests run on a clock of their own: no sleeping, no real time."""
import io

import pytest

from pipeline.engine.reporter import Progress


class Clock:
    """A clock that moves only when told."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _progress(costs: dict) -> tuple[Progress, Clock]:
    clock = Clock()
    progress = Progress(io.StringIO(), interval=5, clock=clock)
    progress.wait = lambda seconds: True  # the ticking thread ends at once: the tests draw the line themselves
    for case in costs:  # each case's own vmfb and verify tasks (no shared model/mlir tasks here)
        for stage in ("vmfb", "verify"):
            progress.track(f"{stage}:{case}", stage, [case])
    progress.costs = dict(costs)
    return progress, clock


def _run(progress: Progress, clock: Clock, case: str, vmfb: float, verify: float) -> None:
    """The case's two tasks run one after the other, taking these seconds."""
    for name, seconds in ((f"vmfb:{case}", vmfb), (f"verify:{case}", verify)):
        progress.executing(name)
        clock.now += seconds
        progress.finished(name, failed=False)


def test_time_left_is_the_planned_work_not_done_over_the_workers():
    progress, clock = _progress({"conv_big@t": 600.0, "conv_a@t": 1.0, "conv_b@t": 3.0})
    progress.executing("vmfb:conv_big@t")
    progress.executing("vmfb:conv_a@t")
    clock.now += 100
    assert progress.left() == 500  # big's 500 s left run on one worker: more than (600 + 4 - 200) / 2
    progress.finished("vmfb:conv_a@t", failed=False)
    progress.finished("verify:conv_a@t", failed=False)
    assert progress.left() == 500


def test_time_left_counts_the_planned_work_over_the_workers_when_no_chain_dominates():
    costs = {f"conv_{i}@t": 10.0 for i in range(6)}
    progress, clock = _progress(costs)
    progress.executing("vmfb:conv_0@t")
    progress.executing("vmfb:conv_1@t")
    clock.now += 4
    assert progress.left() == (60 - 8) / 2


def _never_falling(progress, clock, steps: int, step: float) -> list:
    """The estimates while the clock moves on `steps` times by `step` s and nothing finishes;
    each at least the one before."""
    estimates = []
    for _ in range(steps):
        estimates.append(progress.left())
        clock.now += step
    assert all(later >= earlier for earlier, later in zip(estimates, estimates[1:])), estimates
    return estimates


def test_the_time_left_does_not_fall_while_nothing_finishes():
    """A task far past its plan, and one within it: time passes, nothing finishes, and the
    estimate holds or grows, never falls, up to the long one's limit and past it."""
    progress, clock = _progress({"conv_big@t": 100.0, "conv_a@t": 50.0, "conv_b@t": 20.0})
    progress.limit_of = {"vmfb:conv_big@t": 900.0}.get
    progress.executing("vmfb:conv_big@t")
    progress.executing("vmfb:conv_a@t")
    estimates = _never_falling(progress, clock, steps=120, step=10)
    assert estimates[-1] > estimates[0]


def test_a_task_past_its_scaled_plan_needs_as_long_again_up_to_its_limit():
    progress, clock = _progress({"conv_big@t": 100.0, "conv_a@t": 1.0})
    progress.limit_of = {"vmfb:conv_big@t": 500.0}.get
    progress.executing("vmfb:conv_big@t")
    clock.now += 60
    assert progress.left() == 40 + 1  # within its plan: the rest of it, and a's 1 s (one worker seen)
    clock.now += 90  # 150 s: past its plan of 100
    assert progress.left() == 150 + 1  # as long again as it has run
    clock.now += 250  # 400 s: 100 s before its limit
    assert progress.left() == 150 + 1  # its limit allows 100 s more, but the estimate does not fall
    assert progress._needs("vmfb:conv_big@t", 400, 0.0) == 100
    assert progress._needs("vmfb:conv_big@t", 520, 0.0) == 1  # past its limit: never nothing
    assert progress._needs("vmfb:conv_x@t", 520, 0.0) == 520  # no limit known


def test_the_time_left_drops_when_tasks_finish():
    """Held up while nothing finished, the estimate falls to what is left once a task does."""
    progress, clock = _progress({"conv_big@t": 100.0, **{f"conv_{i}@t": 10.0 for i in range(4)}})
    progress.limit_of = {"vmfb:conv_big@t": 400.0}.get
    progress.concurrency = 2
    progress.executing("vmfb:conv_big@t")
    clock.now += 200
    assert progress.left() == 200  # big, past its plan: as long again as it has run
    clock.now += 150
    assert progress.left() == 200  # big may need only the 50 s its limit allows: held
    _run(progress, clock, "conv_0@t", 1, 1)
    assert progress.left() == 48  # big's limit in 48 s; three cases of 10 s over two workers beside it


def test_the_plan_is_scaled_by_how_far_the_finished_chains_ran_past_it():
    costs = {f"conv_{i}@t": 10.0 for i in range(10)}
    progress, clock = _progress(costs)
    for i in range(4):
        _run(progress, clock, f"conv_{i}@t", 20, 10)  # 30 s each, 3 times the plan
    assert progress.overrun() == 1  # too few to judge by
    assert progress.left() == 60  # six cases at their plan
    _run(progress, clock, "conv_4@t", 20, 10)
    assert progress.overrun() == 3
    assert progress.left() == 5 * 30


def test_cases_found_up_to_date_do_not_scale_the_plan():
    costs = {f"conv_{i}@t": 10.0 for i in range(12)}
    progress, clock = _progress(costs)
    for i in range(6):
        progress.finished(f"vmfb:conv_{i}@t", failed=False)  # up to date: never executed
        progress.executing(f"verify:conv_{i}@t")
        clock.now += 1
        progress.finished(f"verify:conv_{i}@t", failed=False)
    assert progress.overrun() == 1
    assert progress.left() == 6 * 10


def test_without_planned_costs_the_measured_durations_estimate():
    progress, clock = _progress({"conv_x@t": 1.0, "conv_y@t": 1.0})
    progress.costs = {}
    assert progress.left() is None  # nothing measured yet
    progress.executing("vmfb:conv_x@t")
    clock.now += 2
    progress.finished("vmfb:conv_x@t", failed=False)
    assert progress.left() == 6  # three tasks left, each at the 2 s measured, one worker


def test_without_planned_costs_a_running_task_counts_what_it_still_needs():
    progress, clock = _progress({"conv_x@t": 1.0, "conv_y@t": 1.0})
    progress.costs = {}
    progress.executing("vmfb:conv_x@t")
    clock.now += 2
    progress.finished("vmfb:conv_x@t", failed=False)  # a measured 2 s per task
    progress.executing("vmfb:conv_y@t")
    clock.now += 1.5
    assert progress.left() == 6  # three tasks left at 2 s; less the 1.5 s y has run, but nothing finished since
    progress.last_left = None
    assert progress.left() == 4.5  # unheld: less the 1.5 s y has run
    clock.now += 8.5  # 10 s: past its mean
    assert progress.left() == 14  # as long again as it has run, and the two others at 2 s
    clock.now += 10
    assert progress.left() == 24
    progress.finished("vmfb:conv_y@t", failed=False)
    assert progress.left() < 24  # a task finished: the estimate may fall


def test_without_planned_costs_the_time_left_does_not_fall_while_nothing_finishes():
    progress, clock = _progress({"conv_x@t": 1.0, "conv_y@t": 1.0, "conv_z@t": 1.0})
    progress.costs = {}
    _run(progress, clock, "conv_x@t", 5, 5)
    progress.executing("vmfb:conv_y@t")
    _never_falling(progress, clock, steps=30, step=1)


def test_the_line_names_the_longest_running_tasks_against_their_limits():
    progress, clock = _progress({"conv_big@t": 600.0, "conv_a@t": 1.0})
    progress.limit_of = {"vmfb:conv_big@t": 600.0, "vmfb:conv_a@t": 60.0}.get
    progress.executing("vmfb:conv_big@t")
    clock.now += 305
    progress.executing("vmfb:conv_a@t")
    clock.now += 4
    assert progress.line().endswith("; running: vmfb:conv_big@t 5m09s of 10m00s")  # a's 4 s is not news
    clock.now += 3
    assert progress.line().endswith("; running: vmfb:conv_big@t 5m12s of 10m00s, vmfb:conv_a@t 0m07s of 1m00s")


def test_the_line_keeps_ticking_while_nothing_finishes():
    progress, clock = _progress({"conv_hang@t": 10.0})
    progress.interval = 0  # off a terminal: a line whenever it is drawn
    ticks = iter(range(3))

    def wait(seconds):  # three ticks, five seconds apart, then stopped
        clock.now += 5
        return next(ticks, None) is None

    progress.wait = wait
    progress.executing("vmfb:conv_hang@t")
    progress.ticker.join()
    lines = progress.stream.getvalue().splitlines()
    assert [line.split("; running: ")[1] for line in lines] == [f"vmfb:conv_hang@t 0m{s:02d}s" for s in (5, 10, 15)]


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
    # the line names the two longest-running tasks; on a loaded machine a model build may be one
    running = [l.split("; running: ", 1)[1].split(", ") for l in run.stderr.splitlines() if "; running: " in l]
    ticking = [part for parts in running for part in parts if part.startswith(f"{case} 0m0")]
    assert len(ticking) >= 2, run.stderr[-3000:]
    assert all(part.endswith("of 1m00s") for part in ticking)  # llvm-cpu's compile floor: its predicted limit


def _reporter_run(verbosity: int = 0):
    """A run as the tasks carry it (Task.meta), and a case task and a command's task of it."""
    from types import SimpleNamespace

    from doit.task import Task

    from pipeline.engine.tasks import META, RUN_META

    run = SimpleNamespace(verbosity=verbosity, changed=True, costs={}, cases=[],
                          cfg=SimpleNamespace(progress_interval=0.5))
    case = Task("verify:conv_a@t", None, meta={META: {"stage": "verify", "cases": ["conv_a@t"], "target": "t"},
                                                RUN_META: run})
    return run, {t.name: t for t in (case, Task("report", None))}


def test_the_reporter_takes_the_run_from_the_tasks_and_says_one_line_per_failing_case():
    from doit.exceptions import TaskFailed

    from pipeline.engine.reporter import SweepReporter

    run, tasks = _reporter_run()
    out = io.StringIO()
    reporter = SweepReporter(out, {"failure_verbosity": 0})  # as doit makes it, from its registered name
    reporter.initialize(tasks, ["verify:conv_a@t"])
    assert reporter.run is run and reporter.progress.interval == 0.5 and not reporter.verbose
    reporter.execute_task(tasks["verify:conv_a@t"])
    reporter.add_failure(tasks["verify:conv_a@t"], TaskFailed("conv_a@t: compile failed: boom"))
    reporter.complete_run()
    assert out.getvalue() == "conv_a@t: compile failed: boom\n"  # said once, as it failed; no doit block after
    assert reporter.failures == []  # doit's list holds what doit shows, nothing of ours
    assert run.changed is True


def test_a_run_that_ran_nothing_and_failed_nothing_is_unchanged_and_verbosity_2_shows_every_task():
    from pipeline.engine.reporter import SweepReporter

    run, tasks = _reporter_run(verbosity=2)
    out = io.StringIO()
    reporter = SweepReporter(out, {"failure_verbosity": 0})
    reporter.initialize(tasks, ["verify:conv_a@t"])
    assert reporter.verbose
    reporter.skip_uptodate(tasks["verify:conv_a@t"])
    reporter.complete_run()
    assert run.changed is False and out.getvalue() == "-- verify:conv_a@t\n"
