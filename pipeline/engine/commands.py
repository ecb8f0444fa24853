"""The commands of conv-sweep beside the case tasks (`doit report`, `doit hunt`, ...) and `doit
sweep` itself, each one spec: its name and doc (what `doit list` and `doit help <name>` show),
its options (doit's option dicts: each arrives in the action as a keyword argument of its
name), its checks and its action, side by side. dodo.py lists the specs (`creator`).

`perform` runs any command: the options that follow its positional arguments (`doit bisect
CASE --target T`: doit hands everything after such a task to it whole) are read with doit's
own parser from the same option dicts; the spec's check runs first; a ConfigError (an option
or argument that is wrong, named with its value) and a failed outcome (a message the action
returns) become doit's TaskFailed here and nowhere else. Nothing heavy is imported before a
command runs: `doit list` loads this module.
"""
from __future__ import annotations

import getopt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from doit.cmdparse import CmdOption, CmdParseError, TaskParse
from doit.exceptions import TaskFailed

from pipeline.core.errors import ConfigError
from pipeline.engine.tasks import RUN_META, sweep_clean
from pipeline.targets.perf import RUN_TO_RUN_NOISE

COMMAND = "conv_sweep_command"  # Task.meta's entry of a command's task: {"lock": bool}


class Usage(ConfigError):
    """The words after `doit <command>` are not what it takes; the message, whole, says what it takes."""

    def __init__(self, command: str, message: str):
        super().__init__(f"doit {command}", None, message)
        self.args = (message,)


@dataclass(frozen=True)
class CommandSpec:
    """One command, `doit <name>`, whole."""

    name: str  # the task's name
    doc: str  # its line in `doit list`, and `doit help <name>`'s
    action: Callable | None  # (run, **options) -> None, or a message saying how it failed; None: a group of tasks
    params: tuple[dict, ...] = ()  # doit's option dicts, each arriving in `check` and `action` under its name
    pos_arg: str | None = None  # the option the words after `doit <name>` arrive in (a list), where it takes any
    # (**options) -> None, or the options it read into values (--flavors as a set); raises a
    # ConfigError naming the option that is wrong, before the action runs
    check: Callable | None = None
    lock: bool = True  # holds the build folder's lock (False: it works in a folder of its own, or on the store)
    more: Callable | None = None  # (run) -> the rest of a group's task dict (task_dep, clean)


def perform(spec: CommandSpec, run, **given):
    """Run the command's action with its options (doit's, and those among its positional
    arguments), checked first; a ConfigError, or a message the action returns, is the task's
    failure."""
    try:
        options = options_after(spec, given) if spec.pos_arg else given
        if spec.check:
            options = {**options, **(spec.check(**options) or {})}
        failed = spec.action(run, **options)
    except ConfigError as err:
        return TaskFailed(f"conv-sweep: {err}")
    return TaskFailed(f"conv-sweep: {failed}") if failed else None


def options_after(spec: CommandSpec, given: dict) -> dict:
    """`given` with the options found among the positional arguments (`doit bisect CASE
    --target T`) read by doit's parser from the spec's option dicts, later ones winning; the
    other words are the positional arguments (after `--`, every word is)."""
    parser = TaskParse([CmdOption(p) for p in spec.params])
    try:
        found, words = getopt.gnu_getopt(list(given.get(spec.pos_arg) or []), parser.get_short(), parser.get_long())
    except getopt.GetoptError as err:
        raise Usage(spec.name, f"doit {spec.name}: {err.msg} (`doit help {spec.name}` lists its options)") from None
    values = {k: list(v) if isinstance(v, list) else v for k, v in given.items()}
    for opt, value in found:
        option = parser.get_option(opt)[0]
        try:
            parser.parse_only([opt] if option.type is bool else [opt, value], values)
        except CmdParseError:
            raise ConfigError(f"doit {spec.name} --{option.long}", value,
                              f"must be of type {option.type.__name__}") from None
    return {**values, spec.pos_arg: words}


