"""Comparing two runs (`doit compare`): two real runs that differ, the real compiler against
one that fails the Conv1D ONNX cases; and the rules on results entries."""
import json
import re

import pytest

from helpers import clean_env, doit, real_compiler, write_spec, write_wrapper
from pipeline.triage.diff import diff
from test_dodo import SMALL

WRAPPER = """#!/bin/sh
case "$PWD/$1" in  # the compiler runs in the case's folder, on ../model.mlir
  *conv_onnx_*_r1_*) echo "$1:3:7: error: 'linalg.conv_1d' op injected failure" >&2; exit 1;;
esac
exec {real} "$@"
"""


@pytest.mark.slow
def test_compare_two_real_runs(tmp_path):
    spec = write_spec(tmp_path / "spec.json", SMALL)
    good = clean_env(CONV_SWEEP_SPEC=spec, CONV_SWEEP_N=0, CONV_SWEEP_BUILD_DIR=tmp_path / "good")
    assert doit("-n", "2", "sweep", env=good).returncode == 0
    wrapper = write_wrapper(tmp_path / "iree-compile", WRAPPER, real_compiler())
    bad = {**good, "CONV_SWEEP_BUILD_DIR": str(tmp_path / "bad"), "CONV_SWEEP_IREE_COMPILE": str(wrapper)}
    assert doit("-n", "2", "sweep", env=bad).returncode != 0

    worse = doit("compare", "--old", str(tmp_path / "good"), "--new", str(tmp_path / "bad"), env=good)
    assert worse.returncode != 0
    out = worse.stdout + worse.stderr
    regressions = sorted(re.findall(r"REGRESSION (\S+): pass -> error at compile", out))
    assert regressions == ["conv_onnx_bf16_w20_h1_f8_k5_c4_r1_s1x2_pvalid",
                           "conv_onnx_f32_w20_h1_f8_k5_c4_r1_s1x2_pvalid"]
    assert "2 regressions" in out
    folder = tmp_path / "good" / "compare"
    document = json.loads((folder / "compare.json").read_text())
    assert [len(document[0][k]) for k in ("regressions", "fixed", "still_failing")] == [2, 0, 0]
    junit = (folder / "junit.xml").read_text()
    assert junit.count("<testcase ") == 10 and junit.count('type="regression"') == 2
    page = (folder / "compare.html").read_text()
    assert "conv_onnx_f32_w20_h1_f8_k5_c4_r1_s1x2_pvalid" in page and "http" not in page

    better = doit("compare", "--old", str(tmp_path / "bad" / "report" / "llvm-cpu" / "results.json"),
                  "--new", str(tmp_path / "good"), "--out", str(tmp_path / "back"), env=good)
    assert better.returncode == 0, better.stdout + better.stderr
    assert json.loads((tmp_path / "back" / "compare.json").read_text())[0]["fixed"][0]["old"] == "error"

    missing = doit("compare", "--old", str(tmp_path / "nowhere"), "--new", str(tmp_path / "good"), env=good)
    assert missing.returncode != 0 and "compare --old" in missing.stdout + missing.stderr


def _entry(case, status, reason="", ratio=None, stage=None):
    metrics = {"check": {"error_to_tolerance": ratio}} if ratio is not None else {}
    return {"case": case, "status": status, "stage": stage, "reason": reason, "metrics": metrics, "repro": "r"}


def test_diff_rules():
    old = {"a": _entry("a", "pass", ratio=0.1), "b": _entry("b", "error", "x failed at 3", stage="compile"),
           "c": _entry("c", "xfail", "y: 1 of 9", stage="verify"), "d": _entry("d", "pass", ratio=0.5),
           "e": _entry("e", "pass", ratio=0.001), "gone": _entry("gone", "pass")}
    new = {"a": _entry("a", "fail", "outside", ratio=3.0, stage="verify"), "b": _entry("b", "pass", ratio=0.2),
           "c": _entry("c", "error", "z crashed", stage="compile"), "d": _entry("d", "pass", ratio=0.2),
           "e": _entry("e", "pass", ratio=0.004), "new": _entry("new", "pass")}
    d = diff(old, new)
    assert [r["case"] for r in d["regressions"]] == ["a"]
    assert [r["case"] for r in d["fixed"]] == ["b"]
    assert [r["case"] for r in d["still_failing"]] == ["c"] and [r["case"] for r in d["bucket_changes"]] == ["c"]
    assert sorted(r["case"] for r in d["ratio_moves"]) == ["a", "d"]  # e: 0.001 -> 0.004 is below the floor
    assert d["only_old"] == ["gone"] and d["only_new"] == ["new"]


