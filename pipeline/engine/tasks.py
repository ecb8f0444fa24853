"""doit glue: dodo.py's task creators call these. One subtask per case (or per model, for the
tasks every target shares), keyed on everything that shapes its output, so that a rerun runs
exactly what changed.

The run (its Config and cases) is resolved once, when dodo.py loads. The identities of the
targets' tools (their --version, size, digest) are worked out when a task needs them, once per
run: at the start of a run that executes case tasks (the run command asks, so that a tool that
cannot start stops the run before any task), else at the first up-to-date check that needs
them; `doit list` never asks. Each case task carries its identity in Task.meta, and every task
dodo.py makes carries the Run (the run command and the reporters read them there). The other
commands, each whole, are in pipeline/engine/commands.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from doit.exceptions import TaskFailed

from pipeline.config import Config
from pipeline.core.chain import MLIR, MLIR_BYTECODE, SHARED_TASKS, TASK_OF_STAGE, TASKS, VMFB
from pipeline.core.errors import ConfigError
from pipeline.core.integrity import file_record, unchanged
from pipeline.core.layout import folder as target_folder
from pipeline.outcome.result import RESULT_FILE
from pipeline.space.cases import Case


RUN_KEY = "conv_sweep"  # DOIT_CONFIG's entry holding the Run, for the commands (pipeline/engine/command.py)
META = "conv_sweep"  # Task.meta's entry of a case task: {"stage", "cases": [case keys], "target"}
RUN_META = "conv_sweep_run"  # Task.meta's entry holding the Run, on every task dodo.py makes (for the reporters)


def case_meta(task) -> dict | None:
    """A case task's identity (its Task.meta entry): stage, case keys, target (None for a task
    its model's cases share on every target); None for any other task."""
    return (getattr(task, "meta", None) or {}).get(META)


def run_of(tasks: dict):
    """The Run that dodo.py's tasks carry (doit hands a reporter the tasks), or None."""
    return next((t.meta[RUN_META] for t in tasks.values() if RUN_META in (getattr(t, "meta", None) or {})), None)


@dataclass
class Run:
    """What dodo.py resolved: the configuration, the cases, and the tools' identities once asked."""

    cfg: Config
    cases: list[Case]
    _keys: dict = field(default_factory=dict)  # target -> (compile key, run key)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    costs: dict = field(default_factory=dict)  # case key -> its chain's planned seconds (the start order's)
    report_at_end: bool = False  # this run reaches case tasks: the run command writes the report when it ends
    verbosity: int = 0  # doit's -v of the run (the run command's): at 2 the reporter shows every task
    # a case task ran or a task failed, so the report is read again when the run ends: our
    # reporters say so at the end of the run (with any other reporter it is assumed)
    changed: bool = True

    def target_keys(self, target: str) -> tuple[dict, dict]:
        """What identifies the target's compile and its run (executables and their --version,
        flags, toolchain), worked out on first use. A tool that cannot start stops the run."""
        with self._lock:
            if not self._keys:
                self._keys.update(_target_keys(self.cfg))
            return self._keys[target]


def load(project: Path, workdir: str) -> Run:
    """The run's configuration from the environment, or a one-line error naming the knob."""
    if (Path(workdir) / "pyproject.toml").resolve() != project / "pyproject.toml":
        # doit reads its plugins (the durable backend, the reporters) from pyproject.toml in the working directory
        raise SystemExit(f"conv-sweep: run doit from the project folder {project} (cd there first)")
    try:
        cfg = Config.from_env(default_build_dir=project / "build", base_dir=workdir, install_to=sys.stderr)
        return Run(cfg, cfg.cases())
    except ConfigError as err:
        raise SystemExit(f"conv-sweep: bad configuration, nothing was run: {err}") from None