def task(spec: CommandSpec, run) -> dict:
    """The command's doit task (its doc is its creator's docstring)."""
    meta = {"meta": {COMMAND: {"lock": spec.lock}, RUN_META: run}}
    if spec.action is None:
        return {"actions": None, **spec.more(run), **meta}
    return {"actions": [(perform, [spec, run])], "params": list(spec.params),
            **({"pos_arg": spec.pos_arg} if spec.pos_arg else {}), "verbosity": 2, "uptodate": [False], **meta}


def creator(spec: CommandSpec, run):
    """dodo.py's `task_<name>` for the command: doit names the task after the variable and shows
    the creator's docstring."""
    def create():
        return task(spec, run)

    create.__doc__ = spec.doc
    create.__name__ = create.__qualname__ = f"task_{spec.name}"
    return create


def takes_lock(task) -> bool:
    """Whether a task holds the build folder's lock while it runs: every one but a command's
    whose spec says it works elsewhere."""
    return ((getattr(task, "meta", None) or {}).get(COMMAND) or {}).get("lock", True)


# ------------------------------------------------------------------ the commands

# the report is written when the run ends (pipeline/engine/command.py)
SWEEP = CommandSpec("sweep", "Build and verify every case of the sweep.", None,
                    more=lambda run: {"task_dep": ["verify"], "clean": sweep_clean(run)})


def _report(run, merge):
    """Write the report now, unless this run writes it when it ends (it ran case tasks); with
    --merge, one report from several build folders or results.json files."""
    from pipeline.results.report import merge_reports, report_run

    if merge:
        merge_reports(merge, run.cfg)
    elif run.report_at_end:
        print("conv-sweep: the report is written when this run ends")
    else:
        report_run(run.cfg, run.cases)


REPORT = CommandSpec(
    "report", "Summarize every case's result.json: terminal table, report/{results.json,junit.xml,report.html}.",
    _report, params=({"name": "merge", "long": "merge", "type": list, "default": [],
                      "help": "a build folder or results.json to merge into one report (repeat it: the shards of a run)"},))


def _check_compare(old, new, noise_floor, **_):
    if not old or not new:
        raise Usage("compare", "doit compare needs --old and --new (targets of this build folder, build folders or "
                               "results.json files)")
    if not noise_floor >= 0:
        raise ConfigError("doit compare --noise-floor", noise_floor, "must be a fraction >= 0")


def _compare(run, old, new, out, noise_floor):
    from pipeline.triage.diff import compare_runs

    text, regressions = compare_runs(old, new, Path(out) if out else run.cfg.layout.compare_dir(), noise_floor,
                                     run.cfg.layout)
    print(text)
    return f"{regressions} regressions (cases passing in --old, failing in --new)" if regressions else None


COMPARE = CommandSpec(
    "compare", "Compare two runs (--old, --new: targets of this build folder, build folders or results.json): "
               "regressions, fixes, buckets, ratios.",
    _compare, check=_check_compare, params=(
        {"name": "old", "long": "old", "default": "",
         "help": "the earlier run: a target of this build folder (torq@2.2.1), a build folder or results.json"},
        {"name": "new", "long": "new", "default": "",
         "help": "the later run: a target of this build folder (torq), a build folder or results.json"},
        {"name": "out", "long": "out", "default": "",
         "help": "where compare.html, compare.json and junit.xml go (default: <build>/compare)"},
        {"name": "noise_floor", "long": "noise-floor", "type": float, "default": RUN_TO_RUN_NOISE,
         "help": "run-to-run timing noise of the machine, as |log ratio| (default: measured here, "
                 "see pipeline/targets/perf.py); compare two runs of one compiler to measure yours"}))

KEEP_DATA = {"name": "keep_data", "long": "keep-data", "type": bool, "default": False,
             "help": "every attempt crops the original case's weights and input instead of drawing its own "
                     "(a failure that depends on the values)"}


def _budget_at_least_zero(command: str):
    def check(budget, **_):
        if budget < 0:
            raise ConfigError(f"doit {command} --budget", budget, "must be a number of seconds >= 0")
    return check


def _check_shrink(cases, budget, **_):
    if len(cases) != 1:
        raise Usage("shrink", "doit shrink takes one case: doit shrink <case>@<target>")
    _budget_at_least_zero("shrink")(budget)


