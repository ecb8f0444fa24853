"""report.html: one self-contained page (no network): summary table, failure buckets, and
pictures of where in geometry space cases fail, as inline SVG (pipeline/results/svg.py)."""
from __future__ import annotations

import html
import math

from pipeline.outcome.result import RED
from pipeline.results.explorer import records as case_records, section
from pipeline.results.region import describe as describe_region
from pipeline.results.svg import Axis, Panel, Point, scatter_row, step_histogram, viridis
from pipeline.space.cases import VARIANTS

COLORS = {"pass": "#2e7d32", "compiled": "#81c784", "fail": "#c62828", "error": "#6a1b9a", "timeout": "#0277bd",
          "harness": "#000000",
          "changed": "#b71c1c", "xfail": "#ef6c00", "xpass": "#d81b60", "not run": "#9e9e9e"}


def _jitter(values: list[float], seed: int) -> list[float]:
    import random

    rng = random.Random(seed)
    return [v + rng.uniform(-0.2, 0.2) for v in values]


# The two views of the geometry space: (title, x label, y label, x of a geometry, y of it, scale)
VIEWS = [
    ("kernel size (KH x KW) against stride (SH x SW)", "kernel area", "stride area",
     lambda g: math.prod(g["kernel"]), lambda g: math.prod(g["stride"]), "log"),
    ("input channels against output channels", "c_in", "c_out",
     lambda g: math.log2(g["c_in"]), lambda g: math.log2(g["c_out"]), "log2"),
]


def _xy(chosen: list[dict], fx, fy, scale: str) -> tuple[list[float], list[float]]:
    xs = [fx(e["geometry"]) for e in chosen]
    ys = [fy(e["geometry"]) for e in chosen]
    if scale == "log2":  # integer powers of two: jittered so that equal geometries do not hide each other
        return _jitter(xs, 1), _jitter(ys, 2)
    return xs, ys


def _axes(entries: list[dict], fx, fy, scale: str) -> tuple[Axis, Axis]:
    return (Axis.fit([fx(e["geometry"]) for e in entries], scale),
            Axis.fit([fy(e["geometry"]) for e in entries], scale))


def geometry_figures(entries: list[dict]) -> list[tuple[str, str]]:
    """Two rows, one panel per flavor: kernel area vs stride area (log), and c_in vs c_out
    (log2); each case a dot coloured by its status (a failing case's dot names it)."""
    out = []
    for title, xlabel, ylabel, fx, fy, scale in VIEWS:
        xaxis, yaxis = _axes(entries, fx, fy, scale)
        panels = []
        for variant in VARIANTS:
            chosen = [e for e in entries if f"{e['backend']}_{e['flavor']}" == variant]
            points, legend = [], []
            for status, color in COLORS.items():
                group = [e for e in chosen if e["status"] == status]
                if not group:
                    continue
                legend.append((color, f"{status} ({len(group)})"))
                passing = status == "pass"
                for e, x, y in zip(group, *_xy(group, fx, fy, scale)):
                    points.append(Point(x, y, color, 2.2 if passing else 3.2, 0.55 if passing else 0.9,
                                        "" if passing else e["case"]))
            panels.append(Panel(variant, tuple(points), tuple(legend)))
        out.append((title, scatter_row(panels, xaxis, yaxis, xlabel, ylabel)))
    return out


