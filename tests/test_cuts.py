"""Known timeouts (pipeline/core/cuts.py): a tool cut at a limit is remembered in the store with
that limit; asked again at that limit or a lower one it is that cut again without running; at a
higher limit, or with retry, it runs again. A real tool (sleep) cut by run_tool, a real store."""
import pytest

from pipeline.core.cuts import KnownCuts, known_cut
from pipeline.core.errors import StageError
from pipeline.core.store import Store
from pipeline.core.tools import run_tool


def _cut(cuts, limit: float, log) -> StageError:
    log.unlink(missing_ok=True)  # as the stages do before a tool runs
    with pytest.raises(StageError) as caught:
        with known_cut(cuts, "run", limit, log):
            run_tool(["sleep", "30"], stage="run", timeout=limit, log=log)
    return caught.value


def test_a_cut_is_remembered_at_its_limit_and_asked_higher_runs_again(tmp_path):
    store, log = Store(tmp_path / "store"), tmp_path / "run.log"
    cuts = KnownCuts(store, "an invocation's key", "a sleep")
    first = _cut(cuts, 0.3, log)
    assert first.cut and not first.remembered and first.limit == 0.3
    again = _cut(cuts, 0.3, log)  # the same limit: the cut again, from the store
    assert again.cut and again.remembered and again.limit == 0.3 and again.reason == first.reason
    assert log.read_text().startswith("# taken from the store") and "timed out after 0.3 s" in log.read_text()
    assert _cut(cuts, 0.2, log).remembered  # cut after 0.3 s: it would not finish within 0.2 s
    higher = _cut(cuts, 0.6, log)  # a raised limit: it runs again, and its cut is kept at 0.6 s
    assert not higher.remembered and higher.limit == 0.6
    assert _cut(cuts, 0.6, log).remembered
    retried = _cut(KnownCuts(store, "an invocation's key", "a sleep", retry=True), 0.3, log)
    assert not retried.remembered and "taken from the store" not in log.read_text()
    assert _cut(cuts, 0.6, log).remembered  # the retried cut at 0.3 s did not lower what is known
    assert not _cut(KnownCuts(store, "another invocation", "a sleep"), 0.3, log).remembered


def test_a_failure_that_is_not_a_cut_is_not_remembered_as_one(tmp_path):
    store, log = Store(tmp_path / "store"), tmp_path / "run.log"
    cuts = KnownCuts(store, "key", "false")
    for _ in range(2):
        with pytest.raises(StageError) as caught:
            with known_cut(cuts, "run", 5.0, log):
                run_tool(["false"], stage="run", timeout=5.0, log=log)
        assert not caught.value.cut and not caught.value.remembered
    assert cuts.remembered(0.0) is None
    with known_cut(None, "run", 5.0, log):  # no store: the tool just runs
        run_tool(["true"], stage="run", timeout=5.0, log=log)
