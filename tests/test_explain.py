"""The wrong answer explained (pipeline/checks/explain.py): real arrays from the real float64
reference, mis-lowered in each known way, are named; the correct output and random garbage are
not. One case through the real pipeline: a compiler wrapper around the real iree-compile that
drops the conv's bias; the case fails verify and its result.json says "bias dropped"."""
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from helpers import clean_env, doit, results, rewriting_compiler, write_spec, write_wrapper
from pipeline.checks import explain, tolerance
from pipeline.checks.oracle import ModelWeights, abs_sum, accumulators, bf16_sum, float64_reference
from pipeline.checks.reference import conv_nchw, round_to_bf16, to_channels_first, to_channels_last
from pipeline.checks.verify import comparisons, explanation
from pipeline.space.cases import Case
from pipeline.space.geometry import Geometry
from pipeline.targets.profiles import load_profiles

PROFILES = load_profiles()
LLVM = PROFILES["llvm-cpu"]
# Conv2D, padded 'same' (one pad on every side), H stride 2, W dilation 2, two groups
G = Geometry(2, (9, 12), (3, 3), (2, 1), 4, 6, "same", dilation=(1, 2), groups=2)
# the torq example's shape: a dilated depthwise Conv1D, one output position
# square, stride 1: H and W's attributes swapped still fill the output
SQUARE = Geometry(2, (12, 12), (3, 3), (1, 1), 4, 6, "same", dilation=(1, 2), groups=2)
CONV1D = Geometry(1, (10,), (4,), (1,), 2, 2, "valid", dilation=(3,), groups=2)


