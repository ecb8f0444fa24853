import pytest

from pipeline.space.cases import VARIANTS, Case, make_cases, parse_variants
from pipeline.core.errors import ConfigError
from pipeline.space.geometry import Geometry
from pipeline.space.sweep import SweepSpec

G = Geometry(2, (44, 51), (4, 4), (4, 4), 256, 512)


def test_case_name_and_model_file():
    case = Case(G, "tflite", "w8i8", "sqsq")
    assert case.name == "conv_tflite_w8i8_w51_h44_f512_k4_c256_s4x4_pvalid"
    assert case.model_file == "model.tflite" and case.target == "llvm-cpu"
    assert case.key == "conv_tflite_w8i8_w51_h44_f512_k4_c256_s4x4_pvalid@llvm-cpu"
    assert Case(G, "onnx", "bf16").model_file == "model.onnx"


def test_every_geometry_gives_five_cases():
    cases = make_cases(SweepSpec().sample(50))
    assert len(cases) == 1250
    assert len({c.name for c in cases}) == 1250
    assert {c.variant for c in cases} == set(VARIANTS)


def test_unknown_flavor_is_a_clear_error():
    with pytest.raises(ConfigError, match="'int4'.*not a tflite flavor"):
        Case(G, "tflite", "int4")
    with pytest.raises(ConfigError, match="backend='tosa'"):
        Case(G, "tosa", "f32")


def test_compile_only_variants_are_checked():
    assert parse_variants("onnx_bf16, tflite_w8i8", "X") == {"onnx_bf16", "tflite_w8i8"}
    with pytest.raises(ConfigError, match="X='onnx_int8'"):
        parse_variants("onnx_int8", "X")
    cases = make_cases(SweepSpec().sample(1), frozenset({"onnx_bf16"}))
    assert {c.variant for c in cases if c.compile_only} == {"onnx_bf16"}


def test_seeds_are_stable_and_shared_per_geometry():
    a, b = Case(G, "tflite", "f32"), Case(G, "onnx", "f32")
    assert a.weight_seed == b.weight_seed
    assert a.seed != b.seed
    assert a.seed == Case(G, "tflite", "f32").seed
