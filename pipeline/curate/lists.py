"""The expected-failures lists and the upstream xfail files, rewritten from a run's results:
`doit accept_failures`, `doit import_xfails FILE`, `doit export_xfails`."""
from __future__ import annotations

from pathlib import Path

from pipeline.core.tools import write_text
from pipeline.outcome.bucket import signature as bucket_signature
from pipeline.outcome.result import HARNESS, TIMEOUT
from pipeline.outcome.result import NOT_RUN
from pipeline.results.report import by_target, collect, failing, signature
from pipeline.space.cases import Case


def near_budget(entry: dict, budget) -> str | None:
    """The first timed stage (compile, run) of a case that finished whose time came within
    DAY_SPREAD of its budget (`budget(stage)`, seconds): on a slower day it may be cut."""
    from pipeline.targets.cost import DAY_SPREAD, TIMED

    for stage in TIMED:
        seconds = ((entry.get("stages") or {}).get(stage) or {}).get("seconds")
        if isinstance(seconds, (int, float)) and seconds * DAY_SPREAD > budget(stage):
            return stage
    return None


def accept_failures(cfg, cases: list[Case], out=None) -> list:
    """Rewrite each target's expected-failures file so that every case failing now is expected,
    at the stage and with the bucket signature observed (issue links and comments are kept),
    and every case whose compile or run came within DAY_SPREAD of its budget is expected to
    time out there (it may also finish: pipeline/outcome/verdict.py). Harness errors are never
    accepted: they are failures of this tool."""
    import sys

    from pipeline.space import expected

    written = []
    for target, selected in by_target(cfg, cases):
        entries = collect(selected, cfg.case_dir)
        failures = failing(entries)
        for case, entry in zip(selected, entries):
            stage = None if entry["case"] in failures or entry["status"] in (NOT_RUN, HARNESS) else \
                near_budget(entry, lambda s, case=case: cfg.limit(case, s).hard)
            if stage:
                failures[entry["case"]] = (stage, bucket_signature(stage, "", TIMEOUT))
        judged = {e["case"] for e in entries if e["status"] not in (NOT_RUN, HARNESS)}
        accepted = expected.accept(target.expectations, failures, judged)
        write_text(target.expected_path, expected.dump(accepted.entries))
        harness = sum(e["status"] == HARNESS for e in entries)
        print(f"{target.name}: {target.expected_path}: {len(accepted.entries)} entries: {accepted.added} added, "
              f"{accepted.changed} changed, {accepted.removed} removed"
              + (f"; {harness} harness errors not accepted (fix them)" if harness else ""), file=out or sys.stdout)
        written.append(accepted.entries)
    return written


def export_xfails(cfg, cases: list[Case], params: str, out=None) -> list[Path]:
    """Write each target's upstream xfail file (pipeline/curate/xfails.py) from this run:
    <build>/report/<target>/test_conv_sweep-xfails.txt."""
    import sys

    from pipeline.curate import xfails

    written = []
    for target, selected in by_target(cfg, cases):
        entries = [{**e, "bucket": signature(e)} for e in collect(selected, cfg.case_dir)]
        text, count, notes = xfails.export(target.name, entries, target.expectations, params)
        path = cfg.report_dir(target.name) / xfails.FILE_NAME
        write_text(path, text)
        print(f"{target.name}: {path}: {count} tests of "
              f"{sum(1 for line in text.splitlines() if line and not line.startswith('#'))} lines"
              + "".join(f"\n  {note}" for note in notes), file=out or sys.stdout)
        written.append(path)
    return written


def import_xfails(cfg, cases: list[Case], path: Path, out=None) -> int:
    """Add the cases of an upstream xfail file to each target's expected-failures list, each
    at the stage and in the bucket this run observed, with the file's issue link. Returns how
    many lines were not imported (cases that do not fail here, or are not conv-sweep tests)."""
    import sys

    from pipeline.core.errors import ConfigError
    from pipeline.curate import xfails
    from pipeline.space import expected

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError("doit import_xfails FILE", str(path), f"cannot be read ({err.strerror})") from None
    lines = xfails.parse(text, str(path))
    left_out = 0
    for target, selected in by_target(cfg, cases):
        entries = collect(selected, cfg.case_dir)
        failures = failing(entries)
        merged, imported, notes = xfails.merge(target.expectations, lines, failures)
        write_text(target.expected_path, expected.dump(merged))
        print(f"{target.name}: {target.expected_path}: {imported} cases imported from {path}"
              + "".join(f"\n  {note}" for note in notes), file=out or sys.stdout)
        left_out += len(notes)
    return left_out
