"""The checks verify applies, on synthetic data with exactly known answers, and on a real case."""
import json
import subprocess

import numpy as np
import pytest

from helpers import clean_env
from pipeline.run import stages
from pipeline.checks import tolerance
from pipeline.checks import verify as verify_module
from pipeline.space.cases import Case
from pipeline.checks.compare import compare
from pipeline.config import Config
from pipeline.space.expected import Expectation
from pipeline.space.geometry import Geometry
from pipeline.checks.oracle import ModelWeights, onnx_weights
from pipeline.checks.compare import write_check
from pipeline.run.repro import write_repro
from pipeline.outcome.result import read_result
from pipeline.targets.profiles import load_profiles
from pipeline.checks.verify import comparisons, single_round_expected

PROFILES = load_profiles()
G = Geometry(2, (8, 8), (1, 1), (1, 1), 1, 2)  # 1x1 kernel: one accumulator per output


def _w8i8_on_torq():
    """Accumulators of a 2-channel int8 conv at which single and double rounding agree, and some
    at which they differ (requantization ties), with the TFLite reference's output for them."""
    rng = np.random.default_rng(3)
    input_scale, output_scale, zp = 0.05, 0.9, -3
    weight_scales = (2.0 ** -12 * 13.7, 2.0 ** -13 * 11.1)
    multipliers = input_scale * np.asarray(weight_scales) / output_scale
    acc = np.stack([rng.integers(-int(120 / m), int(120 / m), 400000) for m in multipliers], axis=-1)
    double, single = tolerance.requantized(acc, multipliers, -1, zp)
    differs = np.flatnonzero((double != single).any(axis=-1))
    same = np.flatnonzero((double == single).all(axis=-1))[:60]
    rows = np.concatenate([differs[:4], same])
    acc = acc[rows].reshape(1, 8, 8, 2)
    weights = ModelWeights(np.ones((2, 1, 1, 1)), np.zeros(2), True, input_scale, output_scale, 0, zp, weight_scales)
    expected = tolerance.requantized(acc, multipliers, -1, zp)[0]
    return Case(G, "tflite", "w8i8", target="torq"), weights, {"expected": expected, "accumulators": acc}


def test_w8i8_single_round_is_bit_exact_against_the_single_round_model():
    case, weights, refs = _w8i8_on_torq()
    single, ties = single_round_expected(case, weights, refs)
    assert ties >= 1 and (single != refs["expected"]).sum() == ties
    x = np.zeros((1, 8, 8, 1), np.int8)
    [check] = comparisons(case, weights, x, refs, single, PROFILES["torq"])
    assert check.passed and check.max_tolerance == 0.0
    # TFLite's value where the two roundings differ is not accepted: the model predicts one value
    [check] = comparisons(case, weights, x, refs, refs["expected"], PROFILES["torq"])
    assert not check.passed and check.mismatches == ties
    # one LSB off where the two models agree fails
    agree = np.flatnonzero((single == refs["expected"]).ravel())[0]
    off = single.copy().ravel()
    off[agree] += 1 if off[agree] < 127 else -1
    [check] = comparisons(case, weights, x, refs, off.reshape(single.shape), PROFILES["torq"])
    assert not check.passed and check.mismatches == 1


def test_w8i8_elsewhere_is_bit_exact_against_tflite():
    case, weights, refs = _w8i8_on_torq()
    x = np.zeros((1, 8, 8, 1), np.int8)
    [check] = comparisons(case, weights, x, refs, refs["expected"], PROFILES["llvm-cpu"])
    assert check.passed
    single, _ = single_round_expected(case, weights, refs)
    [check] = comparisons(case, weights, x, refs, single, PROFILES["llvm-cpu"])
    assert not check.passed


def test_an_integer_model_that_disagrees_with_tflite_is_a_harness_error():
    case, weights, refs = _w8i8_on_torq()
    wrong = refs["expected"].copy()
    wrong.ravel()[0] += 1
    try:
        single_round_expected(case, weights, {**refs, "expected": wrong})
    except RuntimeError as err:
        assert "differs from the TFLite reference kernels at 1 of" in str(err)
    else:
        raise AssertionError("no error")


