"""conv-sweep: doit tasks from model file to verified result, one subtask per case.

Only wiring: the configuration comes from the environment (docs/knobs.md), resolved once here;
what each task does is in pipeline/ (pipeline/engine/tasks.py builds the subtasks). TensorFlow
and torch are imported only inside the task actions.
"""
from pathlib import Path

from doit import get_initial_workdir

from pipeline.engine import tasks
from pipeline.run import stages
from pipeline.targets.perf import RUN_TO_RUN_NOISE

RUN = tasks.load(Path(__file__).resolve().parent, get_initial_workdir())
DOIT_CONFIG = tasks.doit_config(RUN)


def task_model():
    """Build the case's model file (.tflite from tf.keras, .onnx from torch), shared by every target."""
    yield from tasks.subtasks(RUN, "model", stages.model)


def task_mlir():
    """Import the model file to MLIR (tosa-converter-for-tflite / iree-import-onnx), shared by every target."""
    yield from tasks.subtasks(RUN, "mlir", stages.mlir)


def task_vmfb():
    """Compile the MLIR for the case's target (iree-compile, torq-compile, ...)."""
    yield from tasks.subtasks(RUN, "vmfb", stages.vmfb)


def task_verify():
    """Run the .vmfb on the target and compare with the oracle; writes result.json."""
    yield from tasks.subtasks(RUN, "verify", stages.verify)


def task_sweep():
    """Build and verify every case of the sweep."""
    # the report is written when the run ends (pipeline/engine/command.py)
    return {"actions": None, "task_dep": ["verify"], "clean": tasks.sweep_clean(RUN)}


def task_report():
    """Summarize every case's result.json: terminal table, report/{results.json,junit.xml,report.html}."""
    merge = {"name": "merge", "long": "merge", "type": list, "default": [],
             "help": "a build folder or results.json to merge into one report (repeat it: the shards of a run)"}
    return {"actions": [(tasks.report, [RUN])], "params": [merge], "verbosity": 2, "uptodate": [False]}


def task_compare():
    """Compare two runs (--old, --new: targets of this build folder, build folders or results.json): regressions, fixes, buckets, ratios."""
    params = [{"name": "old", "long": "old", "default": "",
               "help": "the earlier run: a target of this build folder (torq@2.2.1), a build folder or results.json"},
              {"name": "new", "long": "new", "default": "",
               "help": "the later run: a target of this build folder (torq), a build folder or results.json"},
              {"name": "out", "long": "out", "default": "",
               "help": "where compare.html, compare.json and junit.xml go (default: <build>/compare)"},
              {"name": "noise_floor", "long": "noise-floor", "type": float, "default": RUN_TO_RUN_NOISE,
               "help": "run-to-run timing noise of the machine, as |log ratio| (default: measured here, "
                       "see pipeline/targets/perf.py); compare two runs of one compiler to measure yours"}]
    return {"actions": [(tasks.compare, [RUN])], "params": params, "verbosity": 2, "uptodate": [False]}


KEEP_DATA = {"name": "keep_data", "long": "keep-data", "type": bool, "default": False,
             "help": "every attempt crops the original case's weights and input instead of drawing its own "
                     "(a failure that depends on the values)"}


def task_shrink():
    """Shrink a failing case (doit shrink <case>@<target>): the smallest geometry failing the same way."""
    budget = {"name": "budget", "long": "budget", "type": float, "default": 0,
              "help": "seconds after which no new attempt starts; the smallest geometry found so far is kept "
                      "(default 0: no limit)"}
    return {"actions": [(tasks.shrink, [RUN])], "params": [budget, KEEP_DATA], "pos_arg": "cases", "verbosity": 2,
            "uptodate": [False]}


def task_bugreport():
    """Write a report ready to file upstream per failure bucket (doit bugreport [bucket-or-case ...]): bugreports/<target>/."""
    budget = {"name": "budget", "long": "budget", "type": float, "default": 300,
              "help": "seconds per bucket: half for shrinking (without a valid earlier shrink), the rest for "
                      "the target's toggle flags (default 300; 0: the bucket's smallest case as it is, no flags)"}
    return {"actions": [(tasks.bugreport, [RUN])], "params": [budget, KEEP_DATA], "pos_arg": "buckets",
            "verbosity": 2, "uptodate": [False]}


