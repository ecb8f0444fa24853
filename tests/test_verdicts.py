"""An expected failure is a claim about one failure: its stage and its bucket. Through the real
commands on two small geometries: a listed case failing at its stage with another signature
(at compile, run and verify) is `changed` and fails the run; the listed one is `xfail`; every
case a `verify:` pattern selects gets its verdict; `doit accept_failures` rewrites the
signatures and keeps links and comments; and an exception in our own code is a harness error,
never an expected failure."""
import json
import re
import xml.etree.ElementTree as ET

import pytest

from helpers import clean_env, doit, real_compiler, results, write_spec, write_wrapper

pytestmark = pytest.mark.slow
GEOMETRIES = [
    {"category": "two", "rank": 2, "spatial": [10, 9], "kernel": [3, 3], "stride": [1, 1], "c_in": 4, "c_out": 4},
    {"category": "one", "rank": 1, "spatial": [20], "kernel": [5], "stride": [2], "c_in": 4, "c_out": 8},
]
G2, G1 = "w9_h10_f4_k3_c4_pvalid", "w20_h1_f8_k5_c4_r1_s1x2_pvalid"
COMPILER = """#!/bin/sh
case "$PWD/$1" in  # the compiler runs in the case's folder, on ../model.mlir
  *conv_tflite_f32_*_r1_*) kill -SEGV $$;;
  *conv_tflite_w8if32_*_r1_*) echo "error: 'tosa.conv2d' op injected failure" >&2; exit 1;;
esac
exec {real} "$@"
"""
# The real iree-run-module, but: the onnx f32 Conv1D fails to run, and two Conv2D modules'
# outputs come back with one element off by 1.0.
RUNNER = """#!{python}
import subprocess, sys
import numpy as np
args = sys.argv[1:]
module = next(a for a in args if a.startswith("--module="))
if "conv_onnx_f32_" in module and "_r1_" in module:
    sys.exit("INTERNAL; injected run failure")
status = subprocess.run([{real!r}, *args]).returncode
out = next((a.split("@", 1)[1] for a in args if a.startswith("--output=@")), None)
if status == 0 and out and ("conv_onnx_f32_w9" in module or "conv_tflite_f32_w9" in module):
    y = np.load(out)
    y.flat[0] += 1.0
    np.save(out, y)
sys.exit(status)
"""
COMPILE_BUCKET = "compile: <tool> exit status <n>: error: 'tosa.conv2d' op injected failure"
LISTED = [
    # crashes where the list expects an error message: changed at compile
    {"case": f"conv_tflite_f32_{G1}", "stage": "compile", "bucket": COMPILE_BUCKET, "issue": "https://bugs.example/1"},
    # fails as listed: xfail, and its issue and comment survive accept_failures
    {"case": f"conv_tflite_w8if32_{G1}", "stage": "compile", "bucket": COMPILE_BUCKET, "issue": "BUG-2",
     "comment": "the injected one"},
    # fails at run with another message: changed at run
    {"case": f"conv_onnx_f32_{G1}", "stage": "run", "bucket": "run: iree-run-module exit status <n>: out of memory"},
    # fails the one check it has, as listed: xfail at verify
    {"case": f"conv_onnx_f32_{G2}", "stage": "verify", "bucket": "verify: vs float64 conv [some elements]: elements outside tolerance"},
    # fails at verify, but not the check listed: changed at verify
    {"case": f"conv_tflite_f32_{G2}", "stage": "verify",
     "bucket": "verify: vs TFLite reference kernels (bit-exact) [some elements]: elements outside tolerance"},
]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verdicts")
    compiler = write_wrapper(tmp / "iree-compile-wrapper", COMPILER, real_compiler())
    from pipeline.config import Config

    runner = write_wrapper(tmp / "iree-run-module-wrapper", RUNNER,
                           Config.from_env(clean_env()).target("llvm-cpu").runner)
    targets = tmp / "targets.json"
    targets.write_text(json.dumps({"targets": {"llvm-cpu": {"runner": str(runner)}}}))
    expected = tmp / "expected.json"
    expected.write_text(json.dumps({"expected_failures": LISTED}))
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp / "spec.json", GEOMETRIES), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp / "build", CONV_SWEEP_IREE_COMPILE=compiler,
                    CONV_SWEEP_TARGETS_FILE=targets, CONV_SWEEP_EXPECTED_FAILURES=expected,
                    CONV_SWEEP_PROGRESS_INTERVAL=0,
                    # the run tool is a Python script: what it runs is named, so that it is a tool like any other
                    CONV_SWEEP_TOOL_FILES=Config.from_env(clean_env()).target("llvm-cpu").runner)
    run = doit("-n", "2", "sweep", env=env)
    return {"tmp": tmp, "env": env, "run": run, "build": tmp / "build", "expected": expected}