# --- on a real case: llvm-cpu, a tiny ONNX conv built by the sweep's own stage functions ----------

TINY = Geometry(2, (6, 5), (3, 3), (1, 1), 2, 3)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny case built to its .vmfb and verified once (passing), on llvm-cpu."""
    cfg = Config.from_env(clean_env(CONV_SWEEP_BUILD_DIR=tmp_path_factory.mktemp("verify") / "build"))
    case = Case(TINY, "onnx", "f32")
    assert stages.model([case], cfg) is None and stages.mlir([case], cfg) is None and stages.vmfb(case, cfg) is None
    assert stages.verify(case, cfg) is None and read_result(cfg.case_dir(case))["status"] == "pass"
    return cfg, case


@pytest.mark.slow
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_oracle_fails_in_the_sweep_and_in_repro(built, bad):
    cfg, case = built
    case_dir = cfg.case_dir(case)
    actual = np.load(case_dir / "actual.npy")
    expected = actual.copy()
    expected.flat[1] = bad
    check = compare("vs onnxruntime", expected, actual, np.full(actual.shape, 1e-3))
    assert not check.passed and check.mismatches == 1
    # repro.sh on the same data: the same verdict; on the module's own output as expected: a pass
    argument = json.loads((case_dir / "check.json").read_text())["input"]
    for data, verdict in ((expected, 1), (actual, 0)):
        write_check(case_dir, data, "approximate", 1e-3, 0.0, argument)
        repro = write_repro(case, cfg, cfg.model_dir(case), case_dir)
        run = subprocess.run(["bash", str(repro)], capture_output=True, text=True, timeout=300)
        assert (run.returncode != 0) == bool(verdict), run.stdout[-2000:] + run.stderr[-2000:]


@pytest.mark.slow
def test_an_exception_in_our_verify_code_is_a_harness_error_even_when_listed(built, monkeypatch):
    """Listed at verify with exactly the signature the exception would give: still not expected."""
    cfg, case = built

    def broken(*args, **kwargs):
        raise ZeroDivisionError("injected bug in the checks")

    monkeypatch.setattr(verify_module, "comparisons", broken)
    listed = Case(TINY, "onnx", "f32",
                  expected=Expectation(case.name, "verify", "verify: ZeroDivisionError: injected bug in the checks"))
    message = stages.verify(listed, cfg)
    result = read_result(cfg.case_dir(case))
    assert (result["status"], result["stage"]) == ("harness", "verify")
    assert message.startswith(f"{case.key}: HARNESS ERROR at verify") and "ZeroDivisionError" in message
    assert "ZeroDivisionError" in (cfg.case_dir(case) / "verify.log").read_text()  # the traceback is kept


@pytest.mark.slow
@pytest.mark.parametrize("geometry, separate", [
    (Geometry(2, (10, 9), (3, 3), (1, 1), 64, 8), False),  # stride 1: torq fuses the bias, no step allowed
    (Geometry(2, (13, 13), (3, 3), (3, 3), 8, 8), True),  # rewritten over a padded space-to-depth input
])
def test_torq_separate_bias_step_only_where_torq_adds_the_bias_separately(tmp_path, geometry, separate):
    """An ONNX f32 conv with a non-zero bias, converted to bf16 by torq-compile and run on its
    simulator: it passes, with the half bf16 step of the bias-free sum allowed only where the
    padded space-to-depth rewrite adds the bias in bf16 after the conv."""
    cfg = Config.from_env(clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="torq"))
    case = Case(geometry, "onnx", "f32", target="torq")
    assert tolerance.padded_space_to_depth(geometry, "onnx") is separate
    assert stages.model([case], cfg) is None and stages.mlir([case], cfg) is None and stages.vmfb(case, cfg) is None
    assert stages.verify(case, cfg) is None
    result = read_result(cfg.case_dir(case))
    assert result["status"] == "pass" and result["notes"]["converted"], result["reason"]
    assert ("separate_bias_step" in result["notes"]) is separate
    assert np.abs(onnx_weights(cfg.model_dir(case) / "model.onnx").bias).min() > 0  # the bias path is exercised


@pytest.mark.slow
def test_torq_w8i8_one_lsb_off_where_the_two_roundings_agree_fails(tmp_path):
    """A real w8i8 conv on the torq simulator passes bit-exactly against the single-round model;
    its own output with one element moved by one LSB, where the two roundings agree, fails."""
    from pipeline.checks.oracle import evaluate

    cfg = Config.from_env(clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="torq"))
    case = Case(Geometry(2, (12, 10), (3, 3), (1, 1), 16, 8), "tflite", "w8i8", target="torq")
    assert stages.model([case], cfg) is None and stages.mlir([case], cfg) is None and stages.vmfb(case, cfg) is None
    assert stages.verify(case, cfg) is None
    result = read_result(cfg.case_dir(case))
    assert result["status"] == "pass" and "single-round value" in next(iter(result["metrics"]))
    x = np.load(cfg.model_dir(case) / "input.npy")
    refs = evaluate(case, cfg.model_dir(case) / "model.tflite", x, requantize=True)
    actual = np.load(cfg.case_dir(case) / "actual.npy")
    single, ties = single_round_expected(case, refs["weights"], refs)
    assert (actual == single).all()
    agree = np.flatnonzero((single == refs["expected"]).ravel() & (single.ravel() < 127))[0]
    off = actual.copy()
    off.flat[agree] += 1
    [check] = comparisons(case, refs["weights"], x, refs, off, PROFILES["torq"])
    assert not check.passed and check.mismatches == 1 and check.lsb_histogram["1"] == 1


@pytest.mark.slow
def test_torq_w8i8_with_a_separate_bias_add_is_bit_exact_against_tflite(tmp_path):
    """A TFLite Conv1D with one output channel adds its bias in a separate int8 ADD (two
    requantizations): no single-round model applies, so the check is TFLite's output, bit-exact."""
    from pipeline.checks.oracle import tflite_weights

    cfg = Config.from_env(clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="torq"))
    case = Case(Geometry(1, (32,), (5,), (1,), 1, 1), "tflite", "w8i8", target="torq")
    assert stages.model([case], cfg) is None and stages.mlir([case], cfg) is None and stages.vmfb(case, cfg) is None
    assert not tflite_weights(case, cfg.model_dir(case) / "model.tflite").requantized_once
    stages.verify(case, cfg)
    result = read_result(cfg.case_dir(case))
    assert result["status"] in ("pass", "fail") and list(result["metrics"]) == ["vs TFLite reference kernels (bit-exact)"]
    assert "int8_allowance_used" not in result["notes"] and "separate ADD" in result["notes"]["single_round_model"]


