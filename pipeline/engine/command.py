"""The doit commands of conv-sweep, registered in pyproject.toml ([tool.doit.plugins.command])
under doit's own names, so that `doit`, `doit sweep`, `doit clean …` are these:

- `run` (doit's Run) owns a run's lifecycle: the build folder's lock; the selection (a case's
  name selects its tasks on every selected target, a pattern or a misspelt case that matches
  nothing is an error: pipeline/engine/selection.py); the start order of the chains, planned
  for the lanes this run has (`-n`); and, where the selection reaches case tasks, the tools'
  check (a tool that cannot start stops the run before any task), the Dask cluster's start and
  stop, and the report once every task has ended. Its reporter (pipeline/engine/reporter.py),
  which doit makes from its registered name, only reports. `--retry-timeouts` is its own option.
- `clean`, `forget`, `ignore`, `reset-dep`: doit's, with the same lock and selection.
- `toolchain` installs the Torq toolchain and every selected compiler version; of the sweep's
  configuration it reads only the targets (Config.for_toolchain).

What dodo.py resolved (pipeline/engine/tasks.py's Run) reaches the commands through DOIT_CONFIG,
doit's documented way for a dodo file to configure its commands, and the reporters through the
tasks doit hands them (Task.meta); the tasks are told apart by their Task.meta, never by their
names. The commands run as doit runs them: doit's own Run is given its options as it would take
them, under the names of its `_execute`'s parameters.
"""
from __future__ import annotations

import codecs
import fcntl
import fnmatch
import inspect
import os
import sys
from contextlib import contextmanager
from dataclasses import replace

from doit.cmd_base import Command
from doit.cmd_clean import Clean
from doit.cmd_forget import Forget
from doit.cmd_ignore import Ignore
from doit.cmd_resetdep import ResetDep
from doit.cmd_run import Run

from pipeline.engine import order
from pipeline.engine.commands import takes_lock
from pipeline.engine.selection import expand
from pipeline.engine.tasks import RUN_KEY, case_meta, plan_order

RETRY_TIMEOUTS = {
    "name": "retry_timeouts", "long": "retry-timeouts", "type": bool, "default": False,
    "help": "re-run the tool invocations a previous run cut at the same time limit (known timeouts are otherwise "
            "results, taken from the store)"}


def closure(tasks: dict, selected: list[str]) -> set[str]:
    """The names of the selected tasks and every task they depend on."""
    seen, stack = set(), list(selected or [])
    while stack:
        name = stack.pop()
        if name in seen or name not in tasks:
            continue
        seen.add(name)
        stack.extend(tasks[name].task_dep)
        stack.extend(getattr(tasks[name], "setup_tasks", []))
    return seen


class _Sweep:
    """What every command that runs or forgets tasks adds to doit's: the Run dodo.py resolved,
    the selection, and the lock."""

    def execute(self, params, args):
        self._params = params  # DOIT_CONFIG's values join it when doit loads dodo.py
        return super().execute(params, args)

    @property
    def run(self):
        return self._params.get(RUN_KEY)

    def _names(self) -> list[str]:
        return [t.name for t in self.task_list]

    def expanded(self, selection: list[str] | None) -> list[str] | None:
        """The selection as doit is to read it (selection.expand): patterns and case names
        replaced by the task names they select, matched here and only here."""
        if not selection:
            return selection
        names = self._names()
        positional = frozenset(t.name for t in self.task_list if t.pos_arg)
        return expand(list(selection), names, lambda pattern: fnmatch.filter(names, pattern), positional)

    @contextmanager
    def locked(self, selection: list[str] | None):
        """The build folder's lock while the command works, unless the selected task works in a
        folder of its own (its command's spec says so: pipeline/engine/commands.py; what follows
        it on the command line is its own arguments); a second run on the folder is refused."""
        first = next(iter(selection or []), None)  # a task taking positional arguments takes the rest
        task = next((t for t in self.task_list if t.name == first), None)
        if task is not None and not takes_lock(task):
            yield
            return
        fd = _lock(self._params["dep_file"] + ".lock")
        try:
            yield
        finally:
            os.close(fd)


def _with_parameter(function, name: str, default) -> inspect.Signature:
    """`function`'s signature with one more parameter, `name`, after its own."""
    signature = inspect.signature(function)
    extra = inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
    return signature.replace(parameters=[*signature.parameters.values(), extra])


