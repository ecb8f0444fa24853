"""doit reporters: live progress during a run, and one line per failing case.

Registered in pyproject.toml under the names doit uses by default ("console", "json"), so that
`doit -r json` keeps its machine-readable output; doit makes them from those names, as it makes
any reporter. They only report: the run command (pipeline/engine/command.py) owns the run's
lifecycle. The run (pipeline/engine/tasks.py's Run: its configuration, its plan, doit's
verbosity for it) comes with the tasks doit hands a reporter, in their Task.meta, and so do a
case task's case, stage and target; the reporters say on the run whether it changed anything
(the run command then writes the report). Imports doit: loaded by doit as a plugin.
"""
from __future__ import annotations

import sys
import threading
import time

from doit.exceptions import UnmetDependency
from doit.reporter import ConsoleReporter, JsonReporter

from pipeline.config import DEFAULT_PROGRESS_INTERVAL
from pipeline.core.chain import STAGE_OF_TASK, TASKS
from pipeline.engine.command import closure
from pipeline.engine.tasks import case_meta, run_of


def _limits(run, tasks: dict):
    """A task's time limit, for the progress line: a compile's and a module run's their case's
    (pipeline/targets/cost.py), every other tool's the hard one."""
    cases = {c.key: c for c in run.cases}
    known: dict[str, float | None] = {}

    def limit_of(name: str) -> float | None:
        if name not in known:
            meta = case_meta(tasks[name]) if name in tasks else None
            case = cases.get(meta["cases"][0]) if meta and meta["target"] else None
            try:
                known[name] = run.cfg.limit(case, STAGE_OF_TASK[meta["stage"]]).seconds \
                    if case and meta["stage"] in ("vmfb", "verify") else run.cfg.timeout
            except Exception:  # noqa: BLE001 - a progress line never stops a run
                known[name] = None
        return known[name]

    return limit_of


SETTLED = 5  # cases run to their end before their measured over planned seconds scale the plan
AT_LEAST = 1.0  # seconds a running task still needs, whatever it has run


