"""doit reporters: live progress during a run, and the report written when it ends.

doit cannot order a task after tasks that failed (their dependents are skipped), so the report
of a run that executed case tasks is written by the reporter's complete_run, after everything.
Registered in pyproject.toml under the names doit uses by default ("console", "json"), so that
`doit -r json` keeps its machine-readable output and still writes the report.
Imports doit: loaded by doit as a plugin.
"""
from __future__ import annotations

import os
import sys
import time

from doit.reporter import ConsoleReporter, JsonReporter

from pipeline.report import REPORT_AT_END


def _dodo():
    """The loaded dodo.py (its CFG and CASES), if this run has one."""
    module = sys.modules.get("dodo")
    return module if module is not None and hasattr(module, "CFG") else None


def _closure(tasks: dict, selected: list[str]) -> set[str]:
    seen, stack = set(), list(selected or [])
    while stack:
        name = stack.pop()
        if name in seen or name not in tasks:
            continue
        seen.add(name)
        stack.extend(tasks[name].task_dep)
        stack.extend(getattr(tasks[name], "setup_tasks", []))
    return seen


class Progress:
    """Cases done of total, failures so far, elapsed and estimated time left."""

    def __init__(self, stream, interval: float):
        self.stream, self.interval = stream, interval
        self.tty = stream.isatty()
        self.pending: dict[str, set[str]] = {}
        self.failed: set[str] = set()
        self.worked: set[str] = set()
        self.done = 0
        self.start = time.monotonic()
        self.first_work = None
        self.last_print = 0.0
        self.shown = False

    def initialize(self, tasks: dict, selected: list[str]) -> None:
        """Cases are case@target (their vmfb: and verify: tasks); the model: and mlir: tasks of
        a model are shared by its cases on every target."""
        shared: dict[str, set[str]] = {}
        for name in _closure(tasks, selected):
            if ":conv_" in name:
                subject = name.split(":", 1)[1]
                if "@" in subject:
                    self.pending.setdefault(subject, set()).add(name)
                else:
                    shared.setdefault(subject, set()).add(name)
        self.owners: dict[str, list[str]] = {}
        for key, names in self.pending.items():
            for name in shared.get(key.split("@", 1)[0], ()):
                names.add(name)
                self.owners.setdefault(name, []).append(key)
        self.total = len(self.pending)

    def _keys(self, name: str) -> list[str]:
        return self.owners.get(name) or ([name.split(":", 1)[1]] if "@" in name else [])

    def executing(self, name: str) -> None:
        if ":conv_" in name:
            self.worked.update(self._keys(name))
            self.first_work = self.first_work or time.monotonic()

    def finished(self, name: str, failed: bool) -> None:
        if ":conv_" not in name:
            return
        for case in self._keys(name):
            if failed:
                self.failed.add(case)
            tasks = self.pending.get(case)
            if tasks is not None and name in tasks:
                tasks.discard(name)
                if not tasks:
                    self.done += 1
        self.show()

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        text = f"[{self.done}/{self.total} cases] {len(self.failed)} failed, {_clock(elapsed)} elapsed"
        worked_done = len([c for c in self.worked if not self.pending.get(c)])
        if self.first_work and worked_done and self.done < self.total:
            rate = (time.monotonic() - self.first_work) / worked_done
            text += f", ~{_clock(rate * (self.total - self.done))} left"
        return text

    def show(self, final: bool = False) -> None:
        if not self.total:
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r\x1b[K" + self.line() + ("\n" if final else ""))
            self.shown = not final
        elif final or now - self.last_print >= self.interval:
            self.stream.write(f"progress: {self.line()}\n")
            self.last_print = now
        self.stream.flush()

    def clear(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _start_cluster(cfg) -> None:
    """Connect to (or start) the Dask cluster before any task; a bad cluster stops the run."""
    from pipeline.cluster import connect
    from pipeline.errors import ConfigError

    try:
        connect(cfg)
    except ConfigError as err:
        print(f"conv-sweep: bad configuration, nothing was run: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _report_at_end(selected: list[str], tasks: dict) -> bool:
    """A run that touches case tasks writes the report when it ends."""
    return any(":conv_" in name for name in _closure(tasks, selected))


def _write_report(out, changed: bool) -> None:
    dodo = _dodo()
    if dodo is None:
        return
    from pipeline.report import report_run

    try:
        report_run(dodo.CFG, dodo.CASES, out=out, changed=changed)
    except Exception as err:  # the run's own outcome stands; say why the report is missing
        print(f"conv-sweep: the report could not be written: {type(err).__name__}: {err}", file=sys.stderr)


class SweepReporter(ConsoleReporter):
    desc = "console output with live progress; writes the sweep report at the end"

    def __init__(self, outstream, options):
        super().__init__(outstream, options)
        interval = float(os.environ.get("CONV_SWEEP_PROGRESS_INTERVAL", "5"))
        self.progress = Progress(sys.stderr, interval)
        self.report = False

    def initialize(self, tasks, selected_tasks):
        super().initialize(tasks, selected_tasks)
        self.progress.initialize(tasks, selected_tasks)
        self.report = _report_at_end(selected_tasks, tasks)
        dodo = _dodo()
        if self.report and dodo is not None and dodo.CFG.scheduler:
            _start_cluster(dodo.CFG)  # its line (where the stages run, how artifacts move) comes first
        if self.report and dodo is not None:
            refused = dodo.CFG.refused()
            if refused:
                self.write(f"conv-sweep: {len(refused)} cases not generated, their frontend refuses the geometry "
                           f"(`doit refused` lists them with the reason)\n")
        if self.report:
            os.environ[REPORT_AT_END] = "1"  # inherited by the workers: the report task defers to us

    def write(self, text):
        self.progress.clear()
        super().write(text)

    def execute_task(self, task):
        self.progress.executing(task.name)
        super().execute_task(task)

    def add_success(self, task):
        super().add_success(task)
        self.progress.finished(task.name, False)

    def add_failure(self, task, fail):
        super().add_failure(task, fail)
        self.progress.finished(task.name, True)

    def skip_uptodate(self, task):
        super().skip_uptodate(task)
        self.progress.finished(task.name, False)

    def skip_ignore(self, task):
        super().skip_ignore(task)
        self.progress.finished(task.name, False)

    def complete_run(self):
        self.progress.show(final=True)
        super().complete_run()
        if self.report:
            _write_report(self.outstream, changed=bool(self.progress.worked or self.failures))


class SweepJsonReporter(JsonReporter):
    desc = "JSON output (as doit's json reporter); writes the sweep report at the end"

    def __init__(self, outstream, options=None):
        super().__init__(outstream, options)
        self.report = False
        self.executed = False

    def execute_task(self, task):
        super().execute_task(task)
        self.executed = self.executed or ":conv_" in task.name

    def initialize(self, tasks, selected_tasks):  # doit's JsonReporter has no initialize of its own
        self.report = _report_at_end(selected_tasks, tasks)
        dodo = _dodo()
        if self.report and dodo is not None and dodo.CFG.scheduler:
            _start_cluster(dodo.CFG)  # its line goes to stderr: stdout holds only the JSON
        if self.report:
            os.environ[REPORT_AT_END] = "1"

    def complete_run(self):
        super().complete_run()  # restores the real stdout and prints the JSON document
        if self.report:
            _write_report(sys.stderr, changed=self.executed or bool(self.errors))  # stdout: only JSON
