"""Compiler versions as targets, on real IREE releases from PyPI (installed on demand into the
toolchain folder, where `doit toolchain` puts them): two releases in one sweep with their
results apart, `doit compare` between them by target name, `doit bisect` over three releases
with a wrapper that fails from the second on, and a release that does not exist."""
import glob
import json
from pathlib import Path

import pytest

from helpers import clean_env, doit, executed, write_spec, write_wrapper
from pipeline.config import toolchain_dir
from test_dodo import SMALL

OLD, OLDER = "3.12.0", "3.11.0"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("versions")
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp / "spec.json", SMALL), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp / "build", CONV_SWEEP_TARGET=f"llvm-cpu@{OLD},llvm-cpu")
    run = doit("-n", "2", "sweep", env=env, timeout=1800)
    return tmp, env, run


def test_two_releases_in_one_sweep_keep_their_results_apart(two_releases):
    tmp, env, run = two_releases
    build = tmp / "build"
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]  # every case passes on both
    again = doit("-r", "json", "sweep", env=env)
    assert again.returncode == 0 and executed(again) == [], again.stderr[-2000:]  # a rerun builds nothing
    documents = {t: json.loads((build / "report" / t / "results.json").read_text())
                 for t in (f"llvm-cpu-{OLD}", "llvm-cpu")}
    assert {e["target"] for e in documents[f"llvm-cpu-{OLD}"]["cases"]} == {f"llvm-cpu@{OLD}"}, run.stderr[-2000:]
    assert {e["target"] for e in documents["llvm-cpu"]["cases"]} == {"llvm-cpu"}
    assert len(documents["llvm-cpu"]["cases"]) == len(documents[f"llvm-cpu-{OLD}"]["cases"]) == 10
    assert OLD in json.dumps(documents[f"llvm-cpu-{OLD}"]["tools"])  # the release's own compiler
    modules = sorted(build.glob(f"cases/*/llvm-cpu-{OLD}/model.vmfb"))
    assert len(modules) == 10 and all((m.parent.parent / "llvm-cpu" / "model.vmfb").is_file() for m in modules)
    listed = doit("list", "--all", "vmfb", env=env).stdout
    assert f"vmfb:conv_onnx_f32_{'w20_h1_f8_k5_c4_r1_s1x2_pvalid'}@llvm-cpu@{OLD}" in listed
    # one model and one import per model, shared by both releases (the store's and doit's)
    assert len(list(build.glob("cases/*/model.mlir"))) == 10


def test_compare_names_two_targets_of_the_build_folder(two_releases):
    tmp, env, _ = two_releases
    run = doit("compare", "--old", f"llvm-cpu@{OLD}", "--new", "llvm-cpu", env=env)
    out = run.stdout + run.stderr
    assert f"target llvm-cpu@{OLD} -> llvm-cpu" in out, out[-3000:]
    document = json.loads((tmp / "build" / "compare" / "compare.json").read_text())
    assert sorted(document[0]["flavors"]) == ["onnx_bf16", "onnx_f32", "tflite_f32", "tflite_w8i8", "tflite_w8if32"]
    assert sum(row["cases"] for row in document[0]["flavors"].values()) == 10


WRAPPER = """#!/bin/sh
# the release's own compiler for {older}; every later release fails
case "$PWD/" in  # the compiler runs in the case's folder on the target
  */llvm-cpu-{older}/) exec "{real}" "$@";;
esac
echo "error: injected failure in every release after {older}" >&2
exit 1
"""


def test_bisect_finds_the_first_release_that_fails(two_releases, tmp_path):
    _, env, _ = two_releases
    root = toolchain_dir(env)
    build = tmp_path / "build"
    setup = {**env, "CONV_SWEEP_BUILD_DIR": str(build), "CONV_SWEEP_TARGET": "llvm-cpu"}
    assert doit("toolchain", env={**setup, "CONV_SWEEP_TARGET": f"llvm-cpu@{OLDER}"}, timeout=1800).returncode == 0
    older = glob.glob(str(root / f"iree-{OLDER}-*" / "bin" / "iree-compile"))
    assert len(older) == 1
    wrapper = write_wrapper(tmp_path / "iree-compile", WRAPPER.replace("{older}", OLDER), older[0])
    case = "conv_onnx_f32_w20_h1_f8_k5_c4_r1_s1x2_pvalid"
    # the sweep lists the case's failure on the pinned release: bisect judges each release as it
    # fails, never as listed (a listed failure is still a failure of that release)
    listed = tmp_path / "expected.json"
    listed.write_text(json.dumps({"expected_failures": [{"case": case, "stage": "compile", "bucket": (
        "compile: <tool> exit status <n>: error: injected failure in every release after <n>.0")}]}))
    run = doit("bisect", case, "--target", "llvm-cpu", "--versions", f"{OLDER}..3.13.0",
               env={**setup, "CONV_SWEEP_IREE_COMPILE": str(wrapper), "CONV_SWEEP_EXPECTED_FAILURES": str(listed)},
               timeout=1800)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert f"last good: {OLDER}: pass" in out and f"first bad: {OLD}: error: compile" in out
    found = json.loads((build / "bisect" / "llvm-cpu" / "bisect.json").read_text())
    assert (found["last_good"], found["first_bad"]) == (OLDER, OLD)
    assert [o["version"] for o in found["outcomes"]] == [OLDER, OLD, "3.13.0"]
    assert [o["status"] for o in found["outcomes"]] == ["pass", "error", "error"]
    for version in (OLDER, OLD):
        repro = Path(found["repro"][version])
        assert repro.is_file() and f"llvm-cpu-{version}" in str(repro)


def test_a_release_that_does_not_exist_is_refused_before_any_task(tmp_path):
    env = clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="llvm-cpu@9.9.9")
    run = doit("sweep", env=env)
    assert run.returncode != 0
    assert "9.9.9" in run.stderr and "3.13.0" in run.stderr and "3.12.0" in run.stderr, run.stderr[-2000:]
    assert not (tmp_path / "build" / "cases").exists()
    assert not glob.glob(str(toolchain_dir(env) / "iree-9.9.9-*"))


def test_a_release_that_cannot_read_today_s_importer_is_refused_with_its_error(tmp_path):
    # IREE 3.11.0 reads the ONNX importer's text, not the TFLite int8 bytecode (rounding mode)
    env = clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET=f"llvm-cpu@{OLDER}")
    run = doit("list", env=env, timeout=1800)
    assert run.returncode != 0
    said = run.stderr.strip().splitlines()[-1]
    assert f"iree {OLDER}'s compiler cannot read the MLIR today's tflite importer writes" in said, said
    assert "tflite_w8i8.mlirbc" in said and "error" in said