def _f32_case(rng, channels=8):
    from pipeline.checks.oracle import abs_sum
    from pipeline.checks.reference import conv_nchw, to_channels_first, to_channels_last

    g = Geometry(2, (12, 10), (3, 3), (1, 1), 4, channels)
    case = Case(g, "tflite", "f32")
    kernel, bias = rng.uniform(-0.3, 0.3, (channels, 4, 3, 3)), rng.uniform(-0.5, 0.5, channels)
    x = rng.uniform(-1, 1, (1, 12, 10, 4)).astype(np.float32)
    exact = to_channels_last(conv_nchw(to_channels_first(x), kernel, bias, g))
    weights = ModelWeights(kernel, bias, False)
    refs = {"weights": weights, "float64": exact, "abs_sum": abs_sum(case, weights, x)}
    return case, weights, x, refs, exact


def test_the_verdict_rests_on_float64_and_an_oracle_off_it_is_only_reported():
    """TFLite f32 whose oracle output is off the float64 conv beyond one implementation's bound:
    the verdict is the same (float64), the cross-check fails and says so; a wrong module fails
    whatever the oracle says."""
    case, weights, x, refs, exact = _f32_case(np.random.default_rng(3))
    good = exact.astype(np.float32)
    checks = comparisons(case, weights, x, {**refs, "expected": good}, good)
    assert [c.name for c in checks] == ["vs float64 conv", "vs float64 conv, summed error per output channel"]
    assert all(c.passed for c in checks)
    off = good.copy()
    off[..., 1] -= 5.0  # the oracle drops the sum of one channel
    assert [c.passed for c in comparisons(case, weights, x, {**refs, "expected": off}, good)] == [True, True]
    cross = verify_module.oracle_vs_float64(case, weights, x, {**refs, "expected": off})
    assert not cross.passed and cross.name == "TFLite interpreter vs float64 conv"
    assert verify_module.oracle_vs_float64(case, weights, x, {**refs, "expected": good}).passed
    wrong = good.copy()
    wrong[0, 0, 0, 0] += 0.01
    assert not comparisons(case, weights, x, {**refs, "expected": good}, wrong)[0].passed


