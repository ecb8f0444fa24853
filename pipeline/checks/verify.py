"""Stage 4: run the module, ask the oracle, compare under the tolerance policy, write result.json.

The module's I/O types come from its own signature (pipeline/targets/signature.py). Where a compiler
turned an f32 model's I/O into bf16, the input is rounded to bf16 for the module and its
output is checked twice (pipeline/checks/tolerance.py): tightly against the exact conv of the
bf16-rounded operands, and against the flavor's oracle with the conversion's error bound.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pipeline.checks import explain, oracle
from pipeline.targets import perf
from pipeline.targets import signature
from pipeline.checks import tolerance
from pipeline.space.cases import Case
from pipeline.core.chain import MLIR, VMFB
from pipeline.checks.compare import Comparison, compare, compare_channel_sums, write_check
from pipeline.checks.reference import activate, clamp_inactive
from pipeline.targets.compiler import check_vmfb, module_estimate
from pipeline.space.data import make_input, needs_quantization
from pipeline.frontends.tflite_file import input_quantization
from pipeline.space.refusal import INT32_MAX
from pipeline.core.cuts import KnownCuts, known_cut
from pipeline.core.errors import StageError
from pipeline.core.integrity import sha256
from pipeline.core.isolate import call
from pipeline.outcome.result import COMPILED, FAIL, PASS, Result, read_all_stages
from pipeline.targets.runner import input_arg as runner_input_arg
from pipeline.targets.runner import input_file_name, raw_io, run_vmfb, write_input
from pipeline.core.tools import atomic_output

INPUT, EXPECTED, ACTUAL, EXACT, BF16_REFERENCE = "input.npy", "expected.npy", "actual.npy", "exact.npy", \
    "bf16-reference.npy"
CONVERSIONS = {("float32", "bfloat16")}  # model dtype -> module dtype a compiler may convert to


def save_npy(path: Path, array: np.ndarray) -> None:
    """The array as it is: a bf16 input stays bf16 (numpy writes it as 2-byte void), which the run
    tools read as the module's bf16 input (repro.sh passes input.npy where no check.json says
    otherwise)."""
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array)


def save_numbers(path: Path, array: np.ndarray) -> None:
    """An output or reference saved so that np.load gives numbers: bf16 as float32 (exact: a bf16
    value is an f32 with its low 16 bits zero); other dtypes as they are."""
    save_npy(path, array.astype(np.float32) if array.dtype.name == "bfloat16" else array)


def _channel_axis(case: Case) -> int:
    return -1 if case.backend == "tflite" else 1


def _per_channel(case: Case, values, ndim: int) -> np.ndarray:
    """A per-output-channel vector shaped to broadcast against an output of `ndim` dimensions."""
    shape = [1] * ndim
    shape[_channel_axis(case)] = -1
    return np.asarray(values, dtype=np.float64).reshape(shape)


@dataclass(frozen=True)
class Bound:
    """One reference and the accumulation's bound around it, per element
    (pipeline/checks/tolerance.py)."""

    reference: np.ndarray  # S, exact (float64)
    within: np.ndarray  # A
    variance: np.ndarray | None  # u**2 V, the accumulation error's variance proxy (None: no tensor test)
    abs_sum: np.ndarray  # sum |p| over the element's window
    hybrid: np.ndarray | None = None  # w8if32: the hybrid kernel's error against S, H + its roundings
    scaling: np.ndarray | None = None  # w8if32: the hybrid kernel's roundings alone, 3 u (sum |p| + H + |b|)


def _bound(case: Case, reference: np.ndarray, abs_sum: np.ndarray, bias, profile, factors: int = 1) -> Bound:
    """One implementation's accumulation bound around `reference`: f32 partial sums, or the
    profile's bf16 running sum (whose errors may share a sign: no variance for a tensor test)."""
    bias = _per_channel(case, bias, reference.ndim)
    q = tolerance.partial_sum_bound(reference, abs_sum, bias)
    k = case.geometry.reduction
    if profile is not None and profile.accumulation == "bf16":
        return Bound(reference, tolerance.bf16_accumulation_bound(k, q, profile.accumulation_tile, factors), None,
                     abs_sum)
    return Bound(reference, tolerance.accumulation_bound(k, q, factors=factors),
                 tolerance.accumulation_variance(k, q, factors=factors), abs_sum)