def doit_config(run: Run) -> dict:
    config = {
        RUN_KEY: run,  # the run command's (pipeline/engine/command.py)
        "default_tasks": ["sweep"],
        "continue": True,  # a failing case fails its own tasks, the rest of the sweep goes on
        "dep_file": str(run.cfg.layout.db),
        "backend": "durable",  # pipeline/engine/durable_db.py: commits per task, one run per build folder
        "verbosity": 0,
        "check_file_uptodate": "md5",  # an upstream rebuild with identical bytes does not cascade
        # `doit -n N` runs N threads: the work is in tools and helper processes, never in the
        # runner (pipeline/core/isolate.py), and threads share one TensorFlow and one torch helper
        "par_type": "thread",
    }
    if run.cfg.scheduler:
        # The stages run on Dask (pipeline/engine/cluster.py): doit's threads only submit and
        # wait, so one slot per cluster worker keeps them busy; `doit -n` still overrides it.
        # A local cluster gets one more: it checks and prepares the next task while every
        # worker is busy, and submits it only once one is free (Cluster.free), so that Dask
        # never hands it to a busy worker (which, dying, would take it down too).
        config["num_process"] = run.cfg.scheduler.slots + (1 if run.cfg.scheduler.local_workers else 0)
    return config


def _target_keys(cfg: Config) -> dict:
    from pipeline.core.executables import cannot_start
    from pipeline.core.fingerprint import executable_identity
    from pipeline.targets.profiles import toolchain_identity

    keys = {}
    for target in cfg.targets:
        p = target.profile
        identity = {"target": p.name, "toolchain": toolchain_identity(target.toolchain)}
        tools = {role: executable_identity(path, **target.launchers) for role, path in target.tools(cfg.benchmark)}
        for role, tool in tools.items():
            problem = cannot_start(tool["version"] or "")
            if problem:
                raise SystemExit(f"conv-sweep: bad configuration, nothing was run: target {p.name}: "
                                 f"{role} {tool['path']} cannot start: {problem}")
        # the time limits are not in the keys: a limit decides whether a tool may finish, not
        # what a finished one produced (a case cut by one fails, and runs again unless it is listed)
        # nor are the toggle flags: only `doit bugreport` compiles with them
        profile = {k: v for k, v in p.to_dict().items() if k not in ("timeouts", "toggle_flags")}
        keys[p.name] = (
            {**identity, "compiler": tools["compiler"], "mlir": p.mlir, "profiling": list(p.profiling),
             **({"launch": list(target.compile_launch)} if target.compile_launch else {})},
            {**identity, "runner": tools["runner"], "dump_tool": tools["dump_tool"], "profile": profile,
             **({"benchmark": tools["benchmark_tool"]} if "benchmark_tool" in tools else {})})  # re-runs verify only
    return keys


class key_unchanged:
    """An uptodate check, in doit's documented form (a callable of the task and its saved values
    that may add to task.value_savers): up to date while the task's key (a dict computed when
    doit checks the task, not when dodo.py loads) is the one saved with its last success."""

    # Our own name for the saved digest. Build folders whose tasks were saved under the name
    # doit's config_changed uses ("_config_changed", before this name) run each task once
    # more, and hold from then on.
    SAVED = "conv_sweep_key"

    def __init__(self, make_key):
        self.make_key = make_key

    def __call__(self, task, values):
        digest = hashlib.md5(json.dumps(self.make_key(), sort_keys=True).encode("utf-8")).hexdigest()
        task.value_savers.append(lambda: {self.SAVED: digest})
        return values.get(self.SAVED) == digest


# ------------------------------------------------------------------ the case tasks

def _action(run: Run, stage_fn, subject, targets):
    """Run one stage of its subject (one case, or the cases sharing one model on every target),
    here or on the Dask cluster; a failure message becomes a doit task failure. On success the
    outputs' size, mtime and digest are saved with the task (doit values)."""
    if run.cfg.scheduler:
        from pipeline.engine.cluster import connect

        try:
            message = connect(run.cfg).run(stage_fn, subject)
        except ConfigError as err:
            message = f"conv-sweep: bad configuration: {err}"
    else:
        message = stage_fn(subject, run.cfg)
    if message:
        return TaskFailed(message)
    return {"output": [file_record(t) for t in targets]}


def _output_intact(task, values, targets):
    """Up to date only while the outputs are the files this task wrote."""
    recorded = values.get("output")
    return isinstance(recorded, list) and len(recorded) == len(targets) and \
        all(unchanged(r, t) for r, t in zip(recorded, targets))


