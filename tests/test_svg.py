"""The reports' inline SVG charts: ticks that never overlap, a colour map with the right ends,
well-formed SVG with one dot per point."""
import xml.etree.ElementTree as ET

import pytest

from pipeline.results.svg import PANEL_W, LEFT, RIGHT, Axis, Panel, Point, number, scatter_row, step_histogram, viridis

AXES = [Axis(0.8, 100, "log"), Axis(1, 1e6, "log"), Axis(4.0, 6.0, "log"), Axis(1e-4, 1e2, "log"),
        Axis(-0.5, 9.5, "log2"), Axis(0, 1, "linear"), Axis(-3, 1234, "linear"), Axis(0, 0.003, "linear")]


@pytest.mark.parametrize("axis", AXES, ids=str)
def test_ticks_are_few_increasing_inside_and_their_labels_do_not_overlap(axis):
    ticks = axis.ticks()
    assert 1 <= len(ticks) <= 6
    values = [v for v, _ in ticks]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert all(axis.lo <= v <= axis.hi for v in values)
    width = PANEL_W - LEFT - RIGHT
    centres = [axis.fraction(v) * width for v in values]
    for (a, (_, la)), (b, (_, lb)) in zip(zip(centres, ticks), zip(centres[1:], ticks[1:])):
        assert b - a >= 5.5 * (len(la) + len(lb)) / 2 + 2, (la, lb)  # 9 px sans-serif: at most 5.5 px a character


def test_log2_ticks_are_labelled_with_the_powers_of_two():
    assert [label for _, label in Axis(-0.2, 5.2, "log2").ticks()] == ["1", "2", "4", "8", "16", "32"]
    assert [label for _, label in Axis(-0.2, 9.2, "log2").ticks()] == ["1", "4", "16", "64", "256"]


def test_numbers_are_short():
    assert [number(v) for v in (0, 0.001, 0.5, 20, 1000, 2500000.0)] == ["0", "0.001", "0.5", "20", "1k", "2.5M"]


def test_viridis_ends():
    assert viridis(0) == "#440154" and viridis(1) == "#fde725" and viridis(-1) == viridis(0)


def test_fit_pads_the_values_and_survives_none():
    axis = Axis.fit([2.0, 50.0], "log")
    assert axis.lo < 2 and axis.hi > 50
    assert Axis.fit([], "log") == Axis(1.0, 10.0, "log")
    assert Axis.fit([float("nan")]) == Axis(0.0, 1.0)


def test_scatter_row_is_well_formed_with_one_dot_per_point_and_names_the_failures():
    points = (Point(1, 1, "#000"), Point(9, 4, "#c62828", title="conv_a & <b>"))
    svg = scatter_row([Panel("tflite_f32", points, (("#000", "pass (1)"),)), Panel("onnx_f32", ())],
                      Axis(0.5, 20, "log"), Axis(0.5, 20, "log"), "kernel area", "stride area",
                      colorbar=(Axis(1, 100, "log"), "GMAC/s"))
    root = ET.fromstring(svg)
    circles = root.findall("circle")
    assert len(circles) == 3  # two dots and one legend mark
    assert [t.text for t in root.iter("title")] == ["conv_a & <b>"]
    assert float(root.get("width")) == 2 * PANEL_W + 90


def test_step_histogram_counts_each_bin():
    svg = step_histogram([("f32", [0.5, 0.6, 5.0])], [0.1, 1.0, 10.0], "ratio", marker=1.0)
    line = ET.fromstring(svg).find("polyline").get("points").split()
    heights = [float(p.split(",")[1]) for p in line]
    assert heights[0] == heights[1] < heights[2] == heights[3]  # 2 cases in the first bin, 1 in the second
