"""Stage 4: run the module, ask the oracle, compare under the tolerance policy, write result.json.

The module's I/O types come from its own signature (pipeline/targets/signature.py). Where a compiler
turned an f32 model's I/O into bf16, the input is rounded to bf16 for the module and its
output is checked twice (pipeline/checks/tolerance.py): tightly against the exact conv of the
bf16-rounded operands, and against the flavor's oracle with the conversion's error bound.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.checks import oracle
from pipeline.targets import perf
from pipeline.targets import signature
from pipeline.checks import tolerance
from pipeline.space.cases import Case
from pipeline.core.chain import MLIR, VMFB
from pipeline.checks.compare import Comparison, compare, write_check
from pipeline.targets.compiler import PROFILE, check_vmfb, estimated_time
from pipeline.space.data import make_input
from pipeline.space.refusal import INT32_MAX
from pipeline.core.errors import StageError
from pipeline.core.isolate import call
from pipeline.outcome.result import COMPILED, FAIL, PASS, Result, read_all_stages
from pipeline.targets.runner import input_arg as runner_input_arg
from pipeline.targets.runner import input_file_name, raw_io, run_vmfb, write_input
from pipeline.core.tools import atomic_output

INPUT, EXPECTED, ACTUAL, EXACT, BF16_REFERENCE = "input.npy", "expected.npy", "actual.npy", "exact.npy", \
    "bf16-reference.npy"
CONVERSIONS = {("float32", "bfloat16")}  # model dtype -> module dtype a compiler may convert to


def save_npy(path: Path, array: np.ndarray) -> None:
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)


@dataclass(frozen=True)
class Terms:
    """The tolerance policy's terms for one case (pipeline/checks/tolerance.py)."""

    k: int  # the reduction K
    t: float  # max|w| max|x|
    b: float  # max|bias|
    max_x: float  # max|x|
    mu: float = 0.0  # the products' drift
    r: float = 0.0  # the rms bound of a product, max|w| sqrt(mean(x**2)) (<= t)


def _terms(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict | None = None) -> Terms:
    max_x = float(np.abs(x.astype(np.float64)).max()) if x.size else 0.0
    t = float(np.abs(weights.kernel).max()) * max_x
    return Terms(case.geometry.reduction, t, float(np.abs(weights.bias).max()), max_x,
                 float((refs or {}).get("drift", 0.0)), float((refs or {}).get("rms_product", t)))


def _repro_check(case: Case, case_dir: Path, terms: Terms, refs: dict, converted: bool, input_arg: str,
                 checks: list[Comparison], profile) -> None:
    """The primary check in the run tool's terms (atol + rtol |e|), for repro.sh, against the
    reference in the module's dtype. Where the sweep's tolerance has a per-element term the run
    tool cannot express (a separate bias add's step, int8 requantization ties), repro.sh takes its
    largest value everywhere; against a bf16-rounded reference it allows a bf16 step more than the
    sweep's check against the exact sum (tolerance.bf16_terms)."""
    k, r, b, mu = terms.k, terms.r, terms.b, terms.mu
    bias_step = float(np.max(_bias_step(refs, terms)))
    if converted:
        atol, rtol = tolerance.bf16_terms(k, r, b, mu)
        write_check(case_dir, refs["bf16"], "approximate", atol + bias_step, rtol, input_arg)
    elif case.flavor == "w8i8":  # bit-exact, with the single-round model's values on such a target
        write_check(case_dir, refs.get("single_round", refs["expected"]), "exact", input_arg=input_arg)
    elif case.flavor == "bf16":
        atol, rtol = tolerance.bf16_terms(k, r, b, mu)
        write_check(case_dir, refs["expected"], "approximate", atol + bias_step, rtol, input_arg)
    elif "exact" in refs:  # w8if32: the exact conv, saved in f32 (one more rounding: u |e|)
        atol, rtol = tolerance.f32_terms(k, r, b, implementations=1, mu=mu)
        write_check(case_dir, refs["exact"].astype(np.float32), "approximate", atol, rtol + tolerance.U_F32,
                    input_arg)
    else:
        write_check(case_dir, refs["expected"], "approximate",
                    *tolerance.f32_terms(k, r, b, implementations=2, mu=mu), input_arg)


