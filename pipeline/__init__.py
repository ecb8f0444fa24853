"""conv-sweep: convolution geometries through TFLite/ONNX -> MLIR -> a target's compiler -> run -> oracle.

The layers, top to bottom; a module imports only from its own layer and those below it, lazy
imports inside functions included (import-linter checks it: [tool.importlinter] in pyproject.toml):

    engine     doit tasks, reporters, the durable DB, the depth-first order, Dask, the benchmark
    triage     shrink a failing case; compare two runs
    results    the report: summary, results.json, junit, report.html; calibration and chain costs
    run        the stage functions the engine calls (one table), and repro
    checks     reference, oracle, tolerance, compare, verify
    config     the knobs (CONV_SWEEP_*), read and checked; creates nothing
    frontends  models (tf.keras, torch) and their import to MLIR   |   targets  profiles, toolchain,
                                                                    |   compile, run, signature, perf, cost
    outcome    buckets, result records, verdicts
    space      geometry, sweep, cases, data, shards, the expected-failures list
    core       the stage table (chain), errors, tools, helper processes (isolate), fingerprints

Only the engine imports doit and Dask; only the frontends import TensorFlow and torch, inside
functions that run in helper processes.
"""