def perf_figures(entries: list[dict]) -> list[tuple[str, str]]:
    """The achieved MAC rate across the geometry space: the two views of geometry_figures, one
    panel per flavor, each passing case coloured by its rate (log scale)."""
    from pipeline.targets.perf import rated

    points = rated(entries)
    if not points:
        return []
    unit = points[0][2]
    chosen_all = [(e, r) for e, r, u in points if u == unit]
    rates = Axis(min(r for _, r in chosen_all), max(r for _, r in chosen_all), "log")
    if rates.hi <= rates.lo:
        rates = Axis(rates.lo, rates.lo * 1.01, "log")
    out = []
    for title, xlabel, ylabel, fx, fy, scale in VIEWS:
        xaxis, yaxis = _axes([e for e, _ in chosen_all], fx, fy, scale)
        panels = []
        for variant in VARIANTS:
            chosen = [(e, r) for e, r in chosen_all if f"{e['backend']}_{e['flavor']}" == variant]
            xs, ys = _xy([e for e, _ in chosen], fx, fy, scale)
            panels.append(Panel(f"{variant} ({len(chosen)})", tuple(
                Point(x, y, viridis(rates.fraction(r)), 2.8, 0.9, f"{e['case']}: {r:.3g} {unit}")
                for (e, r), x, y in zip(chosen, xs, ys))))
        out.append((f"MAC rate ({unit}): {title}",
                    scatter_row(panels, xaxis, yaxis, xlabel, ylabel, colorbar=(rates, unit))))
    return out


def ratio_figure(entries: list[dict]) -> tuple[str, str] | None:
    """Distribution of max error / tolerance per flavor (primary check): < 1 passes."""
    data = []
    for variant in VARIANTS:
        ratios = []
        for e in entries:
            if f"{e['backend']}_{e['flavor']}" != variant or not e["metrics"]:
                continue
            first = next(iter(e["metrics"].values()))
            value = first.get("error_to_tolerance")
            if isinstance(value, (int, float)) and math.isfinite(value):
                ratios.append(min(max(value, 1e-4), 99.0))
        if ratios:
            data.append((variant, ratios))
    if not data:
        return None
    edges = [10 ** (-4 + 6 * k / 48) for k in range(49)]
    svg = step_histogram(data, edges, "max |actual - expected| / tolerance (exact matches shown at 1e-4, "
                                      "beyond 100 at 99); the dashed line is the limit", marker=1.0)
    return "error-to-tolerance ratio per flavor (primary check)", svg


STYLE = """body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 3px 8px; font-size: 13px; text-align: right; vertical-align: top; }
td:first-child, th:first-child { text-align: left; }
.buckets td, .rows td { text-align: left; }
figure { margin: 0; overflow-x: auto; }
#filters select, #filters input { margin: 0 6px 6px 0; max-width: 30em; }
th.sortable { cursor: pointer; text-decoration: underline dotted; }
#cases-heading, #case-view { scroll-margin-top: 8px; }
#case-view { border: 2px solid #888; padding: 0 1em 1em; margin: 1em 0; background: #fafafa; }
.maps figure.map { display: inline-block; margin: 0 1em 0.5em 0; }
pre { white-space: pre-wrap; font-size: 12px; }"""


def _issue_link(issue: str) -> str:
    """An issue as a link where it is a URL (else its tracker id as text)."""
    e = html.escape
    if issue.startswith(("https://", "http://")):
        return f'<a class="issue" href="{e(issue, quote=True)}">{e(issue)}</a>'
    return f'<span class="issue">{e(issue)}</span>'


def page(title: str, body: str) -> str:
    """A self-contained page (no network) in the reports' one style: report.html, compare.html."""
    return (f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>\n'
            f"<style>\n{STYLE}\n</style></head><body>\n{body}</body></html>\n")


