"""Running cases through the sweep's stages outside doit: the one runner of `doit hunt`, `doit
shrink`, `doit bugreport`'s flag trials, `doit bisect` and the flag check (pipeline/dev/flagcheck.py).

A case's chain is its tasks (pipeline/core/chain.py) run in order by the sweep's own stage
functions (pipeline/run/stages.py, TASK_FUNCTIONS) up to the first that fails, with the Config
given: its build folder, its store of stage outputs (cfg.store()) and its time limits
(cfg.limit), as a doit task runs them. `run_chain` runs one case's chain here; `run_cases` runs
a list of cases on lanes, threads of this process (every tool runs in a subprocess of its own,
a model builder or an importer in a helper process: pipeline/core/isolate.py). Cases of one
model (one name, on several targets) share its model and MLIR: they run in order on one lane.

A journal makes a command that is killed and started again go on where it was: a line per
finished case, appended and synced once the case's result.json is written; a case the journal
holds is not run again (one cut off by the kill, without its line, runs again).
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from pipeline.config import Config
from pipeline.core.chain import SHARED_TASKS, TASKS
from pipeline.outcome.result import read_result
from pipeline.space.cases import Case

WAIT = 5.0  # seconds run_cases waits for a lane to finish before it looks again (and may tick)


def run_chain(case: Case, cfg: Config, tasks=TASKS, call=None) -> dict:
    """Run `tasks` of the case's chain in order with the sweep's stage functions, up to the first
    that fails; the case's result entry where it failed (status, stage, reason), else a pass.
    `call(stage_fn, subject)` runs one stage and gives its failure message (as a doit task's
    action does: on the Dask cluster, pipeline/engine/cluster.py); by default, here, with `cfg`."""
    from pipeline.run import stages

    for task in tasks:
        subject = [case] if task in SHARED_TASKS else case
        stage_fn = stages.TASK_FUNCTIONS[task]
        if call(stage_fn, subject) if call is not None else stage_fn(subject, cfg):
            break
    result = read_result(cfg.case_dir(case)) or {}
    if result.get("status") in stages.FAILURES:
        return result
    return {"status": "pass", "stage": None, "reason": ""}


class Journal:
    """An append-only record of finished cases, one JSON object a line, each with the case's
    `key` (name@target); made where it is new. What it holds is read when it is opened: a line
    torn by a kill is skipped, and the next line written starts on a line of its own."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.entries: dict[str, dict] = {}  # key -> its line, in the order written
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()
        data = self.path.read_bytes()
        self._torn = bool(data) and not data.endswith(b"\n")
        for line in data.decode(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # torn by a kill: its case runs again
            if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                self.entries[entry["key"]] = entry

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def append(self, entry: dict) -> None:
        """Add `entry` (with its case's "key"), on disk before this returns."""
        with open(self.path, "a") as f:
            if self._torn:
                f.write("\n")
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._torn = False
        self.entries[entry["key"]] = entry


def _status(case: Case, value: dict) -> dict:
    """A journal line's outcome of a case by default: the status and stage of its result entry."""
    return {"status": value["status"], "stage": value.get("stage")}


def run_cases(cfg: Config, cases, lanes: int = 1, tasks=TASKS, work=None, journal: Journal | None = None,
              note=_status, deadline: float | None = None, on_done=None, tick=None,
              interval: float = 5.0) -> list[tuple[Case, object]]:
    """Run cases on `lanes` lanes; (case, what `work` gave for it) of every case run, in the order
    they finished.

    - `cases`: a list of cases, or a function giving the next ones (a list; empty or None: none
      now) each time a lane is free, so that a search chooses each case from what finished before
      it (`doit hunt`); the run ends when no case runs and the function gives none.
    - `work(case, cfg)`: what a lane does with a case; by default its chain of `tasks`
      (run_chain), giving its result entry.
    - `journal`: a case it holds does not run; each case that finishes gets a line: its key,
      name, target, flavor and geometry, then the fields `note(case, value)` gives (by default
      the status and stage of the result entry `work` gave).
    - `deadline` (time.monotonic()): no case starts after it; the cases running then finish.
    - `on_done(case, value, line)`: called in this thread as each case finishes, after its
      journal line (`line`; None without a journal) is written.
    - `tick(running)`: called in this thread every `interval` seconds (a progress line), with the
      number of cases running.

    An exception raised by `work` ends the run: no case starts after it, the cases running
    finish, and it is raised here."""
    if work is None:
        def work(case: Case, config: Config) -> dict:
            return run_chain(case, config, tasks)
    more = cases if callable(cases) else _once(list(cases))
    pending: list[list[Case]] = []  # groups of cases of one model, in order
    finished: list[tuple[Case, object]] = []
    last_tick = time.monotonic()
    with ThreadPoolExecutor(max(lanes, 1)) as pool:
        running = {}
        while True:
            while len(running) < lanes and (deadline is None or time.monotonic() < deadline):
                if not pending:
                    batch = more()
                    if not batch:
                        break
                    pending += _by_model([c for c in batch if journal is None or c.key not in journal])
                    continue
                group = pending.pop(0)
                running[pool.submit(_run_group, group, cfg, work)] = group
            if not running:
                break
            done, _ = wait(list(running), timeout=WAIT, return_when=FIRST_COMPLETED)
            for future in done:
                group = running.pop(future)
                for case, value in zip(group, future.result()):
                    line = None
                    if journal is not None:
                        line = {"key": case.key, "case": case.name, "target": case.target, "variant": case.variant,
                                "geometry": case.geometry.to_dict(), **note(case, value)}
                        journal.append(line)
                    finished.append((case, value))
                    if on_done is not None:
                        on_done(case, value, line)
            if tick is not None and time.monotonic() - last_tick >= interval:
                tick(len(running))
                last_tick = time.monotonic()
    return finished


def _once(cases: list[Case]):
    """The function giving `cases` once, then none."""
    batches = [cases]
    return lambda: batches.pop() if batches else None


def _by_model(cases: list[Case]) -> list[list[Case]]:
    """The cases in groups of one model (one name), in the order of each group's first case."""
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(case.name, []).append(case)
    return list(groups.values())


def _run_group(group: list[Case], cfg: Config, work) -> list:
    return [work(case, cfg) for case in group]
