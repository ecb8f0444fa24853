"""`doit calibrate`: a target's cost calibration (pipeline/targets/costs/<target>.json) from a
measured run in the build folder.

Every compile and run invocation the case folders' logs record counts with its wall time,
passing or failing with a message; one that timed out or could not start does not (its time
is the limit's, not the tool's). The calibration keeps the upper envelope of those times
against the MACs of one of the case's convs, and of the runs' against the compiler's estimated
cycles where it gives them (pipeline/targets/cost.py), and what each case's chain took, for the
order chains start in on a folder with no results of its own (pipeline/engine/history.py).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from pipeline.core.tools import logged_runs
from pipeline.space.geometry import macs
from pipeline.targets import cost

LOGS = {"compile": "compile.log", "run": "run.log"}  # the stage's log in a case's folder on its target


def measure(cfg, cases, target) -> tuple[dict[str, list], dict[str, list], dict[str, float]]:
    """From one read of each case's result and logs on the target: (MACs, seconds) of every
    completed compile and run invocation, per stage and per conv (cost.per_conv); (estimated
    cycles, seconds) of those of a stage of cost.BY_CYCLES whose module has the compiler's
    estimate; and case name -> seconds its chain took, the recorded stage times and every
    compile and run tool's time, a failing one included (the order chains start in follows
    these). A tool cut at a limit counts in none: its time was the limit's, which the next
    run's predicted limit may cut far shorter."""
    tools = {"compile": Path(target.compiler).name, "run": Path(target.runner).name}
    samples: dict[str, list] = {stage: [] for stage in cost.TIMED}
    by_cycles: dict[str, list] = {stage: [] for stage in cost.BY_CYCLES}
    chains = {}
    for case in cases:
        if case.target != target.name:
            continue
        count, cycles = macs(case.geometry), cfg.estimated_cycles(case)
        try:
            stages = json.loads((cfg.case_dir(case) / "result.json").read_text()).get("stages", {})
        except (OSError, ValueError):
            stages = None
        seconds = sum(float(v.get("seconds", 0)) for k, v in (stages or {}).items() if k not in LOGS)
        for stage, log in LOGS.items():
            for tool, took in logged_runs(cfg.case_dir(case) / log):
                if took is None:
                    continue
                seconds += took
                if tool == tools[stage]:
                    samples[stage].append(cost.per_conv(count, took, case.convs))
                    if cycles and stage in by_cycles:
                        by_cycles[stage].append((cycles, took))
        if stages is not None:
            chains[case.name] = round(seconds, 2)
    return samples, by_cycles, chains


def calibrate(cfg, cases, out_dir: Path | None = None) -> list[str]:
    """Rewrite each selected target's calibration from this build folder; one line per target."""
    lines = []
    for target in cfg.targets:
        found, by_cycles, chains = measure(cfg, cases, target)
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
                                      chains=chains, cycles=by_cycles)
        envelopes = {stage: cost.Envelope.of(found[stage]) for stage in cost.TIMED}
        envelopes.update({f"{stage} by cycles": cost.Envelope.of(timed) for stage, timed in by_cycles.items()})
        corners = ", ".join(f"{stage} {len(e.points)} corners up to {e.points[-1][1]:.1f} s"
                            for stage, e in envelopes.items() if e.points)
        lines.append(f"{target.name}: {path} from {measured}: {corners}")
    return lines
