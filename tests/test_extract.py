"""`doit extract` (pipeline/frontends/extract.py): a model's convs as a spec file, checked
against the frameworks' own layers and output shapes, on a TFLite model from tf.keras and an
ONNX model from torch; what it cannot express is skipped with the reason; a bad file is an error
naming it."""
import json
import warnings

import pytest

from helpers import clean_env, doit, results
from pipeline.core.errors import ConfigError
from pipeline.frontends.extract import extract
from pipeline.space.geometry import Geometry
from pipeline.space.sweep import load_spec


def _out_shape(entry: dict) -> tuple:
    g = Geometry.from_dict({k: v for k, v in entry.items() if k not in ("category", "layers")})
    return (*g.out_spatial, g.c_out)


@pytest.fixture(scope="module")
def tflite_model(tmp_path_factory):
    import tensorflow as tf

    x = inputs = tf.keras.Input((16, 16, 3), batch_size=1)
    x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu6")(x)
    x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
    x = tf.keras.layers.Conv2D(8, 3, padding="same")(x)  # the same geometry as the one before
    x = tf.keras.layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2)(x)
    x = tf.keras.layers.Conv2DTranspose(4, 2, strides=2)(x)
    model = tf.keras.Model(inputs, x)
    path = tmp_path_factory.mktemp("tflite") / "small.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    convs = [l for l in model.layers if type(l).__name__ in ("Conv2D", "DepthwiseConv2D")]
    return path, [tuple(int(v) for v in l.output.shape[1:]) for l in convs]


def test_tflite_convs_are_geometries_with_the_layers_output_shapes_and_fused_activations(tflite_model):
    path, shapes = tflite_model
    spec = extract(path)
    layers = [(layer, _out_shape(g)) for g in spec["geometries"] for layer in g["layers"]]
    assert sorted(shape for _, shape in layers) == sorted(shapes)  # one per keras conv, with its output shape
    # the two convs identical but for their activation are two geometries: the activation is the geometry's
    assert len(spec["geometries"]) == 4
    assert all(l["activation"] == g.get("activation", "none") for g in spec["geometries"] for l in g["layers"])
    shapes_of = {}
    for g in spec["geometries"]:
        shapes_of.setdefault(json.dumps({k: v for k, v in g.items() if k not in ("activation", "layers")}), []).append(g)
    [twins] = [group for group in shapes_of.values() if len(group) == 2]
    assert sorted(g.get("activation", "none") for g in twins) == ["none", "relu"]
    assert sorted(l["activation"] for _, l in [(g, l) for g in spec["geometries"] for l in g["layers"]]) == \
        ["none", "none", "relu", "relu6"]
    depthwise = next(g for g in spec["geometries"] if g["layers"][0]["op"] == "DEPTHWISE_CONV_2D")
    assert depthwise["groups"] == 8 and depthwise["c_out"] == 16 and depthwise["stride"] == [2, 2]
    assert [s["op"] for s in spec["skipped"]] == ["TRANSPOSE_CONV"] and spec["skipped"][0]["reason"]


def test_onnx_convs_from_torch_with_relu_relu6_and_what_cannot_be_expressed(tmp_path):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Conv2d(3, 8, 3, padding=1)  # symmetric pads 1 at stride 1: TF SAME
            self.b = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)  # pads (1, 1) on 16: TF SAME is (0, 1)
            self.c = torch.nn.Conv2d(8, 4, 1, groups=4)
            self.t = torch.nn.ConvTranspose2d(4, 2, 2, stride=2)

        def forward(self, x):
            y = torch.relu(self.a(x))
            return self.t(torch.nn.functional.relu6(self.c(self.b(y))))

    path = tmp_path / "small.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.zeros(1, 3, 16, 16),), str(path), dynamo=False, opset_version=17)
    spec = extract(path)
    explicit = [g for g in spec["geometries"] if g["padding"] == "explicit"]
    assert [(g["c_in"], g["stride"], g["pads"]) for g in explicit] == [(8, [2, 2], [[1, 1], [1, 1]])]
    by_cin = {g["c_in"]: g for g in spec["geometries"] if g["padding"] != "explicit"}
    assert sorted(by_cin) == [3, 8]
    assert _out_shape(by_cin[3]) == (16, 16, 8) and by_cin[3]["padding"] == "same"
    assert by_cin[3]["layers"][0]["activation"] == by_cin[3]["activation"] == "relu"
    assert by_cin[8]["groups"] == 4 and by_cin[8]["layers"][0]["activation"] == by_cin[8]["activation"] == "relu6"
    reasons = {s["op"]: s["reason"] for s in spec["skipped"]}
    assert list(reasons) == ["ConvTranspose"]


def test_a_file_that_is_no_model_or_holds_no_conv_is_an_error_naming_it(tmp_path):
    import torch

    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a flatbuffer")
    with pytest.raises(ConfigError, match="junk.tflite.*cannot be read as tflite"):
        extract(junk)
    with pytest.raises(ConfigError, match="must be a .tflite or .onnx"):
        extract(tmp_path / "model.pb")
    dense = tmp_path / "dense.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.nn.Linear(4, 2).eval(), (torch.zeros(1, 4),), str(dense), dynamo=False)
    with pytest.raises(ConfigError, match="dense.onnx.*holds no convolution"):
        extract(dense)


