"""A model's own weights for a geometry (pipeline/space/given.py): named in a spec file, checked
before any work, and the case keyed on their digest, never on the seeded weights' key."""
import json

import numpy as np
import pytest

from pipeline.core.errors import ConfigError
from pipeline.engine.tasks import SPECS
from pipeline.space import given
from pipeline.space.cases import geometry_id, make_cases
from pipeline.space.data import case_weights
from pipeline.space.geometry import Geometry
from pipeline.space.sweep import load_spec

G = Geometry(2, (8, 9), (3, 3), (1, 1), 4, 6, "same", activation="relu")


def _weights(path, seed, kernel_shape=(6, 4, 3, 3), bias_shape=(6,)):
    rng = np.random.default_rng(seed)
    kernel, bias = rng.uniform(-1, 1, kernel_shape), rng.uniform(-1, 1, bias_shape)
    with open(path, "wb") as f:
        given.write(f, kernel, bias)
    return kernel, bias


def _spec(tmp_path, entries):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"geometries": [{"category": "mine", **G.to_dict(), **e} for e in entries]}))
    return path


def test_each_layer_s_weights_make_a_case_of_their_own_keyed_on_their_digest(tmp_path):
    """Two layers of one geometry with different weights, and the geometry with seeded weights:
    three cases per flavor, each with its own name and model key; a case is built from its file's
    values exactly."""
    (tmp_path / "w").mkdir()
    a = _weights(tmp_path / "w" / "a.npz", 1)
    _weights(tmp_path / "w" / "b.npz", 2)
    spec = load_spec(_spec(tmp_path, [{"weights": "w/a.npz"}, {"weights": "w/b.npz"}, {}]))
    sampled = spec.sample(0)
    assert [s[2] is None for s in sampled] == [False, False, True]
    cases = [c for c in make_cases(sampled) if c.variant == "onnx_f32"]
    assert len({c.name for c in cases}) == 3 and all(geometry_id(c.name) == G.id for c in cases)
    digest = sampled[0][2].digest
    assert cases[0].name.endswith(f"_w{digest[:12]}") and len(digest) == 64
    keys = [SPECS["model"].key(None, c) for c in cases]
    assert keys[0]["weights"] == digest and keys[1]["weights"] != digest and "weights" not in keys[2]
    kernel, bias = case_weights(cases[0])
    assert np.array_equal(kernel, a[0]) and np.array_equal(bias, a[1])


@pytest.mark.parametrize("make, field, message", [
    (lambda p: None, "geometries[0].weights", "cannot be read"),
    (lambda p: _weights(p, 3, kernel_shape=(6, 4, 3, 2)), "geometries[0].weights (kernel)", "geometry's shape [6, 4, 3, 3]"),
    (lambda p: _weights(p, 3, bias_shape=(5,)), "geometries[0].weights (bias)", "geometry's shape [6]"),
])
def test_weights_that_do_not_fit_are_an_error_naming_the_field_before_any_work(tmp_path, make, field, message):
    make(tmp_path / "w.npz")
    with pytest.raises(ConfigError) as err:
        load_spec(_spec(tmp_path, [{"weights": "w.npz"}]))
    assert err.value.field.endswith(field) and message in str(err.value)


def test_non_finite_weights_and_a_file_changed_after_reading_are_refused(tmp_path):
    kernel, bias = _weights(tmp_path / "w.npz", 4)
    spec = load_spec(_spec(tmp_path, [{"weights": "w.npz"}]))
    case = make_cases(spec.sample(0))[0]
    kernel[0, 0, 0, 0] = np.nan
    with open(tmp_path / "w.npz", "wb") as f:
        given.write(f, kernel, bias)
    with pytest.raises(ConfigError, match="changed since the sweep read it"):
        case_weights(case)
    with pytest.raises(ConfigError, match="not finite"):
        load_spec(_spec(tmp_path, [{"weights": "w.npz"}]))


def test_a_sample_input_in_the_file_is_the_case_s_input_in_its_layout_and_dtype(tmp_path):
    """The layer's input on a model's sample (channels first in the file): the ONNX f32 case runs
    on it as it is, the TFLite one channels last, the bf16 one rounded to bf16; the int8 one needs
    its model's input quantization; calibration is that sample alone. A sample of the wrong
    shape is an error naming it."""
    import ml_dtypes

    from pipeline.space.data import calibration_samples, make_input

    rng = np.random.default_rng(7)
    sample = rng.uniform(-2, 2, (1, 4, 8, 9))
    with open(tmp_path / "w.npz", "wb") as f:
        given.write(f, rng.uniform(-1, 1, (6, 4, 3, 3)), rng.uniform(-1, 1, 6), sample)
    spec = load_spec(_spec(tmp_path, [{"weights": "w.npz"}]))
    assert spec.sample(0)[0][2].has_input
    cases = {c.variant: c for c in make_cases(spec.sample(0))}
    assert np.array_equal(make_input(cases["onnx_f32"]), sample.astype(np.float32))
    assert np.array_equal(make_input(cases["tflite_f32"]), np.moveaxis(sample, 1, -1).astype(np.float32))
    bf16 = make_input(cases["onnx_bf16"])
    assert bf16.dtype == ml_dtypes.bfloat16 and np.array_equal(bf16, sample.astype(np.float32).astype(ml_dtypes.bfloat16))
    [calibration] = calibration_samples(cases["tflite_w8i8"])
    assert np.array_equal(calibration, np.moveaxis(sample, 1, -1).astype(np.float32))
    with pytest.raises(ValueError, match="input quantization"):
        make_input(cases["tflite_w8i8"])
    int8 = make_input(cases["tflite_w8i8"], (0.02, -3))
    assert int8.dtype == np.int8 and np.array_equal(
        int8, np.clip(np.rint(np.moveaxis(sample, 1, -1).astype(np.float32) / 0.02) - 3, -128, 127).astype(np.int8))
    with open(tmp_path / "w.npz", "wb") as f:
        given.write(f, rng.uniform(-1, 1, (6, 4, 3, 3)), rng.uniform(-1, 1, 6), sample[:, :, :7])
    with pytest.raises(ConfigError) as err:
        load_spec(_spec(tmp_path, [{"weights": "w.npz"}]))
    assert err.value.field.endswith("weights (input)") and "[1, 4, 8, 9]" in str(err.value)