def _shrink(run, cases, budget, keep_data):
    from pipeline.triage.shrink import describe, find_cases, shrink

    for case in find_cases(run.cases, cases[0]):  # a case name: that case on every selected target
        print(describe(shrink(case, run.cfg, budget=budget or None, keep_data=keep_data)))


# works in a folder of its own (<build>/shrink/<case>): it may run beside a sweep, or another shrink
SHRINK = CommandSpec(
    "shrink", "Shrink a failing case (doit shrink <case>@<target>): the smallest geometry failing the same way.",
    _shrink, check=_check_shrink, pos_arg="cases", lock=False, params=(
        {"name": "budget", "long": "budget", "type": float, "default": 0,
         "help": "seconds after which no new attempt starts; the smallest geometry found so far is kept "
                 "(default 0: no limit)"}, KEEP_DATA))


def _bugreport(run, buckets, budget, keep_data):
    from pipeline.triage.bugreport import bugreports

    bugreports(run.cfg, run.cases, list(buckets), budget, keep_data=keep_data)


BUGREPORT = CommandSpec(
    "bugreport", "Write a report ready to file upstream per failure bucket (doit bugreport [bucket-or-case ...]): "
                 "bugreports/<target>/.",
    _bugreport, check=_budget_at_least_zero("bugreport"), pos_arg="buckets", params=(
        {"name": "budget", "long": "budget", "type": float, "default": 300,
         "help": "seconds per bucket: half for shrinking (without a valid earlier shrink), the rest for the target's "
                 "toggle flags (default 300; 0: the bucket's smallest case as it is, no flags)"}, KEEP_DATA))


def _check_hunt(budget, strategy, lanes, flavors, cases, **_):
    from pipeline.space.cases import parse_variants
    from pipeline.triage.hunt import STRATEGIES

    if lanes < 0:
        raise ConfigError("doit hunt --lanes", lanes, "must be a number of lanes >= 1 (0: the cores)")
    chosen = parse_variants(flavors, "doit hunt --flavors") if flavors else None
    if strategy not in STRATEGIES:
        raise ConfigError("doit hunt --strategy", strategy, f"must be one of {', '.join(STRATEGIES)}")
    if not budget > 0:
        raise ConfigError("doit hunt --budget", budget, "must be a number of seconds > 0")
    if cases < 0:
        raise ConfigError("doit hunt --cases", cases, "must be a number of cases >= 1 (0: no limit)")
    return {"flavors": chosen}


def _on_cluster(cfg):
    """How a triage command's cases run on the run's Dask cluster (CONV_SWEEP_SCHEDULER), started
    for `cfg` (its build folder), as the sweep's tasks run there."""
    from pipeline.engine.cluster import connect

    return connect(cfg).run


def _hunt(run, budget, seed, strategy, lanes, flavors, cases):
    """A guided search for failure buckets the sweep misses (pipeline/triage/hunt.py), its
    cases run on `lanes` lanes (0: the machine's cores)."""
    from pipeline.engine.history import estimator
    from pipeline.triage.hunt import hunt

    scheduler = run.cfg.scheduler
    summary = hunt(run.cfg, run.cases, budget, seed, strategy,
                   scheduler.slots if scheduler else lanes or os.cpu_count() or 1,
                   estimate=estimator(run.cfg), flavors=flavors, remote=_on_cluster if scheduler else None,
                   limit=cases)
    print(f"conv-sweep: {len(summary['new_buckets'])} new buckets" + "".join(
        f"\n  {b['target']}: {b['bucket']}  ({b['cases']} cases, first {b['first_case']})"
        for b in summary["new_buckets"]))


HUNT = CommandSpec(
    "hunt", "Search for failure buckets the sweep misses (doit hunt --budget S --seed N): new ones are shrunk and "
            "reported; build/hunt/.",
    _hunt, check=_check_hunt, params=(
        {"name": "budget", "long": "budget", "type": float, "default": 600,
         "help": "wall-clock seconds of this hunt: the search takes 3/4, the new buckets' bug reports the rest "
                 "(at most 1/4; default 600)"},
        {"name": "seed", "long": "seed", "type": int, "default": 0, "help": "the search's seed (default 0)"},
        {"name": "strategy", "long": "strategy", "default": "hunt",
         "help": "hunt (boundary values, the extended dimensions, moves near the cases found; default) or "
                 "sample (further draws of the sweep's own categories: the baseline)"},
        {"name": "lanes", "long": "lanes", "type": int, "default": 0,
         "help": "cases run at once (default 0: one per core)"},
        {"name": "flavors", "long": "flavors", "default": "",
         "help": "only these flavors, e.g. onnx_f32,tflite_w8i8 (default: every flavor of each target)"},
        {"name": "cases", "long": "cases", "type": int, "default": 0,
         "help": "start no case once this many have started, over resumes (default 0: the budget alone)"}))


