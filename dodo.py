"""conv-sweep: doit tasks from model file to verified result, one subtask per case.

Configuration comes from the environment (see README.md); it is resolved once, here.
TensorFlow and torch are imported only inside the task actions.
"""
import os
import sys
from pathlib import Path

from doit import get_initial_workdir
from doit.exceptions import TaskFailed
from doit.tools import config_changed

from pipeline import stages
from pipeline.config import Config
from pipeline.errors import ConfigError
from pipeline.expected import TASK_OF_STAGE
from pipeline.integrity import file_record, unchanged
from pipeline.perf import RUN_TO_RUN_NOISE
from pipeline.executables import cannot_start
from pipeline.fingerprint import executable_identity, stage_fingerprint
from pipeline.targets import toolchain_identity

_PROJECT = Path(__file__).resolve().parent
if not (Path(get_initial_workdir()) / "pyproject.toml").resolve() == _PROJECT / "pyproject.toml":
    # doit reads its plugins (the durable backend, the reporters) from pyproject.toml in the working directory
    raise SystemExit(f"conv-sweep: run doit from the project folder {_PROJECT} (cd there first)")

try:
    CFG = Config.from_env(default_build_dir=Path(__file__).parent / "build", base_dir=get_initial_workdir())
    CASES = CFG.cases()
except ConfigError as err:
    if sys.argv[1:] != ["toolchain"]:  # installing the toolchain needs no valid selection
        raise SystemExit(f"conv-sweep: bad configuration, nothing was run: {err}") from None
    CFG, CASES = Config(build_dir=Path(__file__).parent / "build"), []

DOIT_CONFIG = {
    "default_tasks": ["sweep"],
    "continue": True,  # a failing case fails its own tasks, the rest of the sweep goes on
    "dep_file": str(CFG.build_dir / ".doit.db"),
    "backend": "durable",  # pipeline/durable_db.py: commits per task, one run per build folder
    "verbosity": 0,
    "check_file_uptodate": "md5",  # an upstream rebuild with identical bytes does not cascade
}
if CFG.scheduler:
    # The stages run on Dask (pipeline/cluster.py): doit's threads only submit and wait, so
    # one slot per cluster worker keeps them busy; `doit -n` still overrides it.
    DOIT_CONFIG.update({"par_type": "thread", "num_process": CFG.scheduler.slots})


def _action(task, subject, targets):
    """Run one stage of its subject (one case, or the cases sharing one model on every target),
    here or on the Dask cluster; a failure message becomes a doit task failure. On success the
    outputs' size, mtime and digest are saved with the task (doit values)."""
    if CFG.scheduler:
        from pipeline.cluster import connect

        try:
            message = connect(CFG).run(task, subject)
        except ConfigError as err:
            message = f"conv-sweep: bad configuration: {err}"
    else:
        message = getattr(stages, task)(subject, CFG)
    if message:
        if not CFG.scheduler:  # captured with the task's output; under a scheduler nothing is captured
            print(message, file=sys.stderr)
        return TaskFailed(message)
    return {"output": [file_record(t) for t in targets]}


def _output_intact(task, values, targets):
    """Up to date only while the outputs are the files this task wrote."""
    recorded = values.get("output")
    return isinstance(recorded, list) and len(recorded) == len(targets) and \
        all(unchanged(r, t) for r, t in zip(recorded, targets))


def _clean_case_dir(case):
    """Remove the case's folder on its target, and the model's folder once no target uses it."""
    import shutil

    shutil.rmtree(CFG.case_dir(case), ignore_errors=True)
    model_dir = CFG.model_dir(case)
    if model_dir.is_dir() and not any(p.is_dir() for p in model_dir.iterdir()):
        shutil.rmtree(model_dir, ignore_errors=True)


_TASKS = ["model", "mlir", "vmfb", "verify"]


def _last_task(case):
    """The task an expected failure should fail at ends the case's chain."""
    return TASK_OF_STAGE[case.expect_stage] if case.expect_stage else "verify"


def _groups(stage):
    """(task name, cases, model folder, output folder) per subtask: model and mlir are shared by
    a model's cases on every target, vmfb and verify are one case on its target."""
    cases_root = str(CFG.build_dir / "cases")  # plain strings: 5,000 tasks load in a blink
    if stage in ("model", "mlir"):
        shared = {}
        for case in CASES:
            shared.setdefault(case.name, []).append(case)
        for name, cases in shared.items():
            yield name, cases, os.path.join(cases_root, name), os.path.join(cases_root, name)
    else:
        for case in CASES:
            model_folder = os.path.join(cases_root, case.name)
            yield case.key, [case], model_folder, os.path.join(model_folder, case.target)