def _clean_case_dir(cfg: Config, case: Case):
    """Remove the case's folder on its target, and the model's folder once no target uses it."""
    shutil.rmtree(cfg.case_dir(case), ignore_errors=True)
    model_dir = cfg.model_dir(case)
    if model_dir.is_dir() and not any(p.is_dir() for p in model_dir.iterdir()):
        shutil.rmtree(model_dir, ignore_errors=True)


def _last_task(case: Case) -> str:
    """The task an expected failure should fail at ends the case's chain (a listed timeout's
    chain runs on: it may finish within its budget)."""
    return TASK_OF_STAGE[case.expect_stage] if case.expect_stage and not case.expected.may_finish else "verify"


def _module_unless_cut(case: Case) -> bool:
    """Whether the case's verify task runs a module that may not exist: listed as a compile
    timeout, its compile may be cut (then verify judges that) or finish (then verify runs it)."""
    return bool(case.expected and case.expected.may_finish and TASK_OF_STAGE[case.expect_stage] == "vmfb")


@dataclass(frozen=True)
class _Spec:
    """One case task: its doc, its inputs as (in the model's folder?, file), its outputs, and
    what else its key holds."""

    doc: str
    inputs: object  # (run, case) -> [(bool, file name)]
    outputs: object  # (run, case) -> [file name]
    key: object = None  # (run, case) -> dict


SPECS = {
    "model": _Spec("build the model file", lambda r, c: [], lambda r, c: [c.model_file],
                   lambda r, c: {"geometry": c.geometry.to_dict(), "backend": c.backend, "flavor": c.flavor,
                                 **({"weights": c.weights.digest} if c.weights else {})}),
    "mlir": _Spec("import model.mlir (and model.mlirbc for TFLite)", lambda r, c: [(True, c.model_file)],
                  lambda r, c: [MLIR, MLIR_BYTECODE] if c.backend == "tflite" else [MLIR]),
    "vmfb": _Spec("compile model.vmfb", lambda r, c: [(True, r.cfg.mlir_input(c))], lambda r, c: [VMFB],
                  lambda r, c: {**r.target_keys(c.target)[0],
                                "flags": list(r.cfg.target(c.target).compile_flags(c.variant))}),
    "verify": _Spec("run, compare and write result.json", lambda r, c: [(True, c.model_file), (False, VMFB)],
                    lambda r, c: [RESULT_FILE],
                    lambda r, c: {**r.target_keys(c.target)[1], "compile_only": c.compile_only}),
}


def _groups(run: Run, stage: str):
    """(task name, cases, model folder, output folder) per subtask: model and mlir are shared by
    a model's cases on every target, vmfb and verify are one case on its target."""
    cases_root = str(run.cfg.layout.cases)  # plain strings: 5,000 tasks load in a blink
    if stage in SHARED_TASKS:
        shared = {}
        for case in run.cases:
            shared.setdefault(case.name, []).append(case)
        for name, cases in shared.items():
            yield name, cases, os.path.join(cases_root, name), os.path.join(cases_root, name)
    else:
        for case in run.cases:
            model_folder = os.path.join(cases_root, case.name)
            yield case.key, [case], model_folder, os.path.join(model_folder, target_folder(case.target))


def plan_order(run: Run, tasks: dict, lanes: int) -> None:
    """Order the verify tasks as their chains should start (the sweep asks for verify tasks in
    this order, and doit runs each one's chain depth first): a first failure and a first pass
    at once, then every other chain the most expensive first (on more than one lane: `doit -n`,
    or the cluster's slots), by last run's measured durations or the cost model
    (pipeline/engine/history.py), so that no long chain starts late and leaves a lane idle at
    the end. Sets run.costs (the plan the progress line counts down)."""
    group = tasks.get("verify")
    if group is None or len(run.cases) < 3:
        return
    order = {name: i for i, name in enumerate(_costliest_first(run, lanes))}
    group.task_dep.sort(key=lambda name: order.get(name, -1))


