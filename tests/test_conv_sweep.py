"""The sweep's cases as pytest tests (marker conv_sweep, excluded from the default run):

    pytest tests/test_conv_sweep.py -m conv_sweep -k conv_tflite_w8i8

Case ids are case@target (CONV_SWEEP_TARGET selects the targets, as for doit). The selected
cases are built and verified by doit (one `doit -n 2` run for the whole
selection, reusing every up-to-date artifact); each test then reads its case's result.json.
Honours the same CONV_SWEEP_* knobs as doit; a bad one fails these tests, naming it (read
when they are generated, not on import: the default run, which leaves them out, runs as usual).
Runs without -n: its doit run is what uses the cores (under -n, all its tests share one worker).
"""
import functools
import os
import warnings

import pytest

from helpers import ROOT, doit
from pipeline.config import Config, jobs
from pipeline.core.chain import STAGES
from pipeline.core.errors import ConfigError
from pipeline.outcome.result import COMPILED, PASS, XFAIL, read_result

COMPILE_STAGES = STAGES[:STAGES.index("compile") + 1]  # the compile test's; the numeric test has them all


@functools.cache
def _config() -> Config:
    """The selection, as doit reads it from the environment (raises ConfigError)."""
    return Config.from_env(default_build_dir=ROOT / "build")  # CONV_SWEEP_JOBS checked too


def _cfg() -> Config:
    try:
        return _config()
    except ConfigError as err:
        bad = err
    pytest.fail(f"bad configuration, no case was run: {bad}", pytrace=False)


class ExpectedFailure(AssertionError):
    """The case failed at the stage, and with the bucket, the expected-failures list names."""


def _params(cases, stages=None):
    """One param per case; a case listed as an expected failure (at one of `stages`) is
    xfail(strict): it must fail as listed (its verdict xfail); any other failure, a changed
    bucket included, is a plain failure."""
    out = []
    for case in cases:
        marks = []
        if case.expect_stage and (stages is None or case.expect_stage in stages):
            marks.append(pytest.mark.xfail(reason=f"expected to fail at {case.expected.stage}: {case.expected.bucket}",
                                           raises=ExpectedFailure, strict=True))
        out.append(pytest.param(case, id=case.key, marks=marks))
    return out


def pytest_generate_tests(metafunc):
    """Every selected case on every selected target (numeric: those not compile-only); under a
    bad configuration, one test per function that fails naming it."""
    if "case" not in metafunc.fixturenames:
        return
    try:
        cases = _config().cases()
    except ConfigError as err:
        metafunc.parametrize("case", [pytest.param(err, id="bad-configuration")])
        if metafunc.definition.name == "test_conv_sweep_compile":  # said once, whatever -k keeps
            warnings.warn(pytest.PytestWarning(f"the sweep's cases are not generated: bad configuration: {err}"))
        return
    if metafunc.definition.name == "test_conv_sweep_compile":
        metafunc.parametrize("case", _params(cases, COMPILE_STAGES))
    else:
        metafunc.parametrize("case", _params([c for c in cases if not c.compile_only]))


pytestmark = [pytest.mark.conv_sweep, pytest.mark.slow]  # slow too: `pytest -m "not slow"` leaves it out


@pytest.fixture(scope="session")
def built(request):
    """Run doit once for every selected test: verify:<case> of each, which gives every case its
    verdict (a case listed to fail before verify included)."""
    _cfg()  # a bad configuration fails every test here, naming it
    tasks = [f"verify:{item.callspec.params['case'].key}" for item in request.session.items
             if item.module.__name__ == __name__ and "case" in getattr(getattr(item, "callspec", None), "params", {})]
    return doit("-n", str(jobs(os.environ)), *dict.fromkeys(tasks), env=dict(os.environ), timeout=None)


def _verdict(case, built, stages):
    """The case's result.json; raises ExpectedFailure where its verdict is xfail at one of
    `stages`, fails on any other failing verdict there."""
    result = read_result(_cfg().case_dir(case)) or {}
    if not result:
        pytest.fail(f"no result.json for {case.key}; doit said:\n{built.stdout[-2000:]}", pytrace=False)
    status, stage = result["status"], result.get("stage")
    if status in (PASS, COMPILED) or (stage is not None and stage not in stages):
        return result
    where = f" (log: {result['log']})" if result.get("log") else ""
    text = f"{status} at {stage}: {result['reason']}{where}"
    if status == XFAIL:
        raise ExpectedFailure(text)
    pytest.fail(text, pytrace=False)


def test_conv_sweep_compile(case, built):
    _verdict(case, built, COMPILE_STAGES)
    vmfb = _cfg().case_dir(case) / "model.vmfb"
    assert vmfb.is_file() and vmfb.stat().st_size > 0, f"no {vmfb}; doit said:\n{built.stdout[-2000:]}"


def test_conv_sweep_numeric(case, built):
    result = _verdict(case, built, STAGES)
    assert result["status"] == PASS, f"{result['status']}: {result['reason']}"

