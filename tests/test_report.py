"""Results a compiler engineer can act on, through the real commands: a sweep with injected
compile failures and an expected-failures list gives xfail/xpass/error, the report files,
buckets, repro.sh, the pytest mapping, and `doit accept_failures` makes the list current."""
import json
import os
import re
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from pipeline.results.html import COLORS

from helpers import ROOT, clean_env, doit, real_compiler, results, write_spec

pytestmark = pytest.mark.slow
GEOMETRIES = [
    {"category": "two", "rank": 2, "spatial": [10, 9], "kernel": [3, 3], "stride": [1, 1], "c_in": 4, "c_out": 4},
    {"category": "one", "rank": 1, "spatial": [20], "kernel": [5], "stride": [2], "c_in": 4, "c_out": 8},
]
G2, G1 = "w9_h10_f4_k3_c4_pvalid", "w20_h1_f8_k5_c4_r1_s1x2_pvalid"
WRAPPER = """#!/bin/sh
case "$PWD/$1" in  # the compiler runs in the case's folder, on ../model.mlir
  *conv_onnx_*_r1_*) echo "$1:3:7: error: 'linalg.conv_1d' op injected failure for 4x8 operands" >&2; exit 1;;
esac
exec {real} "$@"
"""
INJECTED = ("compile: <tool> exit status <n>: <loc>: "
            "error: 'linalg.conv_1d' op injected failure for <shape> operands")
ISSUE = "synaptics-torq/torq-compiler#123"
EXPECTED = [
    {"case": f"conv_onnx_bf16_{G1}", "stage": "compile", "bucket": INJECTED, "issue": ISSUE,
     "comment": "known: bf16 conv_1d"},
    {"case": f"conv_tflite_f32_{G2}", "stage": "compile", "bucket": "compile: was broken, fixed since"},
    {"case": f"conv_onnx_f32_*_r1_*", "stage": "verify", "bucket": "verify: listed at the wrong stage"},
]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    wrapper = tmp / "iree-compile-wrapper"
    wrapper.write_text(WRAPPER.format(real=real_compiler()))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    expected = tmp / "expected.json"
    expected.write_text(json.dumps({"expected_failures": EXPECTED}))
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp / "spec.json", GEOMETRIES), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp / "build", CONV_SWEEP_IREE_COMPILE=wrapper,
                    CONV_SWEEP_EXPECTED_FAILURES=expected, CONV_SWEEP_PROGRESS_INTERVAL=0)
    run = doit("-n", "2", "sweep", env=env)
    return {"tmp": tmp, "env": env, "run": run, "build": tmp / "build", "expected": expected}


def test_statuses_and_exit_code(scenario):
    assert scenario["run"].returncode != 0  # one xpass and one unexpected error
    status = {name: (r["status"], r["stage"]) for name, r in results(scenario["build"]).items()}
    assert status[f"conv_onnx_bf16_{G1}"] == ("xfail", "compile")
    assert status[f"conv_tflite_f32_{G2}"] == ("xpass", "compile")
    assert status[f"conv_onnx_f32_{G1}"] == ("error", "compile")  # listed at verify: a real failure
    assert sum(s == ("pass", None) for s in status.values()) == 7


def test_failure_message_ends_with_repro(scenario):
    out = scenario["run"].stdout + scenario["run"].stderr
    line = next(l for l in out.splitlines() if l.startswith(f"conv_onnx_f32_{G1}@llvm-cpu: compile failed:"))
    assert line.endswith(f"cases/conv_onnx_f32_{G1}/llvm-cpu/repro.sh")
    assert "error: 'linalg.conv_1d' op injected failure" in line


def test_summary_table_in_the_terminal(scenario):
    out = scenario["run"].stdout
    header = next(l for l in out.splitlines() if re.match(r"^\s+pass\s+fail", l))
    assert header.split() == ["pass", "fail", "error:compile", "changed", "xfail", "xpass", "total"]
    total = next(l for l in out.splitlines() if l.startswith("total "))
    assert total.split() == ["total", "7", "0", "1", "0", "1", "1", "10"]
    assert re.search(r"^flavor onnx_f32\s+1\s+0\s+1\s+0\s+0\s+0\s+2$", out, re.M)
    assert "slowest:" in out and "report/llvm-cpu/report.html" in out
    assert out.count("target llvm-cpu: 10 cases") == 1