def test_the_tensor_test_catches_a_systematic_error_no_element_shows():
    """Every element of one output channel moved by a third of its own bound A: no element is
    outside, the channel's summed error is, and only that channel fails (channel sum)."""
    case, weights, x, refs, exact = _f32_case(np.random.default_rng(4))
    bound = verify_module.float_bound(case, weights, x, refs)
    shifted = exact.copy()
    shifted[..., 2] += bound.within[..., 2] / 3
    checks = comparisons(case, weights, x, {**refs, "expected": exact}, shifted.astype(np.float32))
    element, tensor = checks
    assert element.passed and not tensor.passed
    assert tensor.mismatches == 1 and tensor.worst_index == [2] and "(channel sum)" in tensor.reason
    from pipeline.outcome.bucket import signature

    assert signature("verify", tensor.reason) == \
        "verify: vs float64 conv, summed error per output channel [channel sum]: elements outside tolerance"
    # the same shift with alternating signs sums to (almost) nothing: not a systematic error
    alternating = exact.copy()
    alternating[..., 2] += bound.within[..., 2] / 3 * np.where(np.arange(exact[..., 2].size) % 2, 1, -1).reshape(
        exact[..., 2].shape)
    assert all(c.passed for c in comparisons(case, weights, x, {**refs, "expected": exact}, alternating.astype(np.float32)))


def test_a_flipped_weight_fails_the_element_check():
    case, weights, x, refs, exact = _f32_case(np.random.default_rng(5))
    from pipeline.checks.reference import conv_nchw, to_channels_first, to_channels_last

    kernel = weights.kernel.copy()
    kernel[0, 0, 1, 1] *= -1
    mutated = to_channels_last(conv_nchw(to_channels_first(x), kernel, weights.bias, case.geometry)).astype(np.float32)
    [check] = comparisons(case, weights, x, {**refs, "expected": exact}, mutated)
    assert not check.passed and check.mismatches > 0


def test_the_summary_counts_oracles_off_their_float64_bound():
    from pipeline.results.report import oracle_cross_check, summary

    def entry(case, backend, flavor, notes):
        return {"case": case, "status": "pass", "backend": backend, "flavor": flavor, "category": "c", "stages": {},
                "notes": notes}

    entries = [entry("conv_a", "tflite", "f32", {"oracle_vs_float64": 0.2}),
               entry("conv_b", "tflite", "f32", {"oracle_vs_float64": 3.1, "oracle_disagrees": "TFLite ..."}),
               entry("conv_c", "onnx", "bf16", {})]
    assert oracle_cross_check(entries) == {"checked": 2, "disagrees": 1, "cases": ["conv_b"]}
    assert "oracle cross-check: 1 of 2 f32 oracles disagree with the float64 conv" in summary(entries, [])


def test_the_int32_guard_counts_the_bias():
    """K = 66,311 products of 255 x 127 fit int32 (66,311 x 32,385 = 2,147,481,735, 1,912 below
    2**31 - 1); with a bias of 1,913 the accumulator could overflow: the case cannot be checked
    bit-exactly."""
    kernel = np.full((1, 66_311), 127, dtype=np.int64)
    fits = ModelWeights(kernel.astype(np.float64), np.zeros(1), True, kernel_int=kernel, bias_int=np.array([1_912]))
    verify_module.int32_guard(fits)
    over = ModelWeights(kernel.astype(np.float64), np.zeros(1), True, kernel_int=kernel, bias_int=np.array([-1_913]))
    with pytest.raises(RuntimeError, match="bias"):
        verify_module.int32_guard(over)