def _f32_case(geometry=G, seed=0):
    rng = np.random.default_rng(seed)
    case = Case(geometry, "onnx", "f32")
    weights = ModelWeights(rng.uniform(-1, 1, (geometry.c_out, geometry.c_in // geometry.groups, *geometry.kernel)),
                           rng.uniform(-1, 1, geometry.c_out), False)
    x = rng.uniform(-1, 1, (geometry.batch, geometry.c_in, *geometry.spatial)).astype(np.float32)
    exact = float64_reference(case, weights, x)
    refs = {"weights": weights, "expected": exact.astype(np.float32), "float64": exact,
            "abs_sum": abs_sum(case, weights, x)}
    return case, weights, x, refs


def conv_at(x, kernel, bias, pads, stride, dilation, groups, out):
    """The float64 conv of x padded by `pads` (non-negative), at the first `out` positions."""
    x = np.pad(np.asarray(x, dtype=np.float64), [(0, 0), (0, 0), *pads])
    g = Geometry(len(pads), x.shape[2:], kernel.shape[2:], stride, x.shape[1], kernel.shape[0], "valid",
                 dilation, groups)
    y = conv_nchw(x, kernel, bias, g)
    return y[(slice(None), slice(None), *(slice(0, o) for o in out))]


def _named(case, weights, x, refs, actual, profile=LLVM):
    return explanation(case, weights, x, refs, actual, profile)


def _misses(case, weights, x, refs, actual, profile=LLVM) -> bool:
    return not all(c.passed for c in comparisons(case, weights, x, refs, actual, profile))


def _mislowered(kind: str, weights, x, g=G):
    """The f32 output of a conv mis-lowered in one way, computed here from the geometry."""
    k, b, out = weights.kernel, weights.bias, g.out_spatial
    pads, stride, dilation = g.pads, g.stride, g.dilation
    if kind == "dilation ignored":
        return conv_at(x, k, b, pads, stride, (1, 1), g.groups, out)
    if kind == "stride ignored (H)":
        return conv_at(x, k, b, pads, (1, 1), dilation, g.groups, out)
    if kind == "H and W swapped (stride, dilation, padding)":
        return conv_at(x, k, b, pads[::-1], stride[::-1], dilation[::-1], g.groups, out)
    if kind == "kernel flipped":
        return conv_at(x, k[:, :, ::-1, ::-1], b, pads, stride, dilation, g.groups, out)
    if kind == "kernel flipped (W)":
        return conv_at(x, k[:, :, :, ::-1], b, pads, stride, dilation, g.groups, out)
    if kind == "bias dropped":
        return conv_at(x, k, 0 * b, pads, stride, dilation, g.groups, out)
    if kind == "bias doubled":
        return conv_at(x, k, 2 * b, pads, stride, dilation, g.groups, out)
    if kind == "padding shifted by one (W, one more before)":
        (h, (before, after)) = pads  # W's one pad more before, one less after
        return conv_at(x, k, b, (h, (before + 1, after - 1)), stride, dilation, g.groups, out)
    if kind == "groups ignored (first group's input channels)":
        return conv_at(x[:, :k.shape[1]], k, b, pads, stride, dilation, 1, out)
    if kind == "output channels permuted":
        return conv_at(x, k, b, pads, stride, dilation, g.groups, out)[:, [1, 0, 2, 3, 5, 4]]
    raise ValueError(kind)


KINDS = ["dilation ignored", "stride ignored (H)", "H and W swapped (stride, dilation, padding)", "kernel flipped",
         "kernel flipped (W)", "bias dropped", "bias doubled", "padding shifted by one (W, one more before)",
         "groups ignored (first group's input channels)", "output channels permuted"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_mis_lowering_of_an_f32_conv_is_named(kind):
    g = SQUARE if kind.startswith("H and W") else G
    case, weights, x, refs = _f32_case(g)
    actual = _mislowered(kind, weights, x, g).astype(np.float32)
    assert _misses(case, weights, x, refs, actual)
    assert _named(case, weights, x, refs, actual) == kind


def test_the_correct_output_and_random_garbage_are_not_named():
    case, weights, x, refs = _f32_case()
    assert _named(case, weights, x, refs, refs["expected"]) == explain.NONE
    garbage = np.random.default_rng(7).uniform(-3, 3, refs["expected"].shape).astype(np.float32)
    assert _misses(case, weights, x, refs, garbage) and _named(case, weights, x, refs, garbage) == explain.NONE


@pytest.mark.parametrize("element", [5, -1])  # in the first rows (the probe), in the last
def test_a_candidate_off_by_more_than_its_bound_is_not_named(element):
    """One element of the bias-dropped output moved by 1e-3 (far above its f32 bound): no match."""
    case, weights, x, refs = _f32_case()
    actual = _mislowered("bias dropped", weights, x).astype(np.float32)
    actual.flat[element] += np.float32(1e-3)
    assert _named(case, weights, x, refs, actual) == explain.NONE


def test_an_unwritten_output_is_named_and_a_non_finite_one_is_not_explained():
    case, weights, x, refs = _f32_case()
    zeros = np.zeros_like(refs["expected"])
    assert _named(case, weights, x, refs, zeros) == "output unwritten (all zeros)"
    assert _named(case, weights, x, refs, np.full_like(zeros, 0.25)) == "output unwritten (constant)"
    nan = refs["expected"].copy()
    nan.flat[0] = np.nan
    assert _named(case, weights, x, refs, nan) is None


def test_the_torq_example_dilated_depthwise_conv1d_in_bf16_is_dilation_ignored():
    """conv_onnx_bf16_w10_h1_f2_k4_c2_r1_pvalid_d1x3_dw1's shape: the dilation-1 conv's first output
    position, rounded to bf16, is named; the bf16 check is the verdict's (one rounding of S')."""
    rng = np.random.default_rng(1)
    case = Case(CONV1D, "onnx", "bf16")
    bf = lambda a: round_to_bf16(a).astype(np.float64)  # noqa: E731
    weights = ModelWeights(bf(rng.uniform(-1, 1, (2, 1, 4))), bf(rng.uniform(-1, 1, 2)), False)
    x = round_to_bf16(rng.uniform(-1, 1, (1, 2, 10)))
    total = bf16_sum(case, weights, x)
    refs = {"weights": weights, "sum": total, "expected": round_to_bf16(total),
            "abs_sum": abs_sum(case, weights, x.astype(np.float64))}
    actual = round_to_bf16(conv_at(x, weights.kernel, weights.bias, ((0, 0),), (1,), (1,), 2, (1,)))
    assert actual.shape == (1, 2, 1) and _misses(case, weights, x, refs, actual)
    assert _named(case, weights, x, refs, actual) == "dilation ignored"
    assert _named(case, weights, x, refs, refs["expected"]) == explain.NONE


def test_a_tflite_conv_in_its_own_layout_stride_ignored():
    """NHWC in and out: the candidate is computed channels first and compared in the model's layout."""
    g = Geometry(2, (10, 9), (3, 2), (1, 3), 3, 5, "valid")
    rng = np.random.default_rng(2)
    case = Case(g, "tflite", "f32")
    weights = ModelWeights(rng.uniform(-1, 1, (5, 3, 3, 2)), rng.uniform(-1, 1, 5), False)
    x = rng.uniform(-1, 1, (1, 10, 9, 3)).astype(np.float32)
    exact = float64_reference(case, weights, x)
    refs = {"weights": weights, "expected": exact.astype(np.float32), "float64": exact,
            "abs_sum": abs_sum(case, weights, x)}
    wrong = conv_at(to_channels_first(x), weights.kernel, weights.bias, g.pads, (1, 1), (1, 1), 1, g.out_spatial)
    actual = to_channels_last(wrong).astype(np.float32)
    assert _named(case, weights, x, refs, actual) == "stride ignored (W)"


def test_an_f32_model_run_in_bf16_on_torq_bias_dropped():
    """The converted check's operands (input, weights and bias rounded to bf16): bias dropped is named."""
    g = Geometry(2, (6, 7), (3, 3), (1, 1), 3, 4, "valid")
    case, weights, x, _ = _f32_case(g, seed=4)
    torq = PROFILES["torq"]
    held = replace(weights, kernel=round_to_bf16(weights.kernel).astype(np.float64),
                   bias=round_to_bf16(weights.bias).astype(np.float64))
    xb = round_to_bf16(x.astype(np.float64)).astype(np.float64)
    total = float64_reference(case, held, xb)
    refs = {"weights": weights, "expected": float64_reference(case, weights, x).astype(np.float32),
            "float64": float64_reference(case, weights, x), "abs_sum": abs_sum(case, weights, x),
            "bf16_sum": total, "bf16": round_to_bf16(total), "bf16_abs_sum": abs_sum(case, held, xb),
            "bf16_bias": held.bias}
    actual = round_to_bf16(total - held.bias.reshape(1, -1, 1, 1))
    assert _misses(case, weights, x, refs, actual, torq)
    assert _named(case, weights, x, refs, actual, torq) == "bias dropped"
    assert _named(case, weights, x, refs, refs["bf16"], torq) == explain.NONE



@pytest.mark.parametrize("kind", ["fused activation dropped", "fused activation applied to the bias, not the sum",
                                  "relu6 clamped as relu"])
def test_an_activation_mis_lowered_in_bf16_on_torq_is_named(kind):
    """relu6 on an f32 model run in bf16, as torq 2.3.0 was seen to do it: the plain conv (TFLite),
    the plain conv with the activation applied to its bias (ONNX), relu without its upper clamp."""
    from pipeline.checks.reference import activate

    g = Geometry(2, (6, 7), (3, 3), (1, 1), 3, 4, "valid", activation="relu6")
    case, weights, x, _ = _f32_case(g, seed=6)
    weights = replace(weights, kernel=weights.kernel * 4, bias=weights.bias * 3, activation="relu6")
    torq = PROFILES["torq"]
    held = replace(weights, kernel=round_to_bf16(weights.kernel).astype(np.float64),
                   bias=round_to_bf16(weights.bias).astype(np.float64))
    xb = round_to_bf16(x.astype(np.float64)).astype(np.float64)
    total = float64_reference(case, held, xb)
    assert (total < 0).any() and (total > 6).any() and (held.bias < 0).any()
    refs = {"weights": weights, "float64": float64_reference(case, weights, x), "abs_sum": abs_sum(case, weights, x),
            "bf16_sum": total, "bf16": round_to_bf16(activate(total, "relu6")), "bf16_abs_sum": abs_sum(case, held, xb),
            "bf16_bias": held.bias}
    refs["expected"] = refs["bf16"]
    bias = held.bias.reshape(1, -1, 1, 1)
    actual = round_to_bf16({"fused activation dropped": total,
                            "fused activation applied to the bias, not the sum": total - bias + activate(bias, "relu6"),
                            "relu6 clamped as relu": activate(total, "relu")}[kind])
    assert _misses(case, weights, x, refs, actual, torq)
    assert _named(case, weights, x, refs, actual, torq) == kind
    assert _named(case, weights, x, refs, refs["bf16"], torq) == explain.NONE


def _w8i8_case():
    g = Geometry(2, (7, 8), (3, 3), (1, 1), 4, 3, "valid")
    rng = np.random.default_rng(5)
    case = Case(g, "tflite", "w8i8")
    kernel_int = rng.integers(-127, 128, (3, 4, 3, 3))
    scales = (0.004, 0.005, 0.003)
    bias_int = rng.integers(-2000, 2000, 3)
    weights = ModelWeights(kernel_int * np.asarray(scales).reshape(-1, 1, 1, 1), bias_int * 0.02 * np.asarray(scales),
                           True, input_scale=0.02, output_scale=0.05, input_zero_point=-5, output_zero_point=7,
                           weight_scales=scales, kernel_int=kernel_int, bias_int=bias_int)
    x = rng.integers(-128, 128, (1, 7, 8, 4)).astype(np.int8)
    refs = {"weights": weights, "expected": _requantize(accumulators(case, weights, x), weights, 7)}
    return case, weights, x, refs


def _requantize(acc, weights, zero_point):
    multipliers = weights.input_scale * np.asarray(weights.weight_scales) / weights.output_scale
    double, _ = tolerance.requantized(acc, multipliers, -1, zero_point)
    return double


@pytest.mark.parametrize("kind", ["input zero point ignored", "output zero point ignored", "bias doubled"])
def test_int8_mis_lowerings_are_named_bit_exactly(kind):
    case, weights, x, refs = _w8i8_case()
    changed = weights
    if kind == "input zero point ignored":
        changed = replace(weights, input_zero_point=0)
    elif kind == "bias doubled":
        changed = replace(weights, bias_int=2 * weights.bias_int)
    acc = accumulators(case, changed, x)
    actual = _requantize(acc, weights, 0 if kind == "output zero point ignored" else 7)
    assert _misses(case, weights, x, refs, actual)
    assert _named(case, weights, x, refs, actual) == kind
    assert _named(case, weights, x, refs, refs["expected"]) == explain.NONE
    off = actual.copy()
    off.flat[3] = off.flat[3] + 1 if off.flat[3] < 127 else off.flat[3] - 1  # one LSB off the candidate
    assert _named(case, weights, x, refs, off) == explain.NONE


def test_the_candidates_are_tried_in_their_documented_order():
    """Every name explain can give is in CANDIDATES, and the first matching one is named:
    a zero-bias conv's output, dilation ignored, is named dilation (bias dropped is not tried)."""
    case, weights, x, refs = _f32_case()
    base = explain.verdict_operands(case, weights, x, refs, LLVM)
    y = explain._nchw(case, refs["expected"])
    names = [name for name, _ in explain.candidates(base, y, y[:, [1, 0, 2, 3, 4, 5]])]
    assert names == sorted(names, key=explain.CANDIDATES.index)
    assert set(names) >= {"dilation ignored", "stride ignored (H)", "groups ignored (first group's input channels)",
                          "output channels permuted"}


# --- through the real pipeline: a compiler with a hidden bug --------------------------------------

# An iree-compile that drops the bias of the ONNX conv it compiles: onnx.Conv's third operand and
# its type are removed from the imported MLIR, then the real compiler runs on the rewritten copy.
DROP_BIAS = rewriting_compiler("""
    operands = re.compile(r'"onnx\\.Conv"\\((%[\\w#]+), (%[\\w#]+), %[\\w#]+\\)')
    vtensor = r'!torch\\.vtensor<[^>]*>'
    types = re.compile(r'(onnx\\.Conv.*: \\()(' + vtensor + '), (' + vtensor + '), ' + vtensor + r'\\) ->')
    text, count = operands.subn(r'"onnx.Conv"(\\1, \\2)', text)
    text, typed = types.subn(r'\\1\\2, \\3) ->', text)
    count = min(count, typed)
    assert count == 1, "no onnx.Conv with a bias"
""")


@pytest.mark.slow
def test_a_compiler_that_drops_the_bias_is_explained_in_result_json(tmp_path):
    from pipeline.config import Config

    real = Config.from_env(clean_env()).target("llvm-cpu").compiler
    wrapper = write_wrapper(tmp_path / "iree-compile-drops-bias", DROP_BIAS, real)
    spec = write_spec(tmp_path / "spec.json", [{"rank": 2, "spatial": [8, 9], "kernel": [3, 3], "stride": [1, 1],
                                                "c_in": 3, "c_out": 4, "padding": "valid"}])
    build = tmp_path / "build"
    env = clean_env(CONV_SWEEP_BUILD_DIR=build, CONV_SWEEP_INCLUDE=spec, CONV_SWEEP_IREE_COMPILE=wrapper,
                    CONV_SWEEP_TOOL_FILES=wrapper)
    name = "conv_onnx_f32_w9_h8_f4_k3_c3_pvalid"
    run = doit(f"verify:{name}@llvm-cpu", env=env)
    result = results(build)[name]
    assert result["status"] == "fail" and result["stage"] == "verify", (run.stdout[-2000:], run.stderr[-2000:])
    assert result["explanation"] == "bias dropped"
    # and in the bucket's bug report (its case as it is: budget 0)
    report = doit("bugreport", "--budget", "0", f"{name}@llvm-cpu", env=env)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    (written,) = (build / "bugreports" / "llvm-cpu").glob("*/report.md")
    assert "The wrong answer explained: **bias dropped**." in written.read_text()
