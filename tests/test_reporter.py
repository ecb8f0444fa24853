"""The progress line's time left (pipeline/engine/reporter.py): planned from each chain's cost
where the run planned its order on them (costliest first, so the first tasks' durations say
little of the rest), else from the measured task durations."""
import io
import time

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
