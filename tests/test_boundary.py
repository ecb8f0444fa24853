"""Boundary facts (pipeline/triage/boundary.py): the probes around a minimal case, the table's
wording, the check a region rule must pass to be shown, and one run through the real pipeline
with a compiler wrapper whose hidden boundary is c_in in {4, 8}."""
import json
from dataclasses import fields, replace

import pytest

from helpers import clean_env, real_compiler, write_wrapper
from pipeline.space.geometry import Geometry
from pipeline.triage.boundary import MAX_PROBES, probes, rule_holds, table, write_boundary
from pipeline.triage.shrink import buildable

DEPTHWISE = Geometry(rank=2, spatial=(1, 1), kernel=(1, 1), stride=(1, 1), c_in=4, c_out=4, groups=4)
PLAIN = Geometry(rank=1, spatial=(6,), kernel=(3,), stride=(1,), c_in=4, c_out=2)
LARGE = Geometry(rank=2, spatial=(20, 17), kernel=(5, 4), stride=(2, 3), c_in=16, c_out=24, padding="same",
                 dilation=(2, 1), batch=2)


def _changed(a: Geometry, b: Geometry) -> set[str]:
    return {f.name for f in fields(Geometry) if getattr(a, f.name) != getattr(b, f.name)}


@pytest.mark.parametrize("minimal", [PLAIN, LARGE])
def test_probes_move_one_dimension_each_and_stay_buildable(minimal):
    found = probes(minimal, "onnx", "f32")
    assert 0 < len(found) <= MAX_PROBES
    for dimension, value, g in found:
        if dimension == "flavor":
            assert g == minimal and value != "onnx_f32"
            assert buildable(g, *value.split("_", 1))
            continue
        assert _changed(minimal, g) == {dimension} and buildable(g, "onnx", "f32")
        assert value == (list(getattr(g, dimension)) if isinstance(getattr(g, dimension), tuple)
                         else getattr(g, dimension))
    assert found == probes(minimal, "onnx", "f32")  # deterministic
    assert len({(d, json.dumps(v)) for d, v, _ in found}) == len(found)


def test_probes_of_a_depthwise_case_keep_it_depthwise_and_try_groups_1():
    found = probes(DEPTHWISE, "onnx", "bf16")
    c_in = {v: g for d, v, g in found if d == "c_in"}
    assert {2, 3, 8, 16} <= set(c_in) and all(g.depthwise and g.c_out == g.c_in for v, g in c_in.items() if v > 1)
    assert {v for d, v, _ in found if d == "groups"} == {1, 2}
    assert {v for d, v, _ in found if d == "c_out"} == {8, 16}  # depth multiplier 2 and 4
    assert {v for d, v, _ in found if d == "flavor"} == {"onnx_f32", "tflite_f32", "tflite_w8if32", "tflite_w8i8"}
    assert {v for d, v, _ in probes(DEPTHWISE, "onnx", "bf16", ("onnx_f32", "onnx_bf16")) if d == "flavor"} == \
        {"onnx_f32"}


def test_probes_of_explicit_pads_move_one_side_by_one_and_try_valid_and_same():
    g = Geometry(rank=1, spatial=(3,), kernel=(3,), stride=(4,), c_in=5, c_out=5, padding="explicit", groups=5,
                 explicit_pads=((1, 0),))
    found = probes(g, "onnx", "f32")
    padding = {v: p for d, v, p in found if d == "padding"}
    assert set(padding) == {"valid", "same"} and all(p.explicit_pads is None and buildable(p, "onnx", "f32")
                                                     for p in padding.values())
    assert sorted(v for d, v, _ in found if d == "pads") == [[[0, 0]], [[1, 1]], [[2, 0]]]  # no side below 0
    assert all(_changed(g, p) == {"explicit_pads"} for d, _, p in found if d == "pads")
    lines = table([_probe("pads", [[0, 0]], "pass", g, "f32"), _probe("pads", [[2, 0]], "same", g, "f32"),
                   _probe("padding", "valid", "pass", g, "f32")], g)
    assert lines == ["padding: fails at explicit; passes at valid", "pads: fails at {1-0, 2-0}; passes at 0-0"]


def _probe(dimension, value, outcome, g=DEPTHWISE, flavor="bf16"):
    return {"dimension": dimension, "value": value, "case": "c", "outcome": outcome,
            "geometry": g.to_dict(), "backend": "onnx", "flavor": flavor}


