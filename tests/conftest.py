"""Running the suite on several workers (pytest-xdist, `pytest -n 2`; `--dist loadgroup` is in
pyproject.toml's options).

- Tests that share something beyond their own tmp_path run on one worker, one after the other:
  those using one module- or session-scoped fixture of ours (a sweep built once for them all),
  and those of the modules in SHARED. Each such set is one `xdist_group`.
- The heaviest first: the work units (a group, or a test alone) go out longest first, by the
  times measured in durations.json, so that the workers finish together. Refresh that table
  with `pytest -n 2 --record-durations` (it merges the times of the tests that ran).

Without `-n`, the suite runs as written, module by module.
"""
import json
from pathlib import Path

import pytest

import helpers

DURATIONS = Path(__file__).with_name("durations.json")
UNMEASURED_SLOW = 30.0  # seconds assumed for a slow test not yet in the table
KEPT = 1.0  # the table keeps tests that took at least this long

# module -> why its tests must not run at once, with each other
SHARED = {
    # each installs IREE releases on demand into the user's toolchain folder
    # (CONV_SWEEP_TOOLCHAIN_DIR): two installs of one release at once would collide
    "tests/test_versions.py": "the user's toolchain folder",
}


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # an xdist worker: the session's folders, which the controller made
        helpers._session.update({name: Path(config.workerinput[f"test_{name}"]) for name in helpers.SESSION_FOLDERS})


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """The xdist controller gives each worker the session's folders: the store of stage outputs
    (one for the whole run, as a user's sweeps share theirs: two runs at once on one store is a
    tested case), so that a model, MLIR or module one worker built is not built again by the
    other; and the tools' TMPDIR, removed with the session."""
    for name in helpers.SESSION_FOLDERS:
        node.workerinput[f"test_{name}"] = str(helpers.session_folder(name))


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help=f"merge each test's time (setup, call and teardown) into {DURATIONS.name}")


def _plain(nodeid: str) -> str:
    """The test's id without the `@group` xdist's loadgroup appends to it."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def _shared_with_others(item) -> list[str]:
    """What the test shares with others: our module- and session-scoped fixtures it uses, and
    its module where SHARED names it."""
    module = item.nodeid.split("::")[0]
    keys = [f"{module}::shared"] if module in SHARED else []
    info = getattr(item, "_fixtureinfo", None)  # a test function's (pytest keeps no public map of them)
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        fixture = defs[-1]
        if fixture.scope != "function" and fixture.baseid:  # pytest's and plugins' own have no baseid
            keys.append(f"{fixture.baseid}::{name}")
    return keys


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker: the suite as written
        return (yield)
    _group_and_order(items)  # before xdist reads the groups (and before -k and -m deselect)
    yield
    # xdist's loadgroup, which sends each group to one worker, reads a test's group from the end
    # of its id (`id@group`): where it is not there, the test fails saying so
    if config.getvalue("loadgroup"):
        _lost.update(item.nodeid for item in items
                     if item.get_closest_marker("xdist_group") and _plain(item.nodeid) == item.nodeid)


_lost: set[str] = set()


def pytest_runtest_setup(item):
    if item.nodeid in _lost:
        pytest.fail("xdist's loadgroup lost this test's group (no `@group` at the end of its id): this pytest "
                    "and this pytest-xdist do not work together (see pyproject.toml's test extra)", pytrace=False)


def _group_and_order(items) -> None:
    # tests that share anything, directly or through each other, form one group
    parent: dict[str, str] = {}

    def root(key):
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    shared = {item: _shared_with_others(item) for item in items}
    for keys in shared.values():
        for key in keys:
            parent[root(key)] = root(keys[0])
    members: dict[str, list[str]] = {}
    for key in parent:
        members.setdefault(root(key), []).append(key)
    name = {top: min(keys).removeprefix("tests/").replace(".py::", ".") for top, keys in members.items()}
    units: dict[str, list] = {}  # unit -> its tests, in the order written
    for item in items:
        if shared[item]:
            group = name[root(shared[item][0])]
            item.add_marker(pytest.mark.xdist_group(group))
            units.setdefault(group, []).append(item)
        else:
            units[item.nodeid] = [item]
    measured = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}

    def seconds(item) -> float:
        return measured.get(item.nodeid, UNMEASURED_SLOW if item.get_closest_marker("slow") else 0.0)

    ordered = sorted(units.values(), key=lambda unit: -sum(map(seconds, unit)))  # stable: ties as written
    items[:] = [item for unit in ordered for item in unit]


_times: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _times[_plain(report.nodeid)] = _times.get(_plain(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session):
    if not session.config.getoption("record_durations") or hasattr(session.config, "workerinput"):
        return
    table = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    table.update({nodeid: round(t) for nodeid, t in _times.items()})  # whole seconds: enough to order by
    table = {nodeid: t for nodeid, t in sorted(table.items(), key=lambda kv: -kv[1]) if t >= KEPT}
    DURATIONS.write_text(json.dumps(table, indent=0) + "\n")
