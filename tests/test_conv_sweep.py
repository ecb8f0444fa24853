"""The sweep's cases as pytest tests (marker conv_sweep, excluded from the default run):

    pytest tests/test_conv_sweep.py -m conv_sweep -k conv_tflite_w8i8

Case ids are case@target (CONV_SWEEP_TARGET selects the targets, as for doit). The selected
cases are built and verified by doit (one `doit -n 2` run for the whole
selection, reusing every up-to-date artifact); each test then reads its case's result.json.
Honours the same CONV_SWEEP_* knobs as doit.
"""
import os

import pytest

from helpers import ROOT, doit
from pipeline.config import jobs
from pipeline.config import Config
from pipeline.core.chain import STAGES
from pipeline.outcome.result import COMPILED, PASS, XFAIL, read_result

CFG = Config.from_env(default_build_dir=ROOT / "build")
CASES = CFG.cases()
NUMERIC = [c for c in CASES if not c.compile_only]
COMPILE_STAGES = STAGES[:STAGES.index("compile") + 1]  # the compile test's; the numeric test has them all


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


JOBS = str(jobs(os.environ))

pytestmark = [pytest.mark.conv_sweep, pytest.mark.slow]  # slow too: `pytest -m "not slow"` leaves it out


@pytest.fixture(scope="session")
def built(request):
    """Run doit once for every selected test: verify:<case> of each, which gives every case its
    verdict (a case listed to fail before verify included)."""
    tasks = [f"verify:{item.callspec.params['case'].key}" for item in request.session.items
             if item.module.__name__ == __name__ and "case" in getattr(getattr(item, "callspec", None), "params", {})]
    return doit("-n", JOBS, *dict.fromkeys(tasks), env=dict(os.environ), timeout=None)


def _verdict(case, built, stages):
    """The case's result.json; raises ExpectedFailure where its verdict is xfail at one of
    `stages`, fails on any other failing verdict there."""
    result = read_result(CFG.case_dir(case)) or {}
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


@pytest.mark.parametrize("case", _params(CASES, COMPILE_STAGES))
def test_conv_sweep_compile(case, built):
    _verdict(case, built, COMPILE_STAGES)
    vmfb = CFG.case_dir(case) / "model.vmfb"
    assert vmfb.is_file() and vmfb.stat().st_size > 0, f"no {vmfb}; doit said:\n{built.stdout[-2000:]}"


@pytest.mark.parametrize("case", _params(NUMERIC))
def test_conv_sweep_numeric(case, built):
    result = _verdict(case, built, STAGES)
    assert result["status"] == PASS, f"{result['status']}: {result['reason']}"
