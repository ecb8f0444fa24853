"""Small inline SVG charts for the reports: rows of scatter panels sharing their axes, and
step histograms. Plain strings, no plotting library: a report of thousands of cases renders in
milliseconds, and the page stays one self-contained file.

An axis is linear, logarithmic (base 10) or log2 (values already log2, ticks labelled with
the powers of two); its ticks are few enough that their labels never overlap."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

PANEL_W, PANEL_H = 230, 190
LEFT, RIGHT, TOP, BOTTOM = 44, 10, 22, 36
FONT = 'font-family="sans-serif"'
# viridis, sampled at 0, 0.25, 0.5, 0.75 and 1: colours between are interpolated
VIRIDIS = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
LINES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]


@dataclass(frozen=True)
class Axis:
    lo: float
    hi: float
    scale: str = "linear"  # "linear", "log" (base 10) or "log2" (values already log2)

    @staticmethod
    def fit(values, scale: str = "linear") -> "Axis":
        """An axis spanning the values, padded a little on each side."""
        values = [v for v in values if math.isfinite(v) and (scale != "log" or v > 0)]
        if not values:
            return Axis(1.0, 10.0, scale) if scale == "log" else Axis(0.0, 1.0, scale)
        lo, hi = min(values), max(values)
        if scale == "log":
            pad = 10 ** (max(math.log10(hi / lo), 0.5) * 0.06)
            return Axis(lo / pad, hi * pad, scale)
        pad = max(hi - lo, 1.0) * 0.06
        return Axis(lo - pad, hi + pad, scale)

    def fraction(self, v: float) -> float:
        """Where v falls between lo (0) and hi (1)."""
        if self.scale == "log":
            return (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        return (v - self.lo) / (self.hi - self.lo)

    def ticks(self, most: int = 6) -> list[tuple[float, str]]:
        """At most `most` ticks (value, label) inside the axis."""
        if self.scale == "log":
            first, last = math.ceil(math.log10(self.lo) - 1e-9), math.floor(math.log10(self.hi) + 1e-9)
            step = max(1, math.ceil((last - first + 1) / most))
            out = [(10.0 ** k, number(10.0 ** k)) for k in range(first, last + 1, step)]
            if len(out) < 2:  # less than a decade: 1-2-5 steps
                out = [(m * 10.0 ** k, number(m * 10.0 ** k)) for k in range(first - 1, last + 1) for m in (1, 2, 5)
                       if self.lo <= m * 10.0 ** k <= self.hi]
            return out[:most]
        if self.scale == "log2":
            first, last = math.ceil(self.lo - 1e-9), math.floor(self.hi + 1e-9)
            step = max(1, math.ceil((last - first + 1) / most))
            return [(float(k), number(2.0 ** k)) for k in range(first, last + 1, step)]
        raw = (self.hi - self.lo) / (most - 1)
        magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
        step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
        k = math.ceil(self.lo / step - 1e-9)
        out = []
        while k * step <= self.hi + 1e-9 * step:
            out.append((k * step, number(k * step)))
            k += 1
        return out


def number(v: float) -> str:
    """A short tick label: 0.001, 0.5, 20, 1k, 2.5M."""
    if v == 0:
        return "0"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= limit:
            return f"{v / limit:g}{suffix}"
    return f"{v:.3g}"


def viridis(t: float) -> str:
    """The colour at t in [0, 1] of the viridis map."""
    t = min(max(t, 0.0), 1.0) * (len(VIRIDIS) - 1)
    i = min(int(t), len(VIRIDIS) - 2)
    a, b = VIRIDIS[i], VIRIDIS[i + 1]
    return "#" + "".join(f"{round(x + (y - x) * (t - i)):02x}" for x, y in zip(a, b))


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    color: str
    radius: float = 3.0
    opacity: float = 0.9
    title: str = ""  # the tooltip: a case name


@dataclass(frozen=True)
class Panel:
    title: str
    points: tuple[Point, ...]
    legend: tuple[tuple[str, str], ...] = ()  # (colour, label)


def _frame(x0: float, xaxis: Axis, yaxis: Axis, title: str, xlabel: str, ylabel: str | None) -> list[str]:
    w, h = PANEL_W - LEFT - RIGHT, PANEL_H - TOP - BOTTOM
    out = [f'<rect x="{x0 + LEFT}" y="{TOP}" width="{w}" height="{h}" fill="none" stroke="#999"/>',
           f'<text x="{x0 + LEFT + w / 2}" y="{TOP - 7}" text-anchor="middle" font-size="12" {FONT}>{html.escape(title)}</text>',
           f'<text x="{x0 + LEFT + w / 2}" y="{PANEL_H - 4}" text-anchor="middle" font-size="10" {FONT}>{html.escape(xlabel)}</text>']
    for v, label in xaxis.ticks():
        x = x0 + LEFT + xaxis.fraction(v) * w
        out.append(f'<line x1="{x:.1f}" y1="{TOP + h}" x2="{x:.1f}" y2="{TOP + h + 4}" stroke="#666"/>'
                   f'<text x="{x:.1f}" y="{TOP + h + 15}" text-anchor="middle" font-size="9" {FONT}>{label}</text>')
    for v, label in yaxis.ticks():
        y = TOP + (1 - yaxis.fraction(v)) * h
        out.append(f'<line x1="{x0 + LEFT - 4}" y1="{y:.1f}" x2="{x0 + LEFT}" y2="{y:.1f}" stroke="#666"/>'
                   f'<text x="{x0 + LEFT - 6}" y="{y + 3:.1f}" text-anchor="end" font-size="9" {FONT}>{label}</text>')
    if ylabel:
        out.append(f'<text transform="translate({x0 + 10},{TOP + h / 2}) rotate(-90)" text-anchor="middle" '
                   f'font-size="10" {FONT}>{html.escape(ylabel)}</text>')
    return out


def scatter_row(panels: list[Panel], xaxis: Axis, yaxis: Axis, xlabel: str, ylabel: str,
                colorbar: tuple[Axis, str] | None = None) -> str:
    """One row of scatter panels sharing both axes (the y label on the first); with
    `colorbar` (its log axis and label), a viridis scale at the right."""
    w, h = PANEL_W - LEFT - RIGHT, PANEL_H - TOP - BOTTOM
    parts: list[str] = []
    for i, panel in enumerate(panels):
        x0 = i * PANEL_W
        parts += _frame(x0, xaxis, yaxis, panel.title, xlabel, ylabel if i == 0 else None)
        for p in panel.points:
            cx = x0 + LEFT + xaxis.fraction(p.x) * w
            cy = TOP + (1 - yaxis.fraction(p.y)) * h
            tip = f"<title>{html.escape(p.title)}</title>" if p.title else ""
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{p.radius:g}" fill="{p.color}" '
                         f'fill-opacity="{p.opacity:g}"' + (f">{tip}</circle>" if tip else "/>"))
        for j, (color, label) in enumerate(panel.legend):
            y = TOP + 11 + 11 * j
            parts.append(f'<circle cx="{x0 + LEFT + 8}" cy="{y - 3}" r="3" fill="{color}"/>'
                         f'<text x="{x0 + LEFT + 14}" y="{y}" font-size="9" {FONT}>{html.escape(label)}</text>')
    width = len(panels) * PANEL_W
    if colorbar is not None:
        axis, label = colorbar
        x, steps = width + 12, 24
        for k in range(steps):
            parts.append(f'<rect x="{x}" y="{TOP + h * (1 - (k + 1) / steps):.1f}" width="12" '
                         f'height="{h / steps + 0.5:.1f}" fill="{viridis((k + 0.5) / steps)}"/>')
        for v, text in axis.ticks(5):
            y = TOP + (1 - axis.fraction(v)) * h
            parts.append(f'<text x="{x + 16}" y="{y + 3:.1f}" font-size="9" {FONT}>{text}</text>')
        parts.append(f'<text x="{x}" y="{PANEL_H - 4}" font-size="10" {FONT}>{html.escape(label)}</text>')
        width += 90
    return _svg(width, PANEL_H, parts)


def step_histogram(series: list[tuple[str, list[float]]], edges: list[float], xlabel: str,
                   marker: float | None = None) -> str:
    """Step outlines of the counts of each series in the bins `edges` (log x axis), with a
    dashed vertical line at `marker`."""
    width, height = 760, 260
    left, top, w, h = 50, 12, 560, height - 12 - 40
    xaxis = Axis(edges[0], edges[-1], "log")
    counts = [[sum(1 for v in values if a <= v < b) for a, b in zip(edges, edges[1:])] for _, values in series]
    yaxis = Axis(0, max(1, max((max(c) for c in counts), default=1)) * 1.08)
    parts = [f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#999"/>',
             f'<text x="{left + w / 2}" y="{height - 4}" text-anchor="middle" font-size="10" {FONT}>{html.escape(xlabel)}</text>',
             f'<text transform="translate(12,{top + h / 2}) rotate(-90)" text-anchor="middle" font-size="10" {FONT}>cases</text>']
    for v, label in xaxis.ticks(7):
        x = left + xaxis.fraction(v) * w
        parts.append(f'<text x="{x:.1f}" y="{top + h + 14}" text-anchor="middle" font-size="9" {FONT}>{label}</text>')
    for v, label in yaxis.ticks(5):
        y = top + (1 - yaxis.fraction(v)) * h
        parts.append(f'<text x="{left - 5}" y="{y + 3:.1f}" text-anchor="end" font-size="9" {FONT}>{label}</text>')
    if marker is not None:
        x = left + xaxis.fraction(marker) * w
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + h}" stroke="#000" stroke-dasharray="5,4"/>')
    for k, ((name, values), row) in enumerate(zip(series, counts)):
        color = LINES[k % len(LINES)]
        points = []
        for (a, b), c in zip(zip(edges, edges[1:]), row):
            y = top + (1 - yaxis.fraction(c)) * h
            points += [f"{left + xaxis.fraction(a) * w:.1f},{y:.1f}", f"{left + xaxis.fraction(b) * w:.1f},{y:.1f}"]
        parts.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{color}" stroke-width="1.6"/>')
        parts.append(f'<line x1="{left + w + 14}" y1="{top + 10 + 14 * k}" x2="{left + w + 30}" y2="{top + 10 + 14 * k}" '
                     f'stroke="{color}" stroke-width="2"/><text x="{left + w + 34}" y="{top + 14 + 14 * k}" '
                     f'font-size="10" {FONT}>{html.escape(f"{name} ({len(values)})")}</text>')
    return _svg(width, height, parts)


def _svg(width: float, height: float, parts: list[str]) -> str:
    return (f'<svg width="{width:g}" height="{height:g}" '
            f'viewBox="0 0 {width:g} {height:g}">' + "".join(parts) + "</svg>")
