"""Benchmark: where a sweep's time goes, side by side in one invocation.

    python -m pipeline.dev.benchmark [--n 2] [--pairs K] [--spec FILE] [--out bench.json] [--work DIR]
        [--hunt TARGETS --hunt-budget S] [--skip-sweeps] [--torq-full]

Measures, on a fixed subset (CONV_SWEEP_N geometries per category): a cold `doit -n 2 sweep`;
a no-op rerun; a second empty build folder on the store the cold run filled; a compile-flag
A/B in a third folder on that store (its models and imports all from the store); a rerun
after changing CONV_SWEEP_COMPILE_FLAGS; a naive baseline (the same
cases through the same stage functions in one serial loop, no caching); the intrinsic tool
time (per-stage durations from result.json, divided by 2 cores); what timing every module
costs (CONV_SWEEP_BENCHMARK=1: a verify-only rerun with it, against one without); the same cold sweep with the
stages on a local Dask cluster (CONV_SWEEP_SCHEDULER=local:2) and its overhead against the
`doit -n 2` run (with --pairs K, K such pairs of cold runs, each ratio and their median and
maximum: the machine's noise moves these most); `doit list` and a no-op
`doit sweep` on the full default sweep (when its artifacts exist in the default build
folder); and the peak resident memory of each run's whole process tree. With --torq-full,
also a cold full default sweep on torq with the predicted limits and with the old fixed ones.
With --hunt TARGETS (and --hunt-budget S), `doit hunt` and its baseline (`--strategy cost`, the
search without the known-bucket weighting) on every target, all side by side, one lane each,
from cold stores: the share of cases in known buckets, new buckets and root causes per CPU-hour
of search, and the ratios (--skip-sweeps leaves out everything else). Prints a table and the ratios, and writes them as
JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pipeline.core.chain import STORED_STAGES, TIMED_STAGES
from pipeline.core.tools import logged_runs
from pipeline.curate.calibrate import LOGS

ROOT = Path(__file__).resolve().parents[2]  # the project folder
CORES = 2


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = set(), [pid]
    while stack:
        p = stack.pop()
        out.add(p)
        stack.extend(children.get(p, []))
    return out


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


def measure(argv: list[str], env: dict, cwd: Path = ROOT) -> dict:
    """Wall time, exit status and peak resident memory (sum over the process tree) of argv.
    The wall time ends when the process exits, as a shell's `time` sees it: not when the last
    of its children (a Dask cluster's forkserver and workers, which inherit its stderr) has
    closed the output pipes, nor when the memory sampler next wakes up."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, end = [0], [0.0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], sum(_rss_kib(p) for p in _descendants(proc.pid)))
            time.sleep(0.2)

    def wait():
        proc.wait()
        end[0] = time.monotonic()

    threads = [threading.Thread(target=sample, daemon=True), threading.Thread(target=wait, daemon=True)]
    for thread in threads:
        thread.start()
    out, err = proc.communicate()
    for thread in threads:
        thread.join()
    return {"seconds": round(end[0] - start, 3), "returncode": proc.returncode,
            "peak_rss_mb": round(peak[0] / 1024, 1), "stdout": out, "stderr": err}


def _doit(*args) -> list[str]:
    """A doit command; sweeps run with -v 2, whose line per started task is what _executed counts."""
    return [sys.executable, "-m", "doit", *(("-v", "2") if "sweep" in args else ()), *args]


def _executed(stdout: str) -> int:
    return sum(line.startswith(".  ") for line in stdout.splitlines())


def intrinsic(build_dir: Path) -> dict:
    """Tool time per stage: the durations result.json records, and for the stage a case failed
    at, which records none, what its logged tool invocations took (one cut at a limit: the
    limit), so that a sweep with failures has its whole floor."""
    totals = dict.fromkeys(TIMED_STAGES, 0.0)
    for path in Path(build_dir).glob("cases/*/*/result.json"):
        result = json.loads(path.read_text())
        stages = result.get("stages", {})
        for stage in TIMED_STAGES:
            totals[stage] += float(stages.get(stage, {}).get("seconds", 0.0))
        failed = result.get("stage")
        if failed in LOGS and failed not in stages:
            totals[failed] += _logged_seconds(path.parent / LOGS[failed])
    return totals


def _logged_seconds(log: Path) -> float:
    """Seconds of every tool invocation a log records, a cut one's included."""
    return sum(took for _, took in logged_runs(log) if took is not None) + _cut_seconds(log)


NAIVE = """
import sys, time
from pipeline.run import stages
from pipeline.config import Config
cfg = Config.from_env()
start = time.monotonic()
failed = 0
for case in cfg.cases():
    for stage in (stages.model, stages.mlir, stages.vmfb, stages.verify):
        if stage([case] if stage in (stages.model, stages.mlir) else case, cfg):
            failed += 1
            break
print(f"naive: {len(cfg.cases())} cases, {failed} failed, {time.monotonic() - start:.1f} s")
"""


def cold_pair(base: dict, work: Path, i: int) -> dict:
    """One more cold `doit -n 2 sweep` and cold Dask `local:2` sweep, one right after the other,
    each in a fresh folder with a fresh store: the two ratios the machine's noise moves most.
    Odd pairs run the Dask sweep first, so that a machine slowing down (or speeding up) over
    the pairs does not count against one of the two."""
    env = {**base, "CONV_SWEEP_BUILD_DIR": str(work / f"sweep-{i}"), "CONV_SWEEP_CACHE_DIR": str(work / f"store-{i}")}
    runs = {"cold": (_doit("-n", str(CORES), "sweep"), env),
            "dask": (_doit("sweep"), {**env, "CONV_SWEEP_BUILD_DIR": str(work / f"dask-{i}"),
                                      "CONV_SWEEP_CACHE_DIR": str(work / f"store-dask-{i}"),
                                      "CONV_SWEEP_SCHEDULER": f"local:{CORES}"})}
    measured = {name: measure(*runs[name]) for name in (("dask", "cold") if i % 2 else ("cold", "dask"))}
    floor = sum(intrinsic(work / f"sweep-{i}").values()) / CORES
    return _pair(measured["cold"], floor, measured["dask"])


def _pair(cold: dict, floor: float, dask: dict) -> dict:
    return {"cold_seconds": cold["seconds"], "floor_seconds": round(floor, 2), "dask_seconds": dask["seconds"],
            "returncodes": [cold["returncode"], dask["returncode"]],
            "cold / floor": round(cold["seconds"] / floor, 3) if floor else None,
            "dask / cold": round(dask["seconds"] / cold["seconds"], 3)}


def run(n: int, spec: str | None, work: Path, pairs: int = 1) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_")}
    base["CONV_SWEEP_N"] = str(n)
    if spec:
        base["CONV_SWEEP_SPEC"] = str(Path(spec).resolve())
    # every cold run starts from an empty store of its own; the naive loop uses none
    sweep_env = {**base, "CONV_SWEEP_BUILD_DIR": str(work / "sweep"), "CONV_SWEEP_CACHE_DIR": str(work / "store")}
    naive_env = {**base, "CONV_SWEEP_BUILD_DIR": str(work / "naive"), "CONV_SWEEP_CACHE_DIR": "off"}
    rows = {}
    cold = measure(_doit("-n", str(CORES), "sweep"), sweep_env)
    rows["cold doit -n 2 sweep"] = cold
    # read before later runs in the folder rewrite its records
    tools, built = intrinsic(work / "sweep"), {"cold": built_here(work / "sweep")}
    # the same cold sweep on Dask, right after (side by side on a noisy machine), its own store
    dask_env = {**base, "CONV_SWEEP_BUILD_DIR": str(work / "dask"), "CONV_SWEEP_SCHEDULER": f"local:{CORES}",
                "CONV_SWEEP_CACHE_DIR": str(work / "store-dask")}
    dask = measure(_doit("sweep"), dask_env)
    rows[f"cold sweep on Dask (local:{CORES})"] = dask
    warm_env = {**sweep_env, "CONV_SWEEP_BUILD_DIR": str(work / "warm")}
    warm = measure(_doit("-n", str(CORES), "sweep"), warm_env)
    rows["second empty build folder, warm store"] = warm
    built["warm store"] = built_here(work / "warm")
    ab_env = {**sweep_env, "CONV_SWEEP_BUILD_DIR": str(work / "ab"),
              "CONV_SWEEP_COMPILE_FLAGS": "--iree-opt-strip-assertions=true"}
    rows["compile-flag A/B in a third folder, warm store"] = measure(_doit("-n", str(CORES), "sweep"), ab_env)
    built["compile-flag A/B, warm store"] = built_here(work / "ab")
    rows["no-op rerun"] = measure(_doit("-n", str(CORES), "sweep"), sweep_env)
    flags_env = {**sweep_env, "CONV_SWEEP_COMPILE_FLAGS": "--iree-opt-strip-assertions=true"}
    rows["rerun after CONV_SWEEP_COMPILE_FLAGS change"] = measure(_doit("-n", str(CORES), "sweep"), flags_env)
    timed = measure(_doit("-n", str(CORES), "sweep"), {**flags_env, "CONV_SWEEP_BENCHMARK": "1"})
    rows["verify rerun, CONV_SWEEP_BENCHMARK=1"] = timed
    untimed = measure(_doit("-n", str(CORES), "sweep"), {**flags_env, "CONV_SWEEP_BENCHMARK": "0"})
    rows["verify rerun, CONV_SWEEP_BENCHMARK=0"] = untimed
    rows["naive serial loop"] = measure([sys.executable, "-c", NAIVE], naive_env)
    floor = sum(tools.values()) / CORES
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_")}
    rows["doit list (full default sweep)"] = measure(_doit("list", "--all"), full_env)
    full_build = ROOT / "build"
    complete = len(list(full_build.glob("cases/*/*/result.json")))
    if complete >= 1250:
        rows["no-op doit sweep (full default sweep)"] = measure(_doit("-n", str(CORES), "sweep"), full_env)
    cases = len(list((work / "sweep").glob("cases/*/*/result.json")))
    repeated = [_pair(cold, floor, dask)] + [cold_pair(base, work, i) for i in range(1, pairs)]
    figures = {
        "cold_pairs": repeated,
        "built_not_taken_from_the_store": built,
        "cases": cases,
        "intrinsic_tool_seconds": {k: round(v, 2) for k, v in tools.items()},
        "intrinsic_floor_seconds": round(floor, 2),
        "runs": {name: {k: v for k, v in r.items() if k not in ("stdout", "stderr")} | {
            "executed_tasks": _executed(r["stdout"])} for name, r in rows.items()},
        "full_sweep_artifacts": complete,
        "ratios": {
            "cold / intrinsic floor": round(cold["seconds"] / floor, 3) if floor else None,
            "cold / naive": round(cold["seconds"] / rows["naive serial loop"]["seconds"], 3),
            "naive / cold (speed-up)": round(rows["naive serial loop"]["seconds"] / cold["seconds"], 3),
            "no-op / cold": round(rows["no-op rerun"]["seconds"] / cold["seconds"], 4),
            "second folder on a warm store / cold": round(warm["seconds"] / cold["seconds"], 3),
            f"Dask local:{CORES} / cold doit -n {CORES} (overhead)": round(dask["seconds"] / cold["seconds"], 3),
            "verify rerun with / without CONV_SWEEP_BENCHMARK=1": round(timed["seconds"] / untimed["seconds"], 3),
            "CONV_SWEEP_BENCHMARK=1 cost per case (s, wall, 2 cores)":
                round((timed["seconds"] - untimed["seconds"]) / cases, 3) if cases else None,
        },
    }
    return figures


def built_here(build_dir: Path) -> dict[str, int]:
    """Per stage, how many cases of a build folder ran it rather than taking it from the store."""
    counts: dict[str, int] = {}
    for path in Path(build_dir).glob("cases/*/*/result.json"):
        for stage, info in json.loads(path.read_text()).get("stages", {}).items():
            if stage in STORED_STAGES:
                counts[stage] = counts.get(stage, 0) + (not info.get("store"))
    return counts


def torq_rows(work: Path) -> dict:
    """Opt-in (--torq-full, it takes long): a cold full default sweep on torq with its expected
    failures, with the predicted time limits and with the old fixed ones, side by side: wall
    time, floor (tool time / 2) and the time spent in runs cut at a limit."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_")}
    rows = {}
    for mode in ("predicted", "fixed"):
        env = {**base, "CONV_SWEEP_TARGET": "torq", "CONV_SWEEP_TIMEOUTS": mode,
               "CONV_SWEEP_BUILD_DIR": str(work / f"torq-{mode}"), "CONV_SWEEP_CACHE_DIR": str(work / f"store-{mode}")}
        measured = measure(_doit("-n", str(CORES), "sweep"), env)
        tools = intrinsic(work / f"torq-{mode}")
        rows[f"cold full torq sweep, {mode} limits"] = {
            "seconds": measured["seconds"], "returncode": measured["returncode"],
            "floor_seconds": round(sum(tools.values()) / CORES, 1), "in_timeouts_seconds": in_timeouts(work / f"torq-{mode}")}
    rows["false cuts"] = false_cuts(work / "torq-predicted", work / "torq-fixed", "torq")
    return rows


HUNT_STRATEGIES = ("hunt", "cost")  # the hunt, and its baseline: the same search without the known-bucket weighting


def hunt_rows(work: Path, targets: list[str], budget: float, strategies=HUNT_STRATEGIES) -> dict:
    """Opt-in (--hunt TARGETS, it takes the budget): `doit hunt --strategy S` for each target
    and strategy, all at once, one lane each, at the same budget, each from a cold store and an
    empty build folder, with the target's checked-in expected failures. Per target: each run's
    figures (hunt_figures), and the first strategy's rates over each other's."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_")}
    runs: dict[str, dict] = {target: {} for target in targets}
    threads = []
    for target in targets:
        for strategy in strategies:
            name = f"{target.replace('@', '-')}-{strategy}"
            env = {**base, "CONV_SWEEP_TARGET": target, "CONV_SWEEP_BUILD_DIR": str(work / f"hunt-{name}"),
                   "CONV_SWEEP_CACHE_DIR": str(work / f"store-hunt-{name}")}
            argv = [sys.executable, "-m", "doit", "hunt", "--budget", f"{budget:g}", "--strategy", strategy,
                    "--lanes", "1"]

            def one(target=target, strategy=strategy, name=name, argv=argv, env=env):
                measured = measure(argv, env)
                (work / f"hunt-{name}.log").write_text(measured["stdout"] + measured["stderr"])
                try:
                    summary = json.loads((work / f"hunt-{name}" / "hunt" / "summary.json").read_text())
                except (OSError, ValueError):
                    summary = None
                runs[target][strategy] = {"seconds": measured["seconds"], "returncode": measured["returncode"],
                                          **hunt_figures(summary)}

            threads.append(threading.Thread(target=one))
            threads[-1].start()
    for thread in threads:
        thread.join()
    for target in targets:
        first, *others = strategies
        for other in others:
            for rate in ("new buckets per CPU-hour", "new root causes per CPU-hour"):
                a, b = runs[target][first][rate], runs[target][other][rate]
                runs[target][f"{first} / {other} ({rate})"] = round(a / b, 2) if b else (float("inf") if a else None)
    return runs


