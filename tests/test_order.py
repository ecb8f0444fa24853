"""Chains first: with doit's dispatcher made depth first, the first case is verified before
the last model is built; doit's own breadth-first order (CONV_SWEEP_ORDER=breadth) builds every
model first. Both through `doit -r json`, whose task records carry their start times."""
import json

import pytest

from pipeline.engine import order as depth_first

from helpers import assert_patch_holds, clean_env, doit, write_spec
from test_dodo import SMALL



def test_the_order_patch_is_for_the_pinned_doit():
    """The patch replaces private methods: it holds only for the dispatcher it was written for."""
    assert_patch_holds(depth_first.dispatcher_digest(), depth_first.WRITTEN_FOR, "TaskDispatcher",
                       "pipeline/engine/order.py")


def test_the_depth_first_queue_puts_what_is_released_first():
    queue = depth_first._DepthFirst(["a", "b"])
    queue.append("x")
    queue.append("y")  # consecutive appends keep their order, ahead of what waited
    assert list(queue) == ["x", "y", "a", "b"]
    assert queue.popleft() == "x"
    queue.append("z")
    assert list(queue) == ["z", "y", "a", "b"]



def _starts(run) -> dict[str, list[str]]:
    tasks = json.loads(run.stdout)["tasks"]
    out: dict[str, list[str]] = {}
    for t in tasks:
        if ":conv_" in t["name"] and t["started"]:
            out.setdefault(t["name"].split(":")[0], []).append(t["started"])
    return {stage: sorted(times) for stage, times in out.items()}


@pytest.mark.slow
@pytest.mark.parametrize("order", ["chains", "breadth"])
def test_first_case_completes_before_the_last_model_in_chains_order(tmp_path, order):
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", SMALL), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_ORDER=order)
    run = doit("-n", "2", "-r", "json", "sweep", env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    starts = _starts(run)
    assert [len(starts[s]) for s in ("model", "mlir", "vmfb", "verify")] == [10, 10, 10, 10]
    first_verify, last_model = starts["verify"][0], starts["model"][-1]
    if order == "chains":
        assert first_verify < last_model, (first_verify, last_model)
    else:
        assert last_model < first_verify, (first_verify, last_model)
