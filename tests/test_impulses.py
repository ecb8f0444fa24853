"""Impulse probes of a wrong answer (pipeline/triage/impulses.py): the conv's own map, a map that
reads the input two rows down (in ONNX's and TFLite's layouts), a tap's weight changed, the bias
changed and an output that ignores its input are each told apart, from responses measured by
running a module (here: the float64 conv, as a module would compute it, rounded to the output's
dtype); a tap the output's steps swamp, or a non-finite output, gives no claim. Through the real pipeline: an
iree-compile wrapper that moves the ONNX conv's padding two rows down (not a mis-lowering the
explanation list knows); its bug report says which input positions the module reads instead."""
import json
from dataclasses import replace

import numpy as np
import pytest

from helpers import clean_env, doit, results, rewriting_compiler, write_spec, write_wrapper
from pipeline.checks import explain
from pipeline.checks.reference import round_to_bf16, to_channels_first, to_channels_last
from pipeline.space.cases import Case
from pipeline.space.geometry import Geometry
from pipeline.triage import impulses

# Conv2D 'same' with a 5x5 kernel: two pad rows above and below
G = Geometry(2, (6, 5), (5, 5), (1, 1), 2, 2, "same")


def _conv(seed=0, geometry=G, backend="onnx"):
    rng = np.random.default_rng(seed)
    case = Case(geometry, backend, "f32")
    kernel = rng.uniform(-1, 1, (geometry.c_out, geometry.c_in, *geometry.kernel))
    bias = rng.uniform(-1, 1, geometry.c_out)
    x = np.zeros((geometry.batch, geometry.c_in, *geometry.spatial))
    return case, explain.Conv(x, kernel, bias, geometry.pads, geometry.stride, geometry.dilation, geometry.groups)


def _layout(case, a):
    """An NCHW array in the case's layout (TFLite's channels last)."""
    return to_channels_last(a) if case.backend == "tflite" else a


def _module(case, conv: explain.Conv, dtype="float32", constant=None):
    """A module that computes `conv` (float64, then rounded once to its output dtype) in the
    case's layout; or, given a `constant`, that writes it to every output whatever its input."""
    def run(x):
        made = explain.evaluate(replace(conv, x=to_channels_first(x) if case.backend == "tflite" else x),
                                case.geometry.out_spatial)[0]
        y = _layout(case, made + conv.bias.reshape(1, -1, 1, 1) if constant is None else np.full(made.shape, constant))
        return round_to_bf16(y) if dtype == "bfloat16" else y.astype(np.float32)
    return run


def _findings(case, conv, module_conv, dtype="float32", constant=None):
    nchw_out = (1, conv.kernel.shape[0], *case.geometry.out_spatial)
    in_shape, out_shape = _layout(case, conv.x).shape, _layout(case, np.zeros(nchw_out)).shape
    A, y0, value = impulses.measure(_module(case, module_conv, dtype, constant), in_shape, conv.kernel)
    T = impulses.true_map(case, conv, in_shape, out_shape)
    bias = _layout(case, np.broadcast_to(conv.bias.reshape(1, -1, 1, 1), nchw_out)).reshape(-1)
    bias = round_to_bf16(bias) if dtype == "bfloat16" else bias.astype(np.float32).astype(np.float64)
    return impulses.compare(case, A, y0, T, bias, value, dtype, in_shape, out_shape)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_conv_itself_agrees_and_a_padding_moved_two_rows_reads_two_rows_down(dtype):
    case, conv = _conv()
    assert _findings(case, conv, conv, dtype)["finding"] == "agrees with the conv"
    moved = replace(conv, pads=((0, 4), (2, 2)))  # the padding's two top rows moved below
    found = _findings(case, conv, moved, dtype)
    assert found["finding"] == "wrong input positions" and found["displacement"] == [0, 0, 2, 0]
    assert found["example"]["output"] == [0, 0, 0, 0]
    # every tap the conv applies at output 0 is found two rows down, with its own weight
    assert all(t["module_reads"] == [t["conv_reads"][0], t["conv_reads"][1], t["conv_reads"][2] + 2,
                                     t["conv_reads"][3]] for t in found["example"]["taps"])
    text = "\n".join(impulses.lines(found))
    assert "**wrong input positions**" in text and "read H +2 from where the conv reads it" in text


def test_in_tflite_s_layout_the_positions_are_channels_last():
    case, conv = _conv(3, backend="tflite")
    assert _findings(case, conv, conv)["finding"] == "agrees with the conv"
    found = _findings(case, conv, replace(conv, pads=((0, 4), (2, 2))))
    assert found["layout"] == "NHWC" and found["displacement"] == [0, 2, 0, 0]
    assert "read H +2 from where the conv reads it" in "\n".join(impulses.lines(found))


