"""Stage 4: run the module, ask the oracle, compare under the tolerance policy, write result.json."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from . import oracle, tolerance
from .cases import Case
from .compare import Comparison, compare
from .compiler import check_vmfb
from .data import make_input
from .isolate import call
from .result import FAIL, PASS, Result, read_stages
from .repro import write_check
from .runner import run_vmfb
from .tools import atomic_output

INPUT, EXPECTED, ACTUAL, EXACT = "input.npy", "expected.npy", "actual.npy", "exact.npy"


def save_npy(path: Path, array: np.ndarray) -> None:
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)


def _terms(case: Case, weights: oracle.ModelWeights, x: np.ndarray) -> tuple[int, float, float, float]:
    """K, t, b of the tolerance policy, and max|x|."""
    max_x = float(np.abs(x.astype(np.float64)).max()) if x.size else 0.0
    return (case.geometry.reduction, float(np.abs(weights.kernel).max()) * max_x,
            float(np.abs(weights.bias).max()), max_x)


def _write_repro_check(case: Case, case_dir: Path, weights: oracle.ModelWeights, x: np.ndarray,
                       expected: np.ndarray, exact: np.ndarray | None) -> None:
    """The primary check in iree-run-module's terms (atol + rtol |e|), for repro.sh."""
    k, t, b, _ = _terms(case, weights, x)
    if case.flavor == "w8i8":
        write_check(case_dir, expected, "exact")
    elif case.flavor == "bf16":
        write_check(case_dir, expected, "approximate", *tolerance.bf16_terms(k, t, b))
    else:
        write_check(case_dir, exact if case.flavor == "w8if32" else expected, "approximate",
                    *tolerance.f32_terms(k, t, b, implementations=2))


def comparisons(case: Case, weights: oracle.ModelWeights, x: np.ndarray, expected: np.ndarray,
                actual: np.ndarray, exact: np.ndarray | None = None) -> list[Comparison]:
    """Every check the case's flavor calls for; all must pass."""
    k, t, b, max_x = _terms(case, weights, x)
    if case.flavor == "w8i8":
        return [compare("vs TFLite reference kernels (bit-exact)", expected, actual, 0.0)]
    if case.flavor == "bf16":
        return [compare("vs float64 conv of the bf16 operands, rounded to bf16", expected, actual,
                        tolerance.bf16_tolerance(expected, k, t, b))]
    if case.flavor == "w8if32":
        return [
            compare("vs float64 conv of the dequantized int8 weights", exact, actual,
                    tolerance.f32_tolerance(exact, k, t, b, implementations=2)),
            compare("vs TFLite hybrid kernel (activation quantization bound)", expected, actual,
                    tolerance.hybrid_tolerance(expected, weights.kernel, max_x, k, t, b, channel_axis=-1)),
        ]
    oracle_name = "TFLite interpreter" if case.backend == "tflite" else "onnxruntime"
    return [compare(f"vs {oracle_name}", expected, actual, tolerance.f32_tolerance(expected, k, t, b))]


def verify_case(case: Case, case_dir: Path, *, timeout: float) -> Result:
    """Run and check one case; write input, expected and actual outputs and result.json."""
    case_dir = Path(case_dir)
    model, vmfb = case_dir / case.model_file, case_dir / "model.vmfb"
    stages = read_stages(case_dir)
    notes: dict = {}
    if case.compile_only:
        check_vmfb(vmfb)
        result = Result.for_case(case, PASS, reason="compile-only: not run", stages=stages)
        result.write(case_dir)
        return result
    x = make_input(case)
    save_npy(case_dir / INPUT, x)
    start = time.monotonic()
    weights, expected, exact = call("pipeline.oracle:evaluate", case, model, x, helper="oracle", stage="oracle",
                                    timeout=timeout, log=case_dir / "oracle.log")
    stages["oracle"] = {"seconds": round(time.monotonic() - start, 4)}
    save_npy(case_dir / EXPECTED, expected)
    actual, seconds = run_vmfb(case, vmfb, case_dir / INPUT, expected.shape, expected.dtype,
                               timeout=timeout, log=case_dir / "run.log")
    stages["run"] = {"seconds": round(seconds, 4)}
    save_npy(case_dir / ACTUAL, actual)
    if case.flavor == "w8if32":
        # The converter leaves small weight tensors in float; such a case is f32 coverage only.
        notes["weights_quantized"] = weights.weights_quantized
    if exact is not None:
        save_npy(case_dir / EXACT, exact)
    _write_repro_check(case, case_dir, weights, x, expected, exact)
    start = time.monotonic()
    checks = comparisons(case, weights, x, expected, actual, exact)
    stages["compare"] = {"seconds": round(time.monotonic() - start, 4)}
    failed = [c for c in checks if not c.passed]
    result = Result.for_case(
        case, FAIL if failed else PASS, stage="verify" if failed else None,
        reason="; ".join(c.reason for c in failed) if failed else "; ".join(c.reason for c in checks),
        metrics={c.name: c.to_dict() for c in checks}, notes=notes, stages=stages)
    result.write(case_dir)
    return result