def test_doit_extract_writes_a_spec_the_sweep_reads(tflite_model, tmp_path):
    path, _ = tflite_model
    out = tmp_path / "convs.json"
    run = doit("extract", str(path), "--out", str(out), env=clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 conv layers, 4 distinct geometries; 1 skipped" in run.stdout
    spec = load_spec(out)
    assert len(spec.geometries) == 4 and json.loads(out.read_text())["skipped"]
    assert {g.activation for _, g in spec.geometries} == {"none", "relu", "relu6"}
    listed = doit("list", "--all", env=clean_env(CONV_SWEEP_SPEC=out, CONV_SWEEP_TARGET="llvm-cpu",
                                                   CONV_SWEEP_BUILD_DIR=tmp_path / "build"))
    assert listed.returncode == 0 and sum(line.startswith("verify:") for line in listed.stdout.splitlines()) == 20
    bad = doit("extract", str(tmp_path / "missing.onnx"), env=clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build"))
    assert bad.returncode != 0 and "missing.onnx" in bad.stdout + bad.stderr and "is not a file" in bad.stdout + bad.stderr


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    """A small int8 model with its own calibrated weights: a relu6 conv and a depthwise conv."""
    import numpy as np
    import tensorflow as tf

    x = inputs = tf.keras.Input((12, 12, 3), batch_size=1)
    x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu6")(x)
    x = tf.keras.layers.DepthwiseConv2D(3, strides=2, padding="same")(x)
    model = tf.keras.Model(inputs, x)
    rng = np.random.default_rng(0)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([rng.standard_normal((1, 12, 12, 3)).astype(np.float32)]
                                                 for _ in range(4))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    path = tmp_path_factory.mktemp("int8") / "small_int8.tflite"
    path.write_bytes(converter.convert())
    return path


@pytest.mark.slow
def test_extract_with_weights_builds_each_case_from_the_model_s_own_and_the_sweep_checks_them(int8_model, tmp_path):
    """doit extract --weights: one .npz per layer; the w8i8 case built from it holds the model's own
    int8 kernel and per-channel scales exactly (the converter's max-abs scales meet the dequantized
    values again); the sweep of the spec on llvm-cpu passes every case; the cases' names carry the
    weights' digest, so the seeded-weights cases of the same geometries are others."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from pipeline.checks.oracle import tflite_weights
    from pipeline.frontends.extract import tflite_convs
    from pipeline.frontends.model_tflite import build_tflite
    from pipeline.space.cases import make_cases

    out = tmp_path / "convs.json"
    env = clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build")
    run = doit("extract", str(int8_model), "--weights", "--out", str(out), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(list((tmp_path / "convs-weights").glob("*.npz"))) == 2
    spec = load_spec(out)
    assert all(given is not None for _, _, given in spec.sample(0))
    convs, _ = tflite_convs(int8_model)
    source = Interpreter(str(int8_model))
    details = {d["index"]: d for d in source.get_tensor_details()}
    for conv, sampled in zip(convs, spec.sample(0)):
        case = next(c for c in make_cases([sampled]) if c.variant == "tflite_w8i8")
        built = tmp_path / f"{case.name}.tflite"
        build_tflite(case, built)
        held = tflite_weights(case, built)
        stored = source.get_tensor(conv["tensors"][0])
        stored = stored.transpose(0, 3, 1, 2) if conv["op"] == "CONV_2D" else stored.transpose(3, 0, 1, 2)
        assert np.array_equal(held.kernel_int, stored)
        assert np.array_equal(np.float32(held.weight_scales),
                              np.float32(details[conv["tensors"][0]]["quantization_parameters"]["scales"]))
    swept = doit("-n", "2", "sweep", env={**env, "CONV_SWEEP_SPEC": str(out), "CONV_SWEEP_TARGET": "llvm-cpu"})
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    done = results(tmp_path / "build")
    assert len(done) == 10 and all(r["status"] == "pass" for r in done.values())
    assert all(name.split("_w")[-1][:12] in {s[2].digest[:12] for s in spec.sample(0)} for name in done)


@pytest.mark.slow
def test_extract_with_a_sample_input_runs_each_layer_on_its_own_input(int8_model, tmp_path):
    """--input: each layer's file holds its input when the model runs on the sample (the first
    layer's: the sample itself, through the model's int8 input quantization); the cases run on
    it, and pass on llvm-cpu, the int8 one on the sample requantized with its own model's input
    quantization."""
    import numpy as np

    from pipeline.space.cases import make_cases

    sample = np.random.default_rng(3).uniform(-2, 2, (1, 12, 12, 3)).astype(np.float32)
    np.save(tmp_path / "sample.npy", sample)
    out = tmp_path / "convs.json"
    env = clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build")
    run = doit("extract", str(int8_model), "--weights", "--input", str(tmp_path / "sample.npy"), "--out", str(out), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    first, second = [given for _, _, given in load_spec(out).sample(0)]
    assert first.has_input and second.has_input
    step = float(np.abs(np.diff(np.unique(first.read_input()))).min())  # the source model's input scale
    assert np.abs(first.read_input() - np.moveaxis(sample, -1, 1)).max() <= step / 2 + 1e-6
    assert second.read_input().shape == (1, 8, 12, 12) and second.read_input().min() >= 0  # after relu6
    swept = doit("-n", "2", "verify:conv_tflite_w8i8*", "verify:conv_onnx_f32*",
                 env={**env, "CONV_SWEEP_SPEC": str(out), "CONV_SWEEP_TARGET": "llvm-cpu"})
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    done = results(tmp_path / "build")
    assert len(done) == 4 and all(r["status"] == "pass" for r in done.values())
    onnx = next(c for c in make_cases(load_spec(out).sample(0)[:1]) if c.variant == "onnx_f32")
    saved = np.load(tmp_path / "build" / "cases" / onnx.name / "input.npy")
    assert np.array_equal(saved, first.read_input().astype(np.float32))
