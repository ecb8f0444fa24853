"""conv-sweep: convolution geometries through TFLite/ONNX -> MLIR -> a target's compiler -> run -> oracle.

Layering: geometry, errors, executables, sweep, bucket, expected, cases, verdict, toolchain,
targets, signature, config, data, tools are low-level and import no stage module (verdict judges
an outcome against the expected-failures list); the stages (model_tflite,
model_onnx, importer, compiler, runner, oracle, verify) build on them, the Python-heavy ones running in helper processes (isolate);
`stages` is what the task runner calls; report, report_html and repro only read results.
Only durable_db and doit_reporter import doit (doit loads them as plugins).
"""
__all__ = [
    "benchmark", "bucket", "cases", "compare", "compiler", "config", "data", "doit_reporter", "durable_db", "errors",
    "executables", "expected", "fingerprint", "geometry", "importer", "integrity", "isolate", "model_onnx",
    "model_tflite", "oracle", "reference", "repro", "report", "report_html", "result", "runner", "signature",
    "stages", "sweep", "targets", "tolerance", "toolchain", "tools", "verdict", "verify",
]