def _check_bisect(subject, versions, **_):
    if len(subject) != 1 or not versions:
        raise Usage("bisect", "doit bisect takes one case or bucket and --versions FIRST..LAST: "
                              "doit bisect <case-or-bucket> --target llvm-cpu --versions 3.9.0..3.13.0")


def _bisect(run, subject, target, versions):
    from pipeline.triage.bisect import bisect

    if not target and len(run.cfg.targets) != 1:
        raise Usage("bisect", "doit bisect --target: several targets are selected, name one")
    found = bisect(run.cfg, run.cases, subject[0], target or run.cfg.targets[0].name, versions)
    return "bisect found no release where the case starts failing in the range" if found["first_bad"] is None \
        else None


BISECT = CommandSpec(
    "bisect", "The first release on which a case or a bucket's smallest case fails "
              "(doit bisect CASE-OR-BUCKET --target T --versions A..B).",
    _bisect, check=_check_bisect, pos_arg="subject", params=(
        {"name": "target", "long": "target", "default": "",
         "help": "the target whose toolchain's releases are searched (default: the only selected target)"},
        {"name": "versions", "long": "versions", "default": "",
         "help": "FIRST..LAST: the released versions searched, e.g. 3.9.0..3.13.0 (llvm-cpu) or 2.2.1..2.3.0 (torq)"}))


def _refused(run):
    refused = run.cfg.refused()
    for r in refused:
        print(f"{r.name}  ({r.category}): {r.reason}")
    print(f"{len(refused)} cases not generated: their frontend refuses the geometry or their flavor cannot check it")


REFUSED = CommandSpec("refused", "List the cases not generated (a frontend refuses the geometry), each with the reason.",
                      _refused)


def _check_extract(model, out, weights, sample):
    if len(model) != 1:
        raise Usage("extract", "doit extract MODEL.tflite|MODEL.onnx [--weights [--input SAMPLE.npy]] [--out SPEC.json]: "
                    "one model file")
    return {"model": Path(model[0])}


def _extract(run, model, out, weights, sample):
    """The model's convs as a spec file (pipeline/frontends/extract.py)."""
    import json

    from pipeline.core.tools import write_text
    from pipeline.frontends.extract import extract

    path = Path(out) if out else Path(f"{model.stem}-convs.json")
    folder = path.with_name(path.stem + "-weights") if weights else None
    spec = extract(model, f"doit extract {model}", folder, path.parent, Path(sample) if sample else None)
    write_text(path, json.dumps(spec, indent=1) + "\n")
    layers = sum(len(g["layers"]) for g in spec["geometries"])
    print(f"conv-sweep: {model}: {layers} conv layers, {len(spec['geometries'])} distinct geometries; "
          f"{len(spec['skipped'])} skipped" + "".join(f"\n  skipped {s['layer']} ({s['op']}): {s['reason']}"
                                                         for s in spec["skipped"]))
    if folder:
        print(f"conv-sweep: each layer's own weights in {folder}/ (the cases are keyed on their digest)")
    print(f"conv-sweep: wrote {path}: sweep it with CONV_SWEEP_SPEC={path} (or add it with CONV_SWEEP_INCLUDE)")


EXTRACT = CommandSpec(
    "extract", "Write a spec file of a model's convolutions (doit extract MODEL.tflite|MODEL.onnx [--weights] "
    "--out SPEC.json).",
    _extract, check=_check_extract, pos_arg="model", lock=False, params=(
        {"name": "out", "long": "out", "default": "",
         "help": "the spec file to write (default: <model's name>-convs.json in the current folder)"},
        {"name": "weights", "long": "weights", "type": bool, "default": False,
         "help": "build each case with the layer's own weights and bias (written to <spec>-weights/)"},
        {"name": "sample", "long": "input", "default": "",
         "help": "with --weights: an .npy of the model's input; each case runs on its layer's input on it"}))


