"""conv-sweep: convolution geometries through TFLite/ONNX -> MLIR -> a target's compiler -> run -> oracle.

The layers, top to bottom; a module imports only from its own layer and those below it, lazy
imports inside functions included (import-linter checks it: [tool.importlinter] in pyproject.toml):

    dev        tools for developing conv-sweep and the compilers it tests (python -m): the benchmark,
               detection power against mutant compilers, false alarms, the flag check, the mutants
    engine     the doit plugins (the run command, durable DB, reporters, task order), each command's
               spec, the task wiring dodo.py calls, the order chains start in, the stages on Dask
    triage     doit shrink (slow), bugreport (timing, culprit), compare (diff), bisect, hunt
    curate     beside triage, one layer: rewriting checked-in files from a run (expected-failures
               lists, the upstream xfail files, the cost calibrations)
    results    reading results: the summary, results.json, junit.xml, report.html, region rules
    run        one function per doit task (model, mlir, vmfb, verify), each case's repro.sh, and the
               runner of cases outside doit (hunt, shrink, bisect, the flag trials)
    checks     reference, oracle, tolerance, compare, verify
    config     the knobs (CONV_SWEEP_*), read and checked; creates nothing
    frontends  models (tf.keras, torch) and their import to MLIR   |   targets  profiles, toolchain,
                                                                    |   compile, run, signature, perf, cost
    outcome    a case's result record, failure buckets, verdicts
    space      geometry, refusals, sweep, cases, data, shards, the expected-failures lists
    core       errors, tools and atomic files, executables, integrity, helper processes (isolate),
               fingerprints, the stage table (chain), the build folder's layout, the store and the
               timeouts it keeps (cuts)

Only the engine imports doit and Dask; only the frontends import TensorFlow and torch, inside
functions that run in helper processes.
"""