def hunt_figures(summary: dict | None) -> dict:
    """One hunt's figures from its summary.json (None: it wrote none): cases, the share of them
    in known buckets (the sweep's or listed), new buckets and their root causes, the CPU
    seconds of its search (its process, its finished tools and its helpers), and new buckets and
    root causes per CPU-hour of that search."""
    if summary is None:
        return {"geometries": 0, "cases": 0, "in_known_buckets": None, "cpu_seconds": 0.0, "new_buckets": [],
                "new_root_causes": [], "bugreports": 0, "new buckets per CPU-hour": 0.0,
                "new root causes per CPU-hour": 0.0}
    hours = summary["cpu_seconds"] / 3600
    buckets, causes = summary["new_buckets"], summary["new_root_causes"]
    return {"geometries": summary["geometries"], "cases": summary["cases"],
            "in_known_buckets": summary["in_known_buckets"], "cpu_seconds": summary["cpu_seconds"],
            "new_buckets": [b["bucket"] for b in buckets], "new_root_causes": causes,
            "found_at_s": [b.get("found_at_s") for b in buckets],
            "bugreports": len(summary.get("bugreports", {})),
            "new buckets per CPU-hour": round(len(buckets) / hours, 2) if hours else 0.0,
            "new root causes per CPU-hour": round(len(causes) / hours, 2) if hours else 0.0}