def _subtasks(stage, doc, file_dep, targets, extra=None, clean_case_dir=False):
    """One subtask per group; file_dep(case) names its inputs as (True, file) in the model
    folder or (False, file) in the output folder, targets(case) its outputs."""
    for name, cases, model_folder, folder in _groups(stage):
        first = cases[0]
        # A build task no case's chain reaches is not made. One at which every case's chain ends
        # (an expected failure there) declares no target: a listed failure writes none, and is up
        # to date while its inputs are unchanged. Every case has a verify task, which gives its
        # verdict; for a case listed to fail earlier it judges what that stage recorded.
        if stage != "verify" and all(_TASKS.index(stage) > _TASKS.index(_last_task(c)) for c in cases):
            continue
        ends_here = stage != "verify" and all(c.expect_stage is not None and _last_task(c) == stage for c in cases)
        judged_early = stage == "verify" and _last_task(first) != "verify"
        outputs = [os.path.join(folder, t) for t in targets(first)]
        key = {"case": name, "stage": stage, **stage_fingerprint(stage), **(extra(first) if extra else {})}
        # a build task's failure at its listed stage does not fail it (verify judges it): which
        # cases are listed there is part of its key, their buckets only of verify's
        listed = sorted([c.target, c.expect_stage] for c in cases if c.expect_stage and _last_task(c) == stage)
        if listed and stage != "verify":
            key["listed_to_fail"] = listed
        if stage == "verify":
            key["expected"] = first.expected.to_dict() if first.expected else None
        yield {
            "name": name,
            "doc": doc,
            "actions": [(_action, [stage, cases if stage in ("model", "mlir") else first, outputs])],
            "file_dep": [] if judged_early else
            [os.path.join(model_folder if shared else folder, dep) for shared, dep in file_dep(first)],
            "task_dep": [f"{_last_task(first)}:{first.key if _last_task(first) == 'vmfb' else first.name}"]
            if judged_early else [],
            "targets": [] if ends_here else outputs,
            "uptodate": [config_changed(key), (_output_intact, [outputs])],
            "clean": [(_clean_case_dir, [c]) for c in cases] if clean_case_dir else True,
            # doit's thread runner swaps the process-wide sys.stdout to capture; tasks print little
            **({"io": {"capture": False}} if CFG.scheduler else {}),
        }


def task_model():
    """Build the case's model file (.tflite from tf.keras, .onnx from torch), shared by every target."""
    yield from _subtasks("model", "build the model file", lambda c: [], lambda c: [c.model_file],
                         lambda c: {"geometry": c.geometry.to_dict(), "backend": c.backend, "flavor": c.flavor})


def task_mlir():
    """Import the model file to MLIR (tosa-converter-for-tflite / iree-import-onnx), shared by every target."""
    yield from _subtasks("mlir", "import model.mlir (and model.mlirbc for TFLite)",
                         lambda c: [(True, c.model_file)], _mlir_outputs)


def _mlir_outputs(case):
    from pipeline.importer import bytecode_path

    return [stages.MLIR, bytecode_path(Path(stages.MLIR)).name] if case.backend == "tflite" else [stages.MLIR]


def _target_keys():
    """Per target: what identifies its compile and its run (executables and their --version,
    flags, toolchain), so that changing a profile re-runs exactly that target's tasks. A tool
    that cannot start (a missing library) stops everything here, before any task."""
    keys = {}
    for target in CFG.targets:
        p = target.profile
        identity = {"target": p.name, "toolchain": toolchain_identity(target.toolchain)}
        tools = {role: executable_identity(path, CFG.build_dir) for role, path in target.tools(CFG.benchmark)}
        for role, tool in tools.items():
            problem = cannot_start(tool["version"] or "")
            if problem:
                raise SystemExit(f"conv-sweep: bad configuration, nothing was run: target {p.name}: "
                                 f"{role} {tool['path']} cannot start: {problem}")
        keys[p.name] = (
            {**identity, "compiler": tools["compiler"], "mlir": p.mlir, "profiling": list(p.profiling)},
            {**identity, "runner": tools["runner"], "dump_tool": tools["dump_tool"], "profile": p.to_dict(),
             **({"benchmark": tools["benchmark_tool"]} if "benchmark_tool" in tools else {})})  # re-runs verify only
    return keys


_KEYS = _target_keys()


def task_vmfb():
    """Compile the MLIR for the case's target (iree-compile, torq-compile, ...)."""
    yield from _subtasks("vmfb", "compile model.vmfb", lambda c: [(True, stages.mlir_input(c, CFG))],
                         lambda c: [stages.VMFB],
                         lambda c: {**_KEYS[c.target][0], "flags": list(CFG.target(c.target).compile_flags(c.variant))})


def task_verify():
    """Run the .vmfb on the target and compare with the oracle; writes result.json."""
    yield from _subtasks("verify", "run, compare and write result.json",
                         lambda c: [(True, c.model_file), (False, stages.VMFB)], lambda c: ["result.json"],
                         lambda c: {**_KEYS[c.target][1], "compile_only": c.compile_only}, clean_case_dir=True)


