"""The wrong answer explained: which plausible mis-lowering a failing module's output matches.

For a case that failed at verify with wrong numbers (every element finite; a non-finite output
is its own bucket), the module's output y is compared with the outputs of a family of
mis-lowered convolutions, each computed by the float64 reference conv (reference.conv_nchw) on
the operands the verdict's reference is computed from: the model's weights and input (f32),
its dequantized weights (w8if32), its bf16 operands (onnx bf16), the bf16-rounded operands as
the target holds them (an f32 model the compiler runs in bf16), or the stored integers,
x - zp_in, and the int32 bias (w8i8).

Derivation. Were the compiler to implement the mis-lowered conv C' correctly, its output would
be C' computed in f32 (or rounded to bf16, or requantized to int8): it would pass the verdict's
own check against C', with the bound the check derives for C' from C''s own operands (its S',
sum |p'| and K'; pipeline/checks/tolerance.py). So a candidate matches when the verdict's own
comparisons (verify.comparisons, passed in as `passes`) all pass with C' in place of the true
conv: the same bound objects, the same false-alarm rate per element, nothing loosened. Two
limits: w8if32 is judged on its float path only (the hybrid path's bound is relative to
TFLite's output, which no model gives for C': its oracle output is NaN, which that path never
matches); w8i8 needs an integer model that reproduces the verdict's reference bit for bit (the
TFLite double rounding of the accumulators: a model that requantizes twice has none), else only
"output unwritten" can be named. A candidate equal to the true conv (a zero bias dropped) can
never match an output the verdict failed.

A candidate is first tried on the output's first few positions along its first spatial axis
(the same check on those elements; as each element's check is its own, failing there fails the
whole; the tensor test on them is derived alike), then on the whole output.

A mis-lowered module still writes its declared output: a candidate is its index map evaluated
at the output's positions (window start i x stride - pad_before per axis), the positions past the
input reading zeros of the padding; where that map would read past the padded input (the
candidate's own output is smaller than the module's) it cannot match.

Candidates, in the order they are tried (the first that matches is named; CANDIDATES):
- dilation ignored (every axis; per axis too where two are dilated);
- stride ignored, per axis (H, W; a Conv1D's axis is W, as in the case id);
- H and W swapped (Conv2D): the kernel's spatial axes, or stride, dilation and padding;
- kernel flipped (every spatial axis; per axis where both have more than one tap);
- bias dropped; bias doubled;
- padding shifted by one, per axis: one pad more before (one less after), or one more after;
- groups ignored (groups > 1): every output channel reads the first group's input channels, or
  the kernel is repeated over the groups (a dense conv);
- output channels permuted: each output channel of y matched to the reference channel nearest
  it (max abs difference); tried where that is a permutation other than the identity;
- zero point ignored (w8i8): the input's (x taken as stored), the output's (taken as 0), both;
- the fused activation dropped (the plain conv), or applied to the bias instead of the sum (the
  plain conv with bias act(b)), or relu6's upper clamp dropped (relu);
- output unwritten: none of the above matched and y is all zeros, or one constant.
Else "none matched".
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator

import numpy as np

from pipeline.checks import oracle, tolerance
from pipeline.checks.reference import activate, conv_nchw, round_to_bf16, to_channels_first, to_channels_last
from pipeline.space.cases import Case
from pipeline.space.geometry import Geometry

NONE = "none matched"
AXES = {1: ("W",), 2: ("H", "W")}
CANDIDATES = ("dilation ignored", "dilation ignored (H)", "dilation ignored (W)", "stride ignored (H)",
              "stride ignored (W)", "H and W swapped (kernel)", "H and W swapped (stride, dilation, padding)",
              "kernel flipped", "kernel flipped (H)", "kernel flipped (W)", "bias dropped", "bias doubled",
              "padding shifted by one (H, one more before)", "padding shifted by one (H, one more after)",
              "padding shifted by one (W, one more before)", "padding shifted by one (W, one more after)",
              "groups ignored (first group's input channels)", "groups ignored (kernel repeated over the groups)",
              "output channels permuted", "input zero point ignored", "output zero point ignored",
              "input and output zero points ignored", "fused activation dropped",
              "fused activation applied to the bias, not the sum", "relu6 clamped as relu",
              "output unwritten (all zeros)", "output unwritten (constant)")


@dataclass(frozen=True)
class Conv:
    """One convolution in float64, channels first: its operands and its index map."""

    x: np.ndarray  # (N, C, *spatial)
    kernel: np.ndarray  # (O, C / groups, *K)
    bias: np.ndarray  # (O,)
    pads: tuple  # (before, after) per spatial axis; negative: that many input elements left out
    stride: tuple
    dilation: tuple
    groups: int
    order: np.ndarray | None = None  # the output channels' order (a permutation), None: as stored
    input_zero_point: int = 0  # w8i8: subtracted from x already
    output_zero_point: int = 0  # w8i8: added after requantization
    activation: str = "none"  # the fused activation applied after the sum (Geometry.activation)

    @property
    def rank(self) -> int:
        return len(self.pads)


def _set(values: tuple, axis: int, value) -> tuple:
    return tuple(value if i == axis else v for i, v in enumerate(values))


def _padded(x: np.ndarray, pads: tuple) -> np.ndarray:
    x = np.pad(x, [(0, 0), (0, 0), *((max(b, 0), max(a, 0)) for b, a in pads)])
    cut = tuple(slice(max(-b, 0), x.shape[2 + i] - max(-a, 0)) for i, (b, a) in enumerate(pads))
    return x[(slice(None), slice(None), *cut)]


def evaluate(conv: Conv, out_spatial: tuple) -> tuple[np.ndarray, Geometry] | None:
    """The bias-free conv at the output positions `out_spatial` (NCHW, float64; only the input
    they read is convolved), and the geometry whose reduction K is the candidate's; None where it
    would read past the padded input."""
    x = _padded(conv.x, conv.pads)
    window = [(k - 1) * d + 1 for k, d in zip(conv.kernel.shape[2:], conv.dilation)]
    needed = [(o - 1) * s + w for o, s, w in zip(out_spatial, conv.stride, window)]
    if x.shape[1] != conv.kernel.shape[1] * conv.groups or any(n > size for n, size in zip(needed, x.shape[2:])):
        return None
    x = x[(slice(None), slice(None), *(slice(0, n) for n in needed))]
    g = Geometry(conv.rank, x.shape[2:], conv.kernel.shape[2:], conv.stride, x.shape[1], conv.kernel.shape[0],
                 "valid", conv.dilation, conv.groups, x.shape[0])
    return conv_nchw(x, conv.kernel, np.zeros(conv.kernel.shape[0]), g), g


# --- the candidates ---------------------------------------------------------------------------------

def _dilation(conv: Conv) -> Iterator[tuple[str, Conv]]:
    one = (1,) * conv.rank
    if conv.dilation != one:
        yield "dilation ignored", replace(conv, dilation=one)
    if sum(d > 1 for d in conv.dilation) > 1:
        for axis, name in enumerate(AXES[conv.rank]):
            yield f"dilation ignored ({name})", replace(conv, dilation=_set(conv.dilation, axis, 1))


def _stride(conv: Conv) -> Iterator[tuple[str, Conv]]:
    for axis, name in enumerate(AXES[conv.rank]):
        if conv.stride[axis] > 1:
            yield f"stride ignored ({name})", replace(conv, stride=_set(conv.stride, axis, 1))


def _swapped(conv: Conv) -> Iterator[tuple[str, Conv]]:
    if conv.rank != 2:
        return
    transposed = np.swapaxes(conv.kernel, 2, 3)
    if transposed.shape != conv.kernel.shape or not np.array_equal(transposed, conv.kernel):
        yield "H and W swapped (kernel)", replace(conv, kernel=transposed)
    attributes = (conv.stride, conv.dilation, conv.pads)
    if any(a[0] != a[1] for a in attributes):
        yield "H and W swapped (stride, dilation, padding)", replace(
            conv, stride=conv.stride[::-1], dilation=conv.dilation[::-1], pads=conv.pads[::-1])


def _flipped(conv: Conv) -> Iterator[tuple[str, Conv]]:
    spatial = tuple(range(2, conv.kernel.ndim))
    yield "kernel flipped", replace(conv, kernel=np.flip(conv.kernel, spatial))
    if conv.rank == 2 and min(conv.kernel.shape[2:]) > 1:
        for axis, name in zip(spatial, AXES[2]):
            yield f"kernel flipped ({name})", replace(conv, kernel=np.flip(conv.kernel, axis))


def _bias(conv: Conv) -> Iterator[tuple[str, Conv]]:
    if conv.bias.any():
        yield "bias dropped", replace(conv, bias=np.zeros_like(conv.bias))
        yield "bias doubled", replace(conv, bias=2.0 * conv.bias)


def _padding(conv: Conv) -> Iterator[tuple[str, Conv]]:
    for axis, name in enumerate(AXES[conv.rank]):
        before, after = conv.pads[axis]
        yield f"padding shifted by one ({name}, one more before)", replace(
            conv, pads=_set(conv.pads, axis, (before + 1, after - 1)))
        yield f"padding shifted by one ({name}, one more after)", replace(
            conv, pads=_set(conv.pads, axis, (before - 1, after + 1)))


def _groups(conv: Conv) -> Iterator[tuple[str, Conv]]:
    if conv.groups == 1:
        return
    per_group = conv.kernel.shape[1]
    yield "groups ignored (first group's input channels)", replace(conv, x=conv.x[:, :per_group], groups=1)
    tiled = np.tile(conv.kernel, (1, conv.groups) + (1,) * conv.rank)
    yield "groups ignored (kernel repeated over the groups)", replace(conv, kernel=tiled, groups=1)


def _zero_points(conv: Conv) -> Iterator[tuple[str, Conv]]:
    zp_in, zp_out = conv.input_zero_point, conv.output_zero_point
    no_input = replace(conv, x=conv.x + zp_in, input_zero_point=0)
    if zp_in:
        yield "input zero point ignored", no_input
    if zp_out:
        yield "output zero point ignored", replace(conv, output_zero_point=0)
    if zp_in and zp_out:
        yield "input and output zero points ignored", replace(no_input, output_zero_point=0)


def permuted(conv: Conv, reference: np.ndarray, actual: np.ndarray) -> Conv | None:
    """The conv with its output channels in the order that matches each of the output's channels
    (NCHW) to its nearest reference channel (max abs difference); None unless that is a
    permutation other than the identity."""
    channels = actual.shape[1]
    a = np.moveaxis(actual, 1, 0).reshape(channels, -1)
    r = np.moveaxis(reference, 1, 0).reshape(channels, -1)
    order = np.array([int(np.argmin(np.abs(r - row).max(axis=1))) for row in a])
    if len(set(order.tolist())) != channels or (order == np.arange(channels)).all():
        return None
    return replace(conv, kernel=conv.kernel[order], bias=conv.bias[order], order=order)


def _activation(conv: Conv) -> Iterator[tuple[str, Conv]]:
    if conv.activation != "none":
        yield "fused activation dropped", replace(conv, activation="none")
        yield "fused activation applied to the bias, not the sum", \
            replace(conv, bias=activate(conv.bias, conv.activation), activation="none")
    if conv.activation == "relu6":
        yield "relu6 clamped as relu", replace(conv, activation="relu")


def candidates(conv: Conv, reference: np.ndarray, actual: np.ndarray) -> Iterator[tuple[str, Conv]]:
    """(name, mis-lowered conv) in CANDIDATES' order (reference and actual NCHW)."""
    for family in (_dilation, _stride, _swapped, _flipped, _bias, _padding, _groups):
        yield from family(conv)
    shuffled = permuted(conv, reference, actual)
    if shuffled is not None:
        yield "output channels permuted", shuffled
    yield from _zero_points(conv)
    yield from _activation(conv)


