"""Shrinking a failing case (`doit shrink`): a compiler wrapper that fails only when c_in >= 64
and the kernel height >= 3, from a large failing case, down to exactly that; the search's
moves along every dimension; and the predicate of a timeout bucket, "anomalously slow" (a
shrink on it runs in tests/test_bugreport.py)."""
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from helpers import clean_env, doit, real_compiler, write_spec, write_wrapper
from pipeline.space.geometry import Geometry
from pipeline.triage.shrink import _one_pass, dimensions, joint_moves, minimum, search, value, with_value
from pipeline.triage.slow import SLOW_FACTOR, Slow

# Reads the conv's weight shape [C_out, C_in, KH, KW] from the imported ONNX model; fails the
# way a compiler does when C_in >= 64 and KH >= 3, else runs the real compiler.
WRAPPER = r"""#!{python}
import re, subprocess, sys
text = open(sys.argv[1]).read()  # (braces doubled for str.format)
m = re.search(r"onnx\.Conv.*?\}} : \(!torch\.vtensor<\[[\d,]+\],f32>, !torch\.vtensor<\[(\d+),(\d+),(\d+)", text)
if m and int(m.group(2)) >= 64 and int(m.group(3)) >= 3:
    sys.exit(sys.argv[1] + ":6:10: error: 'linalg.conv_2d_nchw_fchw' op injected failure for "
             + m.group(2) + " input channels, kernel height " + m.group(3))
sys.exit(subprocess.run([{real!r}, *sys.argv[1:]]).returncode)
"""
LARGE = {"rank": 2, "spatial": [20, 17], "kernel": [5, 4], "stride": [2, 3], "c_in": 100, "c_out": 24,
         "padding": "same", "dilation": [2, 1], "batch": 2}  # TFLite refuses stride with dilation: ONNX only
SMALL = {"rank": 2, "spatial": [6, 6], "kernel": [3, 3], "stride": [1, 1], "c_in": 2, "c_out": 2, "padding": "valid"}
CASE = "conv_onnx_f32_w17_h20_f24_k5_c100_khw5x4_s2x3_d2x1_b2"