def false_cuts(predicted: Path, fixed: Path, target: str) -> list[str]:
    """Cases cut at their predicted limit in one run whose tool ended by itself (passing, or
    failing with a message) under the fixed limits in the other."""
    def outcomes(build):
        return {p.parent.parent.name: json.loads(p.read_text()) for p in Path(build).glob(f"cases/*/{target}/result.json")}

    cut = {name for name, r in outcomes(predicted).items() if ": its predicted limit (" in (r.get("reason") or "")}
    return sorted(name for name, r in outcomes(fixed).items() if name in cut and "timed out" not in (r.get("reason") or ""))


def in_timeouts(build_dir: Path) -> float:
    """Seconds the build folder's tools spent before being cut at a limit (their logs say)."""
    return round(sum(_cut_seconds(log) for log in Path(build_dir).glob("cases/*/*/*.log")), 1)


def _cut_seconds(log: Path) -> float:
    """Seconds the tools of one log spent before being cut at a limit."""
    import re

    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(float(m) for m in re.findall(r"^# timed out after ([\d.]+) s", text, re.M))


def table(figures: dict) -> str:
    lines = [f"{'run':48} {'seconds':>9} {'peak RSS MB':>12} {'tasks run':>10} {'exit':>5}"]
    for name, r in figures["runs"].items():
        lines.append(f"{name:48} {r['seconds']:9.2f} {r['peak_rss_mb']:12.0f} {r['executed_tasks']:10d} "
                     f"{r['returncode']:5d}")
    if "intrinsic_tool_seconds" in figures:  # not with --skip-sweeps
        tools = ", ".join(f"{k} {v:.1f}" for k, v in figures["intrinsic_tool_seconds"].items())
        lines.append(f"intrinsic tool time ({figures['cases']} cases): {tools} s; "
                     f"/ {CORES} cores = floor {figures['intrinsic_floor_seconds']:.1f} s")
        if figures["full_sweep_artifacts"] < 1250:
            lines.append(f"no-op full sweep: not measured, the default build folder holds "
                         f"{figures['full_sweep_artifacts']} of 1250 results (run `doit -n 2 sweep` first)")
        lines += [f"built, not taken from the store ({name}): " + ", ".join(f"{k} {v}" for k, v in counts.items())
                  for name, counts in figures.get("built_not_taken_from_the_store", {}).items()]
    lines += [f"{k}: {v}" for k, v in figures["ratios"].items()]
    pairs = figures.get("cold_pairs", [])
    if len(pairs) > 1:
        lines.append(f"cold pairs, one right after the other ({len(pairs)}):")
        lines += [f"  cold -n {CORES} {p['cold_seconds']:.2f} s, floor {p['floor_seconds']:.2f} s: x{p['cold / floor']:.3f}; "
                  f"Dask local:{CORES} {p['dask_seconds']:.2f} s: x{p['dask / cold']:.3f}; exit {p['returncodes']}"
                  for p in pairs]
        for ratio in ("cold / floor", "dask / cold"):
            values = sorted(p[ratio] for p in pairs)
            lines.append(f"  {ratio}: median {statistics.median(values):.3f}, max {values[-1]:.3f}")
    for target, rows in figures.get("hunt", {}).items():
        for strategy, r in rows.items():
            if not isinstance(r, dict):
                lines.append(f"{strategy} on {target}: {r}")
                continue
            known = r["in_known_buckets"] or {"cases": 0, "of": 0, "share": 0.0}
            lines.append(f"doit hunt --strategy {strategy} on {target}: {r['cases']} cases ({r['geometries']} geometries), "
                         f"{known['cases']} of them ({known['share']:.0%}) in known buckets; {len(r['new_buckets'])} new "
                         f"buckets, {len(r['new_root_causes'])} new root causes in {r['cpu_seconds'] / 3600:.2f} CPU-hours "
                         f"of search: {r['new root causes per CPU-hour']:.2f} root causes per CPU-hour; "
                         f"{r['bugreports']} bug reports (exit {r['returncode']})")
            lines += [f"    {b[:150]}" + (f" (first found at {at:.0f} s)" if at is not None else "")
                      for b, at in zip(r["new_buckets"], r.get("found_at_s") or [None] * len(r["new_buckets"]))]
    for name, r in figures.get("torq", {}).items():
        if name == "false cuts":
            lines.append(f"false cuts (cut at a predicted limit, ended by itself under the fixed one): {len(r)} {r[:5]}")
            continue
        lines.append(f"{name}: {r['seconds'] / 60:.1f} min wall (exit {r['returncode']}), floor {r['floor_seconds'] / 60:.1f} "
                     f"min, {r['in_timeouts_seconds'] / 60:.1f} min of tool time in timeouts")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2, help="geometries per category (default 2: 50 cases)")
    parser.add_argument("--spec", help="a CONV_SWEEP_SPEC file instead of the default categories")
    parser.add_argument("--out", default="benchmark.json", help="where to write the figures as JSON")
    parser.add_argument("--work", help="scratch folder (default: a temporary one, removed afterwards)")
    parser.add_argument("--pairs", type=int, default=1,
                        help="cold doit -n 2 and Dask local:2 sweeps, side by side, this many times (default 1)")
    parser.add_argument("--torq-full", action="store_true",
                        help="also a cold full default sweep on torq, with predicted and with fixed limits (hours)")
    parser.add_argument("--hunt", default="",
                        help="targets (comma-separated) on which `doit hunt` and its baseline (--strategy cost) run, "
                             "all side by side")
    parser.add_argument("--hunt-budget", type=float, default=3600, help="seconds of each hunt (default 3600)")
    parser.add_argument("--skip-sweeps", action="store_true", help="only the opt-in rows (--hunt, --torq-full)")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error(f"--pairs={args.pairs}: must be at least 1")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="conv-sweep-bench-"))
    try:
        figures = {"runs": {}, "ratios": {}} if args.skip_sweeps else run(args.n, args.spec, work, args.pairs)
        if args.hunt:
            figures["hunt"] = hunt_rows(work, list(filter(None, args.hunt.split(","))), args.hunt_budget)
        if args.torq_full:
            figures["torq"] = torq_rows(work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(table(figures))
    Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")
    print(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