# --- the verdict's operands, and a candidate in the check's terms ----------------------------------

def _nchw(case: Case, a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return to_channels_first(a) if case.backend == "tflite" else a


def _model_layout(case: Case, a: np.ndarray) -> np.ndarray:
    return to_channels_last(a) if case.backend == "tflite" else a


def _channel_axis(case: Case) -> int:
    return -1 if case.backend == "tflite" else 1


def verdict_operands(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict, profile) -> Conv:
    """The operands the verdict's reference is the conv of (see the module's docstring)."""
    g = case.geometry
    kernel, bias, x64 = weights.kernel, weights.bias, np.asarray(x, dtype=np.float64)
    zp_in = zp_out = 0
    if "bf16" in refs:  # an f32 model the compiler runs in bf16
        converts = profile is None or profile.converts_weights
        kernel = oracle.bf16_operands(weights).kernel if converts else weights.kernel
        bias, x64 = refs["bf16_bias"], round_to_bf16(x64).astype(np.float64)
    elif case.flavor == "w8i8":
        kernel, bias = weights.kernel_int.astype(np.float64), weights.bias_int.astype(np.float64)
        zp_in, zp_out = weights.input_zero_point, weights.output_zero_point
        x64 = x64 - zp_in
    return Conv(_nchw(case, x64), np.asarray(kernel, dtype=np.float64), np.asarray(bias, dtype=np.float64),
                g.pads, g.stride, g.dilation, g.groups, input_zero_point=zp_in, output_zero_point=zp_out,
                activation=g.activation)


def _int_refs(case: Case, weights: oracle.ModelWeights, refs: dict, conv: Conv, total: np.ndarray):
    """w8i8: the candidate's accumulators requantized as TFLite does, and the weights as held."""
    scales = np.asarray(weights.weight_scales, dtype=np.float64)
    scales = scales if conv.order is None else scales[conv.order]
    acc = np.rint(total).astype(np.int64)
    clamp = weights.activation_range if conv.activation == weights.activation else \
        tolerance.activation_range(conv.activation, weights.output_scale, weights.output_zero_point)
    double, _ = tolerance.requantized(acc, weights.input_scale * scales / weights.output_scale,
                                      _channel_axis(case), conv.output_zero_point, clamp)
    out = {"expected": double, **({"accumulators": acc} if "accumulators" in refs else {})}
    held = replace(weights, kernel_int=conv.kernel.astype(np.int64), bias_int=conv.bias.astype(np.int64),
                   weight_scales=tuple(scales), output_zero_point=conv.output_zero_point,
                   activation=conv.activation, activation_range=clamp)
    return held, out


def candidate_refs(case: Case, weights: oracle.ModelWeights, refs: dict, conv: Conv, out_spatial: tuple):
    """(case, weights, refs) that the verdict's check reads, with `conv` in place of the true
    conv; None where the candidate cannot fill the module's output."""
    made = evaluate(conv, out_spatial)
    if made is None:
        return None
    bias_free, g = made
    total = _model_layout(case, bias_free + conv.bias.reshape(1, -1, *(1,) * conv.rank))
    case = replace(case, geometry=replace(g, activation=conv.activation))
    if case.flavor == "w8i8":
        held, out = _int_refs(case, weights, refs, conv, total)
        return case, held, out
    magnitudes = replace(conv, x=np.abs(conv.x), kernel=np.abs(conv.kernel))
    abs_sum = _model_layout(case, evaluate(magnitudes, out_spatial)[0])
    held = replace(weights, kernel=conv.kernel, bias=conv.bias)
    if "bf16" in refs:
        out = {"bf16": round_to_bf16(activate(total, conv.activation)), "bf16_sum": total, "bf16_abs_sum": abs_sum,
               "bf16_bias": conv.bias}
        if "bias_free" in refs:
            out["bias_free"] = _model_layout(case, bias_free)
        return case, held, out
    key = {"bf16": "sum", "w8if32": "exact"}.get(case.flavor, "float64")
    out = {key: total, "abs_sum": abs_sum}
    if case.flavor == "w8if32":  # the float path only: no hybrid kernel's output for a candidate
        out["expected"] = np.full(total.shape, np.nan)
    return case, held, out


def faithful(case: Case, weights: oracle.ModelWeights, refs: dict, conv: Conv, out_spatial: tuple) -> bool:
    """Whether the candidates' model reproduces the verdict's reference from the true conv
    (w8i8: the integer model must give TFLite's output bit for bit; the float flavors' is the
    reference's own computation)."""
    if case.flavor != "w8i8":
        return True
    if weights.kernel_int is None or weights.bias_int is None:
        return False
    _, _, out = candidate_refs(case, weights, refs, conv, out_spatial)
    return bool(np.array_equal(out["expected"], refs["expected"]))


def unwritten(actual: np.ndarray) -> str | None:
    a = np.asarray(actual, dtype=np.float64)
    if not a.any():
        return "output unwritten (all zeros)"
    if a.size > 1 and (a == a.flat[0]).all():
        return "output unwritten (constant)"
    return None


Passes = Callable[[Case, oracle.ModelWeights, dict, np.ndarray], bool]
PROBE = 4  # output positions along the first spatial axis a candidate is tried on first


def _first(case: Case, a: np.ndarray, positions: int) -> np.ndarray:
    """The output's first `positions` along its first spatial axis, in the model's layout."""
    axis = 1 if case.backend == "tflite" else 2
    return a[(slice(None),) * axis + (slice(0, positions),)]


def matches(case: Case, weights: oracle.ModelWeights, refs: dict, conv: Conv, actual: np.ndarray,
            passes: Passes) -> bool:
    """Whether the output passes the verdict's check against the candidate: first on its first
    PROBE positions along one axis (each element's check is its own: failing there fails the
    whole), then on the whole output."""
    y = _nchw(case, actual)
    out_spatial = y.shape[2:]
    for size in (min(PROBE, out_spatial[0]), out_spatial[0]):
        made = candidate_refs(case, weights, refs, conv, (size, *out_spatial[1:]))
        if made is None or not passes(*made, _first(case, actual, size)):
            return False
    return True


def explain(case: Case, weights: oracle.ModelWeights, x: np.ndarray, refs: dict, actual: np.ndarray, profile,
            passes: Passes) -> str:
    """The first of CANDIDATES whose conv the output matches under the verdict's own check
    (`passes(case, weights, refs, actual)`: every comparison passes), or NONE."""
    expected = refs.get("bf16", refs["expected"])
    if actual.shape != expected.shape:
        return NONE
    y = _nchw(case, actual)
    base = verdict_operands(case, weights, x, refs, profile)
    if faithful(case, weights, refs, base, y.shape[2:]):
        for name, conv in candidates(base, _nchw(case, expected), y):
            if matches(case, weights, refs, conv, actual, passes):
                return name
    return unwritten(actual) or NONE
