"""Performance per case: what the compiled module costs and how fast it runs.

Always recorded (free): the MACs of the geometry, the .vmfb size, the compile time, and on a
target whose compiler estimates its execution time (torq-compile's profiling timeline) the
estimated NPU cycles and the MACs per cycle.

Opt-in (CONV_SWEEP_BENCHMARK=1): on a target with a benchmark tool (iree-benchmark-module on
the CPU targets) the module runs REPETITIONS times for at least MIN_TIME each; the median time
per call, the fastest and the slowest repetition, and the spread ((slowest - fastest) / median)
are kept, with the MAC rate at the median. Only a passing case is benchmarked: the speed of a
module that computes the wrong thing means nothing. A failing benchmark tool leaves the case's
status alone; its reason and log are kept in `perf.execution`.

Shared machines are noisy, and more between runs than within one: repetitions in one
benchmark call share the same neighbour on the other core, two runs do not, so the spreads
within a run understate how far two runs' medians move (docs/triage.md, "Comparing two runs",
and docs/measurements.md have the figures). A comparison of two runs (pipeline/triage/diff.py)
therefore calls a time change real only when it exceeds the larger of the two runs' spreads
plus RUN_TO_RUN_NOISE, which `doit compare --noise-floor` replaces for another machine;
`doit compare` of two runs of one compiler prints that run-to-run figure for the machine at
hand.
"""
from __future__ import annotations

import json
import math
import statistics
import tempfile
from pathlib import Path

from pipeline.core.errors import StageError
from pipeline.core.tools import run_tool
from pipeline.space.geometry import macs

REPETITIONS = 5
RUN_TO_RUN_NOISE = 0.10  # |log ratio| two runs of one compiler reach (measured: see above)
MIN_TIME = "0.1s"  # per repetition: google-benchmark repeats the call until this much time has passed
LOG = "benchmark.log"




def benchmark_command(tool: str, run_flags: tuple[str, ...], vmfb: Path, function: str, input_args: list[str],
                      out: Path) -> list[str]:
    return [tool, f"--module={vmfb}", *run_flags, f"--function={function}", *input_args,
            f"--benchmark_repetitions={REPETITIONS}", f"--benchmark_min_time={MIN_TIME}",
            "--benchmark_out_format=json", f"--benchmark_out={out}"]


