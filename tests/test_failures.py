"""A misbehaving compiler fails its own cases, never the sweep: crash, exit status, hang,
empty or invalid output, under `doit -n 2` with a short compile budget."""
import stat
from pathlib import Path

import pytest

from helpers import by_stage, clean_env, doit, executed, real_compiler, results, write_spec

pytestmark = pytest.mark.slow
GEOMETRIES = [
    {"category": "ok", "rank": 2, "spatial": [10, 9], "kernel": [3, 3], "stride": [1, 1], "c_in": 4, "c_out": 4},
    {"category": "bad", "rank": 1, "spatial": [20], "kernel": [5], "stride": [2], "c_in": 4, "c_out": 8},
]
# For the Conv1D geometry, one misbehaviour per flavor; everything else goes to the real compiler.
WRAPPER = """#!/bin/sh
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case "$PWD/$1" in  # the compiler runs in the case's folder, on ../model.mlir
  *conv_tflite_f32_*_r1_*) kill -SEGV $$;;
  *conv_tflite_w8if32_*_r1_*) echo "error: 'linalg.conv' op injected failure" >&2; exit 3;;
  *conv_tflite_w8i8_*_r1_*) echo $$ > "{hung}"; exec sleep 600;;
  *conv_onnx_f32_*_r1_*) : > "$out"; exit 0;;
  *conv_onnx_bf16_*_r1_*) echo "garbage" > "$out"; exit 0;;
esac
exec {real} "$@"
"""
EXPECTED = {
    "tflite_f32": "killed by signal SIGSEGV",
    "tflite_w8if32": "exit status 3: error: 'linalg.conv' op injected failure",
    "tflite_w8i8": "flaky-iree-compile timed out after 5 s: its compile budget is 5 s",
    "onnx_f32": "empty or missing .vmfb",
    "onnx_bf16": "invalid .vmfb",
}


def _running(pid: int, argv: list[bytes]) -> bool:
    """Whether the process `pid` is alive and runs `argv`."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == argv
    except OSError:
        return False


def test_misbehaving_compiler_fails_only_its_cases(tmp_path):
    wrapper = tmp_path / "flaky-iree-compile"
    hung = tmp_path / "hung.pid"  # the hanging compile's process
    wrapper.write_text(WRAPPER.format(real=real_compiler(), hung=hung))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    # the budget limits compiles only: every other tool (model builds, imports, runs) has its usual time
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", GEOMETRIES), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_IREE_COMPILE=wrapper,
                    CONV_SWEEP_BUDGET="compile=5")
    run = doit("-n", "2", "sweep", env=env, timeout=900)
    assert run.returncode != 0
    assert not _running(int(hung.read_text()), [b"sleep", b"600"])  # the hang was killed, not left behind
    found = results(tmp_path / "build")
    assert len(found) == 10
    for name, result in found.items():
        if result["category"] == "ok":
            assert result["status"] == "pass", (name, result["reason"])
            continue
        variant = f"{result['backend']}_{result['flavor']}"
        status = "timeout" if variant == "tflite_w8i8" else "error"  # the hang is cut at its limit
        assert (result["status"], result["stage"]) == (status, "compile"), name
        assert EXPECTED[variant] in result["reason"], (name, result["reason"])
        assert "compile.log" in result["log"] and (tmp_path / "build" / "cases" / name / "llvm-cpu" / "compile.log").exists()
        compile_ = result["stages"]["compile"]  # the failing compile's time counts, as a cut one's limit does
        assert compile_.get("cut") if status == "timeout" else compile_["seconds"] > 0, (name, compile_)
        said = "compile TIMEOUT: " if status == "timeout" else "compile failed: "
        assert f"{name}@llvm-cpu: {said}" in run.stdout + run.stderr

    # failed cases are re-attempted on the next run, and only they
    rerun = doit("-n", "2", "-r", "json", "sweep", env=env, timeout=900)
    assert rerun.returncode != 0
    assert by_stage(executed(rerun)) == {"model": 0, "mlir": 0, "vmfb": 5, "verify": 0}
