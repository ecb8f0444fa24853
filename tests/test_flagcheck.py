"""The flag check compiles every case with and without the flags under test, with the real
iree-compile: a flag that leaves the module alone is identical everywhere, one that changes the
module or breaks the compile is listed and fails the check, a compile cut at its limit proves
nothing, and a build folder without MLIR is refused before anything is compiled."""
import json
import subprocess
import sys

import pytest

from helpers import ROOT, clean_env, doit, write_spec

from pipeline.dev import flagcheck

TINY = [{"category": "tiny", "rank": 1, "spatial": [16], "kernel": [3], "stride": [1], "c_in": 2, "c_out": 2}]


def _flagcheck(env, *args):
    return subprocess.run([sys.executable, "-m", "pipeline.dev.flagcheck", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_flagcheck_proves_identity_and_lists_what_differs(tmp_path):
    env = clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", TINY),
                    CONV_SWEEP_N=0)
    refused = _flagcheck(env, "--flags=--verify=false", "--out", str(tmp_path / "none.json"))
    assert refused.returncode == 2 and "build folder" in refused.stderr and "doit -n 2 mlir" in refused.stderr
    assert not (tmp_path / "none.json").exists()
    built = doit("-n", "2", "mlir", env=env)
    assert built.returncode == 0, built.stderr[-2000:]

    same = _flagcheck(env, "--flags=--verify=false", "--twice", "--out", str(tmp_path / "same.json"))
    assert same.returncode == 0, same.stderr[-2000:]
    figures = json.loads((tmp_path / "same.json").read_text())
    assert figures["flags"] == ["--verify=false"]
    assert figures["summary"]["llvm-cpu"]["cases"] == 5 and figures["summary"]["llvm-cpu"]["identical"] == 5
    assert all(r["reproducible"] and r["a"] == r["b"] == r["a2"] and len(r["a"]) == 64 for r in figures["cases"])
    assert all(r["a_seconds"] > 0 and r["b_seconds"] > 0 for r in figures["cases"])
    assert "llvm-cpu tflite_w8i8" in same.stdout

    # the source map is part of the module: stripping it changes every module
    changed = _flagcheck(env, "--flags=--iree-vm-bytecode-module-strip-source-map=true", "--out",
                         str(tmp_path / "changed.json"))
    assert changed.returncode == 1
    rows = json.loads((tmp_path / "changed.json").read_text())["cases"]
    assert [r["verdict"] for r in rows] == ["differs"] * 5 and all(r["a"] != r["b"] for r in rows)
    assert changed.stdout.count("  differs: ") == 5

    broken = _flagcheck(env, "--flags=--no-such-flag-anywhere", "--out", str(tmp_path / "broken.json"))
    assert broken.returncode == 1
    rows = json.loads((tmp_path / "broken.json").read_text())["cases"]
    assert all(r["verdict"] == "differs" and r["b"].startswith("error: iree-compile exit status 1") for r in rows)

    # a compile cut at its limit proves nothing either way
    cut = _flagcheck({**env, "CONV_SWEEP_TIMEOUT": "0.001"}, "--flags=--verify=false", "--out", str(tmp_path / "cut.json"))
    assert cut.returncode == 1
    rows = json.loads((tmp_path / "cut.json").read_text())["cases"]
    assert all(r["verdict"] == "cut" and r["a"].startswith("cut: iree-compile timed out") for r in rows)


def _row(target, flavor, verdict, a, b, **extra):
    return {"case": f"c_{flavor}", "target": target, "flavor": flavor, "verdict": verdict, "a": "x", "b": "y",
            "a_seconds": a, "b_seconds": b, **extra}


def test_summary_counts_each_verdict_and_the_ratio_per_target_and_flavor():
    rows = [_row("llvm-cpu", "onnx_f32", "identical", 2.0, 1.0), _row("llvm-cpu", "tflite_f32", "differs", 2.0, 3.0),
            _row("torq", "onnx_f32", "cut", 4.0, 4.0, reproducible=False)]
    s = flagcheck.summary(rows)
    assert s["llvm-cpu"] == {"cases": 2, "identical": 1, "differs": 1, "cut": 0, "a_seconds": 4.0,
                             "b_seconds": 4.0, "b / a": 1.0}
    assert s["llvm-cpu onnx_f32"]["b / a"] == 0.5
    assert s["torq"]["cut"] == 1 and s["torq"]["not reproducible"] == 1
    text = flagcheck.table(("--x",), rows)
    assert "differs: c_tflite_f32@llvm-cpu" in text and "cut: c_onnx_f32@torq" in text
    assert "identical: c_onnx_f32" not in text and "A not reproducible: 1" in text