def _install_toolchain():
    from pipeline.toolchain import ToolchainError, install, root_from_env

    try:
        install(root_from_env(os.environ))
    except ToolchainError as err:
        return TaskFailed(f"conv-sweep: the Torq toolchain was not installed: {err}")
    return None


def task_toolchain():
    """Install the Torq toolchain (torq-compile, torq-run-module) outside the sources."""
    return {"actions": [(_install_toolchain,)], "verbosity": 2, "uptodate": [False]}


def _report(merge):
    """Write the report now, unless this run writes it when it ends (it ran case tasks); with
    --merge, one report from several build folders or results.json files."""
    from pipeline.report import REPORT_AT_END, merge_reports, report_run

    if merge:
        try:
            merge_reports(merge, CFG)
        except ConfigError as err:
            return TaskFailed(f"conv-sweep: {err}")
        return None
    if os.environ.get(REPORT_AT_END):
        print("conv-sweep: the report is written when this run ends")
        return None
    report_run(CFG, CASES)
    return None


def task_report():
    """Summarize every case's result.json: terminal table, report/{results.json,junit.xml,report.html}."""
    merge = {"name": "merge", "long": "merge", "type": list, "default": [],
             "help": "a build folder or results.json to merge into one report (repeat it: the shards of a run)"}
    return {"actions": [(_report,)], "params": [merge], "verbosity": 2, "uptodate": [False]}


def _accept_failures():
    from pipeline.report import accept_failures

    accept_failures(CFG, CASES)


def _compare(old, new, out, noise_floor):
    from pipeline.diff import compare_runs

    if not old or not new:
        return TaskFailed("conv-sweep: doit compare needs --old and --new (build folders or results.json files)")
    if not noise_floor >= 0:
        return TaskFailed(f"conv-sweep: doit compare --noise-floor={noise_floor}: must be a fraction >= 0")
    try:
        text, regressions = compare_runs(old, new, Path(out) if out else CFG.build_dir / "compare", noise_floor)
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    print(text)
    if regressions:
        return TaskFailed(f"conv-sweep: {regressions} regressions (cases passing in --old, failing in --new)")
    return None


def task_compare():
    """Compare two runs (--old, --new: build folders or results.json): regressions, fixes, buckets, ratios."""
    params = [{"name": "old", "long": "old", "default": "", "help": "the earlier run: a build folder or results.json"},
              {"name": "new", "long": "new", "default": "", "help": "the later run: a build folder or results.json"},
              {"name": "out", "long": "out", "default": "",
               "help": "where compare.html, compare.json and junit.xml go (default: <build>/compare)"},
              {"name": "noise_floor", "long": "noise-floor", "type": float, "default": RUN_TO_RUN_NOISE,
               "help": "run-to-run timing noise of the machine, as |log ratio| (default: measured here, "
                       "see pipeline/perf.py); compare two runs of one compiler to measure yours"}]
    return {"actions": [(_compare,)], "params": params, "verbosity": 2, "uptodate": [False]}


def _shrink(cases, budget):
    from pipeline.shrink import describe, find_case, shrink

    if len(cases) != 1:
        return TaskFailed("conv-sweep: doit shrink takes one case: doit shrink <case>@<target>")
    if budget < 0:
        return TaskFailed(f"conv-sweep: doit shrink --budget={budget}: must be a number of seconds >= 0")
    try:
        summary = shrink(find_case(CASES, cases[0]), CFG, budget=budget or None)
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    print(describe(summary))
    return None


def task_shrink():
    """Shrink a failing case (doit shrink <case>@<target>): the smallest geometry failing the same way."""
    budget = {"name": "budget", "long": "budget", "type": float, "default": 0,
              "help": "seconds after which no new attempt starts; the smallest geometry found so far is kept "
                      "(default 0: no limit)"}
    return {"actions": [(_shrink,)], "params": [budget], "pos_arg": "cases", "verbosity": 2, "uptodate": [False]}


def _print_refused():
    refused = CFG.refused()
    for r in refused:
        print(f"{r.name}  ({r.category}): {r.reason}")
    print(f"{len(refused)} cases not generated: their frontend refuses the geometry")


def task_refused():
    """List the cases not generated (a frontend refuses the geometry), each with the reason."""
    return {"actions": [(_print_refused,)], "verbosity": 2, "uptodate": [False]}


def task_accept_failures():
    """Rewrite the expected-failures file from the latest results (keeps reasons that still hold)."""
    return {"actions": [(_accept_failures,)], "verbosity": 2, "uptodate": [False]}


def task_sweep():
    """Build and verify every case of the sweep."""
    import shutil

    return {
        "actions": None,
        "task_dep": ["verify"],  # the report is written when the run ends (pipeline/doit_reporter.py)
        "clean": [(shutil.rmtree, [str(CFG.build_dir / folder)], {"ignore_errors": True})
                  for folder in ("cases", "report")],
    }
