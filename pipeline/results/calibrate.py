"""`doit calibrate`: a target's cost calibration (pipeline/targets/costs/<target>.json) from a
measured run in the build folder.

Every compile and run invocation the case folders' logs record counts with its wall time,
passing or failing with a message; one that timed out or could not start does not (its time
is the limit's, not the tool's). The calibration keeps the upper envelope of those times
against the case's MACs (pipeline/targets/cost.py), and what each case's chain took, for the
order chains start in on a folder with no results of its own (pipeline/results/history.py).
"""
from __future__ import annotations

import time
from pathlib import Path

from pipeline.core.tools import logged_runs
from pipeline.space.geometry import macs
from pipeline.targets import cost

LOGS = {"compile": "compile.log", "run": "run.log"}  # the stage's log in a case's folder on its target


def samples(cfg, cases, target) -> dict[str, list[tuple[int, float]]]:
    """(MACs, seconds) of every completed compile and run invocation of the target's cases."""
    tools = {"compile": Path(target.compiler).name, "run": Path(target.runner).name}
    found: dict[str, list] = {stage: [] for stage in cost.TIMED}
    for case in cases:
        if case.target != target.name:
            continue
        count = macs(case.geometry)
        for stage, log in LOGS.items():
            for tool, seconds in logged_runs(cfg.case_dir(case) / log):
                if tool == tools[stage] and seconds is not None:
                    found[stage].append((count, seconds))
    return found


def chains(cfg, cases, target) -> dict[str, float]:
    """case name -> seconds its chain took: the recorded stage times and every compile and run
    tool's time, a failing one included (the order chains start in follows these). A tool cut
    at a limit counts nothing: its time was the limit's, which the next run's predicted
    limit may cut far shorter."""
    import json

    found = {}
    for case in cases:
        if case.target != target.name:
            continue
        try:
            stages = json.loads((cfg.case_dir(case) / "result.json").read_text()).get("stages", {})
        except (OSError, ValueError):
            continue
        seconds = sum(float(v.get("seconds", 0)) for k, v in stages.items() if k not in ("compile", "run"))
        for log in LOGS.values():
            seconds += sum(s for tool, s in logged_runs(cfg.case_dir(case) / log) if s is not None)
        found[case.name] = round(seconds, 2)
    return found


def calibrate(cfg, cases, out_dir: Path | None = None) -> list[str]:
    """Rewrite each selected target's calibration from this build folder; one line per target."""
    lines = []
    for target in cfg.targets:
        found = samples(cfg, cases, target)
        if not any(found.values()):
            lines.append(f"{target.name}: no completed compile or run in {cfg.build_dir}: calibration left as it was")
            continue
        ran = sum(1 for c in cases if c.target == target.name)
        wheels = (target.toolchain or {}).get("wheels") or {}
        versions = ", ".join(f"{name} {w.get('version')}" for name, w in sorted(wheels.items()) if isinstance(w, dict))
        measured = (f"{time.strftime('%Y-%m-%d')}: {ran} cases ({len(found['compile'])} compiles, "
                    f"{len(found['run'])} runs completed) of {Path(target.compiler).name} and "
                    f"{Path(target.runner).name}" + (f" ({versions})" if versions else ""))
        path = cost.write_calibration(target.name, found, measured,
                                      (out_dir / f"{target.name}.json") if out_dir else None,
                                      chains=chains(cfg, cases, target))
        envelopes = {stage: cost.Envelope.of(found[stage]) for stage in cost.TIMED}
        corners = ", ".join(f"{stage} {len(e.points)} corners up to {e.points[-1][1]:.1f} s"
                            for stage, e in envelopes.items() if e.points)
        lines.append(f"{target.name}: {path} from {measured}: {corners}")
    return lines
