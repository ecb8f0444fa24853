"""The sweep's cases as pytest tests (marker conv_sweep, excluded from the default run):

    pytest tests/test_conv_sweep.py -m conv_sweep -k conv_tflite_w8i8

The selected cases are built and verified by doit (one `doit -n 2` run for the whole
selection, reusing every up-to-date artifact); each test then reads its case's result.json.
Honours the same CONV_SWEEP_* knobs as doit.
"""
import os

import pytest

from helpers import ROOT, doit
from pipeline.config import Config
from pipeline.result import read_result

CFG = Config.from_env(default_build_dir=ROOT / "build")
CASES = CFG.cases()
NUMERIC = [c for c in CASES if not c.compile_only]
JOBS = os.environ.get("CONV_SWEEP_JOBS", "2")

pytestmark = pytest.mark.conv_sweep


@pytest.fixture(scope="session")
def built(request):
    """Run doit once for every selected test: vmfb:<case> for compile, verify:<case> for numeric."""
    tasks = []
    for item in request.session.items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if case is not None and item.module.__name__ == __name__:
            tasks.append(("vmfb:" if item.originalname == "test_conv_sweep_compile" else "verify:") + case.name)
    run = doit("-n", JOBS, *dict.fromkeys(tasks), env=dict(os.environ), timeout=None)
    return run


def _result(case):
    return read_result(CFG.case_dir(case)) or {}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conv_sweep_compile(case, built):
    vmfb = CFG.case_dir(case) / "model.vmfb"
    result = _result(case)
    if result.get("status") == "error" and result.get("stage") in ("model", "import", "compile"):
        pytest.fail(f"{result['stage']}: {result['reason']} (log: {result.get('log')})", pytrace=False)
    assert vmfb.is_file() and vmfb.stat().st_size > 0, f"no {vmfb}; doit said:\n{built.stdout[-2000:]}"


@pytest.mark.parametrize("case", NUMERIC, ids=[c.name for c in NUMERIC])
def test_conv_sweep_numeric(case, built):
    result = _result(case)
    if not result:
        pytest.fail(f"no result.json for {case.name}; doit said:\n{built.stdout[-2000:]}", pytrace=False)
    if result["status"] != "pass":
        where = f" (log: {result['log']})" if result.get("log") else ""
        pytest.fail(f"{result['status']} at {result['stage']}: {result['reason']}{where}", pytrace=False)