def separate_bias(case: Case, profile, converted: bool) -> bool:
    """Whether the target adds this case's bias in a separate bf16 step (pipeline/checks/tolerance.py):
    on torq, an f32 model run in bf16 whose conv is rewritten over a padded space-to-depth input."""
    return bool(profile is not None and profile.bf16_bias_add == "padded-space-to-depth" and converted
                and tolerance.padded_space_to_depth(case.geometry, case.backend))


def _bias_step(refs: dict, terms: Terms) -> np.ndarray | float:
    """Per element, what a target that adds the bias in a separate bf16 step may add (else 0):
    the oracle computes the bias-free sum only for such a case."""
    if "bias_free" in refs:
        return tolerance.separate_bias_term(refs["bias_free"], terms.k, terms.r, terms.b, terms.mu)
    return 0.0


def _channel_axis(case: Case) -> int:
    return -1 if case.backend == "tflite" else 1


def single_round_expected(case: Case, weights: oracle.ModelWeights, refs: dict) -> tuple[np.ndarray, int]:
    """w8i8 on a single-rounding target: the single-round integer model's output (zero point
    added, clamped), and at how many elements it differs from TFLite's double rounding. Our
    integer model of the double rounding must reproduce the TFLite reference kernels bit for bit,
    or the prediction cannot be trusted: that is a harness error, raised."""
    multipliers = weights.input_scale * np.asarray(weights.weight_scales) / weights.output_scale
    acc = refs["accumulators"]
    if acc.size and int(np.abs(acc).max()) > INT32_MAX:
        raise RuntimeError(f"an int32 accumulator overflows (|acc| up to {int(np.abs(acc).max())}): "
                           "the integer model cannot be trusted")
    double, single = tolerance.requantized(acc, multipliers, _channel_axis(case), weights.output_zero_point)
    wrong = int((double != refs["expected"]).sum())
    if wrong:
        raise RuntimeError(f"the integer model of TFLite's requantization differs from the TFLite reference "
                           f"kernels at {wrong} of {double.size} elements")
    return single, int((single != double).sum())


def oracle_vs_float64(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict) -> Comparison | None:
    """The f32 oracle (TFLite interpreter, onnxruntime, TFLite's hybrid kernel) against the float64
    conv of the model's own weights, under one f32 implementation's bound (the hybrid kernel: plus
    its activation quantization's): an oracle outside it cannot vouch for a verdict. None where the
    flavor's oracle is not an f32 implementation."""
    reference = refs.get("float64", refs.get("exact"))
    if reference is None or case.flavor not in ("f32", "w8if32"):
        return None
    terms = _terms(case, weights, x, refs)
    if case.flavor == "w8if32":
        bound = tolerance.hybrid_tolerance(reference, weights.kernel, terms.max_x, terms.k, terms.r, terms.b, -1,
                                           terms.mu, implementations=1)
    else:
        bound = tolerance.f32_tolerance(reference, terms.k, terms.r, terms.b, 1, terms.mu)
    return compare("oracle vs float64 conv", reference, refs["expected"].astype(np.float64), bound)


