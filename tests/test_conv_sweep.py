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
from pipeline.config import Config
from pipeline.expected import TASK_OF_STAGE
from pipeline.result import read_result

CFG = Config.from_env(default_build_dir=ROOT / "build")
CASES = CFG.cases()
NUMERIC = [c for c in CASES if not c.compile_only]
COMPILE_STAGES = ("model", "import", "compile")


class ExpectedStageFailure(AssertionError):
    """The case failed at the stage the expected-failures list names."""


def _params(cases, stages=None):
    """One param per case; a case listed as an expected failure (at one of `stages`) is
    xfail(strict): it must fail, and at that stage (a failure elsewhere is a plain failure)."""
    out = []
    for case in cases:
        marks = []
        if case.expect_stage and (stages is None or case.expect_stage in stages):
            marks.append(pytest.mark.xfail(reason=f"expected to fail at {case.expect_stage}: {case.expect_reason}",
                                           raises=ExpectedStageFailure, strict=True))
        out.append(pytest.param(case, id=case.key, marks=marks))
    return out


def _fail(case, result, message):
    if case.expect_stage and result.get("stage") == case.expect_stage:
        raise ExpectedStageFailure(message)
    pytest.fail(message, pytrace=False)


JOBS = os.environ.get("CONV_SWEEP_JOBS", "2")
STAGE_ORDER = ["model", "mlir", "vmfb", "verify"]

pytestmark = pytest.mark.conv_sweep


@pytest.fixture(scope="session")
def built(request):
    """Run doit once for every selected test: vmfb:<case> for compile, verify:<case> for numeric."""
    tasks = []
    for item in request.session.items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if case is not None and item.module.__name__ == __name__:
            stage = "vmfb" if item.originalname == "test_conv_sweep_compile" else "verify"
            if case.expect_stage:  # the chain of an expected failure ends at the task that should fail
                stage = TASK_OF_STAGE[case.expect_stage] if stage == "verify" else \
                    min(stage, TASK_OF_STAGE[case.expect_stage], key=STAGE_ORDER.index)
            tasks.append(f"{stage}:{case.name if stage in ('model', 'mlir') else case.key}")
    run = doit("-n", JOBS, *dict.fromkeys(tasks), env=dict(os.environ), timeout=None)
    return run


def _result(case):
    return read_result(CFG.case_dir(case)) or {}


@pytest.mark.parametrize("case", _params(CASES, COMPILE_STAGES))
def test_conv_sweep_compile(case, built):
    vmfb = CFG.case_dir(case) / "model.vmfb"
    result = _result(case)
    if result.get("status") in ("error", "xfail") and result.get("stage") in COMPILE_STAGES:
        _fail(case, result, f"{result['stage']}: {result['reason']} (log: {result.get('log')})")
    assert vmfb.is_file() and vmfb.stat().st_size > 0, f"no {vmfb}; doit said:\n{built.stdout[-2000:]}"


@pytest.mark.parametrize("case", _params(NUMERIC))
def test_conv_sweep_numeric(case, built):
    result = _result(case)
    if not result:
        pytest.fail(f"no result.json for {case.key}; doit said:\n{built.stdout[-2000:]}", pytrace=False)
    if result["status"] not in ("pass", "xpass"):
        where = f" (log: {result['log']})" if result.get("log") else ""
        _fail(case, result, f"{result['status']} at {result['stage']}: {result['reason']}{where}")