def test_a_changed_weight_and_a_changed_bias_are_told_apart():
    case, conv = _conv(1)
    kernel = conv.kernel.copy()
    kernel[1, 0, 2, 3] *= 1.01  # one tap off by 1%: far more than an f32 step
    found = _findings(case, conv, replace(conv, kernel=kernel))
    assert found["finding"] == "wrong weights" and found["example"]["output"][1] == 1
    found = _findings(case, conv, replace(conv, bias=conv.bias + [0.0, 0.01]))
    assert found["finding"] == "wrong bias" and found["example"]["output"][1] == 1
    assert "**wrong bias**" in "\n".join(impulses.lines(found))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_output_that_ignores_its_input_is_said_so_and_a_swamped_tap_or_a_non_finite_one_is_not_claimed(dtype):
    """torq 2.3.0's `conv_onnx_bf16_w2_h1_f1_k1_c1_khw1x2_s2x2_pvalid` writes 6.06e32 whatever its
    input: no impulse moves it, bit for bit. An output whose steps swamp every tap times the
    largest impulse gives no claim at all: neither "agrees" nor a wrong tap."""
    case, conv = _conv(2)
    found = _findings(case, conv, conv, dtype, constant=6.06e32)
    assert found["finding"] == "ignores its input" and found["wrong_outputs"] == found["outputs"]
    assert "**the output ignores its input**" in "\n".join(impulses.lines(found))
    A = np.zeros((2, 3))
    A[0, 0] = 1e-30  # moved, but by far less than the output's steps at 3e38 over a 2^100 impulse
    T = np.array([[0.5, 0.0, 0.0], [0.0, 0.25, 0.0]])
    found = impulses.compare(case, A, np.array([3e38, 0.0]), T, np.zeros(2), 2.0 ** 100, dtype, (1, 1, 1, 3),
                             (1, 2, 1, 1))
    assert found["finding"] == "unresolved" and found["unresolved_taps"] == 1
    A[1, 1] = np.nan  # an impulse at input 1 gives a NaN: no claim, whatever the rest says
    found = impulses.compare(case, A, np.zeros(2), T, np.zeros(2), 1.0, dtype, (1, 1, 1, 3), (1, 2, 1, 1))
    assert found["finding"] == "non-finite" and found["input"] == [0, 0, 0, 1]
    found = impulses.compare(case, T, np.array([np.inf, 0.0]), T, np.zeros(2), 1.0, dtype, (1, 1, 1, 3), (1, 2, 1, 1))
    assert found["finding"] == "non-finite" and found["input"] is None


def test_only_a_module_linear_in_its_input_is_probed():
    case, _ = _conv()
    assert impulses.not_probed(case, 60) is None
    assert "quantizes" in impulses.not_probed(replace(case, backend="tflite", flavor="w8i8"), 60)
    assert "relu" in impulses.not_probed(replace(case, geometry=replace(G, activation="relu")), 60)
    assert "more than" in impulses.not_probed(case, impulses.MAX_INPUTS + 1)


# An iree-compile that moves the ONNX conv's padding two rows down: pads [2, w, 2, w] become
# [0, w, 4, w] in the imported MLIR (the output's shape is the same), then the real compiler runs
MOVE_PADDING = rewriting_compiler("""
    pads = re.compile(r'torch\\.onnx\\.pads = \\[(\\d+) : si64, (\\d+) : si64, (\\d+) : si64, (\\d+) : si64\\]')
    def move(m):
        top, left, bottom, right = map(int, m.groups())
        if top < 2:
            return m.group(0)
        return f'torch.onnx.pads = [{{top - 2}} : si64, {{left}} : si64, {{bottom + 2}} : si64, {{right}} : si64]'
    text = pads.sub(move, text)
""")


@pytest.mark.slow
def test_a_wrong_answer_no_mis_lowering_explains_is_probed_with_impulses_in_its_bug_report(tmp_path):
    from pipeline.config import Config

    real = Config.from_env(clean_env()).target("llvm-cpu").compiler
    wrapper = write_wrapper(tmp_path / "iree-compile-moves-padding", MOVE_PADDING, real)
    spec = write_spec(tmp_path / "spec.json", [{"rank": 2, "spatial": [6, 5], "kernel": [5, 5], "stride": [1, 1],
                                                "c_in": 1, "c_out": 2, "padding": "same"}])
    build = tmp_path / "build"
    env = clean_env(CONV_SWEEP_BUILD_DIR=build, CONV_SWEEP_INCLUDE=spec, CONV_SWEEP_IREE_COMPILE=wrapper,
                    CONV_SWEEP_TOOL_FILES=wrapper)
    name = "conv_onnx_f32_w5_h6_f2_k5_c1"
    run = doit(f"verify:{name}@llvm-cpu", env=env)
    result = results(build)[name]
    assert result["status"] == "fail" and result["stage"] == "verify", (run.stdout[-2000:], run.stderr[-2000:])
    assert result["explanation"] == explain.NONE
    report = doit("bugreport", "--budget", "20", f"{name}@llvm-cpu", env=env, timeout=600)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    (written,) = (build / "bugreports" / "llvm-cpu").glob("*/report.md")
    found = json.loads((written.parent / impulses.IMPULSES).read_text())
    assert found["finding"] == "wrong input positions" and found["displacement"] == [0, 0, 2, 0], found["example"]
    assert len(found["response"]) == found["outputs"] and len(found["response"][0]) == found["runs"] - 1
    text = written.read_text()
    assert "**wrong input positions**" in text and "read H +2 from where the conv reads it" in text
