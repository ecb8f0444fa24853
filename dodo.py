"""conv-sweep: doit tasks from model file to verified result, one subtask per case.

Configuration comes from the environment (see README.md); it is resolved once, here.
TensorFlow and torch are imported only inside the task actions.
"""
import os
from pathlib import Path

from doit import get_initial_workdir
from doit.exceptions import TaskFailed
from doit.tools import config_changed

from pipeline import stages
from pipeline.config import Config
from pipeline.errors import ConfigError
from pipeline.expected import TASK_OF_STAGE
from pipeline.integrity import file_record, unchanged
from pipeline.fingerprint import executable_identity, stage_fingerprint

_PROJECT = Path(__file__).resolve().parent
if not (Path(get_initial_workdir()) / "pyproject.toml").resolve() == _PROJECT / "pyproject.toml":
    # doit reads its plugins (the durable backend, the reporters) from pyproject.toml in the working directory
    raise SystemExit(f"conv-sweep: run doit from the project folder {_PROJECT} (cd there first)")

try:
    CFG = Config.from_env(default_build_dir=Path(__file__).parent / "build", base_dir=get_initial_workdir())
    CASES = CFG.cases()
except ConfigError as err:
    raise SystemExit(f"conv-sweep: bad configuration, nothing was run: {err}") from None

DOIT_CONFIG = {
    "default_tasks": ["sweep"],
    "continue": True,  # a failing case fails its own tasks, the rest of the sweep goes on
    "dep_file": str(CFG.build_dir / ".doit.db"),
    "backend": "durable",  # pipeline/durable_db.py: commits per task, one run per build folder
    "verbosity": 0,
    "check_file_uptodate": "md5",  # an upstream rebuild with identical bytes does not cascade
}


def _action(stage_fn, case, target):
    """Run one stage of one case; a failure message becomes a doit task failure.

    On success the output's size, mtime and digest are saved with the task (doit values).
    """
    import sys

    message = stage_fn(case, CFG)
    if message:
        print(message, file=sys.stderr)
        return TaskFailed(message)
    return {"output": file_record(target)}


def _output_intact(task, values, target):
    """Up to date only while the output is the file this task wrote."""
    return unchanged(values.get("output"), target)


def _clean_case_dir(case):
    import shutil

    shutil.rmtree(CFG.case_dir(case), ignore_errors=True)


_TASKS = ["model", "mlir", "vmfb", "verify"]


def _subtasks(stage, doc, stage_fn, file_dep, target, extra=None, clean_case_dir=False):
    cases_root = str(CFG.build_dir / "cases")
    for case in CASES:
        folder = os.path.join(cases_root, case.name)  # plain strings: 5,000 tasks load in a blink
        # The task an expected failure should fail at ends the case's chain and declares no
        # target: an xfail writes none, and is up to date while its inputs are unchanged.
        last = TASK_OF_STAGE[case.expect_stage] if case.expect_stage else "verify"
        if _TASKS.index(stage) > _TASKS.index(last):
            continue
        ends_here = case.expect_stage is not None and last == stage
        output = os.path.join(folder, target(case))
        key = {"case": case.name, "stage": stage, **stage_fingerprint(stage), **(extra(case) if extra else {})}
        if ends_here:
            key["expected_failure"] = [case.expect_stage, case.expect_reason]
        yield {
            "name": case.name,
            "doc": doc,
            "actions": [(_action, [stage_fn, case, output])],
            "file_dep": [os.path.join(folder, name) for name in file_dep(case)],
            "targets": [] if ends_here else [output],
            "uptodate": [config_changed(key), (_output_intact, [output])],
            "clean": [(_clean_case_dir, [case])] if clean_case_dir else True,
        }


def task_model():
    """Build the case's model file (.tflite from tf.keras, .onnx from torch)."""
    yield from _subtasks("model", "build the model file", stages.model, lambda c: [], lambda c: c.model_file,
                         lambda c: {"geometry": c.geometry.to_dict(), "backend": c.backend, "flavor": c.flavor})


def task_mlir():
    """Import the model file to text MLIR (tosa-converter-for-tflite / iree-import-onnx)."""
    yield from _subtasks("mlir", "import model.mlir", stages.mlir, lambda c: [c.model_file], lambda c: stages.MLIR)


def task_vmfb():
    """Compile the MLIR with iree-compile for llvm-cpu on the host CPU."""
    compiler = {"compiler": executable_identity(CFG.iree_compile, CFG.build_dir), "flags": list(CFG.compile_flags)}
    yield from _subtasks("vmfb", "compile model.vmfb", stages.vmfb, lambda c: [stages.MLIR], lambda c: stages.VMFB,
                         lambda c: compiler)


def task_verify():
    """Run the .vmfb and compare with the oracle; writes result.json."""
    yield from _subtasks("verify", "run, compare and write result.json", stages.verify,
                         lambda c: [c.model_file, stages.VMFB], lambda c: "result.json",
                         lambda c: {"compile_only": c.compile_only}, clean_case_dir=True)


def _report():
    """Write the report now, unless this run writes it when it ends (it ran case tasks)."""
    from pipeline.report import REPORT_AT_END, report_run

    if os.environ.get(REPORT_AT_END):
        print("conv-sweep: the report is written when this run ends")
        return None
    report_run(CFG, CASES)
    return None


def task_report():
    """Summarize every case's result.json: terminal table, report/{results.json,junit.xml,report.html}."""
    return {"actions": [(_report,)], "verbosity": 2, "uptodate": [False]}


def _accept_failures():
    from pipeline.report import accept_failures

    accept_failures(CFG, CASES)


def task_accept_failures():
    """Rewrite the expected-failures file from the latest results (keeps reasons that still hold)."""
    return {"actions": [(_accept_failures,)], "verbosity": 2, "uptodate": [False]}


def task_sweep():
    """Build and verify every case of the sweep."""
    import shutil

    # a case listed as an expected failure ends at the task that should fail, before verify
    ends = [f"{TASK_OF_STAGE[c.expect_stage]}:{c.name}" for c in CASES
            if c.expect_stage and TASK_OF_STAGE[c.expect_stage] != "verify"]
    return {
        "actions": None,
        "task_dep": ["verify", *ends],  # the report is written when the run ends (pipeline/doit_reporter.py)
        "clean": [(shutil.rmtree, [str(CFG.build_dir / folder)], {"ignore_errors": True})
                  for folder in ("cases", "report")],
    }