def comparisons(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict, actual: np.ndarray,
                profile=None) -> list[Comparison]:
    """Every check the case's flavor calls for on the target (a targets.Profile; None is stock
    behaviour); all must pass. `refs` are oracle.evaluate's outputs.

    An f32 oracle that disagrees with the float64 conv of the model's own weights beyond its own
    bound (oracle_vs_float64) cannot vouch: the checks against it are replaced by the check
    against the float64 conv (f32: one implementation's bound), which holds the module to the
    model's exact meaning; verify_case notes why."""
    terms = _terms(case, weights, x, refs)
    agreement = oracle_vs_float64(case, weights, x, refs)
    oracle_off = agreement is not None and not agreement.passed
    k, t, b, max_x, mu, r = terms.k, terms.t, terms.b, terms.max_x, terms.mu, terms.r
    expected, exact = refs["expected"], refs.get("exact")
    bias_step = _bias_step(refs, terms)
    if "bf16" in refs:  # an f32 model converted to bf16 by the compiler
        wide = actual.astype(np.float64)  # bf16 -> float64 is exact
        operands = "bf16-rounded operands" if profile is None or profile.converts_weights else \
            "bf16-rounded input and f32 weights"
        checks = [compare(f"vs float64 conv of the {operands}, rounded to bf16", refs["bf16_sum"], wide,
                          tolerance.bf16_tolerance(refs["bf16_sum"], k, r, b, mu, bias_step))]
        if case.flavor == "w8if32":
            checks.append(compare("vs float64 conv of the dequantized int8 weights (bf16 conversion bound)", exact,
                                  wide, tolerance.converted_tolerance(exact, k, t, b, 1, mu, bias_step, r=r)))
            if oracle_off:
                return checks
            hybrid = tolerance.activation_quantization(expected, weights.kernel, max_x, -1)
            checks.append(compare("vs TFLite hybrid kernel (activation quantization + bf16 conversion bound)",
                                  expected, actual.astype(expected.dtype),
                                  tolerance.converted_tolerance(expected, k, t, b, 2, mu, bias_step, hybrid, r)))
        elif oracle_off:
            checks.append(compare("vs float64 conv (bf16 conversion bound)", refs["float64"], wide,
                                  tolerance.converted_tolerance(refs["float64"], k, t, b, 1, mu, bias_step, r=r)))
        else:
            oracle_name = "TFLite interpreter" if case.backend == "tflite" else "onnxruntime"
            checks.append(compare(f"vs {oracle_name} (bf16 conversion bound)", expected, actual.astype(expected.dtype),
                                  tolerance.converted_tolerance(expected, k, t, b, 2, mu, bias_step, r=r)))
        return checks
    if case.flavor == "w8i8":
        if profile is not None and profile.int8_rounding == "single-round" and "accumulators" in refs:
            # (the oracle gives accumulators only where the model requantizes once)
            single, _ = single_round_expected(case, weights, refs)
            return [compare("vs TFLite reference kernels (bit-exact; the single-round value at requantization ties)",
                            single, actual, 0.0)]
        return [compare("vs TFLite reference kernels (bit-exact)", expected, actual, 0.0)]
    if case.flavor == "bf16":
        return [compare("vs float64 conv of the bf16 operands, rounded to bf16", refs["sum"],
                        actual.astype(np.float64), tolerance.bf16_tolerance(refs["sum"], k, r, b, mu, bias_step))]
    if case.flavor == "w8if32":
        checks = [compare("vs float64 conv of the dequantized int8 weights", exact, actual.astype(np.float64),
                          tolerance.f32_tolerance(exact, k, r, b, implementations=1, mu=mu))]
        if not oracle_off:
            checks.append(compare("vs TFLite hybrid kernel (activation quantization bound)", expected, actual,
                                  tolerance.hybrid_tolerance(expected, weights.kernel, max_x, k, r, b, channel_axis=-1,
                                                             mu=mu)))
        return checks
    if oracle_off:
        return [compare("vs float64 conv", refs["float64"], actual.astype(np.float64),
                        tolerance.f32_tolerance(refs["float64"], k, r, b, implementations=1, mu=mu))]
    oracle_name = "TFLite interpreter" if case.backend == "tflite" else "onnxruntime"
    return [compare(f"vs {oracle_name}", expected, actual, tolerance.f32_tolerance(expected, k, r, b, mu=mu))]


def module_input(case: Case, x: np.ndarray, sig: signature.Signature) -> tuple[np.ndarray, bool]:
    """The input in the module's dtype, and whether the compiler converted the model's dtype."""
    want = sig.inputs[0]
    if len(sig.inputs) != 1 or len(sig.outputs) != 1:
        raise StageError("run", f"@{sig.function} takes {len(sig.inputs)} inputs and returns "
                         f"{len(sig.outputs)} outputs; the model has one of each")
    if tuple(want.shape) != tuple(x.shape):
        raise StageError("run", f"@{sig.function} takes {want.spec}, the model's input is {x.shape}")
    if want.dtype == x.dtype:
        return x, False
    if (x.dtype.name, want.dtype.name) not in CONVERSIONS:
        raise StageError("run", f"@{sig.function} takes {want.spec}: no policy compares a "
                         f"{x.dtype.name} model run in {want.dtype.name}")
    return x.astype(want.dtype), True


def _estimate(profile, case_dir: Path) -> float | None:
    """The compiler's estimated execution time (NPU cycles), where the profile asks for it."""
    return estimated_time(case_dir / PROFILE) if profile.profiling else None