def parse_benchmark(document: dict) -> dict:
    """Per-repetition real times (google-benchmark JSON) -> median, fastest, slowest, spread, in seconds."""
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    times = [float(b["real_time"]) * scale[b.get("time_unit", "ns")]
             for b in document.get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"]
    if not times:
        raise ValueError("the benchmark tool reported no repetition")
    median = statistics.median(times)
    return {"repetitions": len(times), "median_s": median, "min_s": min(times), "max_s": max(times),
            "spread": (max(times) - min(times)) / median if median > 0 else 0.0,
            "iterations": [int(b.get("iterations", 0)) for b in document["benchmarks"]
                           if b.get("run_type", "iteration") == "iteration"]}


def run_benchmark(tool: str, run_flags: tuple[str, ...], vmfb: Path, function: str, input_args: list[str], *,
                  timeout: float, log: Path) -> dict:
    """Time the module's function with the benchmark tool; {"tool", median_s, ...} or {"error", "log"}."""
    with tempfile.TemporaryDirectory(dir=Path(log).parent, prefix=".benchmark.") as tmp:
        out = Path(tmp) / "benchmark.json"
        try:
            run_tool(benchmark_command(tool, run_flags, vmfb, function, input_args, out), stage="benchmark",
                     timeout=timeout, log=log)
            measured = parse_benchmark(json.loads(out.read_text()))
        except StageError as err:
            return {"tool": Path(tool).name, "error": err.reason, "log": str(log)}
        except (OSError, ValueError, KeyError) as err:
            return {"tool": Path(tool).name, "error": f"unreadable benchmark output: {err}", "log": str(log)}
    return {"tool": Path(tool).name, **measured}


def record(geometry, vmfb: Path, stages: dict, estimated_cycles: float | None = None,
           execution: dict | None = None) -> dict:
    """The case's `perf` entry of result.json."""
    count = macs(geometry)
    perf = {"macs": count}
    if Path(vmfb).exists():
        perf["vmfb_bytes"] = Path(vmfb).stat().st_size
    if "compile" in stages:
        perf["compile_seconds"] = stages["compile"].get("seconds")
    if estimated_cycles:
        perf["estimated_npu_cycles"] = estimated_cycles
        perf["macs_per_cycle"] = count / estimated_cycles
    if execution:
        perf["execution"] = execution
        if execution.get("median_s"):
            perf["gmacs_per_second"] = count / execution["median_s"] / 1e9
    return perf


def mac_rate(perf: dict) -> tuple[float, str] | None:
    """The achieved MAC rate and its unit: measured GMAC/s where benchmarked, else the compiler's
    estimated MACs per NPU cycle, else None."""
    if perf.get("gmacs_per_second"):
        return perf["gmacs_per_second"], "GMAC/s"
    if perf.get("macs_per_cycle"):
        return perf["macs_per_cycle"], "MAC/cycle"
    return None


# --- across the sweep (results/report.py, results/html.py) -------------------------------------------------

def rated(entries: list[dict]) -> list[tuple[dict, float, str]]:
    """(entry, MAC rate, unit) of every passing case with one."""
    out = []
    for e in entries:
        rate = mac_rate(e.get("perf") or {}) if e.get("status") == "pass" else None
        if rate:
            out.append((e, *rate))
    return out


def slowest_relative(entries: list[dict], top: int = 15) -> list[tuple[dict, float, str]]:
    """The cases with the lowest MAC rate: the slowest relative to their MACs."""
    return sorted(rated(entries), key=lambda item: (item[2], item[1]))[:top]


def by_flavor(entries: list[dict]) -> dict[str, dict]:
    """Per flavor: cases rated, median MAC rate and unit, median .vmfb size and compile time."""
    out: dict[str, dict] = {}
    for variant in sorted({f"{e['backend']}_{e['flavor']}" for e in entries}):
        chosen = [e for e in entries if f"{e['backend']}_{e['flavor']}" == variant]
        rates = [(r, u) for e, r, u in rated(chosen)]
        sizes = [e["perf"]["vmfb_bytes"] for e in chosen if (e.get("perf") or {}).get("vmfb_bytes")]
        compiles = [e["perf"]["compile_seconds"] for e in chosen if (e.get("perf") or {}).get("compile_seconds")]
        out[variant] = {
            "rated": len(rates), "median_rate": statistics.median(r for r, _ in rates) if rates else None,
            "unit": rates[0][1] if rates else None,
            "median_vmfb_bytes": statistics.median(sizes) if sizes else None,
            "median_compile_seconds": statistics.median(compiles) if compiles else None,
            "benchmark_errors": sum(1 for e in chosen if ((e.get("perf") or {}).get("execution") or {}).get("error")),
        }
    return out


def describe(item: tuple[dict, float, str]) -> str:
    """One case's speed: MACs, time (or estimated cycles), rate."""
    e, rate, unit = item
    p = e["perf"]
    if unit == "GMAC/s":
        x = p["execution"]
        spent = f"{x['median_s'] * 1e3:.3f} ms (spread {x['spread']:.0%})"
    else:
        spent = f"{p['estimated_npu_cycles']:,.0f} estimated NPU cycles"
    return f"{p['macs']:,} MACs in {spent}: {rate:.3g} {unit}"


# --- two runs of one case (pipeline/triage/diff.py) ------------------------------------------------------

def changes(old: dict, new: dict, floor: float = RUN_TO_RUN_NOISE) -> list[dict]:
    """Performance changes of one case between two runs, beyond the noise measured:
    - execution time, where both runs benchmarked it: when |log(new median / old median)|
      exceeds the larger of the two runs' relative spreads plus `floor`, the run-to-run noise
      of the machine (RUN_TO_RUN_NOISE);
    - the compiler's estimated NPU cycles: any change (the estimate is deterministic).
    Each change: metric, old, new, ratio (new / old), noise (the threshold on |log ratio|), and
    "slower" or "faster"."""
    out = []
    a, b = (old or {}).get("execution") or {}, (new or {}).get("execution") or {}
    if a.get("median_s") and b.get("median_s"):
        ratio = b["median_s"] / a["median_s"]
        noise = max(a.get("spread", 0.0), b.get("spread", 0.0)) + floor
        if abs(math.log(ratio)) > noise:
            out.append({"metric": "time", "old": a["median_s"], "new": b["median_s"], "ratio": ratio,
                        "noise": noise, "direction": "slower" if ratio > 1 else "faster"})
    ca, cb = (old or {}).get("estimated_npu_cycles"), (new or {}).get("estimated_npu_cycles")
    if ca and cb and ca != cb:
        out.append({"metric": "estimated NPU cycles", "old": ca, "new": cb, "ratio": cb / ca, "noise": 0.0,
                    "direction": "slower" if cb > ca else "faster"})
    return out


def run_to_run(pairs: list[tuple[dict, dict]]) -> dict | None:
    """How much the timed cases' medians moved between two runs: |log(new / old)| at the median,
    the 99th percentile and the maximum (two runs of one compiler measure the machine's noise)."""
    moves = sorted(abs(math.log(b["execution"]["median_s"] / a["execution"]["median_s"]))
                   for a, b in pairs if ((a or {}).get("execution") or {}).get("median_s")
                   and ((b or {}).get("execution") or {}).get("median_s"))
    if not moves:
        return None
    return {"cases": len(moves), "median": statistics.median(moves), "p99": moves[min(len(moves) - 1,
                                                                                       int(0.99 * len(moves)))],
            "max": moves[-1]}