def _performance(entries: list[dict]) -> str:
    """MAC rate per flavor, pictures of it across the geometry space, the slowest relative to MACs."""
    from pipeline.targets.perf import by_flavor, describe, slowest_relative

    e = html.escape

    def cell(value, spec, unit=""):
        return "" if value is None else f"{value:{spec}}{unit}"

    rows = "".join(
        f"<tr><td>{e(v)}</td><td>{s['rated']}</td><td>{e(cell(s['median_rate'], '.3g', ' ' + str(s['unit'])))}</td>"
        f"<td>{cell(s['median_vmfb_bytes'], ',.0f')}</td><td>{cell(s['median_compile_seconds'], '.2f')}</td>"
        f"<td>{s['benchmark_errors']}</td></tr>" for v, s in by_flavor(entries).items())
    slow = "".join(f"<tr><td>{e(item[0]['case'])}</td><td>{e(describe(item))}</td></tr>"
                   for item in slowest_relative(entries))
    images = "".join(f'<h3>{e(title)}</h3><figure>{svg}</figure>' for title, svg in perf_figures(entries))
    note = "" if slow else ("<p>No MAC rate: set CONV_SWEEP_BENCHMARK=1 to time the modules on a target with a "
                            "benchmark tool; torq's estimated cycles come with every compile.</p>")
    return f"""<h2>Performance</h2>
<p>MAC rate of the passing cases: measured GMAC/s at the median of the benchmark's repetitions, or
the compiler's estimated MACs per NPU cycle. Compile time and .vmfb size are recorded for every case.</p>
<table><tr><th>flavor</th><th>cases rated</th><th>median MAC rate</th><th>median .vmfb bytes</th>
<th>median compile s</th><th>benchmark errors</th></tr>{rows}</table>
{note}{images}
<h3>Slowest relative to their MACs</h3>
<table class="buckets"><tr><th>case</th><th>speed</th></tr>{slow or "<tr><td colspan=2>none rated</td></tr>"}</table>
"""


def _explained(entry: dict) -> str:
    """A numeric failure's explanation (pipeline/checks/explain.py), as a line of its reason cell."""
    explanation = entry.get("explanation")
    return f"<br>explained: <b>{html.escape(explanation)}</b>" if explanation else ""


def _cause_rows(causes) -> str:
    e = html.escape
    return "".join(
        f"<tr><td>{c['count']}</td><td>{'<br>'.join(f'<code>{e(b)}</code>' for b in c['buckets'])}</td>"
        f"<td>{e(', '.join(c['flavors']))}</td><td>{e(', '.join(c['stages']))}</td><td>{c['geometries']}</td>"
        f"<td>{e('; '.join(c['joined_by']) or 'a bucket of its own')}</td></tr>" for c in causes) or \
        "<tr><td colspan=6>no failures</td></tr>"


def _network_rows(networks_) -> str:
    """The per-network view (pipeline/results/networks.py): a row per network and flavor."""
    e = html.escape
    out = []
    for row in networks_:
        for v, f in row["flavors"].items():
            failing = "<br>".join(f"{e(x['layer'])}: {e(x['status'])} at {e(str(x['stage']))}: <code>{e(x['bucket'][:160])}</code>"
                                  for x in f["failing"])
            c = row["cycles"].get(v)
            cost = (f"{c['total']:,.0f} ({c['layers']} of {c['of']} layers); costliest: "
                    + ", ".join(f"{e(t['layer'])} {t['cycles']:,.0f}" + (f" ({t['macs_per_cycle']:.1f} MACs/cycle)"
                                if t.get("macs_per_cycle") else "") for t in c["top"])) if c else ""
            counts = f"{f['pass']} of {f['layers']}" + (f", {f['compiled']} compiled only" if f["compiled"] else "") \
                + (f", {f['missing']} not run" if f["missing"] else "")
            skipped = f" ({len(row['skipped'])} conv layers not expressible, skipped)" if row.get("skipped") else ""
            out.append(f"<tr><td>{e(row['network'])}{skipped}</td><td>{e(v)}</td><td>{counts}</td><td>{failing}</td>"
                       f"<td>{cost}</td></tr>")
    return "".join(out)


def _networks_section(networks_) -> str:
    if not networks_:
        return ""
    return ("<h2>Networks</h2>\n<p>The conv layers of each network of the networks profile: a layer passes when its "
            "geometry's case of the flavor passes. The conv stack's cycles (torq) sum the compiler's estimate over the "
            "layers, each counted once per use.</p>\n<table class=\"buckets\"><tr><th>network</th><th>flavor</th>"
            "<th>layers passing</th><th>failing layers</th><th>estimated NPU cycles</th></tr>"
            f"{_network_rows(networks_)}</table>\n")