def test_table_wording():
    found = [_probe("c_in", v, "same" if v == 8 else "pass") for v in (2, 3, 16)] + [_probe("c_in", 8, "same")]
    found += [_probe("groups", 1, "pass"), _probe("stride", [1, 2], "other: compile: <tool> crashed"),
              _probe("stride", [2, 1], "same"), _probe("flavor", "onnx_f32", "pass"), _probe("c_out", 8, "pass")]
    assert table(found, DEPTHWISE) == [  # a depthwise case's channel lines say what their probes kept
        "c_in (depthwise kept: groups = c_in): fails at {4, 8}; passes at {2, 3, 16}",
        "c_out (depthwise: c_in x the depth multiplier): fails at 4; passes at 8",
        "groups: fails at 4; passes at 1",
        "stride: fails at {1x1, 2x1}; fails otherwise at 1x2 (`compile: <tool> crashed`)",
        "flavor: fails in onnx_bf16; passes in onnx_f32",
    ]


def test_rule_holds_refuses_a_rule_its_own_minimal_case_contradicts():
    minimal = {"geometry": DEPTHWISE.to_dict(), "backend": "onnx", "flavor": "bf16"}  # stride_w/kernel_w 1
    found = [_probe("groups", 1, "pass", replace(DEPTHWISE, groups=1)),
             _probe("stride", [1, 2], "same", replace(DEPTHWISE, stride=(1, 2)))]
    assert not rule_holds([[["groups", ">=", 4], ["stride_w/kernel_w", ">", 1.25]]], minimal, found)
    assert rule_holds([[["groups", ">=", 4]]], minimal, found)
    # true on the minimal case, but false on a probe that failed the same way
    assert not rule_holds([[["groups", ">=", 4], ["stride_w", "<=", 1]]], minimal, found)
    # holds on every case, but uses a feature no probe moved
    assert not rule_holds([[["groups", ">=", 4], ["c_in", ">=", 4]]], minimal, found)
    assert not rule_holds([], minimal, found)


def test_write_boundary_writes_the_list(tmp_path):
    found = [_probe("c_in", 8, "same")]
    path = write_boundary(tmp_path / "report", found)
    assert path.name == "boundary.json" and json.loads(path.read_text()) == found


# Fails as a compiler does iff the case (named by its folder: cases/<name>/<target>) has 4 or 8
# input channels, in any flavor; else the real compiler.
WRAPPER = r"""#!{python}
import os, re, sys
name = os.getcwd().rstrip("/").split("/")[-2]
if int(re.search(r"_k\d+_c(\d+)", name).group(1)) in (4, 8):
    sys.exit("error: 'linalg.conv' op injected boundary failure")
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


@pytest.mark.slow
def test_run_probes_finds_a_hidden_channel_boundary(tmp_path):
    from pipeline.config import Config
    from pipeline.results.report import signature
    from pipeline.run.runner import run_chain
    from pipeline.space.cases import Case
    from pipeline.triage.boundary import run_probes

    wrapper = write_wrapper(tmp_path / "iree-compile", WRAPPER, real_compiler())
    cfg = Config.from_env(clean_env(CONV_SWEEP_TARGET="llvm-cpu", CONV_SWEEP_BUILD_DIR=tmp_path / "build",
                                    CONV_SWEEP_IREE_COMPILE=wrapper, CONV_SWEEP_N=0))
    minimal = Case(PLAIN, "onnx", "f32", target="llvm-cpu")
    first = run_chain(minimal, cfg.scratch(tmp_path / "minimal"))
    assert first["status"] == "error" and first["stage"] == "compile"
    bucket = signature(first)

    found = run_probes(cfg, minimal, bucket, lanes=4, report_folder=tmp_path / "report",
                       variants=("onnx_f32", "onnx_bf16"))
    assert json.loads((tmp_path / "report" / "boundary.json").read_text()) == found
    assert {p["outcome"] for p in found} == {"pass", "same"}, found
    for p in found:  # every probe keeping c_in 4 fails the same way; c_in fails only at 8
        assert p["outcome"] == ("same" if p["dimension"] != "c_in" or p["value"] == 8 else "pass"), p
    lines = table(found, PLAIN)
    assert lines[0] == "c_in: fails at {4, 8}; passes at {1, 2, 3, 5, 16}", lines
    assert "flavor: fails in {onnx_bf16, onnx_f32}" in lines, lines
