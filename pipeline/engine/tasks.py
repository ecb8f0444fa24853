"""doit glue: dodo.py's task creators call these. One subtask per case (or per model, for the
tasks every target shares), keyed on everything that shapes its output, so that a rerun runs
exactly what changed.

The run (its Config and cases) is resolved once, when dodo.py loads. The identities of the
targets' tools (their --version, size, digest) are worked out when a task needs them, once per
run: at the start of a run that executes case tasks (the run command asks, so that a tool that
cannot start stops the run before any task), else at the first up-to-date check that needs
them; `doit list` never asks. Each case task carries its identity in Task.meta (the run
command and the reporter read it there).
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


def case_meta(task) -> dict | None:
    """A case task's identity (its Task.meta entry): stage, case keys, target (None for a task
    its model's cases share on every target); None for any other task."""
    return (getattr(task, "meta", None) or {}).get(META)


@dataclass
class Run:
    """What dodo.py resolved: the configuration, the cases, and the tools' identities once asked."""

    cfg: Config
    cases: list[Case]
    _keys: dict = field(default_factory=dict)  # target -> (compile key, run key)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    costs: dict = field(default_factory=dict)  # case key -> its chain's planned seconds (the start order's)
    report_at_end: bool = False  # this run reaches case tasks: the run command writes the report when it ends

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
    """An uptodate check: up to date while the task's key (a dict computed when doit checks the
    task, not when dodo.py loads) is the one saved with its last success. The digest is saved
    through task.value_savers, under the name and in the form of doit's config_changed, so a
    build folder's saved keys hold across both."""

    SAVED = "_config_changed"

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
                   lambda r, c: {"geometry": c.geometry.to_dict(), "backend": c.backend, "flavor": c.flavor}),
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
    at once, then planned on the run's lanes (`doit -n`, or the cluster's slots), one streaming
    the cheapest chains so that results come in from the first seconds, the others the most
    expensive first, by last run's measured durations or the cost model
    (pipeline/engine/history.py), so that no long chain starts last and leaves a lane idle at
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
                            else first.target}},
            # doit's thread runner swaps the process-wide sys.stdout to capture; tasks print
            # nothing (a failure's message is the TaskFailed's, the tools' output is in logs)
            "io": {"capture": False},
        }


def sweep_clean(run: Run) -> list:
    return [(shutil.rmtree, [str(folder)], {"ignore_errors": True}) for folder in run.cfg.layout.cleaned]


# ------------------------------------------------------------------ the other commands' actions

def report(run: Run, merge):
    """Write the report now, unless this run writes it when it ends (it ran case tasks); with
    --merge, one report from several build folders or results.json files."""
    from pipeline.results.report import merge_reports, report_run

    if merge:
        try:
            merge_reports(merge, run.cfg)
        except ConfigError as err:
            return TaskFailed(f"conv-sweep: {err}")
        return None
    if run.report_at_end:
        print("conv-sweep: the report is written when this run ends")
        return None
    report_run(run.cfg, run.cases)
    return None


def accept_failures(run: Run):
    from pipeline.curate.lists import accept_failures

    accept_failures(run.cfg, run.cases)


def export_xfails(run: Run, params):
    from pipeline.curate.lists import export_xfails

    if not params or any(c.isspace() or c in "[]" for c in params):
        return TaskFailed(f"conv-sweep: doit export_xfails --params={params!r}: must be upstream's test "
                          "parameters, e.g. sim-sl2610-v1")
    export_xfails(run.cfg, run.cases, params)
    return None


def import_xfails(run: Run, files):
    from pipeline.curate.lists import import_xfails

    if len(files) != 1:
        return TaskFailed("conv-sweep: doit import_xfails FILE: name one xfail file "
                          "(upstream's tests/test_conv_sweep-xfails.txt)")
    try:
        import_xfails(run.cfg, run.cases, Path(files[0]))
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    return None


def prune_store(run: Run, days, max_gb):
    store = run.cfg.store()
    if store is None:
        return TaskFailed("conv-sweep: the store is off (CONV_SWEEP_CACHE_DIR=off): nothing to prune")
    if days < 0 or max_gb < 0:
        return TaskFailed(f"conv-sweep: doit prune_store --days={days} --max-gb={max_gb}: must be >= 0 (0: no limit)")
    found = store.prune(max_age_days=days or None, max_bytes=int(max_gb * 1e9) if max_gb else None)
    print(f"{store.root}: {found['entries_removed']} entries removed, {found['entries_kept']} kept; "
          f"{found['bytes_freed'] / 1e6:.1f} MB freed, {found['bytes_kept'] / 1e6:.1f} MB kept")
    return None