def test_a_bf16_running_sum_gets_its_worst_case_bound_and_no_tensor_test():
    """A profile whose conv rounds its running sum to bf16 every 16 terms: the bound is the worst
    case of those roundings (wider than f32's), and no tensor test applies."""
    from dataclasses import replace

    case, weights, x, refs, exact = _f32_case(np.random.default_rng(6))
    bf16_profile = replace(PROFILES["llvm-cpu"], accumulation="bf16", accumulation_tile=16)
    f32 = verify_module.float_bound(case, weights, x, refs, PROFILES["llvm-cpu"])
    bf16 = verify_module.float_bound(case, weights, x, refs, bf16_profile)
    assert (bf16.within > 10 * f32.within).all() and bf16.variance is None
    checks = comparisons(case, weights, x, {**refs, "expected": exact}, exact.astype(np.float32), bf16_profile)
    assert [c.name for c in checks] == ["vs float64 conv"] and checks[0].passed


def test_w8if32_admits_either_implementation_each_at_its_own_bound():
    """w8if32 (int8 weights, K = 36): a module computing the float path (S, its f32 rounding)
    passes and gets the tensor test; one computing TFLite's hybrid kernel's value passes (a value
    within the hybrid bound H of S, matched to the oracle's output); one weight one int8 step off
    fails on either path, though its effect is within H."""
    from pipeline.checks.oracle import abs_sum
    from pipeline.checks.reference import conv_nchw, to_channels_first, to_channels_last

    rng = np.random.default_rng(8)
    g = Geometry(2, (12, 10), (3, 3), (1, 1), 4, 8)
    case = Case(g, "tflite", "w8if32")
    scales = np.full(8, 0.3 / 127)
    kernel = rng.integers(-127, 128, (8, 4, 3, 3)) * scales[:, None, None, None]
    bias = rng.uniform(-0.5, 0.5, 8)
    x = rng.uniform(-1, 1, (1, 12, 10, 4)).astype(np.float32)

    def conv(w, inputs):
        return to_channels_last(conv_nchw(to_channels_first(inputs), w, bias, g))

    exact = conv(kernel, x)
    step = np.abs(x).max() / 127  # the hybrid kernel: activations quantized per batch element
    hybrid = conv(kernel, np.round(x / step) * step).astype(np.float32)
    weights = ModelWeights(kernel, bias, True, weight_scales=tuple(scales))
    refs = {"weights": weights, "exact": exact, "abs_sum": abs_sum(case, weights, x), "expected": hybrid}
    float_path = comparisons(case, weights, x, refs, exact.astype(np.float32))
    assert [c.passed for c in float_path] == [True, True]
    bound = verify_module.float_bound(case, weights, x, refs)
    assert np.abs(hybrid - exact).max() > 10 * bound.within.max()  # the hybrid path is far outside A
    assert [c.passed for c in comparisons(case, weights, x, refs, hybrid)] == [True]
    off = kernel.copy()
    off[0, 0, 1, 1] += scales[0]
    effect = np.abs(conv(off, x) - exact).max()
    assert effect < bound.hybrid.min()  # within the bound that admits the hybrid path everywhere
    for module in (conv(off, x), conv(off, np.round(x / step) * step)):
        assert not comparisons(case, weights, x, refs, module.astype(np.float32))[0].passed


def _activated(activation, rng, channels=8, scale=1.0):
    """_f32_case's conv with a fused activation, its sums S scaled so that some pass 6."""
    from dataclasses import replace

    case, weights, x, refs, exact = _f32_case(rng, channels)
    weights = ModelWeights(weights.kernel * scale, weights.bias * scale, False, activation=activation)
    case = replace(case, geometry=replace(case.geometry, activation=activation))
    from pipeline.checks.oracle import abs_sum, float64_reference

    exact = float64_reference(case, weights, x)
    refs = {"weights": weights, "float64": exact, "abs_sum": abs_sum(case, weights, x)}
    return case, weights, x, refs, exact


