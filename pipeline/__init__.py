"""conv-sweep: convolution geometries through TFLite/ONNX -> MLIR -> iree-compile -> run -> oracle.

Layering: geometry, errors, sweep, cases, config, data, tools are low-level and import no
stage module; the stages (model_tflite, model_onnx, importer, compiler, runner, oracle,
verify) build on them; `stages` is what the task runner calls. Nothing here imports doit.
"""
__all__ = [
    "cases", "compare", "compiler", "config", "data", "errors", "fingerprint", "geometry", "importer",
    "model_onnx", "model_tflite", "oracle", "reference", "result", "runner", "stages", "sweep",
    "tolerance", "tools", "verify",
]