class Progress:
    """What is moving, from the first seconds: tasks done per stage, cases verified, failures so
    far, elapsed time, and the time left estimated from the plan and the measured task
    durations. `clock` gives the time in seconds (monotonic; a test passes its own)."""

    def __init__(self, stream, interval: float, clock=time.monotonic):
        self.stream, self.interval, self.clock = stream, interval, clock
        self.tty = stream.isatty()
        self.pending: dict[str, set[str]] = {}  # case key -> its tasks not finished
        self.stage_of: dict[str, str] = {}  # case task -> its stage (model, mlir, vmfb, verify)
        self.owners: dict[str, list[str]] = {}  # case task -> the case keys it is part of
        self.failed: set[str] = set()
        self.worked: set[str] = set()
        self.done = 0
        self.total = 0  # set by initialize; a run stopped before it shows no line
        self.start = clock()
        self.last_print = 0.0
        self.shown = False
        self.totals = dict.fromkeys(TASKS, 0)  # tasks per stage in this run
        self.finished_tasks = dict.fromkeys(TASKS, 0)  # run or found up to date
        self.ran: dict[str, list[float]] = {s: [] for s in TASKS}  # measured durations of tasks that ran
        self.started: dict[str, float] = {}
        self.concurrency = 1
        self.spent: dict[str, float] = {}  # case -> seconds its finished tasks ran (a shared task's split)
        self.unmeasured: set[str] = set()  # cases with a task up to date: their seconds are not their chain's
        self.settled = [0, 0.0, 0.0]  # cases run to their end: how many, their seconds, their planned seconds
        self.finishes = 0  # case tasks finished so far
        self.last_left: tuple[int, float | None] | None = None  # (finishes, estimate) at the last estimate
        self.costs: dict[str, float] = {}  # case key -> planned seconds of its chain, where the run planned them
        self.limit_of = lambda name: None  # a task's time limit in seconds, where it has one
        self.lock = threading.RLock()  # doit's thread and the ticker
        self.ticker: threading.Thread | None = None
        self.stopped = threading.Event()
        self.wait = self.stopped.wait  # (seconds) -> True once stopped; a test passes its own

    def initialize(self, tasks: dict, selected: list[str]) -> None:
        """The cases are those of the per-target tasks (vmfb, verify) this run reaches; the
        model and mlir tasks of a model are shared by its cases on every target (Task.meta)."""
        shared = []
        for name in closure(tasks, selected):
            meta = case_meta(tasks[name])
            if meta is None:
                continue
            if meta["target"] is None:
                shared.append((name, meta))
            else:
                self.track(name, meta["stage"], meta["cases"])
        for name, meta in shared:
            self.track(name, meta["stage"], [key for key in meta["cases"] if key in self.pending])

    def track(self, name: str, stage: str, keys: list[str]) -> None:
        """Count the case task `name` of `stage`, part of the cases `keys`."""
        self.stage_of[name] = stage
        self.totals[stage] += 1
        self.owners[name] = list(keys)
        for key in keys:
            self.pending.setdefault(key, set()).add(name)
        self.total = len(self.pending)

    def _keys(self, name: str) -> list[str]:
        return self.owners.get(name, [])

    def executing(self, name: str) -> None:
        if name in self.stage_of:
            with self.lock:
                self.worked.update(self._keys(name))
                self.started[name] = self.clock()
                self.concurrency = max(self.concurrency, len(self.started))
            self._tick()

    def _tick(self) -> None:
        """While tasks run, the line keeps moving even when none finishes (a long compile, a
        hang until its limit): a thread redraws it every second (off a terminal, every
        interval)."""
        if self.ticker is None and self.total:
            self.ticker = threading.Thread(target=self._ticking, name="conv-sweep-progress", daemon=True)
            self.ticker.start()

    def _ticking(self) -> None:
        while not self.wait(1.0):
            with self.lock:
                if self.started:
                    self.show()

    def stop(self) -> None:
        self.stopped.set()

    def finished(self, name: str, failed: bool) -> None:
        with self.lock:
            self._finished(name, failed)

    def _finished(self, name: str, failed: bool) -> None:
        stage = self.stage_of.get(name)
        if stage is None:
            return
        self.finished_tasks[stage] += 1
        self.finishes += 1
        began = self.started.pop(name, None)
        keys = self._keys(name)
        if began is not None:
            self.ran[stage].append(self.clock() - began)
            for case in keys:
                self.spent[case] = self.spent.get(case, 0.0) + self.ran[stage][-1] / len(keys)
        elif not failed:  # up to date: it ran in an earlier run (a failed dependency ran nothing)
            self.unmeasured.update(keys)
        for case in keys:
            if failed:
                self.failed.add(case)
            tasks = self.pending.get(case)
            if tasks is not None and name in tasks:
                tasks.discard(name)
                if not tasks:
                    self.done += 1
                    if case in self.costs and case not in self.unmeasured and self.spent.get(case):
                        self.settled = [self.settled[0] + 1, self.settled[1] + self.spent[case],
                                        self.settled[2] + self.costs[case]]
        self.show()

    def left(self) -> float | None:
        """Seconds of work left, never more optimistic than the last estimate while no task
        has finished since: an estimate that falls while nothing finishes promises an end
        that is not coming. Where the run planned each chain's cost, `_planned_left`; else
        each stage's unfinished tasks at that stage's mean measured duration in this run (a
        stage not measured yet: the mean of those that are), a running task counting what it
        still needs (`_needs`), over the tasks seen running at once, and at least what the
        task that needs the most still needs."""
        with self.lock:
            now = self.clock()
            value = self._planned_left(now) if self.costs else self._measured_left(now)
            if value is not None and self.last_left is not None and self.last_left[0] == self.finishes:
                value = max(value, self.last_left[1] or 0.0)
            self.last_left = (self.finishes, value)
            return value

    def overrun(self) -> float:
        """How far this run's chains run past their plan: the measured seconds of the cases run
        to their end in this run over their planned seconds, once SETTLED have (1 before).
        Cases with a task up to date are left out: their seconds are not their chain's."""
        count, measured, planned = self.settled
        return measured / planned if count >= SETTLED and planned > 0 else 1.0

    def _needs(self, name: str, elapsed: float, expected: float) -> float:
        """What a running task still needs: what it is expected to take less what it has run;
        past that, as long again as it has run (the longer a task has run past its prediction,
        the less the prediction says), up to its time limit, and never nothing."""
        if expected > elapsed:
            return expected - elapsed
        limit = self.limit_of(name)
        return max(min(elapsed, limit - elapsed) if limit else elapsed, AT_LEAST)

    def _planned_left(self, now: float) -> float:
        """Each case not done needs its planned seconds scaled by `overrun`, less what its
        tasks have run (finished and running); a case whose running task has passed that
        needs what the task still needs (`_needs`). The sum over the tasks seen running at
        once, and at least the most any one case needs: a chain runs on one worker."""
        scale = self.overrun()
        running: dict[str, list[tuple[str, float]]] = {}
        for name, began in self.started.items():
            for case in self._keys(name):
                running.setdefault(case, []).append((name, now - began))
        work = most = 0.0
        for case, tasks in self.pending.items():
            if not tasks:
                continue
            tasks_running = running.get(case, [])
            shares = sum(elapsed / len(self._keys(name)) for name, elapsed in tasks_running)
            need = self.costs.get(case, 0.0) * scale - self.spent.get(case, 0.0) - shares
            if need <= 0 and tasks_running:
                need = max(self._needs(name, elapsed, 0.0) for name, elapsed in tasks_running)
            work += max(need, 0.0)
            most = max(most, need)
        return max(work / self.concurrency, most)

    def _measured_left(self, now: float) -> float | None:
        measured = [d for durations in self.ran.values() for d in durations]
        if not measured:
            return None
        fallback = sum(measured) / len(measured)
        mean = {s: sum(self.ran[s]) / len(self.ran[s]) if self.ran[s] else fallback for s in TASKS}
        work = sum((self.totals[s] - self.finished_tasks[s]) * mean[s] for s in TASKS)
        most = 0.0
        for name, began in self.started.items():  # counted at its mean above: what it still needs instead
            expected = mean.get(self.stage_of.get(name), fallback)
            need = self._needs(name, now - began, expected)
            work += need - expected
            most = max(most, need)
        return max(max(work, 0.0) / self.concurrency, most)

    def running(self, most: int = 2) -> str:
        """The longest-running tasks, each with how long it has run and its limit."""
        now = self.clock()
        longest = sorted(self.started.items(), key=lambda item: item[1])[:most]
        parts = []
        for name, began in longest:
            if now - began < 5:
                continue
            limit = self.limit_of(name)
            parts.append(f"{name} {_clock(now - began)}" + (f" of {_clock(limit)}" if limit else ""))
        return "; running: " + ", ".join(parts) if parts else ""

    def line(self) -> str:
        elapsed = self.clock() - self.start
        stages = " ".join(f"{s} {self.finished_tasks[s]}/{self.totals[s]}" for s in TASKS if self.totals[s])
        text = (f"[{self.done}/{self.total} cases] {len(self.failed)} failed; {stages}; "
                f"{_clock(elapsed)} elapsed")
        left = self.left()
        if left is not None and self.done < self.total:
            text += f", ~{_clock(left)} left"
        return text + self.running()

    def show(self, final: bool = False) -> None:
        with self.lock:
            self._show(final)

    def _show(self, final: bool) -> None:
        if not self.total:
            return
        now = self.clock()
        if self.tty:
            self.stream.write("\r\x1b[K" + self.line() + ("\n" if final else ""))
            self.shown = not final
        elif final or now - self.last_print >= self.interval:
            self.stream.write(f"progress: {self.line()}\n")
            self.last_print = now
        self.stream.flush()

    def clear(self) -> None:
        with self.lock:
            self._clear()

    def _clear(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class SweepReporter(ConsoleReporter):
    desc = "console output with live progress, one line per failing case"

    def __init__(self, outstream, options):
        super().__init__(outstream, options)
        self.run = None  # the run the tasks carry (initialize)
        self.progress = Progress(sys.stderr, DEFAULT_PROGRESS_INTERVAL)
        self.verbose = False  # per-task lines and doit's own failure blocks: the run's verbosity 2
        self.failed = False  # a task failed (doit's list of failures holds only those it shows)

    def initialize(self, tasks, selected_tasks):
        super().initialize(tasks, selected_tasks)
        self.run = run_of(tasks)
        if self.run is not None:
            self.verbose = self.run.verbosity >= 2
            self.progress.interval = self.run.cfg.progress_interval
        self.progress.initialize(tasks, selected_tasks)
        if self.run is not None:
            if self.run.costs and set(self.progress.pending) <= set(self.run.costs):
                self.progress.costs = self.run.costs
            self.progress.limit_of = _limits(self.run, tasks)

    def write(self, text):
        self.progress.clear()
        super().write(text)

    def execute_task(self, task):
        self.progress.executing(task.name)
        if self.verbose or case_meta(task) is None:
            super().execute_task(task)

    def add_success(self, task):
        super().add_success(task)
        self.progress.finished(task.name, False)

    def add_failure(self, task, fail):
        """A failing case is one line (case, stage, reason, log, repro: the task's message);
        tasks skipped because a dependency failed are said by that failure already."""
        self.failed = self.failed or fail.report
        if self.verbose or (case_meta(task) is None and not isinstance(fail, UnmetDependency)):
            super().add_failure(task, fail)
        elif fail.report and not isinstance(fail, UnmetDependency):
            self.write((getattr(fail, "message", "") or fail.get_msg()).rstrip() + "\n")
        self.progress.finished(task.name, True)

    def skip_uptodate(self, task):
        if self.verbose:
            super().skip_uptodate(task)
        self.progress.finished(task.name, False)

    def skip_ignore(self, task):
        if self.verbose:
            super().skip_ignore(task)
        self.progress.finished(task.name, False)

    def complete_run(self):
        """The last progress line; doit's summary shows the failures it was given (a failing
        case's line was said as it failed)."""
        self.progress.stop()
        self.progress.show(final=True)
        if self.run is not None:
            self.run.changed = bool(self.progress.worked or self.failed)
        super().complete_run()


class SweepJsonReporter(JsonReporter):
    desc = "JSON output (as doit's json reporter)"
    document_output = True  # its output is one JSON document: the run command writes the report to stderr

    def __init__(self, outstream, options=None):
        super().__init__(outstream, options)
        self.run = None
        self.changed = False  # a case task ran or a task failed

    def initialize(self, tasks, selected_tasks):
        self.run = run_of(tasks)

    def execute_task(self, task):
        super().execute_task(task)
        self.changed = self.changed or case_meta(task) is not None

    def add_failure(self, task, fail):
        super().add_failure(task, fail)
        self.changed = True

    def complete_run(self):
        if self.run is not None:
            self.run.changed = self.changed
        super().complete_run()