ORACLE_OUTPUTS = "oracle.pickle"  # the oracle's outputs, as the store keeps them
SIGNATURE = "signature.json"  # the module's signature, as the store keeps it


def _signature(target, vmfb: Path, mlir: Path, function: str, store, timeout: float, log: Path):
    """The module's signature (signature.read, which runs the target's module dumper); from the
    store where it has it under the same key (the module's and the imported MLIR's bytes, the
    dumper's content digest and toolchain, the verify code), else read and stored."""
    import json

    if not store:
        return signature.read(target.dump_tool, vmfb, mlir, function, stage="run", timeout=timeout, log=log)
    from pipeline.core.fingerprint import stage_fingerprint, tool_digest
    from pipeline.core.integrity import sha256
    from pipeline.core.store import key_of
    from pipeline.targets.profiles import toolchain_identity

    key = key_of({"stage": "signature", **stage_fingerprint("verify"), "vmfb": sha256(vmfb), "mlir": sha256(mlir),
                  "dump_tool": tool_digest(target.dump_tool, **target.launchers), "toolchain": toolchain_identity(target.toolchain),
                  "function": function})
    stored = store.read(key, [SIGNATURE])
    if stored:
        return signature.Signature.from_json(json.loads(stored[SIGNATURE]))
    found = signature.read(target.dump_tool, vmfb, mlir, function, stage="run", timeout=timeout, log=log)
    store.put_data(key, {SIGNATURE: json.dumps(found.to_json()).encode()}, f"signature of {vmfb}")
    return found


def _oracle(case: Case, model: Path, x: np.ndarray, options: dict, store, timeout: float, log: Path):
    """The oracle's outputs for the model and input (oracle.evaluate, in the oracle helper), and
    the stage's record; from the store where it has them under the same key (the model's and
    input's bytes, the options, the verify code and its libraries), else computed and stored."""
    import pickle

    from pipeline.core.fingerprint import stage_fingerprint
    from pipeline.core.integrity import sha256
    from pipeline.core.isolate import warm
    from pipeline.core.store import key_of

    start = time.monotonic()
    key = key_of({"stage": "oracle", **stage_fingerprint("verify"), "model": sha256(model),
                  "input": hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest(),
                  "dtype": x.dtype.str, "shape": list(x.shape), **options}) if store else None
    stored = store.read(key, [ORACLE_OUTPUTS]) if store else None
    if stored:
        refs = pickle.loads(stored[ORACLE_OUTPUTS])
        return refs, {"seconds": round(time.monotonic() - start, 4), "store": True}
    warm(oracle.warm_up, helper="oracle", stage="oracle", log=log)
    start = time.monotonic()
    refs = call(oracle.evaluate, case, model, x, **options, helper="oracle", stage="oracle", timeout=timeout,
                log=log)
    seconds = round(time.monotonic() - start, 4)
    if store:
        store.put_data(key, {ORACLE_OUTPUTS: pickle.dumps(refs, protocol=pickle.HIGHEST_PROTOCOL)},
                       f"oracle of {case.name}")
    return refs, {"seconds": seconds}