def _check_export_xfails(params):
    if not params or any(c.isspace() or c in "[]" for c in params):
        raise ConfigError("doit export_xfails --params", params, "must be upstream's test parameters, e.g. sim-sl2610-v1")


def _export_xfails(run, params):
    from pipeline.curate.lists import export_xfails

    export_xfails(run.cfg, run.cases, params)


EXPORT_XFAILS = CommandSpec(
    "export_xfails", "Write each target's upstream xfail file (report/<target>/test_conv_sweep-xfails.txt) from the "
                     "listed failures.",
    _export_xfails, check=_check_export_xfails, params=(
        {"name": "params", "long": "params", "default": "sim-sl2610-v1",
         "help": "upstream's test parameters after the case name: runtime and chip (default sim-sl2610-v1)"},))


def _check_import_xfails(files):
    if len(files) != 1:
        raise Usage("import_xfails", "doit import_xfails FILE: name one xfail file "
                                     "(upstream's tests/test_conv_sweep-xfails.txt)")


def _import_xfails(run, files):
    from pipeline.curate.lists import import_xfails

    import_xfails(run.cfg, run.cases, Path(files[0]))


IMPORT_XFAILS = CommandSpec(
    "import_xfails", "Add the cases of an upstream xfail file (doit import_xfails FILE) to the expected failures, "
                     "as this run failed them.",
    _import_xfails, check=_check_import_xfails, pos_arg="files")


def _check_prune_store(days, max_gb):
    for option, value in (("days", days), ("max-gb", max_gb)):
        if value < 0:
            raise ConfigError(f"doit prune_store --{option}", value, "must be >= 0 (0: no limit)")


def _prune_store(run, days, max_gb):
    store = run.cfg.store()
    if store is None:
        return "the store is off (CONV_SWEEP_CACHE_DIR=off): nothing to prune"
    found = store.prune(max_age_days=days or None, max_bytes=int(max_gb * 1e9) if max_gb else None)
    print(f"{store.root}: {found['entries_removed']} entries removed, {found['entries_kept']} kept; "
          f"{found['bytes_freed'] / 1e6:.1f} MB freed, {found['bytes_kept'] / 1e6:.1f} MB kept")
    return None


# works on the store alone
PRUNE_STORE = CommandSpec(
    "prune_store", "Prune the store of stage outputs (CONV_SWEEP_CACHE_DIR): entries unused for --days, then the "
                   "oldest past --max-gb.",
    _prune_store, check=_check_prune_store, lock=False, params=(
        {"name": "days", "long": "days", "type": float, "default": 0,
         "help": "remove entries not used for this many days (default 0: no age limit)"},
        {"name": "max_gb", "long": "max-gb", "type": float, "default": 0,
         "help": "then remove the least recently used until the store holds at most this many GB (0: no limit)"}))


def _calibrate(run, out):
    from pipeline.curate.calibrate import calibrate

    for line in calibrate(run.cfg, run.cases, Path(out) if out else None):
        print(line)


# only reads the case folders' logs
CALIBRATE = CommandSpec(
    "calibrate", "Rewrite each selected target's cost calibration (the time limits) from this build folder's run.",
    _calibrate, lock=False, params=(
        {"name": "out", "long": "out", "default": "",
         "help": "write <target>.json into this folder instead of pipeline/targets/costs/"},))


def _accept_failures(run):
    from pipeline.curate.lists import accept_failures

    accept_failures(run.cfg, run.cases)


ACCEPT_FAILURES = CommandSpec(
    "accept_failures", "Rewrite the expected-failures file from the latest results (keeps issue links and comments).",
    _accept_failures)

SPECS = (SWEEP, REPORT, COMPARE, SHRINK, BUGREPORT, HUNT, BISECT, REFUSED, EXTRACT, EXPORT_XFAILS, IMPORT_XFAILS, PRUNE_STORE,
         CALIBRATE, ACCEPT_FAILURES)
