"""Where a slow compile's time goes, for `doit bugreport` on a timeout bucket: MLIR's pass
timing (`--mlir-timing --mlir-timing-display=list`, which IREE's and Torq's compilers print on
stderr when the compile ends), parsed into its passes, and the growth of the time with the
case's size along the shrink's path.

A compiler may print several reports, one per pass manager it runs (torq-compile runs nested
ones, e.g. to check whether a tile fits in memory); a pass's seconds are summed over them. In
the list display a pass's time includes the passes it runs (a pipeline adaptor, a pass that
translates executables), so the shares overlap; the pipeline containers themselves (root,
`'func.func' Pipeline`, `Pipeline Collection : [...]`, adaptors) are left out.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

TIMING_FLAGS = ("--mlir-timing", "--mlir-timing-display=list")
TOP_PASSES = 12  # passes shown, slowest first

_HEADER = re.compile(r"\.\.\. Execution time report \.\.\.")
_TOTAL = re.compile(r"Total Execution Time: (-?\d+(?:\.\d+)?) seconds")
# a row: [user seconds (share)] wall seconds (share) name; with threading on, both columns
_ROW = re.compile(r"^\s*(?:-?\d+\.\d+ \(\s*-?\d+(?:\.\d+)?%\)\s+)?(-?\d+\.\d+) \(\s*-?\d+(?:\.\d+)?%\)\s+(\S.*?)\s*$")
_CONTAINER = re.compile(r"^(root|Rest|Total)$|Pipeline$|^Pipeline Collection\b|OpPipelineAdaptorPass$")


@dataclass(frozen=True)
class Timing:
    """A compile's pass timing."""

    reports: tuple[float, ...]  # each report's total seconds, in the order printed
    passes: tuple[tuple[str, float], ...]  # (pass, wall seconds summed over the reports), slowest first

    def top(self, n: int = TOP_PASSES) -> tuple[tuple[str, float], ...]:
        return self.passes[:n]


def parse_timing(text: str) -> Timing | None:
    """The pass timing in a compiler's output (a compile log will do), or None if it has none."""
    totals: list[float] = []
    seconds: dict[str, float] = {}
    inside = False
    for line in text.splitlines():
        if _HEADER.search(line):
            inside = True
            continue
        if not inside:
            continue
        total = _TOTAL.search(line)
        if total:
            totals.append(float(total.group(1)))
            continue
        row = _ROW.match(line)
        if row is None:
            continue
        wall, name = float(row.group(1)), row.group(2)
        if name == "Total":
            inside = False  # the report ends
        if not _CONTAINER.search(name):
            seconds[name] = seconds.get(name, 0.0) + wall
    if not totals:
        return None
    ordered = sorted(seconds.items(), key=lambda item: (-item[1], item[0]))
    return Timing(tuple(totals), tuple(ordered))


def pass_table(timing: Timing, compile_seconds: float | None, n: int = TOP_PASSES) -> list[str]:
    """Markdown: the slowest passes, each with its seconds and its share of the compile's wall time."""
    whole = compile_seconds or max(timing.reports)
    lines = [f"{len(timing.reports)} timing report{'s' if len(timing.reports) != 1 else ''}, "
             f"{max(timing.reports):.3g} s in the largest, of a compile of {whole:.3g} s "
             "(a pass's time includes the passes it runs: the shares overlap).", "",
             "| pass | seconds | share of the compile |", "|---|---|---|"]
    for name, wall in timing.top(n):
        lines.append(f"| {name.replace('|', '/')} | {wall:.3g} | {100 * wall / whole:.1f} % |")
    return lines


def growth_table(points: list[dict], stage: str, factor: float) -> list[str]:
    """Markdown: the stage's seconds against MACs at the given points of the shrink's path
    (attempt entries of shrink.json: case, macs, timed, limit, typical), largest first, and
    the exponent of the growth between the largest and the smallest that finished."""
    lines = [f"| case | MACs | {stage} (s) | typical (s) | x typical |", "|---|---|---|---|---|"]
    for p in sorted(points, key=lambda p: -p["macs"]):
        took = f"{p['timed']:.3g}" if p.get("timed") is not None else \
            f"> {p['limit']:g} (cut)" if p.get("limit") else "-"
        guess = p.get("typical")
        spent = p.get("timed") if p.get("timed") is not None else p.get("limit")
        ratio = "-" if not guess or spent is None else \
            f"{'> ' if p.get('timed') is None else ''}{spent / guess:.1f}"
        lines.append(f"| `{p['case']}` | {p['macs']:,} | {took} | {f'{guess:.3g}' if guess else '-'} | {ratio} |")
    finished = sorted((p for p in points if p.get("timed")), key=lambda p: p["macs"])
    if len(finished) > 1 and finished[-1]["macs"] > finished[0]["macs"]:
        small, large = finished[0], finished[-1]
        exponent = math.log(large["timed"] / small["timed"]) / math.log(large["macs"] / small["macs"])
        lines += ["", f"From {small['macs']:,} to {large['macs']:,} MACs the {stage} time grows as "
                      f"MACs^{exponent:.2f}; anomalous is past {factor:g} x typical."]
    return lines


def path_points(path: list[dict], n: int = 6) -> list[dict]:
    """At most `n` points of the shrink's path, evenly spaced, the original and the minimum kept."""
    if len(path) <= n:
        return list(path)
    step = (len(path) - 1) / (n - 1)
    return [path[round(i * step)] for i in range(n)]