def render(entries, cols, rows, groups, tools, refused=(), records=None, causes=(), networks_=()) -> str:
    """The page; `records` are the case table's rows (explorer.records), made here if not given;
    `causes` the root causes of the failures (pipeline/results/causes.py), shown before the buckets;
    `networks_` the per-network view, where the sweep holds networks' layers."""
    e = html.escape
    reasons: dict[str, list] = {}
    for r in refused:
        reasons.setdefault(r.reason, []).append(r.name)
    refused_rows = "".join(f"<tr><td>{len(names)}</td><td>{e(reason)}</td><td>{'<br>'.join(e(n) for n in names[:5])}</td></tr>"
                           for reason, names in reasons.items()) or "<tr><td colspan=3>none</td></tr>"
    head = "".join(f"<th>{e(c)}</th>" for c in ["", *cols, "total"])
    body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    bucket_rows = "".join(
        f"<tr><td>{b['count']}</td><td><code>{e(b['signature'])}</code>"
        + "".join(f"<br>listed as: <code>{e(sig)}</code>" for sig in b.get("listed_as", []))
        + "".join(f'<br>issue: {_issue_link(i)}' for i in b.get("issues", [])) + "</td>"
        f"<td>{e(', '.join(f'{k} {v}' for k, v in b['statuses'].items()))}</td>"
        f"<td>{'<br>'.join(e(x) for x in b['examples'])}</td>"
        f"<td>{e(describe_region(b['region'])) if b.get('region') else ''}</td></tr>" for b in groups) or \
        "<tr><td colspan=5>no failures</td></tr>"
    failing = [x for x in entries if x["status"] in RED]
    failure_rows = "".join(
        f"<tr><td>{e(x['case'])}</td><td>{e(x['status'])}</td><td>{e(str(x['stage']))}</td>"
        f"<td>{e(x['reason'][:400])}{_explained(x)}</td><td><code>{e(x['repro'])}</code></td></tr>"
        for x in failing[:500])
    figures = geometry_figures(entries)
    ratio = ratio_figure(entries)
    if ratio:
        figures.append(ratio)
    images = "".join(f'<h3>{e(title)}</h3><figure>{svg}</figure>' for title, svg in figures)
    versions = "".join(f"<li>{e(k)}: {e(str(v))}</li>" for k, v in tools.items())
    performance = _performance(entries)
    cases = section(records if records is not None else case_records(entries))
    return page("conv-sweep report", f"""<h1>conv-sweep report</h1>
<p>{len(entries)} cases. Status: pass, compiled (compile-only: not run or compared), fail (numbers out
of tolerance), error:&lt;stage&gt; (a tool or stage failed), harness (conv-sweep itself failed: never
expected), xfail (failed at the listed stage with the listed bucket), changed (failed at the listed stage
with another bucket: fails the run), xpass (listed, but passed: fails the run).</p>
<h2>Summary</h2>
<table><tr>{head}</tr>{body}</table>
{_networks_section(networks_)}<h2>Root causes</h2>
<p>Failure buckets that are one bug: a geometry fails in each at the same stage (in other flavors), or one
mis-lowering explains their wrong answers. Each row lists its buckets, biggest first.</p>
<table class="buckets"><tr><th>cases</th><th>buckets</th><th>flavors</th><th>stages</th><th>geometries</th><th>joined by</th></tr>{_cause_rows(causes)}</table>
<h2>Not generated</h2>
<p>Cases whose frontend (tf.keras and the TFLite converter, or torch) cannot build the geometry as one convolution.</p>
<table class="buckets"><tr><th>cases</th><th>reason</th><th>examples</th></tr>{refused_rows}</table>
<h2>Failure buckets</h2>
<p>Region: where a bucket lives, a short rule over geometry features that tells its cases from the passing
ones, learned from two thirds of them, with its accuracy on the third held out; too thin where there are
too few cases to say.</p>
<table class="buckets"><tr><th>cases</th><th>signature</th><th>statuses</th><th>examples</th><th>region</th></tr>{bucket_rows}</table>
<h2>Where cases fail</h2>
{images}
{performance}
{cases}
<h2>Failing cases</h2>
<table class="buckets"><tr><th>case</th><th>status</th><th>stage</th><th>reason</th><th>repro</th></tr>{failure_rows}</table>
<h2>Tools</h2><ul>{versions}</ul>
""")
