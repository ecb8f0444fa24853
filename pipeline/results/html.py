"""report.html: one self-contained page (no network): summary table, failure buckets, and
pictures of where in geometry space cases fail, embedded as PNG."""
from __future__ import annotations

import base64
import html
import io
import math

from pipeline.space.cases import VARIANTS
from pipeline.outcome.result import RED

COLORS = {"pass": "#2e7d32", "compiled": "#81c784", "fail": "#c62828", "error": "#6a1b9a", "harness": "#000000",
          "changed": "#b71c1c", "xfail": "#ef6c00", "xpass": "#d81b60", "not run": "#9e9e9e"}


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def _jitter(values, seed):
    import numpy as np

    return np.asarray(values, dtype=float) + np.random.default_rng(seed).uniform(-0.2, 0.2, len(values))


# The two views of the geometry space: (title, x label, y label, x of a geometry, y of it, jitter)
VIEWS = [
    ("kernel size (KH x KW) against stride (SH x SW)", "kernel area", "stride area",
     lambda g: math.prod(g["kernel"]), lambda g: math.prod(g["stride"]), False),
    ("input channels against output channels", "c_in (log2)", "c_out (log2)",
     lambda g: math.log2(g["c_in"]), lambda g: math.log2(g["c_out"]), True),
]