@pytest.mark.parametrize("activation, low, high", [("relu", 0.0, np.inf), ("relu6", 0.0, 6.0)])
def test_a_fused_activation_is_checked_after_the_sum_under_the_same_bound(activation, low, high):
    """act(S) rounded to f32 passes, under the same per-element bound A as without the clamp; the
    sum without the clamp fails exactly where the clamp moves it by more than A."""
    case, weights, x, refs, exact = _activated(activation, np.random.default_rng(11), scale=8.0)
    clamped = np.clip(exact, low, high)
    assert (exact < low).any() and (activation == "relu" or (exact > high).any())
    checks = comparisons(case, weights, x, {**refs, "expected": clamped.astype(np.float32)}, clamped.astype(np.float32))
    assert [c.passed for c in checks] == [True, True]
    bound = verify_module.float_bound(case, weights, x, refs)
    [element] = comparisons(case, weights, x, refs, exact.astype(np.float32))[:1]
    assert not element.passed and element.mismatches == int((np.abs(clamped - exact) > bound.within).sum())
    assert element.max_tolerance == pytest.approx(float(bound.within.max()))


def test_the_tensor_test_sums_only_elements_the_clamp_cannot_touch():
    """relu: a systematic shift of a third of A on one channel fails the tensor test through the
    elements well inside the clamp; the clamped elements' errors (truncated toward zero) are left
    out of the sum, so an output equal to act(S) everywhere passes however many are clamped."""
    case, weights, x, refs, exact = _activated("relu", np.random.default_rng(12), scale=4.0)
    bound = verify_module.float_bound(case, weights, x, refs)
    shifted = exact.copy()
    shifted[..., 2] += bound.within[..., 2] / 3
    element, tensor = comparisons(case, weights, x, refs, np.clip(shifted, 0, None).astype(np.float32))
    assert element.passed and not tensor.passed and tensor.worst_index == [2]
    from pipeline.checks.reference import clamp_inactive

    keep = clamp_inactive(exact, bound.within, "relu")
    assert 0 < keep[..., 2].sum() < keep[..., 2].size  # both kinds of element in the channel


def test_bf16_with_relu6_accepts_exactly_the_clamped_interval():
    """ONNX bf16 with relu6: the rounding of act(S) passes; the rounding of S fails where S > 6
    (its bf16 value is not 6) or S < 0."""
    from dataclasses import replace

    from pipeline.checks.oracle import abs_sum, float64_reference
    from pipeline.checks.reference import round_to_bf16

    rng = np.random.default_rng(13)
    g = Geometry(2, (12, 10), (3, 3), (1, 1), 4, 8, activation="relu6")
    case = Case(g, "onnx", "bf16")
    kernel = round_to_bf16(rng.uniform(-3, 3, (8, 4, 3, 3))).astype(np.float64)
    bias = round_to_bf16(rng.uniform(-0.5, 0.5, 8)).astype(np.float64)
    x = round_to_bf16(rng.uniform(-1, 1, (1, 4, 12, 10))).astype(np.float64)
    weights = ModelWeights(kernel, bias, False, activation="relu6")
    total = float64_reference(case, weights, x)
    assert (total > 6).any() and (total < 0).any()
    refs = {"weights": weights, "sum": total, "abs_sum": abs_sum(case, weights, x),
            "expected": round_to_bf16(np.clip(total, 0, 6))}
    [check] = comparisons(case, weights, x, refs, refs["expected"])
    assert check.passed
    [check] = comparisons(case, weights, x, refs, round_to_bf16(total))
    outside = (total > 6) | (total < 0)
    assert not check.passed and check.mismatches == int((round_to_bf16(total).astype(np.float64) !=
                                                         round_to_bf16(np.clip(total, 0, 6)).astype(np.float64)).sum())
    assert check.mismatches <= int(outside.sum())
    none = replace(case, geometry=replace(g, activation="none"))
    [check] = comparisons(none, weights, x, refs, round_to_bf16(total))
    assert check.passed