def test_results_json_holds_every_case(scenario):
    doc = json.loads((scenario["build"] / "report" / "llvm-cpu" / "results.json").read_text())
    assert len(doc["cases"]) == 10
    case = next(c for c in doc["cases"] if c["case"] == f"conv_tflite_w8i8_{G2}")
    metric = next(iter(case["metrics"].values()))
    for key in ("max_abs_error", "max_rel_error", "max_tolerance", "error_to_tolerance", "lsb_histogram"):
        assert key in metric
    assert set(case["geometry"]) >= {"spatial", "kernel", "stride", "c_in", "c_out"}
    assert "compile" in case["stages"] and "iree-compile" in doc["tools"]["compiler"]
    assert case["target"] == "llvm-cpu" and doc["tools"]["target"].startswith("llvm-cpu")


def test_buckets_abstract_numbers_paths_and_shapes(scenario):
    doc = json.loads((scenario["build"] / "report" / "llvm-cpu" / "results.json").read_text())
    bucket = doc["buckets"][0]
    assert bucket["count"] == 2  # the onnx Conv1D cases, xfail and error, one signature
    assert bucket["signature"] == INJECTED


def test_junit_xml_one_testcase_per_case(scenario):
    root = ET.parse(scenario["build"] / "report" / "llvm-cpu" / "junit.xml").getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 10
    assert (suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("1", "1", "1")
    error = next(c for c in cases if c.get("name") == f"conv_onnx_f32_{G1}").find("error")
    assert "injected failure" in error.get("message")


def test_the_summary_shows_the_issue_next_to_its_bucket(scenario):
    line = next(l for l in scenario["run"].stdout.splitlines() if l.startswith("[2] "))
    assert line.endswith(f"[issue: {ISSUE}]") and INJECTED[:60] in line


def upstream_xfails(path):
    """What upstream's torq/testing/xfail.py makes of an xfail file, written here from its
    description (pipeline/curate/xfails.py): stripped lines, `#` comments and blank lines
    skipped, one space between a test name and an optional issue, more fields refused."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(" ")
        if len(fields) > 2:
            raise ValueError(f"invalid line in xfail file '{path}': '{line}'")
        found[fields[0]] = fields[1] if len(fields) == 2 else None
    return found


def test_export_xfails_names_upstream_tests_and_imports_back(scenario, tmp_path):
    run = doit("export_xfails", env=scenario["env"])
    assert run.returncode == 0, run.stdout + run.stderr
    exported = scenario["build"] / "report" / "llvm-cpu" / "test_conv_sweep-xfails.txt"
    case = f"conv_onnx_bf16_{G1}"  # listed and failing as listed; a compile failure fails both tests
    assert upstream_xfails(exported) == {f"test_conv_sweep_numeric[{case}-sim-sl2610-v1]": ISSUE,
                                         f"test_conv_sweep_compile[{case}-sim-sl2610-v1]": ISSUE}
    text = exported.read_text()
    assert f"# {INJECTED} (1 cases)" in text
    assert f"conv_tflite_f32_{G2}: xpass in this run, not exported" in run.stdout
    # back: into an empty list, the stage and bucket from this run, the issue from the file;
    # a line naming a case that passes here is not imported, and says so
    passing = f"test_conv_sweep_compile[conv_tflite_w8i8_{G2}-sim-sl2610-v1] tracker#9"
    theirs = tmp_path / "test_conv_sweep-xfails.txt"
    theirs.write_text(text + passing + "\n")
    empty = tmp_path / "expected.json"
    empty.write_text('{"expected_failures": []}')
    back = doit("import_xfails", str(theirs), env={**scenario["env"], "CONV_SWEEP_EXPECTED_FAILURES": str(empty)})
    assert back.returncode == 0, back.stdout + back.stderr
    assert json.loads(empty.read_text())["expected_failures"] == [
        {"case": case, "stage": "compile", "bucket": INJECTED, "issue": ISSUE}]
    assert f"conv_tflite_w8i8_{G2}: does not fail in this run" in back.stdout
    broken = tmp_path / "broken.txt"
    broken.write_text(f"test_conv_sweep_compile[{case}-sim-sl2610-v1] {ISSUE} # a trailing comment\n")
    refused = doit("import_xfails", str(broken), env={**scenario["env"], "CONV_SWEEP_EXPECTED_FAILURES": str(empty)})
    assert refused.returncode != 0 and f"{broken}, line 1" in refused.stdout + refused.stderr


def test_report_html_is_self_contained_and_renders(scenario, tmp_path):
    page = scenario["build"] / "report" / "llvm-cpu" / "report.html"
    text = page.read_text()
    assert text.count("<figure><svg ") == 3  # two geometry views and the error-to-tolerance histogram
    assert not re.search(r"""(src=|<link[^>]*href=)["']?https?:""", text)  # nothing loaded from a network
    assert f'issue: <span class="issue">{ISSUE}</span>' in text  # next to its bucket
    chromium = "/usr/bin/chromium"
    assert os.path.exists(chromium), "install Debian's chromium (see .ci/run)"
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2000",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 2000)
    colors = {rgb: n for n, rgb in image.getcolors(maxcolors=1 << 20)}
    assert len(colors) > 200  # tables, text and plots, not a blank page
    green = tuple(int(COLORS["pass"][i:i + 2], 16) for i in (1, 3, 5))
    assert colors.get(green, 0) >= 20  # the charts drew: the opaque legend marks of "pass"


def test_repro_passes_and_catches_a_corrupted_expected_output(scenario):
    for name in (f"conv_tflite_f32_{G1}", f"conv_tflite_w8i8_{G2}", f"conv_onnx_bf16_{G2}"):
        repro = scenario["build"] / "cases" / name / "llvm-cpu" / "repro.sh"
        ok = subprocess.run(["bash", str(repro)], capture_output=True, text=True, timeout=120)
        assert ok.returncode == 0, ok.stderr[-2000:]
        expected = repro.parent / "repro-expected.bin"
        data = bytearray(expected.read_bytes())
        data[len(data) // 2] ^= 0x40  # one element of the expected output changes
        expected.write_bytes(bytes(data))
        bad = subprocess.run(["bash", str(repro)], capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0, name


def test_pytest_front_end_maps_expected_failures_to_strict_xfail(scenario):
    run = subprocess.run([sys.executable, "-m", "pytest", "tests/test_conv_sweep.py", "-m", "conv_sweep", "-q",
                          "-p", "no:cacheprovider"], cwd=ROOT, env=scenario["env"], capture_output=True, text=True,
                         timeout=600)
    last = run.stdout.strip().splitlines()[-1]
    assert re.search(r"4 failed, 14 passed, 2 xfailed", last), run.stdout[-3000:]
    # the case listed at compile that compiles: its verdict xpass fails both of its tests
    for test in ("compile", "numeric"):
        assert re.search(rf"test_conv_sweep_{test}\[conv_tflite_f32_{G2}@llvm-cpu\] _+\nxpass at compile: ",
                         run.stdout), run.stdout[-3000:]


def test_doit_report_alone_and_json_output(scenario):
    alone = doit("report", env=scenario["env"])
    assert alone.returncode == 0 and re.search(r"^total\s+7\s+0\s+1\s+0\s+1\s+1\s+10$", alone.stdout, re.M)
    as_json = doit("-r", "json", "verify:conv_tflite_w8i8*", env=scenario["env"])
    assert json.loads(as_json.stdout)["tasks"]  # still machine-readable; the table went to stderr
    assert "total" in as_json.stderr


def test_progress_lines_when_not_a_terminal(scenario):
    err = scenario["run"].stderr
    lines = [l for l in err.splitlines() if l.startswith("progress: [")]
    # every case has a verify task: for the two listed at compile it judges what compile recorded
    assert lines and lines[-1].startswith("progress: [10/10 cases] 2 failed; model 10/10 mlir 10/10 vmfb 10/10 "
                                          "verify 10/10; ")
    assert any(re.search(r", ~\d+m\d\ds left$", l) for l in lines[:-1])


def test_console_says_each_failing_case_once(scenario):
    run = scenario["run"]
    lines = (run.stdout + run.stderr).splitlines()
    failing = [l for l in lines if l.startswith("conv_")]
    assert sorted(l.split(":")[0] for l in failing) == [f"conv_onnx_f32_{G1}@llvm-cpu", f"conv_tflite_f32_{G2}@llvm-cpu"]
    assert all("repro: " in l for l in failing)  # one line each: case, stage, reason, log, repro
    noise = [l for l in lines if l.startswith((".  ", "-- ", "TaskFailed", "UnmetDependency", "#####"))]
    assert noise == []
    verbose = doit("-v", "2", "sweep", env=scenario["env"])
    assert sum(l.startswith("-- model:conv_") for l in verbose.stdout.splitlines()) == 10  # per-task lines on request


def test_accept_failures_makes_todays_failures_expected(scenario):
    run = doit("accept_failures", env=scenario["env"])
    assert run.returncode == 0, run.stderr
    assert "2 entries: 0 added, 1 changed, 1 removed" in run.stdout
    entries = json.loads(scenario["expected"].read_text())["expected_failures"]
    # the pattern listed at the wrong stage now says where and how its case fails; the entry that
    # still holds is kept with its comment; the one fixed since is gone
    assert entries == [{"case": "conv_onnx_f32_*_r1_*", "stage": "compile", "bucket": INJECTED}, EXPECTED[0]]
    again = doit("-n", "2", "sweep", env=scenario["env"])
    assert again.returncode == 0, again.stdout[-3000:]
    assert re.search(r"^total\s+8\s+0\s+0\s+2\s+0\s+10$", again.stdout, re.M)


def test_progress_updates_in_place_on_a_terminal(scenario):
    import pty

    from helpers import DOIT

    primary, secondary = pty.openpty()
    proc = subprocess.Popen([*DOIT, "sweep"], cwd=ROOT, env=scenario["env"], stdin=subprocess.DEVNULL,
                            stdout=secondary, stderr=secondary)
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:  # the terminal closes when doit exits
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(primary)
    screen = b"".join(chunks).decode(errors="replace")
    assert "\r\x1b[K[10/10 cases]" in screen
    assert "progress: " not in screen  # the line-per-interval form is for logs only


def test_a_numeric_failure_buckets_by_its_failed_checks():
    from pipeline.results.report import signature

    check = "vs TFLite reference kernels (bit-exact; 1 LSB at requantization ties)"
    one = {"stage": "verify", "reason": f"{check}: 3 of 1058 elements outside tolerance; max abs error 2, max rel "
                                         "error inf, worst at [0, 3, 5, 1] (expected 0, got 2, tolerance 1); "
                                         "LSB differences {'-1': 3, '0': 1050, '2': 5}"}
    two = {"stage": "verify", "reason": f"{check}: 1 of 8 elements outside tolerance; max abs error 3, max rel "
                                         "error 0.5, worst at [0, 1] (expected 6, got 3, tolerance 0); "
                                         "LSB differences {'-3': 1, '0': 7}"}
    assert signature(one) == signature(two) == \
        "verify: vs TFLite reference kernels (bit-exact; <n> LSB at requantization ties): elements outside tolerance"
    both = {"stage": "verify", "reason": "vs a: 2 of 9 elements outside tolerance; max abs error 1 (expected 1, "
                                          "got 2, tolerance 0.5); vs b (bound): 1 of 9 elements outside tolerance; x"}
    assert signature(both) == "verify: vs a + vs b (bound): elements outside tolerance"
    assert signature({"stage": "compile", "reason": "tool exit status 1: error at 12"}) == \
        "compile: <tool> exit status <n>: error at <n>"