def geometry_figures(entries: list[dict]) -> list[tuple[str, str]]:
    """Two grids, one panel per flavor: kernel area vs stride, and c_in vs c_out (log2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = []
    for title, xlabel, ylabel, fx, fy, jitter in VIEWS:
        fig, axes = plt.subplots(1, len(VARIANTS), figsize=(3.2 * len(VARIANTS), 3.2), sharex=True, sharey=True)
        for ax, variant in zip(np.atleast_1d(axes), VARIANTS):
            chosen = [e for e in entries if f"{e['backend']}_{e['flavor']}" == variant]
            for status, color in COLORS.items():
                pts = [e for e in chosen if e["status"] == status]
                if not pts:
                    continue
                xs = [fx(e["geometry"]) for e in pts]
                ys = [fy(e["geometry"]) for e in pts]
                if jitter:
                    xs, ys = _jitter(xs, 1), _jitter(ys, 2)
                ax.scatter(xs, ys, s=14 if status == "pass" else 30, c=color, label=f"{status} ({len(pts)})",
                           alpha=0.55 if status == "pass" else 0.9, edgecolors="none")
            ax.set_title(variant, fontsize=10)
            ax.set_xlabel(xlabel, fontsize=8)
            if not jitter:
                ax.set_xscale("log")
                ax.set_yscale("log")
            ax.legend(fontsize=7, loc="upper left")
        np.atleast_1d(axes)[0].set_ylabel(ylabel, fontsize=8)
        out.append((title, _png(fig)))
        plt.close(fig)
    return out


def perf_figures(entries: list[dict]) -> list[tuple[str, str]]:
    """The achieved MAC rate across the geometry space: the two views of geometry_figures, one
    panel per flavor, each passing case coloured by its rate (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm

    from pipeline.targets.perf import rated

    points = rated(entries)
    if not points:
        return []
    unit = points[0][2]
    rates = [r for _, r, u in points if u == unit]
    norm = LogNorm(vmin=min(rates), vmax=max(rates) if max(rates) > min(rates) else min(rates) * 1.01)
    out = []
    for title, xlabel, ylabel, fx, fy, jitter in VIEWS:
        fig, axes = plt.subplots(1, len(VARIANTS), figsize=(3.2 * len(VARIANTS), 3.4), sharex=True, sharey=True)
        scatter = None
        for ax, variant in zip(np.atleast_1d(axes), VARIANTS):
            chosen = [(e, r) for e, r, u in points if u == unit and f"{e['backend']}_{e['flavor']}" == variant]
            ax.set_title(f"{variant} ({len(chosen)})", fontsize=10)
            ax.set_xlabel(xlabel, fontsize=8)
            if not chosen:
                continue
            xs = [fx(e["geometry"]) for e, _ in chosen]
            ys = [fy(e["geometry"]) for e, _ in chosen]
            if jitter:
                xs, ys = _jitter(xs, 1), _jitter(ys, 2)
            scatter = ax.scatter(xs, ys, s=22, c=[r for _, r in chosen], cmap="viridis", norm=norm,
                                 edgecolors="none")
            if not jitter:
                ax.set_xscale("log")
                ax.set_yscale("log")
        np.atleast_1d(axes)[0].set_ylabel(ylabel, fontsize=8)
        if scatter is not None:
            fig.colorbar(scatter, ax=list(np.atleast_1d(axes)), label=unit, shrink=0.9)
        out.append((f"MAC rate ({unit}): {title}", _png(fig)))
        plt.close(fig)
    return out


def ratio_figure(entries: list[dict]) -> tuple[str, str] | None:
    """Distribution of max error / tolerance per flavor (primary check): < 1 passes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = {}
    for variant in VARIANTS:
        ratios = []
        for e in entries:
            if f"{e['backend']}_{e['flavor']}" != variant or not e["metrics"]:
                continue
            first = next(iter(e["metrics"].values()))
            value = first.get("error_to_tolerance")
            if isinstance(value, (int, float)) and math.isfinite(value):
                ratios.append(max(value, 1e-4))
        if ratios:
            data[variant] = ratios
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.4))
    bins = np.logspace(-4, 2, 49)
    for variant, ratios in data.items():
        ax.hist(ratios, bins=bins, histtype="step", linewidth=1.6, label=f"{variant} ({len(ratios)})")
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("max |actual - expected| / tolerance (exact matches shown at 1e-4); the dashed line is the limit")
    ax.set_ylabel("cases")
    ax.legend(fontsize=8)
    title = "error-to-tolerance ratio per flavor (primary check)"
    png = _png(fig)
    plt.close(fig)
    return title, png


STYLE = """body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
td, th { border: 1px solid #ccc; padding: 3px 8px; font-size: 13px; text-align: right; vertical-align: top; }
td:first-child, th:first-child { text-align: left; }
.buckets td, .rows td { text-align: left; }
img { max-width: 100%; }"""


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
    images = "".join(f'<h3>{e(title)}</h3><img alt="{e(title)}" src="data:image/png;base64,{png}">'
                     for title, png in perf_figures(entries))
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


def render(entries, cols, rows, groups, tools, refused=()) -> str:
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
        + "".join(f"<br>listed as: <code>{e(sig)}</code>" for sig in b.get("listed_as", [])) + "</td>"
        f"<td>{e(', '.join(f'{k} {v}' for k, v in b['statuses'].items()))}</td>"
        f"<td>{'<br>'.join(e(x) for x in b['examples'])}</td></tr>" for b in groups) or \
        "<tr><td colspan=4>no failures</td></tr>"
    failing = [x for x in entries if x["status"] in RED]
    failure_rows = "".join(
        f"<tr><td>{e(x['case'])}</td><td>{e(x['status'])}</td><td>{e(str(x['stage']))}</td>"
        f"<td>{e(x['reason'][:400])}</td><td><code>{e(x['repro'])}</code></td></tr>" for x in failing[:500])
    figures = geometry_figures(entries)
    ratio = ratio_figure(entries)
    if ratio:
        figures.append(ratio)
    images = "".join(f'<h3>{e(title)}</h3><img alt="{e(title)}" src="data:image/png;base64,{png}">'
                     for title, png in figures)
    versions = "".join(f"<li>{e(k)}: {e(str(v))}</li>" for k, v in tools.items())
    performance = _performance(entries)
    return page("conv-sweep report", f"""<h1>conv-sweep report</h1>
<p>{len(entries)} cases. Status: pass, compiled (compile-only: not run or compared), fail (numbers out
of tolerance), error:&lt;stage&gt; (a tool or stage failed), harness (conv-sweep itself failed: never
expected), xfail (failed at the listed stage with the listed bucket), changed (failed at the listed stage
with another bucket: fails the run), xpass (listed, but passed: fails the run).</p>
<h2>Summary</h2>
<table><tr>{head}</tr>{body}</table>
<h2>Not generated</h2>
<p>Cases whose frontend (tf.keras and the TFLite converter, or torch) cannot build the geometry as one convolution.</p>
<table class="buckets"><tr><th>cases</th><th>reason</th><th>examples</th></tr>{refused_rows}</table>
<h2>Failure buckets</h2>
<table class="buckets"><tr><th>cases</th><th>signature</th><th>statuses</th><th>examples</th></tr>{bucket_rows}</table>
<h2>Where cases fail</h2>
{images}
{performance}
<h2>Failing cases</h2>
<table class="buckets"><tr><th>case</th><th>status</th><th>stage</th><th>reason</th><th>repro</th></tr>{failure_rows}</table>
<h2>Tools</h2><ul>{versions}</ul>
""")