class SweepRun(_Sweep, Run):
    name = "run"
    doc_purpose = "run tasks (conv-sweep: the build folder's lock, case names, the start order and the report)"
    cmd_options = Run.cmd_options + (RETRY_TIMEOUTS,)

    def _execute(self, retry_timeouts=False, **options):
        """doit's run, within the run's lifecycle; `options` are doit's Run's, passed on as they came."""
        run = self.run
        if run is not None:
            run.verbosity = options.get("verbosity") or 0
            if retry_timeouts:
                run.cfg = replace(run.cfg, retry_timeouts=True)
        self.sel_tasks = self.expanded(self.sel_tasks)
        tasks = {t.name: t for t in self.task_list}
        cases = run is not None and any(case_meta(tasks[n]) for n in closure(tasks, self.sel_tasks))
        outfile = options["outfile"]
        stream = codecs.open(outfile, "w", encoding="utf-8") if isinstance(outfile, str) else outfile
        try:
            with self.locked(self.sel_tasks):
                if cases:
                    self._before(run, tasks, options.get("num_process") or 0)
                try:
                    with order.depth_first(run.cfg.order if run else "breadth"):
                        code = super()._execute(**{**options, "outfile": stream})
                finally:
                    if cases:
                        self._after(run, self._report_stream(options.get("reporter"), stream), run.changed)
            return code
        finally:
            if stream is not outfile:
                stream.close()

    # doit passes a command the options named by its _execute's parameters: doit's Run's, and ours
    _execute.__signature__ = _with_parameter(Run._execute, "retry_timeouts", False)

    def _report_stream(self, reporter, stream):
        """Where the report's summary goes when the run ends: the run's output, unless the
        reporter's output is a document (`doit -r json`: stdout holds only the JSON)."""
        chosen = self.reporters.get(reporter) if isinstance(reporter, str) else reporter
        return sys.stderr if getattr(chosen, "document_output", False) else stream

    @staticmethod
    def _before(run, tasks: dict, lanes: int) -> None:
        """Before any task of a run that reaches case tasks: the tools' identities (a tool that
        cannot start stops the run here), the chains' start order, the cluster, and the count of
        cases no frontend can build."""
        for target in run.cfg.targets:
            run.target_keys(target.name)
        plan_order(run, tasks, lanes)
        run.report_at_end = True
        if run.cfg.scheduler:
            _start_cluster(run.cfg)  # it says where the stages run and how artifacts move, once it is up
        refused = run.cfg.refused()
        if refused:
            print(f"conv-sweep: {len(refused)} cases not generated, their frontend refuses the geometry "
                  f"or their flavor cannot check it (`doit refused` lists them with the reason)", file=sys.stderr)

    @staticmethod
    def _after(run, out, changed: bool) -> None:
        """Once every task has ended: the report (the cluster stops while it is written)."""
        from pipeline.results.report import report_run

        stopping = None
        if run.cfg.scheduler:
            from pipeline.engine.cluster import stopped

            stopping = stopped()
        try:
            report_run(run.cfg, run.cases, out=out, changed=changed)
        except Exception as err:  # the run's own outcome stands; say why the report is missing
            print(f"conv-sweep: the report could not be written: {type(err).__name__}: {err}", file=sys.stderr)
        finally:
            if stopping is not None:
                stopping.join()


class SweepClean(_Sweep, Clean):
    name = "clean"

    def _execute(self, dryrun, cleandep, cleanall, cleanforget, pos_args=None):
        pos_args = self.expanded(pos_args)
        with self.locked(pos_args or self.sel_tasks):
            return super()._execute(dryrun, cleandep, cleanall, cleanforget, pos_args)


class SweepForget(_Sweep, Forget):
    name = "forget"

    def _execute(self, forget_sub, forget_disable_default, forget_all):
        if not self.sel_default_tasks:
            self.sel_tasks = self.expanded(self.sel_tasks)
        with self.locked(self.sel_tasks):
            return super()._execute(forget_sub, forget_disable_default, forget_all)


class SweepIgnore(_Sweep, Ignore):
    name = "ignore"

    def _execute(self, pos_args):
        pos_args = self.expanded(pos_args)
        with self.locked(pos_args):
            return super()._execute(pos_args)


class SweepResetDep(_Sweep, ResetDep):
    name = "reset-dep"

    def _execute(self, pos_args=None):
        pos_args = self.expanded(pos_args)
        with self.locked(pos_args):
            return super()._execute(pos_args)


class Toolchain(Command):
    """`doit toolchain`: install the Torq toolchain (torq-compile, torq-run-module), and every
    compiler version CONV_SWEEP_TARGET selects (`torq@2.2.1`, `llvm-cpu@3.12.0`), outside the
    sources, where CONV_SWEEP_TOOLCHAIN_DIR says (pipeline/targets/toolchain.py). Of the sweep's
    configuration it reads only that (Config.for_toolchain): a misspelt knob is refused, a bad
    value of any other knob is not its business."""

    name = "toolchain"
    doc_purpose = "install the Torq toolchain and every selected compiler version outside the sources"
    doc_usage = ""
    doc_description = None

    def execute(self, params, args):
        from pipeline.config import Config
        from pipeline.core.errors import ConfigError
        from pipeline.targets.toolchain import ToolchainError, install

        if args:
            print(f"conv-sweep: doit toolchain takes no arguments, got: {' '.join(args)}", file=sys.stderr)
            return 3
        try:
            cfg = Config.for_toolchain()
        except ConfigError as err:
            print(f"conv-sweep: bad configuration, nothing was installed: {err}", file=sys.stderr)
            return 3
        root = cfg.toolchain_dir
        versions = [(p.toolchain, p.version) for p in cfg.profiles if p.version]
        for kind, version in [("torq", None), *versions]:
            what = f"{kind} {version}" if version else "the Torq toolchain"
            try:
                install(root, kind=kind, version=version)
            except ToolchainError as err:
                print(f"conv-sweep: {what} was not installed: {err}", file=sys.stderr)
                return 1
            except OSError as err:  # the folder cannot be made or written
                print(f"conv-sweep: {what} was not installed: CONV_SWEEP_TOOLCHAIN_DIR={root}: "
                      f"{err.strerror}: {err.filename}", file=sys.stderr)
                return 1
        return 0


def _start_cluster(cfg) -> None:
    """Connect to the Dask cluster before any task, where a bad one stops the run; a local
    cluster starts in the background while the driver builds the first models."""
    from pipeline.core.errors import ConfigError
    from pipeline.engine.cluster import connect

    try:
        connect(cfg, wait=False)
    except ConfigError as err:
        print(f"conv-sweep: bad configuration, nothing was run: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _lock(path: str) -> int:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise SystemExit(f"conv-sweep: another doit run ({holder}) is using {os.path.dirname(path)}; "
                         "wait for it to finish or stop it, or set CONV_SWEEP_BUILD_DIR to another folder") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}".encode())
    return fd
