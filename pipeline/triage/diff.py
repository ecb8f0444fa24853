"""Two runs side by side (`doit compare --old A --new B`): two compiler versions, two flag sets,
or two targets. Each side is a build folder (its report/<target>/results.json), a
results.json file, or a target of this build folder (`--old torq@2.2.1 --new torq`). Cases
are matched by name, on the same target, or across the two targets when each side holds one
target.

Reported: regressions (passing before, failing now: fail, error or an expected failure),
newly passing cases, cases failing in both (and those whose failure bucket changed), cases
whose error-to-tolerance ratio moved by more than a factor of 2, and cases slower or faster
beyond the noise (pipeline/targets/perf.py: `changes`: the larger of the two runs' spreads plus the
machine's run-to-run noise), with how far the timed cases moved between the runs; compile time beyond COMPILE_TIME_NOISE.
Per flavor, the release table: regressions, fixes and bucket changes, and the distributions
of the estimated-NPU-cycle ratio (cases passing in both) and of the compile-time ratio. Per
network of the networks profile (pipeline/results/networks.py), its layers' verdict changes and
its conv stack's cycle ratio.
Written as a terminal table, compare.html (self-contained) and junit.xml (a failure per
regression) in the output folder.
"""
from __future__ import annotations

import html
import json
import math
import statistics
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from pipeline.core.errors import ConfigError
from pipeline.targets.perf import RUN_TO_RUN_NOISE, changes, run_to_run
from pipeline.core.layout import Layout
from pipeline.results import networks
from pipeline.results.report import format_table, signature
from pipeline.results.html import page

PASSING = ("pass", "xpass", "compiled")
FAILING = ("fail", "error", "timeout", "xfail", "changed", "harness")
RATIO_FACTOR = 2.0  # a ratio that moved by more than this factor either way is listed
RATIO_FLOOR = 0.01  # ratios are compared as (r + floor): a move from 0.001 to 0.004 is noise, not news
# A compile's time moved beyond noise when |log(new / old)| exceeds this: the largest move two
# cold full sweeps of one compiler showed on a 2-core machine (docs/measurements.md).
COMPILE_TIME_NOISE = 0.75
COMPILE_TIME_MIN = 1.0  # seconds: shorter compiles are mostly process start, their ratios are not compared


def load(source: str, where: str, build: Layout | None = None) -> dict[str, dict[str, dict]]:
    """target -> case -> results.json entry, from a build folder, a results.json file, or (a
    source that is no path) a target of the `build` folder."""
    path = Path(source)
    if not path.exists() and build is not None:
        report = build.report_dir(source) / "results.json"
        if not report.is_file():
            found = sorted({target for f in build.report_files() for target in _targets(f)})
            raise ConfigError(where, source, f"is neither a build folder, a results.json, nor a target with results "
                              f"in {build.root} (targets with results: {', '.join(found) or 'none'})")
        path = report
    files = Layout(path).report_files() if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise ConfigError(where, source, "is neither a build folder with a report nor a results.json")
    out: dict[str, dict[str, dict]] = {}
    for f in files:
        try:
            cases = json.loads(f.read_text())["cases"]
        except (ValueError, KeyError) as err:
            raise ConfigError(where, str(f), f"is not a conv-sweep results.json ({err})") from None
        for entry in cases:
            out.setdefault(entry["target"], {})[entry["case"]] = entry
    return out