def _timed(case, status, flavor, compile_s=None, cycles=None, **kw):
    backend, _, variant = flavor.partition("_")
    entry = {**_entry(case, status, **kw), "backend": backend, "flavor": variant}
    if compile_s is not None:
        entry["stages"] = {"compile": {"seconds": compile_s}}
    if cycles is not None:
        entry["perf"] = {"estimated_npu_cycles": cycles}
    return entry


def test_the_release_table_per_flavor():
    old = {"a": _timed("a", "pass", "tflite_f32", 10.0, 100.0), "b": _timed("b", "pass", "tflite_f32", 2.0, 50.0),
           "c": _timed("c", "pass", "onnx_bf16", 0.2, 10.0), "d": _timed("d", "error", "onnx_bf16", stage="compile",
                                                                         reason="x failed at 3")}
    new = {"a": _timed("a", "pass", "tflite_f32", 25.0, 80.0), "b": _timed("b", "pass", "tflite_f32", 2.2, 50.0),
           "c": _timed("c", "fail", "onnx_bf16", 0.9, 10.0, stage="verify", reason="outside"),
           "d": _timed("d", "error", "onnx_bf16", stage="compile", reason="y crashed")}
    table = diff(old, new)["flavors"]
    f32, bf16 = table["tflite_f32"], table["onnx_bf16"]
    assert (f32["cases"], f32["regressions"], f32["compile_moves"]) == (2, 0, 1)  # a: x2.5 > e^0.75; b: x1.1
    assert f32["cycles"]["cases"] == 2 and f32["cycles"]["min"] == 0.8 and f32["cycles"]["max"] == 1.0
    assert f32["compile"]["cases"] == 2 and f32["compile"]["max"] == 2.5
    assert (bf16["regressions"], bf16["bucket_changes"], bf16["compile_moves"]) == (1, 1, 0)  # c: under 1 s
    assert bf16["cycles"] is None and bf16["compile"] is None  # c fails in new; its compiles are under a second
    slow_failure = {"x": _timed("x", "pass", "onnx_f32", 40.0), "y": _timed("y", "pass", "onnx_f32", 40.0)}
    fast_failure = {"x": _timed("x", "error", "onnx_f32", 0.3, stage="compile", reason="crashed"),
                    "y": _timed("y", "pass", "onnx_f32", 41.0)}
    assert diff(slow_failure, fast_failure)["flavors"]["onnx_f32"]["compile"]["cases"] == 1  # a failed compile says nothing of speed
    fast_failure["y"]["stages"]["compile"]["store"] = True
    assert diff(slow_failure, fast_failure)["flavors"]["onnx_f32"]["compile"] is None  # nor a module from the store


def test_compare_names_targets_of_the_build_folder(tmp_path):
    from pipeline.core.errors import ConfigError
    from pipeline.core.layout import Layout
    from pipeline.triage.diff import compare_runs

    build = Layout(tmp_path / "build")
    for target, status in (("torq@2.2.1", "pass"), ("torq", "error")):
        build.report_dir(target).mkdir(parents=True)
        entry = {**_timed("a", status, "tflite_f32", 3.0), "target": target}
        (build.report_dir(target) / "results.json").write_text(json.dumps({"cases": [entry]}))
    assert build.report_dir("torq@2.2.1").name == "torq-2.2.1"  # IREE's run tools split paths at '@'
    text, regressions = compare_runs("torq@2.2.1", "torq", tmp_path / "out", build=build)
    assert regressions == 1 and "target torq@2.2.1 -> torq" in text and "tflite_f32" in text
    with pytest.raises(ConfigError, match="targets with results: torq, torq@2.2.1"):
        compare_runs("torq@9.9.9", "torq", tmp_path / "out", build=build)