def _status(scenario):
    return {name: (r["status"], r["stage"]) for name, r in results(scenario["build"]).items()}


def test_a_different_failure_at_the_listed_stage_is_changed_and_fails_the_run(scenario):
    run = scenario["run"]
    assert run.returncode != 0
    status = _status(scenario)
    assert status[f"conv_tflite_f32_{G1}"] == ("changed", "compile")
    assert status[f"conv_onnx_f32_{G1}"] == ("changed", "run")
    assert status[f"conv_tflite_f32_{G2}"] == ("changed", "verify")
    assert status[f"conv_tflite_w8if32_{G1}"] == ("xfail", "compile")
    assert status[f"conv_onnx_f32_{G2}"] == ("xfail", "verify")
    assert sum(s == ("pass", None) for s in status.values()) == 5
    crashed = results(scenario["build"])[f"conv_tflite_f32_{G1}"]
    assert crashed["notes"]["expected_bucket"] == COMPILE_BUCKET
    assert crashed["notes"]["observed_bucket"] == "compile: <tool> killed by signal SIGSEGV"
    out = run.stdout + run.stderr
    assert f"conv_tflite_f32_{G1}@llvm-cpu: CHANGED at compile: listed as [{COMPILE_BUCKET}], failed as " \
           "[compile: <tool> killed by signal SIGSEGV]" in out
    assert re.search(r"^total\s+5\s+0\s+3\s+2\s+0\s+10$", run.stdout, re.M), run.stdout[-3000:]
    assert "CHANGED: 3 listed cases failed at their stage with another signature" in run.stdout


def test_junit_counts_changed_as_failures(scenario):
    suite = ET.parse(scenario["build"] / "report" / "llvm-cpu" / "junit.xml").getroot().find("testsuite")
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("3", "0", "2")
    changed = next(c for c in suite.findall("testcase") if c.get("name") == f"conv_onnx_f32_{G1}").find("failure")
    assert changed.get("type") == "changed" and "listed as [run: iree-run-module exit status" in changed.get("message")


def test_every_case_a_verify_pattern_selects_gets_a_verdict(scenario):
    """The listed compile failures have verify: tasks too: the pattern runs all five flavors."""
    run = doit("-r", "json", f"verify:conv_*_{G1}*", env=scenario["env"])
    ran = [t["name"] for t in json.loads(run.stdout)["tasks"] if t["name"].startswith("verify:")]
    assert sorted(ran) == sorted(f"verify:conv_{v}_{G1}@llvm-cpu"
                                 for v in ("tflite_f32", "tflite_w8if32", "tflite_w8i8", "onnx_f32", "onnx_bf16"))
    assert run.returncode != 0 and "not run" not in run.stderr
    xfail = doit(f"verify:conv_tflite_w8if32_{G1}@llvm-cpu", env=scenario["env"])
    assert xfail.returncode == 0, xfail.stdout[-3000:]
    assert _status(scenario)[f"conv_tflite_w8if32_{G1}"] == ("xfail", "compile")


def test_accept_failures_rewrites_buckets_and_keeps_links(scenario):
    run = doit("accept_failures", env=scenario["env"])
    assert run.returncode == 0, run.stderr
    assert "5 entries: 0 added, 3 changed, 0 removed" in run.stdout
    entries = {e["case"]: e for e in json.loads(scenario["expected"].read_text())["expected_failures"]}
    assert entries[f"conv_tflite_w8if32_{G1}"] == LISTED[1]  # unchanged: links and comment kept
    assert entries[f"conv_tflite_f32_{G1}"]["bucket"] == "compile: <tool> killed by signal SIGSEGV"
    assert entries[f"conv_tflite_f32_{G1}"]["issue"] == "https://bugs.example/1"
    assert entries[f"conv_tflite_f32_{G2}"]["bucket"] == \
        "verify: vs float64 conv [some elements]: elements outside tolerance"
    rerun = doit("-n", "2", "-r", "json", "sweep", env=scenario["env"])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    ran = sorted(t["name"] for t in json.loads(rerun.stdout)["tasks"] if t["started"] and ":conv_" in t["name"])
    # only the three re-judged verdicts; no compile re-runs for a changed bucket
    assert ran == sorted([f"verify:conv_tflite_f32_{G1}@llvm-cpu", f"verify:conv_onnx_f32_{G1}@llvm-cpu",
                          f"verify:conv_tflite_f32_{G2}@llvm-cpu"]), ran
    assert set(_status(scenario).values()) == {("pass", None), ("xfail", "compile"), ("xfail", "run"),
                                               ("xfail", "verify")}