def _snapshot(build: Path) -> dict:
    """The sweep's artifacts and results: every file under cases/ and report/."""
    return {str(p.relative_to(build)): (p.stat().st_mtime_ns, hashlib.md5(p.read_bytes()).hexdigest())
            for folder in ("cases", "report") for p in sorted((build / folder).rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_shrink_finds_the_smallest_failing_geometry(tmp_path):
    wrapper = write_wrapper(tmp_path / "iree-compile", WRAPPER, real_compiler())
    build = tmp_path / "build"
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [LARGE, SMALL]), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=build, CONV_SWEEP_IREE_COMPILE=wrapper)
    sweep = doit("-n", "2", "sweep", env=env)
    assert sweep.returncode != 0 and f"{CASE}@llvm-cpu: compile failed" in sweep.stdout + sweep.stderr
    before = _snapshot(build)

    run = doit("shrink", f"{CASE}@llvm-cpu", env=env)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    summary = json.loads((build / "shrink" / "llvm-cpu" / CASE / "shrink.json").read_text())
    minimal = Geometry.from_dict(summary["minimal"]["geometry"])
    assert (minimal.c_in, minimal.kernel[0]) == (64, 3)
    assert (minimal.c_out, minimal.kernel[1], minimal.stride, minimal.dilation, minimal.batch, minimal.groups) == \
        (1, 1, (1, 1), (1, 1), 1, 1)
    assert minimal.spatial == tuple(minimum(minimal, f"spatial{i}") for i in range(2)) == (3, 1)
    assert summary["stage"] == "compile" and "injected failure" in summary["signature"]
    assert summary["swept_signature"] == summary["signature"]
    assert summary["minimal"]["macs"] == 64 * 3 and summary["original"]["macs"] == 5_760_000
    for line in (f"original: {CASE}", f"minimal:  {summary['minimal']['case']}  192 MACs",
                 f"{summary['attempts']} attempts ({summary['compile_attempts']} compiles) in "):
        assert line in out
    # the minimal case is an ordinary case folder with a repro.sh that reproduces the failure
    folder = Path(summary["minimal"]["folder"])
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "error" and result["stage"] == "compile"
    assert (folder / "repro.sh").is_file() and (folder.parent / "model.onnx").is_file()
    # every attempt that failed the same way is no smaller than the minimum; attempts below it pass
    tried = summary["tried"]
    assert all(t["macs"] >= 192 for t in tried if t["outcome"] == "same")
    assert {t["outcome"] for t in tried} <= {"same", "pass", "other"}
    # the sweep's own artifacts and results are untouched, and it has nothing to redo
    assert _snapshot(build) == before
    assert doit("-r", "json", "sweep", env=env).stdout.count('"started": true') == 0

    again = doit("shrink", CASE, env=env)  # one target selected: the name alone will do
    assert again.returncode == 0
    redo = json.loads((build / "shrink" / "llvm-cpu" / CASE / "shrink.json").read_text())
    assert [t["case"] for t in redo["tried"]] == [t["case"] for t in tried]  # deterministic

    # no attempt starts after half a second; with the store off, or the attempts remembered by
    # the shrinks above would all end within it
    budget = doit("shrink", "--budget", "0.5", CASE, env={**env, "CONV_SWEEP_CACHE_DIR": "off"})
    assert budget.returncode == 0 and "(stopped by the time budget: the smallest found so far)" in budget.stdout
    cut = json.loads((build / "shrink" / "llvm-cpu" / CASE / "shrink.json").read_text())
    assert cut["stopped_by_budget"] and cut["attempts"] < len(tried)
    assert json.loads((Path(cut["minimal"]["folder"]) / "result.json").read_text())["stage"] == "compile"

    small = "conv_onnx_f32_w6_h6_f2_k3_c2_pvalid"
    passing = doit("shrink", small, env=env)
    assert passing.returncode != 0 and "does not fail now on llvm-cpu: nothing to shrink" in \
        passing.stdout + passing.stderr
    unknown = doit("shrink", "conv_onnx_f32_nothing", env=env)
    assert unknown.returncode != 0 and "case='conv_onnx_f32_nothing': is not a case of this run's selection" in \
        unknown.stdout + unknown.stderr


# Fails while the conv has as many output channels as input channels (non-monotone in each).
EQUAL = r"""#!{python}
import re, subprocess, sys
text = open(sys.argv[1]).read()  # (braces doubled for str.format)
m = re.search(r"onnx\.Conv.*?\}} : \(!torch\.vtensor<\[[\d,]+\],f32>, !torch\.vtensor<\[(\d+),(\d+),", text)
if m and m.group(1) == m.group(2):
    sys.exit(sys.argv[1] + ":6:10: error: 'linalg.conv_1d' op injected failure for equal channel counts")
sys.exit(subprocess.run([{real!r}, *sys.argv[1:]]).returncode)
"""