def task_hunt():
    """Search for failure buckets the sweep misses (doit hunt --budget S --seed N): new ones are shrunk and reported; build/hunt/."""
    params = [{"name": "budget", "long": "budget", "type": float, "default": 600,
               "help": "wall-clock seconds of this hunt: the search takes 3/4, the new buckets' bug reports the rest "
                       "(default 600)"},
              {"name": "seed", "long": "seed", "type": int, "default": 0, "help": "the search's seed (default 0)"},
              {"name": "strategy", "long": "strategy", "default": "hunt",
               "help": "hunt (boundary values, the extended dimensions, moves near the cases found; default) or "
                       "sample (further draws of the sweep's own categories: the baseline)"},
              {"name": "lanes", "long": "lanes", "type": int, "default": 0,
               "help": "cases run at once (default 0: one per core)"},
              {"name": "flavors", "long": "flavors", "default": "",
               "help": "only these flavors, e.g. onnx_f32,tflite_w8i8 (default: every flavor of each target)"}]
    return {"actions": [(tasks.hunt, [RUN])], "params": params, "verbosity": 2, "uptodate": [False]}


def task_bisect():
    """The first release on which a case or a bucket's smallest case fails (doit bisect CASE-OR-BUCKET --target T --versions A..B)."""
    params = [{"name": "target", "long": "target", "default": "",
               "help": "the target whose toolchain's releases are searched (default: the only selected target)"},
              {"name": "versions", "long": "versions", "default": "",
               "help": "FIRST..LAST: the released versions searched, e.g. 3.9.0..3.13.0 (llvm-cpu) or 2.2.1..2.3.0 (torq)"}]
    return {"actions": [(tasks.bisect, [RUN])], "params": params, "pos_arg": "subject", "verbosity": 2,
            "uptodate": [False]}


def task_refused():
    """List the cases not generated (a frontend refuses the geometry), each with the reason."""
    return {"actions": [(tasks.print_refused, [RUN])], "verbosity": 2, "uptodate": [False]}


def task_export_xfails():
    """Write each target's upstream xfail file (report/<target>/test_conv_sweep-xfails.txt) from the listed failures."""
    params = {"name": "params", "long": "params", "default": "sim-sl2610-v1",
              "help": "upstream's test parameters after the case name: runtime and chip (default sim-sl2610-v1)"}
    return {"actions": [(tasks.export_xfails, [RUN])], "params": [params], "verbosity": 2, "uptodate": [False]}


def task_import_xfails():
    """Add the cases of an upstream xfail file (doit import_xfails FILE) to the expected failures, as this run failed them."""
    return {"actions": [(tasks.import_xfails, [RUN])], "pos_arg": "files", "verbosity": 2, "uptodate": [False]}


def task_prune_store():
    """Prune the store of stage outputs (CONV_SWEEP_CACHE_DIR): entries unused for --days, then the oldest past --max-gb."""
    params = [{"name": "days", "long": "days", "type": float, "default": 0,
               "help": "remove entries not used for this many days (default 0: no age limit)"},
              {"name": "max_gb", "long": "max-gb", "type": float, "default": 0,
               "help": "then remove the least recently used until the store holds at most this many GB (0: no limit)"}]
    return {"actions": [(tasks.prune_store, [RUN])], "params": params, "verbosity": 2, "uptodate": [False]}


def task_calibrate():
    """Rewrite each selected target's cost calibration (the time limits) from this build folder's run."""
    out = {"name": "out", "long": "out", "default": "",
           "help": "write <target>.json into this folder instead of pipeline/targets/costs/"}
    return {"actions": [(tasks.calibrate, [RUN])], "params": [out], "verbosity": 2, "uptodate": [False]}


def task_accept_failures():
    """Rewrite the expected-failures file from the latest results (keeps issue links and comments)."""
    return {"actions": [(tasks.accept_failures, [RUN])], "verbosity": 2, "uptodate": [False]}
