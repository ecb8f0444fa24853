import json

import numpy as np
import pytest

from pipeline.targets import signature

REFLECTION = """Exported Functions:
  [  0] main(!vm.ref<?>) -> (!vm.ref<?>)
        iree.abi.declaration: sync func @main(%input0: tensor<1x44x51x256xbf16> {tf_saved_model.index_path = ["keras_tensor"]}) -> (%output0: tensor<1x11x12x512xbf16> {tf_saved_model.index_path = ["output_0"]})
  [  1] __init() -> ()
"""
ONNX_MLIR = """module {
  func.func @main_graph(%arg0: !torch.vtensor<[1,16,27],bf16>) -> !torch.vtensor<[1,2,8],bf16> attributes {torch.onnx_meta.ir_version = 8 : si64} {
"""


def test_reflection_declaration():
    sig = signature.from_metadata(REFLECTION, "main")
    assert sig.source == "reflection" and sig.function == "main"
    assert [t.spec for t in sig.inputs] == ["1x44x51x256xbf16"]
    assert [t.spec for t in sig.outputs] == ["1x11x12x512xbf16"]
    assert sig.inputs[0].dtype.name == "bfloat16" and sig.inputs[0].shape == (1, 44, 51, 256)
    assert signature.from_metadata(REFLECTION, "main_graph") is None


def test_imported_mlir_entry_function():
    sig = signature.from_mlir(ONNX_MLIR, "main_graph")
    assert sig.source == "mlir"
    assert sig.inputs[0].spec == "1x16x27xbf16" and sig.outputs[0].spec == "1x2x8xbf16"


def test_int8_and_f32_types():
    text = "sync func @main(%input0: tensor<1x8x8x3xi8>) -> (%output0: tensor<1x6x6x4xf32>)"
    sig = signature.parse(text, "main", "reflection")
    assert sig.inputs[0].dtype == np.int8 and sig.outputs[0].dtype == np.float32


@pytest.mark.slow
def test_real_modules_with_and_without_reflection(tmp_path):
    """A stock llvm-cpu module built from iree-import-onnx output carries no reflection (the
    imported MLIR gives the signature); one whose entry a wrapper turned to bf16 I/O does."""
    from helpers import BF16_IO_WRAPPER, clean_env, write_wrapper
    from pipeline.config import Config
    from pipeline.space.geometry import Geometry
    from pipeline.space.cases import Case
    from pipeline.run import stages

    cfg = Config.from_env(clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build"))
    target = cfg.targets[0]
    geometry = Geometry(2, (8, 8), (3, 3), (1, 1), 3, 4)
    onnx, tflite = Case(geometry, "onnx", "f32"), Case(geometry, "tflite", "f32")
    for case in (onnx, tflite):
        assert stages.model([case], cfg) is None and stages.mlir([case], cfg) is None
        assert stages.vmfb(case, cfg) is None
    log = tmp_path / "dump.log"
    sig = signature.read(target.dump_tool, cfg.case_dir(onnx) / "model.vmfb", cfg.model_dir(onnx) / "model.mlir",
                         "main_graph", stage="run", timeout=60, log=log)
    assert sig.source == "mlir" and sig.inputs[0].spec == "1x3x8x8xf32" and sig.outputs[0].spec == "1x4x6x6xf32"

    wrapper = write_wrapper(tmp_path / "bf16-io-compile", BF16_IO_WRAPPER, target.compiler)
    from pipeline.targets.compiler import compile_mlir

    compile_mlir(cfg.model_dir(tflite) / "model.mlir", tmp_path / "bf16.vmfb", compiler=str(wrapper),
                 flags=target.compile_flags(tflite.variant), timeout=120, log=log)
    sig = signature.read(target.dump_tool, tmp_path / "bf16.vmfb", cfg.model_dir(tflite) / "model.mlir", "main",
                         stage="run", timeout=60, log=log)
    assert sig.source == "reflection" and sig.inputs[0].spec == "1x8x8x3xbf16" and sig.outputs[0].spec == "1x6x6x4xbf16"


def test_json_keeps_every_field_as_read():
    text = "sync func @main(%input0: tensor<1x8x3xsi8>) -> (%output0: tensor<1x6x4xbf16>, %output1: tensor<f32>)"
    sig = signature.parse(text, "main", "reflection")
    again = signature.Signature.from_json(json.loads(json.dumps(sig.to_json())))
    assert again == sig and again.inputs[0].element == "si8" and again.outputs[1].shape == ()