@pytest.mark.slow
def test_shrink_escapes_a_failure_no_single_dimension_can_lower(tmp_path):
    wrapper = write_wrapper(tmp_path / "iree-compile", EQUAL, real_compiler())
    start = {"rank": 1, "spatial": [12], "kernel": [3], "stride": [1], "c_in": 8, "c_out": 8, "padding": "valid"}
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [start]), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_IREE_COMPILE=wrapper)
    case = "conv_onnx_f32_w12_h1_f8_k3_c8_r1_pvalid"
    run = doit("shrink", f"{case}@llvm-cpu", env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads((tmp_path / "build" / "shrink" / "llvm-cpu" / case / "shrink.json").read_text())
    minimal = Geometry.from_dict(summary["minimal"]["geometry"])
    assert (minimal.c_in, minimal.c_out, minimal.kernel, minimal.spatial) == (1, 1, (1,), (1,))
    tried = {t["case"]: t["outcome"] for t in summary["tried"]}  # by geometry
    # one dimension at a time stops at 8 and 8: each alone lowered passes
    assert tried["w1_h1_f8_k1_c7_r1_pvalid"] == tried["w1_h1_f7_k1_c8_r1_pvalid"] == "pass"
    assert tried["w1_h1_f4_k1_c4_r1_pvalid"] == "same"  # the pair, halved together

    # --keep-data: the same search, every attempt cropping the original's weights and input
    kept = doit("shrink", "--keep-data", f"{case}@llvm-cpu", env=env)
    assert kept.returncode == 0 and "(the original's data, cropped)" in kept.stdout, kept.stdout + kept.stderr
    summary = json.loads((tmp_path / "build" / "shrink" / "llvm-cpu" / case / "shrink.json").read_text())
    assert summary["keep_data"] and summary["minimal"]["geometry"] == minimal.to_dict()
    folder = Path(summary["minimal"]["folder"])
    assert folder.parent.name == f"conv_onnx_f32_{minimal.id}_data_{Geometry.from_dict(start).id}"
    from pipeline.space.cases import Case
    from pipeline.space.data import make_input

    original = make_input(Case(Geometry.from_dict(start), "onnx", "f32"))
    assert np.array_equal(np.load(folder.parent / "input.npy"), original[:1, :1, :1])


class _Predicate:
    """The search's view of attempts, for a rule on the geometry alone."""

    def __init__(self, rule):
        self.rule, self.seen = rule, {}

    def fails(self, g):
        self.seen[g] = None
        try:
            g.validate()
        except Exception:
            return False
        return self.rule(g)

    def discard(self, g, keep):
        pass


@pytest.mark.parametrize("start, rule, expected", [
    # depthwise stays depthwise while the rule needs it: groups shrink with their channels
    (Geometry(2, (30, 30), (3, 3), (2, 2), 32, 64, "same", groups=32), lambda g: g.depthwise and g.c_in >= 8,
     Geometry(2, (1, 1), (1, 1), (1, 1), 8, 8, "valid", groups=8)),
    # a grouped conv: channels per group and the group count move separately
    (Geometry(2, (16, 16), (3, 3), (1, 1), 48, 96, "valid", groups=4),
     lambda g: g.groups >= 3 and g.c_out // g.groups >= 5,
     Geometry(2, (1, 1), (1, 1), (1, 1), 3, 15, "valid", groups=3)),
    # Conv1D with dilation and batch: the window and the batch shrink to what the rule keeps; the
    # kernel goes first (5 -> 3 keeps a window of 9 at dilation 4: 3 MACs, not 5 at dilation 2)
    (Geometry(1, (40,), (5,), (3,), 7, 9, "valid", dilation=(4,), batch=3),
     lambda g: g.window[0] >= 9 and g.batch >= 2,
     Geometry(1, (9,), (3,), (1,), 1, 1, "valid", dilation=(4,), batch=2)),
    # a failure in a window of values (torq's DEDR/CEDW abort: depthwise at 4 to 8 channels and
    # from 25 up, not at 2, 3 or 16): the ladder below 50 finds the window's bottom, 4, where
    # bisecting down from 50 would stop above 16
    (Geometry(1, (1,), (1,), (1,), 50, 50, "valid", groups=50),
     lambda g: g.depthwise and (4 <= g.c_in <= 8 or g.c_in >= 25),
     Geometry(1, (1,), (1,), (1,), 4, 4, "valid", groups=4)),
    # explicit pads: each side moves down to what the rule keeps (a pad before, a stride of 3)
    (Geometry(1, (20,), (3,), (4,), 5, 5, "explicit", groups=5, explicit_pads=((3, 2),)),
     lambda g: g.padding == "explicit" and g.explicit_pads[0][0] >= 1 and g.stride[0] >= 3,
     Geometry(1, (1,), (1,), (3,), 1, 1, "explicit", explicit_pads=((1, 0),))),
    # and go where the failure does not need them
    (Geometry(2, (9, 9), (3, 3), (1, 1), 2, 2, "explicit", explicit_pads=((1, 1), (0, 2))), lambda g: g.c_in >= 2,
     Geometry(2, (1, 1), (1, 1), (1, 1), 2, 1, "valid")),
])
def test_search_moves_along_every_dimension(start, rule, expected):
    found = search(_Predicate(rule), start)
    assert found == expected, found.to_dict()


def test_joint_moves_escape_where_every_single_dimension_is_stuck():
    # fails only while c_in == c_out: lowering either alone passes, so one dimension at a time
    # stops at 8 and 8; halving the pair together goes on, to 1 and 1
    start = Geometry(2, (8, 8), (3, 3), (1, 1), 8, 8, "valid")
    rule = lambda g: g.c_in == g.c_out  # noqa: E731
    stuck = _Predicate(rule)
    stuck.best = start
    while _one_pass(stuck, start):
        pass
    assert (stuck.best.c_in, stuck.best.c_out) == (8, 8)
    assert search(_Predicate(rule), start) == Geometry(2, (1, 1), (1, 1), (1, 1), 1, 1, "valid")


def test_joint_moves_scale_every_size_then_halve_pairs():
    g = Geometry(2, (16, 12), (3, 2), (1, 1), 8, 4, "valid")
    moves = joint_moves(g)
    assert moves[0] == Geometry(2, (8, 6), (1, 1), (1, 1), 4, 2, "valid")  # every size halved, kernel 3 -> 1
    assert all(m != g for m in moves) and len(set(moves)) == len(moves)
    assert Geometry(2, (16, 12), (3, 2), (1, 1), 4, 2, "valid") in moves  # the channel pair


def test_dimensions_round_trip():
    g = Geometry(2, (16, 12), (3, 2), (2, 1), 12, 18, "same", dilation=(2, 1), groups=6, batch=2)
    assert dimensions(g)[:4] == ["batch", "groups", "c_in_per_group", "c_out_per_group"]
    for dim in dimensions(g):
        assert with_value(g, dim, value(g, dim)) == g
    assert with_value(g, "groups", 2) == Geometry(2, (16, 12), (3, 2), (2, 1), 4, 6, "same", dilation=(2, 1),
                                                  groups=2, batch=2)
    assert minimum(Geometry(2, (9, 9), (3, 2), (1, 1), 1, 1, "valid", dilation=(3, 1)), "spatial0") == 7


def test_explicit_pads_are_dimensions_down_to_what_the_window_needs():
    g = Geometry(2, (4, 9), (5, 3), (1, 1), 2, 2, "explicit", explicit_pads=((1, 2), (0, 3)))
    assert dimensions(g)[-4:] == ["pad_before0", "pad_after0", "pad_before1", "pad_after1"]
    assert "pad_before0" not in dimensions(Geometry(2, (4, 9), (5, 3), (1, 1), 2, 2, "same"))
    assert [value(g, d) for d in dimensions(g)[-4:]] == [1, 2, 0, 3]
    for dim in dimensions(g):
        assert with_value(g, dim, value(g, dim)) == g
    assert with_value(g, "pad_after1", 1).explicit_pads == ((1, 2), (0, 1))
    # a window of 5 fits an input of 4 with 2 after it and none before; with none after, 1 before
    assert minimum(g, "pad_before0") == 0 and minimum(replace(g, explicit_pads=((1, 0), (0, 3))), "pad_before0") == 1
    assert minimum(g, "pad_before1") == 0


CUT, DONE = {"status": "timeout", "stage": "compile"}, {"status": "pass", "stage": None}


@pytest.mark.parametrize("result, timed, limit, typical, outcome", [
    (CUT, None, 3.5, 0.75, "same"),  # cut at 3.5 s, past 4 x 0.75 s
    (CUT, None, 2.5, 0.75, "undecided"),  # cut before 3 s: it cannot be told slow
    (CUT, None, 60.0, None, "same"),  # no prediction: the cut is the only sign
    (DONE, 3.1, None, 0.75, "same"),  # finished, anomalously slowly
    (DONE, 2.9, None, 0.75, "pass"),  # finished within 4 x its prediction
    (DONE, 30.0, None, None, "pass"),  # no prediction: only a cut counts
    ({"status": "error", "stage": "compile"}, None, None, 0.75, "other"),
    ({"status": "error", "stage": "import"}, None, None, 0.75, "other"),
])
def test_slow_judges_a_compile_by_its_time_against_its_typical_seconds(result, timed, limit, typical, outcome):
    assert Slow("compile").judge(result, timed, limit, typical) == outcome


def test_slow_on_a_run_keeps_a_slow_run_whatever_its_check_said():
    fail = {"status": "fail", "stage": "verify"}
    assert Slow("run").judge(fail, 10.0, None, 1.0) == "same"
    assert Slow("run").judge(fail, 1.0, None, 1.0) == "other"
    assert Slow("run").judge({"status": "timeout", "stage": "run"}, None, 20.0, 1.0) == "same"
    assert Slow("run").judge({"status": "timeout", "stage": "compile"}, None, 60.0, 1.0) == "other"


def test_slow_factor_is_below_every_built_in_margin():
    """An attempt cut at its predicted limit (margin x predicted) has then run past the factor."""
    from pipeline.targets.profiles import load_profiles

    for profile in load_profiles().values():
        for stage, rule in profile.timeouts:
            assert rule.margin > SLOW_FACTOR, (profile.name, stage)


def test_a_stage_s_seconds_are_known_only_where_it_ended_by_itself(tmp_path):
    from pipeline.config import Config
    from pipeline.outcome.result import record_stage
    from pipeline.triage.slow import stage_seconds

    cfg = Config.from_env(clean_env(CONV_SWEEP_BUILD_DIR=tmp_path))
    case = cfg.cases()[0]
    assert stage_seconds(cfg, case, "compile") is None  # not run
    for facts, seconds in (({"seconds": 1.25}, 1.25), ({"seconds": 3.5, "cut": True}, None),
                           ({"seconds": 0.0, "store": True}, None)):
        record_stage(cfg.case_dir(case), "compile", **facts)  # ended; cut at its 3.5 s limit; from the store
        assert stage_seconds(cfg, case, "compile") == seconds, facts


def test_typical_seconds_are_the_sweeps_other_cases_not_the_anomaly(tmp_path):
    """The giant torq compile made the calibration predict 563 s for every case from 46 M MACs
    up; what is typical at its size is what the sweep's other compiles of that size took."""
    from pipeline.config import Config
    from pipeline.space.cases import Case
    from pipeline.targets import cost
    from pipeline.triage.slow import predicted_seconds, typical_seconds

    cfg = Config.from_env(clean_env(CONV_SWEEP_TARGET="torq", CONV_SWEEP_BUILD_DIR=tmp_path))
    g = Geometry(2, (52, 39), (7, 1), (5, 5), 512, 512, "valid")
    giant, twin = (Case(g, "onnx", f, target="torq") for f in ("bf16", "f32"))
    assert giant.name == "conv_onnx_bf16_w39_h52_f512_k7_c512_khw7x1_s5x5_pvalid"
    assert twin.name in {e.case for e in cfg.target("torq").expectations if e.may_finish}  # listed `compile: timeout`
    assert typical_seconds(cfg, giant, "compile") == predicted_seconds(cfg, giant, "compile") == 563.4
    report = cfg.report_dir("torq")
    cost.observe(report, "compile", 146800640, 1800.0, giant.name)  # the case itself, under a raised budget
    cost.observe(report, "compile", 146800640, 1700.0, twin.name)  # listed as a timeout
    cost.observe(report, "compile", 146800640, 1600.0, "conv_shrunk_original")  # a shrink's original
    cost.observe(report, "compile", 383516672, 22.9, "conv_onnx_f32_w37_h59_f128_k4_c512_khw4x7_s3x3_pvalid")
    cost.observe(report, "compile", 155713536, 13.0, "conv_onnx_f32_w24_h59_f128_k9_c512_khw9x3_s7x2_pvalid")
    assert typical_seconds(cfg, giant, "compile", ("conv_shrunk_original",)) == 22.9
    assert typical_seconds(cfg, giant, "compile") == 1600.0  # without naming the shrink's original
    smaller = Case(Geometry(2, (52, 39), (7, 1), (5, 5), 383, 512, "valid"), "onnx", "bf16",
                   target="torq")  # 109.8 M MACs: cases up to 347 M count
    assert typical_seconds(cfg, smaller, "compile", ("conv_shrunk_original",)) == 13.0
