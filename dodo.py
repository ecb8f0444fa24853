"""conv-sweep: doit tasks from model file to verified result, one subtask per case.

Only wiring: the configuration comes from the environment (docs/knobs.md), resolved once here;
what each task does is in pipeline/ (pipeline/engine/tasks.py builds the case tasks, and every
other command is one spec in pipeline/engine/commands.py: its options, checks and action).
TensorFlow and torch are imported only inside the task actions.
"""
from pathlib import Path

from doit import get_initial_workdir

from pipeline.engine import commands, tasks
from pipeline.run import stages

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


task_sweep = commands.creator(commands.SWEEP, RUN)
task_report = commands.creator(commands.REPORT, RUN)
task_compare = commands.creator(commands.COMPARE, RUN)
task_shrink = commands.creator(commands.SHRINK, RUN)
task_bugreport = commands.creator(commands.BUGREPORT, RUN)
task_hunt = commands.creator(commands.HUNT, RUN)
task_bisect = commands.creator(commands.BISECT, RUN)
task_refused = commands.creator(commands.REFUSED, RUN)
task_extract = commands.creator(commands.EXTRACT, RUN)
task_export_xfails = commands.creator(commands.EXPORT_XFAILS, RUN)
task_import_xfails = commands.creator(commands.IMPORT_XFAILS, RUN)
task_prune_store = commands.creator(commands.PRUNE_STORE, RUN)
task_calibrate = commands.creator(commands.CALIBRATE, RUN)
task_accept_failures = commands.creator(commands.ACCEPT_FAILURES, RUN)