def test_w8i8_single_round_clamps_to_the_activation_range():
    """relu6 on torq's single rounding: the integer models clamp to TFLite's activation range
    (zp + rn(0 / s), zp + rn(6 / s)), and still reproduce the reference kernels' output."""
    from dataclasses import replace

    case, weights, refs = _w8i8_on_torq()
    low, high = tolerance.activation_range("relu6", weights.output_scale, weights.output_zero_point)
    assert (low, high) == (-3, 4)  # zp -3; 6 / 0.9 = 6.67 -> 7
    weights = replace(weights, activation="relu6", activation_range=(low, high))
    case = replace(case, geometry=replace(case.geometry, activation="relu6"))
    multipliers = weights.input_scale * np.asarray(weights.weight_scales) / weights.output_scale
    expected = tolerance.requantized(refs["accumulators"], multipliers, -1, -3, (low, high))[0]
    assert expected.min() == low and expected.max() == high
    single, _ = single_round_expected(case, weights, {**refs, "expected": expected})
    assert single.min() >= low and single.max() <= high
    with pytest.raises(RuntimeError, match="differs from the TFLite reference"):  # the unclamped reference
        single_round_expected(case, weights, refs)


def test_where_the_bias_may_be_added_separately_one_rounding_is_accepted_too():
    """torq 2.3.0 ran `conv_tflite_f32_w76_h1_f1_k4_c1_r1_s1x5_pvalid`, whose geometry the profile
    says gets a separate bf16 bias add, with one rounding: every output element was bf16(S),
    and at four of 15 that value is outside the separate add's values. Those four elements (S,
    the bias-free S0, the bias 0.25390625): one rounding passes, the separate add's own value
    passes, a value a step beyond both fails."""
    from pipeline.checks.reference import round_to_bf16

    geometry = Geometry(1, (76,), (4,), (5,), 1, 1, "valid")
    case = Case(geometry, "tflite", "f32", target="torq")
    assert tolerance.padded_space_to_depth(geometry, "tflite")
    s0 = np.array([-0.4479065, -0.2963142, -0.2058144, -0.2952576]).reshape(1, 4, 1)
    bias = np.array([0.25390625])
    s = s0 + bias
    abs_sum = np.abs(s0) + 0.2
    once = round_to_bf16(s).astype(np.float64)
    separately = round_to_bf16(round_to_bf16(s0).astype(np.float64) + bias).astype(np.float64)
    assert (once != separately).all()  # the two implementations' values differ at each

    def check(actual):
        return verify_module._bf16_check("bf16", case, s, abs_sum, bias, round_to_bf16(actual), PROFILES["torq"], s0)

    assert check(once).passed and check(separately).passed
    beyond = np.where(separately > once, once - 2 * tolerance.bf16_ulp(once), once + 2 * tolerance.bf16_ulp(once))
    result = check(beyond)
    assert not result.passed and result.mismatches == 4


def test_a_completed_run_is_taken_from_the_store_only_within_its_limit(tmp_path):
    """A run the store keeps is that run's output again, with its log saying so; asked under a
    limit shorter than the run took, it is not taken (it runs again, to be cut there)."""
    import ml_dtypes

    from pipeline.core.store import Store, key_of

    store, key, log = Store(tmp_path / "store"), key_of({"stage": "run", "module": "m"}), tmp_path / "run.log"
    assert verify_module._stored_run(store, key, 60.0, log) is None and not log.exists()
    actual = np.array([[1.5, -0.25]], dtype=ml_dtypes.bfloat16)
    verify_module._keep_run(store, key, actual, 3.2, tmp_path / "model.vmfb")
    assert verify_module._stored_run(store, key, 3.0, log) is None and not log.exists()  # took longer than 3 s
    again = verify_module._stored_run(store, key, 3.2, log)
    assert again.dtype == actual.dtype and again.tobytes() == actual.tobytes()
    assert log.read_text().startswith("# taken from the store") and "completed in 3.2 s" in log.read_text()
    assert verify_module._stored_run(store, key_of({"stage": "run", "module": "other"}), 60.0, log) is None