def _costliest_first(run: Run, lanes: int) -> list[str]:
    """The verify task names in their chains' start order (plan_order)."""
    from pipeline.engine.history import chain_costs, start_order

    by_key = {c.key: c for c in run.cases}
    lanes = run.cfg.scheduler.slots if run.cfg.scheduler else max(lanes, 1)
    run.costs = chain_costs(run.cfg, run.cases)
    first = []  # the cheapest chain expected to fail (listed) and the cheapest expected to pass
    for listed in (True, False):
        kind = [c.key for c in run.cases if (c.expected is not None) == listed]
        if kind:
            first.append(min(kind, key=lambda k: (run.costs[k], k)))
    first.sort(key=lambda k: (run.costs[k], k))
    return [f"verify:{k}" for k in start_order(list(by_key), run.costs, lanes, tuple(first))]


def subtasks(run: Run, stage: str, stage_fn):
    """One doit subtask per group of the stage (pipeline/core/chain.py's TASKS), running stage_fn."""
    from pipeline.core.fingerprint import stage_fingerprint

    spec = SPECS[stage]
    for name, cases, model_folder, folder in _groups(run, stage):
        first = cases[0]
        # A build task no case's chain reaches is not made. One at which every case's chain ends
        # (an expected failure there) declares no target: a listed failure writes none, and is up
        # to date while its inputs are unchanged. Every case has a verify task, which gives its
        # verdict; for a case listed to fail earlier it judges what that stage recorded.
        if stage != "verify" and all(TASKS.index(stage) > TASKS.index(_last_task(c)) for c in cases):
            continue
        ends_here = stage != "verify" and all(c.expect_stage is not None and _last_task(c) == stage for c in cases)
        judged_early = stage == "verify" and _last_task(first) != "verify"
        outputs = [os.path.join(folder, t) for t in spec.outputs(run, first)]
        # a build task's failure at its listed stage does not fail it (verify judges it): which
        # cases are listed there is part of its key, their buckets only of verify's
        listed = sorted([c.target, c.expect_stage] for c in cases
                        if c.expect_stage and TASK_OF_STAGE[c.expect_stage] == stage)
        module_unless_cut = stage == "verify" and _module_unless_cut(first)
        inputs = [os.path.join(model_folder if shared else folder, dep) for shared, dep in spec.inputs(run, first)
                  if not (module_unless_cut and dep == VMFB)]

        def key(stage=stage, name=name, first=first, listed=listed, module_unless_cut=module_unless_cut,
                folder=folder):
            key = {"case": name, "stage": stage, **stage_fingerprint(stage),
                   **(spec.key(run, first) if spec.key else {})}
            if listed and stage != "verify":
                key["listed_to_fail"] = listed
            if stage == "verify":
                key["expected"] = first.expected.to_dict() if first.expected else None
            if module_unless_cut:  # the module, where the compile finished: what file_dep would say
                key["module"] = file_record(Path(folder) / VMFB).get("sha256", "absent")
            if first.expected and first.expected.may_finish and TASK_OF_STAGE[first.expect_stage] == stage:
                # a listed timeout is tried again under another budget (a cut leaves no output)
                key["budget"] = run.cfg.limit(first, first.expect_stage).hard
            return key

        ending = f"{_last_task(first)}:{first.key if _last_task(first) == 'vmfb' else first.name}"
        yield {
            "name": name,
            "doc": spec.doc,
            "actions": [(_action, [run, stage_fn, cases if stage in SHARED_TASKS else first, outputs])],
            "file_dep": [] if judged_early else inputs,
            "task_dep": [ending] if judged_early else [f"vmfb:{first.key}"] if module_unless_cut else [],
            "targets": [] if ends_here else outputs,
            "uptodate": [key_unchanged(key), (_output_intact, [outputs])],
            "clean": [(_clean_case_dir, [run.cfg, c]) for c in cases] if stage == "verify" else True,
            "meta": {META: {"stage": stage, "cases": [c.key for c in cases], "target": None if stage in SHARED_TASKS
                            else first.target}, RUN_META: run},
            # doit's thread runner swaps the process-wide sys.stdout to capture; tasks print
            # nothing (a failure's message is the TaskFailed's, the tools' output is in logs)
            "io": {"capture": False},
        }


def sweep_clean(run: Run) -> list:
    return [(shutil.rmtree, [str(folder)], {"ignore_errors": True}) for folder in run.cfg.layout.cleaned]