def float_bound(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict, profile=None) -> Bound:
    """The verdict's reference for an f32 output (the float64 conv of the model's weights; for
    w8if32 of its dequantized weights) and its float path's bound; for w8if32 also the hybrid
    kernel's error bound H + 3 u (sum |p| + H + |b|)."""
    if case.flavor != "w8if32":
        return _bound(case, refs["float64"], refs["abs_sum"], weights.bias, profile)
    bound = _bound(case, refs["exact"], refs["abs_sum"], weights.bias, profile, 2)
    h = tolerance.activation_quantization(weights.kernel, x, bound.reference.shape, _channel_axis(case))
    h = h if weights.weights_quantized else np.zeros_like(h)  # float weights: TFLite's plain f32 conv
    hybrid = tolerance.hybrid_bound(bound.abs_sum, _per_channel(case, weights.bias, bound.reference.ndim), h)
    return replace(bound, hybrid=hybrid, scaling=hybrid - h)


def hybrid_path(bound: Bound, expected: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """w8if32's tolerance around S: where the module computed TFLite's hybrid kernel's value
    (within both implementations' scaling roundings of the oracle's output, itself within its
    derived bound H of S), |e - S| + those roundings; elsewhere the float path's A. Admits both
    correct implementations, each at its own derived error."""
    e, y, s = (np.asarray(a, dtype=np.float64) for a in (expected, actual, bound.reference))  # s: act(S)
    rounding = 2.0 * bound.scaling  # the module's and the oracle's
    matched = (np.abs(e - s) <= bound.hybrid) & (np.abs(y - e) <= rounding)
    return np.where(matched, np.maximum(bound.within, np.abs(e - s) + rounding), bound.within)


def _bf16_check(name: str, case: Case, reference: np.ndarray, abs_sum: np.ndarray, bias, actual: np.ndarray,
                profile, bias_free: np.ndarray | None = None) -> Comparison:
    """A bf16 output against S: exactly the values a correct rounding of a value within A reaches,
    through the activation. Where the target may add the bias in a separate bf16 step, the
    values of either implementation: that step's, or the one rounding's (a module that rounds
    once is correct too, and torq 2.3.0 does on some geometries the profile's rule names:
    docs/measurements.md, 2026-12-07 (day))."""
    bound = _bound(case, reference, abs_sum, bias, profile)
    intervals = [tolerance.bf16_accepted(reference, bound.within)]
    if bias_free is not None:
        intervals.append(tolerance.bf16_accepted_separate_bias(bias_free, bound.within,
                                                               _per_channel(case, bias, reference.ndim)))
    act = case.geometry.activation
    wide = actual.astype(np.float64)  # bf16 -> float64 is exact
    shown = activate(reference, act)
    within = [tolerance.interval_tolerance(shown, activate(low, act), activate(high, act), wide)
              for low, high in intervals]
    return compare(name, shown, wide, np.maximum.reduce(within))  # in either interval


def channel_check(case: Case, bound: Bound, actual: np.ndarray) -> Comparison:
    """The tensor test: each output channel's summed error against its bound
    (pipeline/checks/tolerance.py), elements whose sums lie within each other's bound as one
    group (the float path's: a w8if32 module on the hybrid kernel's path gets none)."""
    axis = _channel_axis(case)
    keep = clamp_inactive(bound.reference, bound.within, case.geometry.activation)  # where y is the sum itself
    limits = tolerance.channel_error_bound(bound.variance, bound.reference, bound.within, axis, keep)
    wide = actual.astype(np.float64)
    return compare_channel_sums("vs float64 conv, summed error per output channel", bound.reference,
                                np.where(keep, wide, bound.reference), limits, axis)


def separate_bias(case: Case, profile, converted: bool) -> bool:
    """Whether the target adds this case's bias in a separate bf16 step (pipeline/checks/tolerance.py):
    on torq, an f32 model run in bf16 whose conv is rewritten over a padded space-to-depth input."""
    return bool(profile is not None and profile.bf16_bias_add == "padded-space-to-depth" and converted
                and tolerance.padded_space_to_depth(case.geometry, case.backend))


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
    double, single = tolerance.requantized(acc, multipliers, _channel_axis(case), weights.output_zero_point,
                                           weights.activation_range)
    wrong = int((double != refs["expected"]).sum())
    if wrong:
        raise RuntimeError(f"the integer model of TFLite's requantization differs from the TFLite reference "
                           f"kernels at {wrong} of {double.size} elements")
    return single, int((single != double).sum())


def int32_guard(weights: oracle.ModelWeights) -> None:
    """w8i8: every accumulator of the model fits int32 for any input, its bias counted:
    255 sum |w_o| + |bias_o| (|x - zp| <= 255) for the stored integers of each output channel. A
    geometry refused for w8i8 (pipeline/space/refusal.py) fails this without its bias; a model
    that fails it only with its bias cannot be checked bit-exactly either: a harness error, raised."""
    if weights.kernel_int is None or weights.bias_int is None:
        return
    worst = 255 * np.abs(weights.kernel_int).reshape(weights.kernel_int.shape[0], -1).sum(axis=1) + \
        np.abs(weights.bias_int)
    if int(worst.max()) > INT32_MAX:
        raise RuntimeError(f"the int32 accumulator could overflow: 255 sum |w_o| + |bias_o| reaches {int(worst.max()):,} "
                           "> 2**31 - 1 (output channel " + str(int(np.argmax(worst))) + "): the bit-exact check cannot vouch")


def verdict_reference(case: Case, refs: dict) -> np.ndarray | None:
    """act(S), the exact (float64) conv the verdict compares with, through the case's activation
    (None for w8i8's bit-exact check)."""
    for key in ("bf16_sum", "sum", "exact", "float64"):
        if key in refs:
            return activate(refs[key], case.geometry.activation)
    return None


ORACLE_NAMES = {("tflite", "f32"): "TFLite interpreter", ("tflite", "w8if32"): "TFLite hybrid kernel",
                ("onnx", "f32"): "onnxruntime"}


def oracle_vs_float64(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict) -> Comparison | None:
    """The cross-check of the harness: the f32 oracle (TFLite interpreter, onnxruntime, TFLite's
    hybrid kernel) against the float64 conv of the model's own weights, under one f32
    implementation's bound (the hybrid kernel: the w8if32 bound, which admits its path). None
    where the flavor's oracle is not an f32 implementation. Never part of the verdict."""
    if (case.backend, case.flavor) not in ORACLE_NAMES:
        return None
    bound = float_bound(case, weights, x, refs)
    within = bound.within if bound.hybrid is None else np.maximum(bound.within, bound.hybrid)
    return compare(f"{ORACLE_NAMES[case.backend, case.flavor]} vs float64 conv",
                   activate(bound.reference, case.geometry.activation), refs["expected"].astype(np.float64), within)


def comparisons(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict, actual: np.ndarray,
                profile=None) -> list[Comparison]:
    """Every check the case's flavor calls for on the target (a targets.Profile; None is stock
    behaviour); all must pass. `refs` are oracle.evaluate's outputs. The verdict rests on the
    float64 conv of the model's own weights (w8i8: the TFLite reference kernels, bit-exact); the
    f32 oracles are only cross-checked against it (oracle_vs_float64). Where the element check
    passes, an f32 output also gets the tensor test (channel_check)."""
    if "bf16" in refs:  # an f32 model converted to bf16 by the compiler
        operands = "bf16-rounded operands" if profile is None or profile.converts_weights else \
            "bf16-rounded input and f32 weights"
        return [_bf16_check(f"vs float64 conv of the {operands}, rounded to bf16", case, refs["bf16_sum"],
                            refs["bf16_abs_sum"], refs["bf16_bias"], actual, profile, refs.get("bias_free"))]
    if case.flavor == "w8i8":
        int32_guard(weights)
        if profile is not None and profile.int8_rounding == "single-round" and "accumulators" in refs:
            # (the oracle gives accumulators only where the model requantizes once)
            single, _ = single_round_expected(case, weights, refs)
            return [compare("vs TFLite reference kernels (bit-exact; the single-round value at requantization ties)",
                            single, actual, 0.0)]
        return [compare("vs TFLite reference kernels (bit-exact)", refs["expected"], actual, 0.0)]
    if case.flavor == "bf16":
        return [_bf16_check("vs float64 conv of the bf16 operands, rounded to bf16", case, refs["sum"],
                            refs["abs_sum"], weights.bias, actual, profile)]
    bound = float_bound(case, weights, x, refs, profile)
    shown = replace(bound, reference=activate(bound.reference, case.geometry.activation))  # act(S), the same A
    if case.flavor == "w8if32":  # either implementation, each at its own bound
        within = hybrid_path(shown, refs["expected"], actual)
        check = compare("vs float64 conv of the dequantized int8 weights", shown.reference,
                        actual.astype(np.float64), within)
        float_path = bool((np.abs(actual.astype(np.float64) - shown.reference) <= bound.within).all())
        tensor = check.passed and bound.variance is not None and float_path
    else:
        check = compare("vs float64 conv", shown.reference, actual.astype(np.float64), bound.within)
        tensor = check.passed and bound.variance is not None
    return [check, channel_check(case, bound, actual)] if tensor else [check]


def explanation(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict, actual: np.ndarray,
                profile) -> str | None:
    """For wrong numbers, the mis-lowering the output matches under these very comparisons
    (pipeline/checks/explain.py); None where an element is not finite (a non-finite output is
    its own bucket, and no conv of finite operands matches it)."""
    if not np.isfinite(actual.astype(np.float64)).all():
        return None

    def passes(candidate: Case, held: oracle.ModelWeights, candidate_refs: dict, output: np.ndarray) -> bool:
        return all(c.passed for c in comparisons(candidate, held, x, candidate_refs, output, profile))

    return explain.explain(case, weights, x, refs, actual, profile, passes)


def _repro_check(case: Case, case_dir: Path, refs: dict, weights: oracle.ModelWeights, x: np.ndarray,
                 converted: bool, input_arg: str, profile) -> None:
    """The primary check in the run tool's terms (atol + rtol |e|), for repro.sh, against the
    reference in the module's dtype. The sweep's bound is per element; the run tool takes its
    largest value everywhere (and, for a separate bias add, half a bf16 step of the bias-free sum
    more); against a bf16-rounded reference it allows a bf16 step more than the sweep's check
    against the exact sum (tolerance.bf16_terms)."""
    if case.flavor == "w8i8":  # bit-exact, with the single-round model's values on such a target
        write_check(case_dir, refs.get("single_round", refs["expected"]), "exact", input_arg=input_arg)
        return
    if converted or case.flavor == "bf16":
        key, abs_key, bias = ("bf16_sum", "bf16_abs_sum", refs["bf16_bias"]) if converted else \
            ("sum", "abs_sum", weights.bias)
        within = float(np.max(_bound(case, refs[key], refs[abs_key], bias, profile).within, initial=0.0))
        step = float(np.max(tolerance.separate_bias_term(refs["bias_free"], within), initial=0.0)) \
            if "bias_free" in refs else 0.0
        atol, rtol = tolerance.bf16_terms(within)
        write_check(case_dir, refs["bf16" if converted else "expected"], "approximate", atol + step, rtol, input_arg)
        return
    bound = float_bound(case, weights, x, refs, profile)  # the float64 reference, saved in f32: u |e| more
    within = bound.within if bound.hybrid is None else np.maximum(bound.within, bound.hybrid)  # either path
    write_check(case_dir, activate(bound.reference, case.geometry.activation).astype(np.float32), "approximate",
                float(np.max(within, initial=0.0)), tolerance.U_F32, input_arg)


def case_input(case: Case, model: Path) -> np.ndarray:
    """The case's input (pipeline/space/data.py); a w8i8 case given a model's sample input is
    quantized with its built `model`'s own input quantization."""
    return make_input(case, input_quantization(model) if needs_quantization(case) else None)


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


ORACLE_OUTPUTS = "oracle.pickle"  # the oracle's outputs, as the store keeps them
SIGNATURE = "signature.json"  # the module's signature, as the store keeps it
RUN_OUTPUT = "run.pickle"  # a completed run's output and seconds, as the store keeps them


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


def _run_key(target, vmfb: Path, input_path: Path) -> str:
    """What identifies one run, for its output or its cut in the store: the module's and the
    input's bytes, the run tool's identity, its flags and I/O convention."""
    from pipeline.core.fingerprint import tool_digest
    from pipeline.core.store import key_of
    from pipeline.targets.profiles import toolchain_identity

    profile = target.profile
    return key_of({"stage": "run", "module": sha256(vmfb), "input": sha256(input_path),
                   "runner": tool_digest(target.runner, **target.launchers),
                   "toolchain": toolchain_identity(target.toolchain), "flags": list(profile.run_flags),
                   "io": profile.io})


def _stored_run(store, key: str, limit: float, log: Path) -> np.ndarray | None:
    """The output of the same run completed before, from the store, where it finished within
    `limit` seconds (a run that took longer runs again, to be cut there); `log` says where it
    came from, as a stage taken from the store does. None where the store has no such run."""
    import pickle

    stored = store.read(key, [RUN_OUTPUT])
    if not stored:
        return None
    kept = pickle.loads(stored[RUN_OUTPUT])
    if kept["seconds"] > limit:
        return None
    with open(log, "a") as f:
        f.write(f"# taken from the store ({store.root}, entry {key[:16]}): the output of the same run tool, "
                f"module, input and flags, which completed in {kept['seconds']:.3g} s\n")
    return kept["actual"]


def _keep_run(store, key: str, actual: np.ndarray, seconds: float, vmfb: Path) -> None:
    import pickle

    store.put_data(key, {RUN_OUTPUT: pickle.dumps({"actual": actual, "seconds": seconds},
                                                  protocol=pickle.HIGHEST_PROTOCOL)}, f"run of {vmfb}")


def _run(target, vmfb: Path, sig, input_path: Path, run_limit, timeout: float, store, retry_timeouts: bool,
         log: Path) -> tuple[np.ndarray, dict]:
    """The module's output on the input, and the run stage's record: from the store where the same
    run completed before (within the limit), or cut at once where it was cut at this limit or a
    higher one (pipeline/core/cuts.py; not with `retry_timeouts`); else run, and kept."""
    profile = target.profile
    limit = run_limit.seconds if run_limit else timeout
    key = _run_key(target, vmfb, input_path) if store else None
    actual = _stored_run(store, key, limit, log) if store else None
    if actual is not None:
        return actual, {"seconds": 0.0, "store": True}
    with known_cut(KnownCuts(store, key, f"run of {vmfb}", retry_timeouts) if store else None, "run", limit, log):
        actual, seconds = run_vmfb(target.runner, profile.run_flags, vmfb, sig, [input_path], profile.io,
                                   timeout=limit, log=log, timeout_note=run_limit.cut_note() if run_limit else None)
    if store:
        _keep_run(store, key, actual, seconds, vmfb)
    return actual, {"seconds": round(seconds, 4)}


def verify_case(case: Case, target, model_dir: Path, case_dir: Path, *, timeout: float,
                benchmark: bool = False, run_limit=None, store=None, retry_timeouts: bool = False) -> Result:
    """Run and check one case on its target (a config.Target); write the inputs, expected and
    actual outputs and result.json in case_dir. With `benchmark`, a passing case's module is
    also timed with the target's benchmark tool (pipeline/targets/perf.py). The run tool gets
    `run_limit` (a pipeline/targets/cost.py Limit; else `timeout`), every other tool `timeout`.
    The oracle's outputs come from `store` (pipeline/core/store.py) where it has them, and so
    does the run's output where the same run completed before within its limit, or its cut at
    that limit (pipeline/core/cuts.py; not with `retry_timeouts`)."""
    model_dir, case_dir = Path(model_dir), Path(case_dir)
    model, vmfb = model_dir / case.model_file, case_dir / VMFB
    stages = read_all_stages(model_dir, case_dir)
    profile = target.profile
    notes: dict = {}
    if case.compile_only:
        check_vmfb(vmfb, Path(target.compiler).name)
        result = Result.for_case(case, COMPILED, reason="compile-only: compiled, not run or compared", stages=stages,
                                 perf=perf.record(case.geometry, vmfb, stages, module_estimate(profile.profiling, case_dir)))
        result.write(case_dir)
        return result
    x = case_input(case, model)
    save_npy(model_dir / INPUT, x)
    sig = _signature(target, vmfb, model_dir / MLIR, profile.function(case.backend), store, timeout,
                     case_dir / "run.log")
    notes["module_io"] = sig.to_dict()
    if profile.profiling:
        notes["estimated_npu_cycles"] = module_estimate(profile.profiling, case_dir)
    x_module, converted = module_input(case, x, sig)
    options = {"converted": converted, "round_weights": profile.converts_weights,
               "bias_free": separate_bias(case, profile, converted),
               "requantize": profile.int8_rounding == "single-round"}
    refs, stages["oracle"] = _oracle(case, model, x, options, store, timeout, case_dir / "oracle.log")
    weights = refs["weights"]
    save_numbers(case_dir / EXPECTED, refs["expected"])
    if converted or raw_io(profile.io, sig.inputs[0]):
        input_path = case_dir / input_file_name(sig.inputs[0], profile.io)
        write_input(input_path, x_module, sig.inputs[0], profile.io)
    else:
        input_path = model_dir / INPUT  # the model's own input, as saved
    actual, stages["run"] = _run(target, vmfb, sig, input_path, run_limit, timeout, store, retry_timeouts,
                                 case_dir / "run.log")
    save_numbers(case_dir / ACTUAL, actual)
    if case.flavor == "w8if32":
        # The converter leaves small weight tensors in float; such a case is f32 coverage only.
        notes["weights_quantized"] = weights.weights_quantized
    if converted:
        notes["converted"] = f"{x.dtype.name} model run in {x_module.dtype.name}"
        save_numbers(case_dir / BF16_REFERENCE, refs["bf16"])
    reference = verdict_reference(case, refs)
    if reference is not None:
        save_numbers(case_dir / EXACT, reference)
    start = time.monotonic()
    checks = comparisons(case, weights, x, refs, actual, profile)
    agreement = oracle_vs_float64(case, weights, x, refs)
    if agreement is not None:
        notes["oracle_vs_float64"] = round(agreement.error_to_tolerance, 4)
        if not agreement.passed:
            module = ", ".join(f"{c.name} {c.error_to_tolerance:.3g}" for c in checks)
            notes["oracle_disagrees"] = (f"{agreement.reason}; the verdict rests on the float64 conv "
                                         f"(the module's error/tolerance: {module})")
    if "accumulators" in refs:
        refs["single_round"], notes["int8_allowance_used"] = single_round_expected(case, weights, refs)
    elif case.flavor == "w8i8" and profile.int8_rounding == "single-round":
        notes["single_round_model"] = "none: the model requantizes twice (its bias in a separate ADD); bit-exact"
    if "bias_free" in refs:  # does the case need the separate bias step? (the report counts them)
        without = comparisons(case, weights, x, {k: v for k, v in refs.items() if k != "bias_free"}, actual, profile)
        notes["separate_bias_step"] = "needed" if not all(c.passed for c in without) else "not needed"
    stages["compare"] = {"seconds": round(time.monotonic() - start, 4)}
    relative = input_path.name if input_path.parent == case_dir else f"../{input_path.name}"
    _repro_check(case, case_dir, refs, weights, x, converted, runner_input_arg(relative, sig.inputs[0], profile.io),
                 profile)
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
        perf=perf.record(case.geometry, vmfb, stages, notes.get("estimated_npu_cycles"), execution),
        explanation=explanation(case, weights, x, refs, actual, profile) if failed else None)
    result.write(case_dir)
    return result