def _targets(results: Path) -> set[str]:
    try:
        return {entry["target"] for entry in json.loads(results.read_text())["cases"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def pairs(old: dict, new: dict) -> list[tuple[str, str]]:
    """(old target, new target) to compare: the same names, or the only target of each side."""
    same = [(t, t) for t in old if t in new]
    if same:
        return same
    if len(old) == 1 and len(new) == 1:
        return [(next(iter(old)), next(iter(new)))]
    raise ConfigError("compare", f"{sorted(old)} vs {sorted(new)}",
                      "no target in common; compare two targets through their results.json files")


def worst_ratio(entry: dict) -> float | None:
    """The largest error-to-tolerance ratio over the case's checks (inf: outside a 0 tolerance)."""
    ratios = [float(m["error_to_tolerance"]) for m in (entry.get("metrics") or {}).values()
              if m.get("error_to_tolerance") is not None]
    return max(ratios) if ratios else None


def diff(old: dict[str, dict], new: dict[str, dict], noise_floor: float = RUN_TO_RUN_NOISE) -> dict:
    """Cases of one target in two runs -> the changes, each a list of dicts."""
    out = {"regressions": [], "fixed": [], "still_failing": [], "bucket_changes": [], "ratio_moves": [],
           "slower": [], "faster": [],
           "only_old": sorted(set(old) - set(new)), "only_new": sorted(set(new) - set(old))}
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        row = {"case": name, "old": a["status"], "new": b["status"], "stage": b.get("stage"),
               "reason": b.get("reason", ""), "repro": b.get("repro")}
        if a["status"] in PASSING and b["status"] in FAILING:
            out["regressions"].append(row)
        elif a["status"] in FAILING and b["status"] in PASSING:
            out["fixed"].append(row)
        elif a["status"] in FAILING and b["status"] in FAILING:
            out["still_failing"].append(row)
            if signature(a) != signature(b):
                out["bucket_changes"].append({**row, "old_bucket": signature(a), "new_bucket": signature(b)})
        ra, rb = worst_ratio(a), worst_ratio(b)
        if ra is not None and rb is not None and math.isfinite(ra) and math.isfinite(rb):
            factor = (rb + RATIO_FLOOR) / (ra + RATIO_FLOOR)
            if factor > RATIO_FACTOR or factor < 1 / RATIO_FACTOR:
                out["ratio_moves"].append({**row, "old_ratio": ra, "new_ratio": rb, "factor": factor})
        for change in changes(a.get("perf"), b.get("perf"), noise_floor):
            out[change["direction"]].append({**row, **change})
        ta, tb = compile_seconds(a), compile_seconds(b)
        if ta and tb and max(ta, tb) >= COMPILE_TIME_MIN and abs(math.log(tb / ta)) > COMPILE_TIME_NOISE:
            out["slower" if tb > ta else "faster"].append({**row, "metric": "compile time", "old": ta, "new": tb,
                                                           "ratio": tb / ta, "noise": COMPILE_TIME_NOISE})
    common = sorted(set(old) & set(new))
    out["timing"] = run_to_run([(old[n].get("perf"), new[n].get("perf")) for n in common])
    out["noise_floor"] = noise_floor
    out["flavors"] = release_table(old, new, out)
    out["networks"] = networks.compare(list(old.values()), list(new.values()))
    return out


def compile_seconds(entry: dict) -> float | None:
    """The compile's wall time where the compile ran to a module here (a cut compile has no
    such time; one that failed stopped early, and one from the store took a copy's time: neither
    says anything of the compiler's speed)."""
    if entry.get("stage") == "compile" and entry.get("status") in FAILING:
        return None
    stage = (entry.get("stages") or {}).get("compile") or {}
    seconds = stage.get("seconds")
    if stage.get("store"):  # given back by the store: its time is the copy's
        return None
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else None


def distribution(values: list[float]) -> dict | None:
    """count, min, 10th percentile, median, 90th percentile and max of ratios (None: no value)."""
    if not values:
        return None
    v = sorted(values)

    def at(q: float) -> float:
        return v[min(len(v) - 1, int(q * len(v)))]
    return {"cases": len(v), "min": v[0], "p10": at(0.1), "median": statistics.median(v), "p90": at(0.9), "max": v[-1]}


def _flavor(entry: dict) -> str:
    """backend_flavor (tflite_w8i8), as the report names them."""
    return "_".join(part for part in (entry.get("backend"), entry.get("flavor")) if part) or "?"


def release_table(old: dict[str, dict], new: dict[str, dict], changed: dict) -> dict[str, dict]:
    """Per flavor: regressions, fixes, bucket changes, compile-time moves beyond noise, and the
    ratio distributions of estimated NPU cycles (cases passing in both) and of compile time."""
    table: dict[str, dict] = {}
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        row = table.setdefault(_flavor(a), {"cases": 0, "regressions": 0, "fixed": 0,
                                                         "bucket_changes": 0, "compile_moves": 0,
                                                         "cycles": [], "compile": []})
        row["cases"] += 1
        ca, cb = (a.get("perf") or {}).get("estimated_npu_cycles"), (b.get("perf") or {}).get("estimated_npu_cycles")
        if a["status"] in PASSING and b["status"] in PASSING and ca and cb:
            row["cycles"].append(cb / ca)
        ta, tb = compile_seconds(a), compile_seconds(b)
        if ta and tb and max(ta, tb) >= COMPILE_TIME_MIN:
            row["compile"].append(tb / ta)
    flavor_of = {name: _flavor(old[name]) for name in old}
    for key in ("regressions", "fixed", "bucket_changes"):
        for r in changed[key]:
            table[flavor_of[r["case"]]][key] += 1
    for r in changed["slower"] + changed["faster"]:
        if r["metric"] == "compile time":
            table[flavor_of[r["case"]]]["compile_moves"] += 1
    return {flavor: {**row, "cycles": distribution(row["cycles"]), "compile": distribution(row["compile"])}
            for flavor, row in sorted(table.items())}


def compare_runs(old_source: str, new_source: str, out_dir: Path,
                 noise_floor: float = RUN_TO_RUN_NOISE, build: Layout | None = None) -> tuple[str, int]:
    """Compare two runs; write compare.json, compare.html and junit.xml in out_dir. A source
    that is no path names a target of the `build` folder. Returns the terminal text and the
    number of regressions."""
    old, new = load(old_source, "compare --old", build), load(new_source, "compare --new", build)
    results = []
    for old_target, new_target in pairs(old, new):
        results.append((old_target, new_target, diff(old[old_target], new[new_target], noise_floor)))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    document = [{"old": {"source": old_source, "target": o}, "new": {"source": new_source, "target": n}, **d}
                for o, n, d in results]
    (out_dir / "compare.json").write_text(json.dumps(document, indent=1) + "\n")
    (out_dir / "junit.xml").write_text(_junit(results, old, new))
    (out_dir / "compare.html").write_text(_html(results, old_source, new_source))
    text = _text(results, old_source, new_source) + f"\ncompare: {out_dir / 'compare.html'} (also compare.json, junit.xml)"
    return text, sum(len(d["regressions"]) for _, _, d in results)


KINDS = (("regressions", "newly failing (regressions)"), ("fixed", "newly passing"),
         ("still_failing", "failing in both"), ("bucket_changes", "failing in both, bucket changed"),
         ("ratio_moves", f"error/tolerance moved > {RATIO_FACTOR:g}x"), ("slower", "slower beyond noise"),
         ("faster", "faster beyond noise"), ("only_old", "only in old"),
         ("only_new", "only in new"))


def _text(results, old_source, new_source) -> str:
    parts = [f"old: {old_source}\nnew: {new_source}"]
    for o, n, d in results:
        target = o if o == n else f"{o} -> {n}"
        parts.append(f"target {target}\n" + format_table(["", "cases"], [[label, len(d[k])] for k, label in KINDS]))
        parts.append(format_table(*_release_rows(d["flavors"])))
        for row in d["regressions"]:
            parts.append(f"REGRESSION {row['case']}: {row['old']} -> {row['new']} at {row['stage']}: "
                         f"{row['reason'][:160]}; repro: {row['repro']}")
        for row in d["fixed"]:
            parts.append(f"fixed {row['case']}: {row['old']} -> {row['new']}")
        for row in d["bucket_changes"][:20]:
            parts.append(f"bucket {row['case']}: {row['old_bucket'][:80]} -> {row['new_bucket'][:80]}")
        for row in sorted(d["ratio_moves"], key=lambda r: -abs(math.log(r["factor"])))[:20]:
            parts.append(f"ratio {row['case']}: {row['old_ratio']:.3g} -> {row['new_ratio']:.3g} (x{row['factor']:.2f})")
        parts += networks.compare_lines(d["networks"])
        if d["timing"]:
            parts.append(_timing(d))
        for direction in ("slower", "faster"):
            for row in sorted(d[direction], key=lambda r: -abs(math.log(r["ratio"])))[:20]:
                parts.append(f"{direction} {row['case']}: {_perf_change(row)}")
    return "\n".join(parts)


def _timing(d: dict) -> str:
    t = d["timing"]
    return (f"timing: {t['cases']} cases timed in both runs; their medians moved by |log ratio| "
            f"{t['median']:.1%} (median), {t['p99']:.1%} (99th percentile), {t['max']:.1%} (max); a case is "
            f"slower or faster beyond the larger of its two spreads + {d['noise_floor']:.0%}")


def _ratios(dist: dict | None) -> str:
    if not dist:
        return "-"
    return (f"{dist['median']:.3f} [{dist['p10']:.3f}, {dist['p90']:.3f}] "
            f"({dist['min']:.3f}-{dist['max']:.3f}, n={dist['cases']})")


def _release_rows(flavors: dict) -> tuple[list[str], list[list]]:
    """The release table: one row per flavor."""
    header = ["flavor", "cases", "regressions", "fixed", "bucket changed", "compile beyond noise",
              "NPU cycles new/old: median [p10, p90] (min-max, n)", "compile time new/old"]
    return header, [[flavor, r["cases"], r["regressions"], r["fixed"], r["bucket_changes"], r["compile_moves"],
                     _ratios(r["cycles"]), _ratios(r["compile"])] for flavor, r in flavors.items()]


def _perf_change(row: dict) -> str:
    if row["metric"] == "compile time":
        return f"compile {row['old']:.1f} s -> {row['new']:.1f} s (x{row['ratio']:.2f}; threshold {row['noise']:.2f})"
    if row["metric"] == "time":
        return (f"{row['old'] * 1e3:.4g} ms -> {row['new'] * 1e3:.4g} ms (x{row['ratio']:.2f}; "
                f"threshold {row['noise']:.0%})")
    return f"{row['metric']} {row['old']:,.0f} -> {row['new']:,.0f} (x{row['ratio']:.2f})"


def _junit(results, old, new) -> str:
    lines = ['<?xml version="1.0" encoding="utf-8"?>', "<testsuites>"]
    for o, n, d in results:
        names = sorted(set(old[o]) & set(new[n]))
        regressed = {r["case"]: r for r in d["regressions"]}
        lines.append(f'<testsuite name={quoteattr(f"conv_sweep_compare.{o}.{n}")} tests="{len(names)}" '
                     f'failures="{len(regressed)}" errors="0" skipped="0">')
        for name in names:
            head = f"  <testcase classname={quoteattr('conv_sweep_compare.' + n)} name={quoteattr(name)}"
            if name in regressed:
                r = regressed[name]
                message = quoteattr(f"{r['old']} -> {r['new']} at {r['stage']}: {r['reason']}"[:2000])
                lines.append(f"{head}><failure message={message} type=\"regression\">"
                             f"{escape('repro: ' + str(r['repro']))}</failure></testcase>")
            else:
                lines.append(f"{head}/>")
        lines.append("</testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


TABLES_JS = Path(__file__).resolve().parents[1] / "results" / "tables.js"  # search, filters, sorting, "N of M"


def _html(results, old_source, new_source) -> str:
    e = html.escape
    sections = []
    for o, n, d in results:
        counts = "".join(f"<tr><td>{e(label)}</td><td>{len(d[k])}</td></tr>" for k, label in KINDS)
        header, release = _release_rows(d["flavors"])
        flavors = "<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>" + "".join(
            "<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in release)
        rows = "".join(
            f"<tr><td>{e(kind)}</td><td>{e(r['case'])}</td><td>{e(r['old'])}</td><td>{e(r['new'])}</td>"
            f"<td>{e(str(r['stage']))}</td><td>{e(r['reason'][:300])}</td><td><code>{e(str(r['repro']))}</code></td></tr>"
            for kind, key in (("regression", "regressions"), ("fixed", "fixed"), ("bucket changed", "bucket_changes"))
            for r in d[key][:500]) or "<tr><td colspan=7>no status changes</td></tr>"
        moves = "".join(f"<tr><td>{e(r['case'])}</td><td>{r['old_ratio']:.3g}</td><td>{r['new_ratio']:.3g}</td>"
                        f"<td>{r['factor']:.2f}</td></tr>" for r in d["ratio_moves"][:500]) or \
            "<tr><td colspan=4>none</td></tr>"
        speed = "".join(f"<tr><td>{e(direction)}</td><td>{e(r['case'])}</td><td>{e(_perf_change(r))}</td></tr>"
                        for direction in ("slower", "faster") for r in d[direction][:500]) or \
            "<tr><td colspan=3>none</td></tr>"
        target = o if o == n else f"{o} → {n}"
        sections.append(f"""<h2>target {e(target)}</h2>
<table><tr><th></th><th>cases</th></tr>{counts}</table>
<h3>Per flavor</h3>
<table>{flavors}</table>
<h3>Status changes</h3>
<table class="rows explore"><tr><th data-filter>change</th><th>case</th><th data-filter>old</th><th data-filter>new</th><th data-filter>stage</th><th>reason</th><th>repro</th></tr>{rows}</table>
<h3>Error-to-tolerance ratio moved more than {RATIO_FACTOR:g}x</h3>
<table class="explore"><tr><th>case</th><th>old</th><th>new</th><th>factor</th></tr>{moves}</table>
<h3>Performance beyond the measured noise</h3>
<p>Execution time: |log(new median / old median)| above the larger relative spread (slowest - fastest) /
median of the two runs plus the machine's run-to-run noise ({d['noise_floor']:.0%}). Estimated NPU cycles:
any change. Compile time: |log ratio| above {COMPILE_TIME_NOISE:g}, for compiles of {COMPILE_TIME_MIN:g} s or more.{(' ' + e(_timing(d)) + '.') if d['timing'] else ''}</p>
<table class="rows explore"><tr><th data-filter>change</th><th>case</th><th>old -> new</th></tr>{speed}</table>""")
    return page("conv-sweep compare", f"""<h1>conv-sweep compare</h1>
<p>old: <code>{e(old_source)}</code><br>new: <code>{e(new_source)}</code></p>
{''.join(sections)}
<script>
{TABLES_JS.read_text()}
</script>
""")