def verify_case(case: Case, target, model_dir: Path, case_dir: Path, *, timeout: float,
                benchmark: bool = False, run_limit=None, store=None) -> Result:
    """Run and check one case on its target (a config.Target); write the inputs, expected and
    actual outputs and result.json in case_dir. With `benchmark`, a passing case's module is
    also timed with the target's benchmark tool (pipeline/targets/perf.py). The run tool gets
    `run_limit` (a pipeline/targets/cost.py Limit; else `timeout`), every other tool `timeout`.
    The oracle's outputs come from `store` (pipeline/core/store.py) where it has them."""
    model_dir, case_dir = Path(model_dir), Path(case_dir)
    model, vmfb = model_dir / case.model_file, case_dir / VMFB
    stages = read_all_stages(model_dir, case_dir)
    profile = target.profile
    notes: dict = {}
    if case.compile_only:
        check_vmfb(vmfb, Path(target.compiler).name)
        result = Result.for_case(case, COMPILED, reason="compile-only: compiled, not run or compared", stages=stages,
                                 perf=perf.record(case.geometry, vmfb, stages, _estimate(profile, case_dir)))
        result.write(case_dir)
        return result
    x = make_input(case)
    save_npy(model_dir / INPUT, x)
    sig = _signature(target, vmfb, model_dir / MLIR, profile.function(case.backend), store, timeout,
                     case_dir / "run.log")
    notes["module_io"] = sig.to_dict()
    if profile.profiling:
        notes["estimated_npu_cycles"] = _estimate(profile, case_dir)
    x_module, converted = module_input(case, x, sig)
    options = {"converted": converted, "round_weights": profile.converts_weights,
               "bias_free": separate_bias(case, profile, converted),
               "requantize": profile.int8_rounding == "single-round"}
    refs, stages["oracle"] = _oracle(case, model, x, options, store, timeout, case_dir / "oracle.log")
    weights = refs["weights"]
    save_npy(case_dir / EXPECTED, refs["expected"])
    if converted or raw_io(profile.io, sig.inputs[0]):
        input_path = case_dir / input_file_name(sig.inputs[0], profile.io)
        write_input(input_path, x_module, sig.inputs[0], profile.io)
    else:
        input_path = model_dir / INPUT  # the model's own input, as saved
    actual, seconds = run_vmfb(target.runner, profile.run_flags, vmfb, sig, [input_path], profile.io,
                               timeout=run_limit.seconds if run_limit else timeout, log=case_dir / "run.log",
                               timeout_note=run_limit.cut_note() if run_limit else None)
    stages["run"] = {"seconds": round(seconds, 4)}
    save_npy(case_dir / ACTUAL, actual)
    if case.flavor == "w8if32":
        # The converter leaves small weight tensors in float; such a case is f32 coverage only.
        notes["weights_quantized"] = weights.weights_quantized
    if converted:
        notes["converted"] = f"{x.dtype.name} model run in {x_module.dtype.name}"
        save_npy(case_dir / BF16_REFERENCE, refs["bf16"])
    if "exact" in refs:
        save_npy(case_dir / EXACT, refs["exact"])
    terms = _terms(case, weights, x, refs)
    start = time.monotonic()
    checks = comparisons(case, weights, x, refs, actual, profile)
    agreement = oracle_vs_float64(case, weights, x, refs)
    if agreement is not None:
        notes["oracle_vs_float64"] = round(agreement.error_to_tolerance, 4)
        if not agreement.passed:
            notes["oracle_disagrees"] = (f"{agreement.reason}; the checks against the oracle are replaced by the "
                                         "float64 conv of the model's weights")
            refs.setdefault("exact", refs.get("float64"))  # repro.sh compares with it too
    if "accumulators" in refs:
        refs["single_round"], notes["int8_allowance_used"] = single_round_expected(case, weights, refs)
    elif case.flavor == "w8i8" and profile.int8_rounding == "single-round":
        notes["single_round_model"] = "none: the model requantizes twice (its bias in a separate ADD); bit-exact"
    if "bias_free" in refs:  # does the case need the separate bias step? (the report counts them)
        without = comparisons(case, weights, x, {k: v for k, v in refs.items() if k != "bias_free"}, actual, profile)
        notes["separate_bias_step"] = "needed" if not all(c.passed for c in without) else "not needed"
    stages["compare"] = {"seconds": round(time.monotonic() - start, 4)}
    relative = input_path.name if input_path.parent == case_dir else f"../{input_path.name}"
    _repro_check(case, case_dir, terms, refs, converted, runner_input_arg(relative, sig.inputs[0], profile.io),
                 checks, profile)
    failed = [c for c in checks if not c.passed]
    execution = None
    if benchmark and not failed and target.benchmark_tool:
        execution = perf.run_benchmark(target.benchmark_tool, profile.run_flags, vmfb, sig.function,
                                       [runner_input_arg(input_path, sig.inputs[0], profile.io)],
                                       timeout=timeout, log=case_dir / perf.LOG)
    result = Result.for_case(
        case, FAIL if failed else PASS, stage="verify" if failed else None,
        reason="; ".join(c.reason for c in failed) if failed else "; ".join(c.reason for c in checks),
        metrics={c.name: c.to_dict() for c in checks}, notes=notes, stages=stages,
        perf=perf.record(case.geometry, vmfb, stages, notes.get("estimated_npu_cycles"), execution))
    result.write(case_dir)
    return result