def calibrate(run: Run, out):
    from pipeline.curate.calibrate import calibrate

    for line in calibrate(run.cfg, run.cases, Path(out) if out else None):
        print(line)


def compare(run: Run, old, new, out, noise_floor):
    from pipeline.triage.diff import compare_runs

    if not old or not new:
        return TaskFailed("conv-sweep: doit compare needs --old and --new (targets of this build folder, "
                          "build folders or results.json files)")
    if not noise_floor >= 0:
        return TaskFailed(f"conv-sweep: doit compare --noise-floor={noise_floor}: must be a fraction >= 0")
    try:
        text, regressions = compare_runs(old, new, Path(out) if out else run.cfg.layout.compare_dir(), noise_floor,
                                         run.cfg.layout)
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    print(text)
    if regressions:
        return TaskFailed(f"conv-sweep: {regressions} regressions (cases passing in --old, failing in --new)")
    return None


def shrink(run: Run, cases, budget, keep_data):
    from pipeline.triage.shrink import describe, find_cases, shrink

    if len(cases) != 1:
        return TaskFailed("conv-sweep: doit shrink takes one case: doit shrink <case>@<target>")
    if budget < 0:
        return TaskFailed(f"conv-sweep: doit shrink --budget={budget}: must be a number of seconds >= 0")
    try:
        chosen = find_cases(run.cases, cases[0])  # a case name: that case on every selected target
        for case in chosen:
            print(describe(shrink(case, run.cfg, budget=budget or None, keep_data=keep_data)))
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    return None


def bugreport(run: Run, buckets, budget, keep_data):
    from pipeline.triage.bugreport import bugreports

    if budget < 0:
        return TaskFailed(f"conv-sweep: doit bugreport --budget={budget}: must be a number of seconds >= 0")
    try:
        bugreports(run.cfg, run.cases, list(buckets), budget, keep_data=keep_data)
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    return None


def bisect(run: Run, subject, target, versions):
    """`doit bisect CASE --target T --versions A..B`: doit hands what follows a task taking
    positional arguments to it whole, so the options after the case are read here."""
    import argparse

    from pipeline.triage.bisect import bisect

    parser = argparse.ArgumentParser(prog="doit bisect", add_help=False, exit_on_error=False)
    parser.add_argument("subject", nargs="*")
    parser.add_argument("--target", default=target)
    parser.add_argument("--versions", default=versions)
    try:
        args, unknown = parser.parse_known_args(list(subject))
    except argparse.ArgumentError as err:
        return TaskFailed(f"conv-sweep: doit bisect: {err}")
    subject, target, versions = args.subject + unknown, args.target, args.versions
    if len(subject) != 1 or not versions:
        return TaskFailed("conv-sweep: doit bisect takes one case or bucket and --versions FIRST..LAST: "
                          "doit bisect <case-or-bucket> --target llvm-cpu --versions 3.9.0..3.13.0")
    if not target and len(run.cfg.targets) != 1:
        return TaskFailed("conv-sweep: doit bisect --target: several targets are selected, name one")
    try:
        found = bisect(run.cfg, run.cases, subject[0], target or run.cfg.targets[0].name, versions)
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    if found["first_bad"] is None:
        return TaskFailed("conv-sweep: bisect found no release where the case starts failing in the range")
    return None


def print_refused(run: Run):
    refused = run.cfg.refused()
    for r in refused:
        print(f"{r.name}  ({r.category}): {r.reason}")
    print(f"{len(refused)} cases not generated: their frontend refuses the geometry or their flavor cannot check it")


def hunt(run: Run, budget, seed, strategy, lanes, flavors):
    """`doit hunt`: a guided search for failure buckets the sweep misses (pipeline/triage/hunt.py),
    its cases run on `lanes` lanes (default: the machine's cores)."""
    from pipeline.engine.history import estimator
    from pipeline.space.cases import parse_variants
    from pipeline.triage.hunt import hunt

    if lanes < 0:
        return TaskFailed(f"conv-sweep: doit hunt --lanes={lanes}: must be a number of lanes >= 1 (0: the cores)")
    try:
        chosen = parse_variants(flavors, "doit hunt --flavors") if flavors else None
        summary = hunt(run.cfg, run.cases, budget, seed, strategy, lanes or os.cpu_count() or 1,
                       estimate=estimator(run.cfg), flavors=chosen)
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    print(f"conv-sweep: {len(summary['new_buckets'])} new buckets" + "".join(
        f"\n  {b['target']}: {b['bucket']}  ({b['cases']} cases, first {b['first_case']})"
        for b in summary["new_buckets"]))
    return None
