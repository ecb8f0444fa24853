"""`doit bugreport`: on torq at N=1, one report per failure bucket, each with a repro.sh that
reproduces its failure with a bare PATH and a report.md naming the versions and commands; a
second run reuses the shrinks. A timeout bucket (a compiler wrapper that sleeps unless a toggle
flag is given) shrinks on "anomalously slow", shows the minimal case's passes and the flag
table, and names the flag as a workaround. And the pieces: slugs, titles, bucket selection,
ranges, the pass-timing parser, the flag table and the findings."""
import json
import os
import re
import subprocess

import pytest

from helpers import clean_env, doit, real_compiler, write_spec
from pipeline.config import Config
from pipeline.core.errors import ConfigError
from pipeline.core.executables import tool_path
from pipeline.space.cases import Case
from pipeline.space.geometry import Geometry
from pipeline.triage.bugreport import (_diagnostic_section, _geometry_range, diagnostic, environment, failing_output,
                                       release, select, slug, title, tracker)
from pipeline.triage.culprit import Trial, findings, flag_table
from pipeline.triage.timing import TIMING_FLAGS, parse_timing, pass_table
from pipeline.triage.slow import TYPICAL

BUCKET = "compile: <tool> exit status <n>: <loc>: error: 'linalg.generic' op unsupported in function body"


def _message(bucket: str) -> re.Pattern:
    """What a tool prints for the bucket: its last error message, placeholders as wildcards."""
    if bucket.endswith(": timeout"):
        return re.compile("timed out")
    text = bucket.split("error: ")[-1] if "error: " in bucket else bucket.split(": ", 1)[1]
    parts = re.split(r"<(?:n|\.\.\.|path|unknown|hex|tool|loc)>", text)
    return re.compile(".*?".join(re.escape(p) for p in parts))


@pytest.mark.slow
def test_bugreport_on_torq_one_report_per_bucket_each_reproducing(tmp_path):
    build = tmp_path / "build"
    env = clean_env(CONV_SWEEP_TARGET="torq", CONV_SWEEP_N=1, CONV_SWEEP_BUILD_DIR=build)
    doit("-n", "2", "sweep", env=env, timeout=1800)
    document = json.loads((build / "report" / "torq" / "results.json").read_text())
    buckets = {b["signature"]: b["count"] for b in document["buckets"]}
    assert buckets, "torq-compile 2.3.0 fails some N=1 cases"

    run = doit("bugreport", "--budget", "15", env=env, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    root = build / "bugreports" / "torq"
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(slug(b) for b in buckets)
    index = (root / "index.md").read_text()
    toolchain = json.loads(document["tools"]["toolchain"])
    tools = Config.from_env(env).target("torq").toolchain["tools"]
    bin_folder = os.path.dirname(tools["torq-compile"])
    for bucket, count in buckets.items():
        assert f"| [{slug(bucket)}]({slug(bucket)}/report.md) | {count} | {title(bucket, 'torq')} |" in index
        folder = root / slug(bucket)
        report = (folder / "report.md").read_text()
        assert report.startswith(f"# {title(bucket, 'torq')}\n") and f"Bucket: `{bucket}`" in report
        assert f"## The sweep's cases in this bucket: {count}" in report
        # the boundary facts: the minimal case moved one dimension at a time, each probe a case
        probes = json.loads((folder / "boundary.json").read_text())
        assert all({"dimension", "value", "case", "outcome"} <= set(p) for p in probes)
        assert all(p["outcome"] in ("pass", "same") or p["outcome"].startswith("other: ") for p in probes)
        assert "## Boundary facts" in report and (not probes or "every probe in `boundary.json`" in report)
        stage = re.search(r"^- stage: (\w+)$", report, re.M).group(1)
        ran = {"import": (), "run": ("torq-compiler", "torq-runtime"), "verify": ("torq-compiler", "torq-runtime")}
        for wheel in ("torq-compiler", "torq-runtime"):  # the versions and wheel digests of what the stage ran
            assert (toolchain["wheels"][wheel]["sha256"] in report) == (wheel in ran.get(stage, ("torq-compiler",)))
        environment = report.split("## Environment")[1].split("\n## ")[0]
        if stage == "import":  # the importer's bug: the Torq tools never ran
            assert "- file it at: https://github.com/tensorflow/tensorflow/issues\n" in report \
                or "- file it at: https://github.com/iree-org/iree/issues\n" in report
            tool = "iree-import-onnx" if "\n- model: onnx " in report else "tosa-converter-for-tflite"
            tools_folder = os.path.dirname(tool_path(tool))
        else:
            assert re.search(r"^`torq-(compile|run-module)` \(torq-(compiler|runtime) 2\.3\.0\) ", report, re.M)
            assert "- file it at: https://github.com/synaptics-torq/torq-compiler/issues\n" in report
            assert "--torq-hw=SL2610" in environment and not re.search(r"tensorflow|keras|torch |onnx", environment)
            tool, tools_folder = "torq-compile", bin_folder
        # the user's toolchain folder is named nowhere: the tools come from PATH
        assert os.path.dirname(bin_folder) not in report + (folder / "repro.sh").read_text()
        # outside the project: a bare PATH, no virtual environment, nothing but the tools' folder
        bare = ["/usr/bin/env", "-i", "HOME=" + str(tmp_path), "/bin/bash", str(folder / "repro.sh")]
        repro = subprocess.run(bare[:2] + [f"PATH={tools_folder}:/usr/bin:/bin"] + bare[2:], capture_output=True,
                               text=True, timeout=900)
        assert repro.returncode not in (0, 127), (bucket, repro.stderr[-2000:])
        assert _message(bucket).search(repro.stdout + repro.stderr), (bucket, repro.stderr[-2000:])
        without = subprocess.run(bare[:2] + ["PATH=/usr/bin:/bin"] + bare[2:], capture_output=True, text=True,
                                 timeout=60)
        assert without.returncode == 127 and f"{tool} not found" in without.stderr  # those tools are what it needs

    again = doit("bugreport", "--budget", "15", env=env, timeout=1800)
    assert again.returncode == 0
    assert again.stdout.count("reusing the shrink of") == len(buckets)


def test_slug_is_a_short_folder_name_unique_per_bucket():
    assert slug(BUCKET) == "compile-linalg-generic-op-unsupported-in-function-body-c4b85d18"
    assert slug("compile: timeout") == "compile-timeout-1cc6ce3c"
    assert slug(BUCKET) != slug(BUCKET.replace("generic", "conv_2d_nchw_fchw"))
    assert re.fullmatch(r"[a-z0-9-]{1,73}", slug("verify: " + "x" * 500))


def test_title_drops_placeholders_and_boilerplate():
    assert title(BUCKET, "torq") == "[torq] compile: 'linalg.generic' op unsupported in function body"
    assert title("compile: <tool> killed by signal SIGABRT", "torq") == "[torq] compile: killed by signal SIGABRT"
    # a failed assertion (as torq-compile 2.3.0's, listed in torq.json): the function it failed in, without
    # namespaces, and its expression as printed (numbers abstracted)
    assert title("compile: <tool> killed by signal SIGABRT: int _proc_mem_ndl_cmd(torq_wrap_t *, uint32_t, int, "
                 "torq_ndl_cmd_t *, uint32_t, uint32_t, uint32_t *): Assertion `kernel_top_odd >= <n> && "
                 "kernel_bottom_odd >= <n>' failed.", "torq") == \
        "[torq] compile: assertion failed in _proc_mem_ndl_cmd: kernel_top_odd >= N && kernel_bottom_odd >= N"
    transform = ("compile: <tool> killed by signal SIGABRT: LogicalResult mlir::syna::torq::OpPattern<mlir::syna::"
                 "torq_hl::Conv2DOp>::transform(torq_hl::Conv2DOp, PatternRewriter &) const [HlOp = mlir::syna::"
                 "torq_hl::Conv2DOp]: Assertion `stride <= <n> && \"stride must be less than or equal to <n>\"' failed.")
    assert title(transform, "torq") == ('[torq] compile: assertion failed in OpPattern<Conv2DOp>::transform: '
                                        'stride <= N && "stride must be less than or equal to N"')
    assert slug(transform).startswith("compile-assertion-failed-in-oppattern-conv2dop-transform-stride-")
    transpose = ("compile: <tool> killed by signal SIGABRT: RankedTensorType mlir::syna::torq::transposeType(Type, "
                 "const SmallVector<int64_t> &): Assertion `inputType.getRank() == permutation.size()' failed.")
    assert title(transpose, "torq") == \
        "[torq] compile: assertion failed in transposeType: inputType.getRank() == permutation.size()"
    assert title("run: timeout", "torq") == "[torq] run: timeout"


def test_select_by_slug_signature_part_or_case_and_refuse_what_matches_nothing():
    groups = {BUCKET: [{"case": "conv_onnx_f32_a"}], "verify: x: elements outside tolerance": [{"case": "conv_b"}]}
    assert select(groups, [], "torq") == groups
    assert list(select(groups, [slug(BUCKET)], "torq")) == [BUCKET]
    assert list(select(groups, ["conv_b@torq"], "torq")) == ["verify: x: elements outside tolerance"]
    assert list(select(groups, ["linalg.generic"], "torq")) == [BUCKET]
    with pytest.raises(ConfigError, match="names no failure bucket of torq"):
        select(groups, ["no-such-bucket"], "torq")


def test_geometry_range_spans_every_field():
    entries = [{"geometry": {"rank": 2, "spatial": [4, 9], "kernel": [3, 3], "stride": [1, 1], "c_in": 2, "c_out": 8, "padding": "valid"}},
               {"geometry": {"rank": 2, "spatial": [6, 9], "kernel": [1, 3], "stride": [1, 1], "c_in": 2, "c_out": 16, "padding": "same"}}]
    rows = _geometry_range(entries)
    assert rows[:2] == ["| rank | 2 |", "| spatial | 4-6 x 9 |"]
    assert "| c_out | 8-16 |" in rows and "| padding | same, valid |" in rows and rows[-1].startswith("| MACs | ")


# A compiler 4 s slower than the real one unless a toggle flag is on its command line.
SLOWCC = """#!/bin/sh
case " $* " in
  *" --iree-opt-const-eval=false "*) ;;
  *) sleep 4;;
esac
exec {real} "$@"
"""
# Every compile is typically 0.75 s (the calibration: the sweep completes none), so anomalously slow past 4 x 0.75 s = 3 s: the 3.5 s
# compile budget cuts the sleeping compiles past that point; the real one, under a second, is
# normal. Its limit is min(budget 3.5 s, max(floor 1 s, 5 x 0.75 s)) = 3.5 s.
SLOW_PROFILE = {"base": "llvm-cpu", "flavors": ["onnx_f32"], "calibration": "cal.json",
                "timeouts": {"compile": {"limit": 600, "margin": 5, "floor": 1},
                             "run": {"limit": 600, "margin": 5, "floor": 20}},
                "toggle_flags": ["--iree-llvmcpu-disable-vector-peeling", "--iree-opt-const-eval=false"]}
TINY = {"rank": 1, "spatial": [4], "kernel": [2], "stride": [1], "c_in": 2, "c_out": 2, "padding": "valid"}
CUT = "conv_onnx_f32_w4_h1_f2_k2_c2_r1_pvalid"


@pytest.mark.slow
def test_bugreport_on_a_timeout_times_the_minimal_case_and_names_the_flag_that_works_around_it(tmp_path):
    wrapper = tmp_path / "slowcc.sh"
    wrapper.write_text(SLOWCC.format(real=real_compiler()))
    wrapper.chmod(0o755)
    (tmp_path / "cal.json").write_text(json.dumps(
        {"measured": "by hand", "stages": {"compile": {"points": [[1, 0.75], [10 ** 9, 0.75]]}}}))
    (tmp_path / "targets.json").write_text(json.dumps({"targets": {"slow": SLOW_PROFILE}}))
    build = tmp_path / "build"
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [TINY]), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=build, CONV_SWEEP_TARGETS_FILE=tmp_path / "targets.json",
                    CONV_SWEEP_TARGET="slow", CONV_SWEEP_IREE_COMPILE=wrapper, CONV_SWEEP_BUDGET="compile=3.5")
    assert doit("sweep", env=env).returncode != 0
    swept = json.loads((build / "cases" / CUT / "slow" / "result.json").read_text())
    assert (swept["status"], swept["stage"]) == ("timeout", "compile")

    run = doit("bugreport", "--budget", "120", f"{CUT}@slow", env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # shrunk on "anomalously slow": every attempt past 3 s, down to one MAC
    summary = json.loads((build / "shrink" / "slow" / CUT / "shrink.json").read_text())
    assert summary["predicate"] == {"kind": "slow", "stage": "compile", "factor": 4.0, "typical": TYPICAL}
    assert summary["minimal"]["macs"] == 1 and {t["outcome"] for t in summary["tried"]} == {"same"}
    assert [p["macs"] for p in summary["path"]][0] == 24 and summary["path"][-1]["macs"] == 1
    folder = build / "bugreports" / "slow" / slug("compile: timeout")
    report = (folder / "report.md").read_text()
    # the first finding: the flag brings the time back, on both cases, and the module passes
    first = report.split("## Findings\n\n- ")[1].split("\n")[0]
    assert first.startswith("`--iree-opt-const-eval=false` brings the minimal case's compile time back to normal")
    assert "On the original case too" in first and "`--iree-opt-const-eval=false` is a workaround (not the same " \
        "test: the flag changes the module)" in first
    # where the time goes: the minimal case's passes, from MLIR's timing of the real compiler
    passes = report.split("## Where the time goes")[1].split("## Toggle flags")[0]
    rows = re.findall(r"^\| (\S+) \| ([\d.e-]+) \| ([\d.]+) % \|$", passes, re.M)
    assert len(rows) >= 5 and "SerializeTargetExecutablesPass" in {r[0] for r in rows}
    assert [float(r[1]) for r in rows] == sorted((float(r[1]) for r in rows), reverse=True)
    assert f"| `{summary['path'][0]['case']}` | 24 | > 3.5 (cut) | 0.75 | > 4.7 |" in passes  # the growth table
    # the flag tables: the minimal case's compile without a flag ran to its end, slow
    tables = report.split("## Toggle flags")[1].split("## Reproduce")[0]
    assert re.search(r"^\| \(no flag\) \| \d+\.\d\d \(slow\) \| 1 \| \S+ [\d.e-]+ s \| passes \|$", tables, re.M)
    # its compile's seconds, whatever the machine's load (normal: not marked slow), a fraction of the flagless one's
    assert re.search(r"^\| `--iree-opt-const-eval=false` \| \d+\.\d\d \| 0\.\d\d \| \S+ [\d.e-]+ s \| passes \|$",
                     tables, re.M), tables
    assert re.search(r"^\| `--iree-llvmcpu-disable-vector-peeling` \| > 3\.5 \(cut\) \| - \| - \| timeout at compile",
                     tables, re.M), tables
    original = tables.split(f"On the original case, `{CUT}`")[1]
    assert re.search(r"^\| \(no flag\) \| > 3\.5 \(cut\) \| - \| - \| timeout at compile", original, re.M)
    assert re.search(r"^\| `--iree-opt-const-eval=false` \| \d+\.\d\d \| < 0\.\d\d \|", original, re.M)
    assert "the same failure" in original  # the other flag: cut like the sweep's compile
    # repro.sh fails while the compile is anomalously slow: it gives it 4 x 0.75 s
    # the sweep's compiler was the user's own: repro.sh takes it from the variable its header names
    assert "# Needs iree-compile (not from a package: slowcc.sh, " in (folder / "repro.sh").read_text()
    repro = subprocess.run(["bash", str(folder / "repro.sh")], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "IREE_COMPILE": str(wrapper)})
    assert repro.returncode == 124 and "compile timed out after 3 s" in repro.stderr


def _iree_timing(tmp_path, *flags) -> str:
    """The pass timing the real iree-compile prints for a tiny conv."""
    mlir = tmp_path / "conv.mlir"
    mlir.write_text("""func.func @main(%arg0: tensor<1x6x6x2xf32>) -> tensor<1x4x4x2xf32> {
  %w = arith.constant dense<1.0> : tensor<3x3x2x2xf32>
  %z = arith.constant dense<0.0> : tensor<1x4x4x2xf32>
  %r = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}
    ins(%arg0, %w : tensor<1x6x6x2xf32>, tensor<3x3x2x2xf32>) outs(%z : tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  return %r : tensor<1x4x4x2xf32>
}
""")
    done = subprocess.run([real_compiler(), str(mlir), "-o", str(tmp_path / "conv.vmfb"), "--iree-hal-target-device=local",
                           "--iree-hal-local-target-device-backends=llvm-cpu", *TIMING_FLAGS, *flags],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


@pytest.mark.parametrize("flags", [("--mlir-disable-threading",), ()], ids=["wall", "user-and-wall"])
def test_parse_timing_of_iree_compile_lists_passes_slowest_first_without_pipelines(tmp_path, flags):
    text = _iree_timing(tmp_path, *flags)
    assert ("----User Time----" in text) == (not flags)  # with threads, a user time column first
    timing = parse_timing("# exit status 0 after 0.4 s\n--- stderr ---\n" + text)  # as in a compile log
    total = float(re.search(r"Total Execution Time: ([\d.]+) seconds", text).group(1))
    assert timing.reports == (total,)
    names = [name for name, _ in timing.passes]
    assert "SerializeTargetExecutablesPass" in names and "CanonicalizerPass" in names
    assert not {"root", "Rest", "Total"} & set(names)
    assert not [n for n in names if n.endswith("Pipeline") or n.startswith("Pipeline Collection")
                or n.endswith("OpPipelineAdaptorPass")]
    seconds = [s for _, s in timing.passes]
    assert seconds == sorted(seconds, reverse=True) and 0 < seconds[0] <= total
    wall = float(re.search(r"([\d.]+) \(\s*[\d.]+%\)\s+SerializeTargetExecutablesPass$", text, re.M).group(1))
    assert dict(timing.passes)["SerializeTargetExecutablesPass"] == wall  # the wall time, not the user time
    table = pass_table(timing, 2 * total)
    assert table[2:4] == ["| pass | seconds | share of the compile |", "|---|---|---|"]
    assert table[4] == f"| {names[0]} | {seconds[0]:.3g} | {100 * seconds[0] / (2 * total):.1f} % |"
    assert parse_timing("no timing here\n  0.5 (50.0%)  NotAPass") is None


# torq-compile 2.3.0's timing of a tiny w8i8 conv (captured, trimmed): one report per pass
# manager, the nested one first; a pass's seconds are summed over them.
TORQ_TIMING = """===-------------------------------------------------------------------------===
                         ... Execution time report ...
===-------------------------------------------------------------------------===
  Total Execution Time: 0.1957 seconds

  ----Wall Time----  ----Name----
    0.1957 (100.0%)  root
    0.1877 ( 95.9%)  Pipeline Collection : ['func.func']
    0.1877 ( 95.9%)  'func.func' Pipeline
    0.0824 ( 42.1%)  TileAndFuse
    0.0538 ( 27.5%)  LinalgToTorqHLPreConversion
    0.0046 (  2.4%)  Canonicalizer
    0.0061 (  3.1%)  Rest
    0.1957 (100.0%)  Total
===-------------------------------------------------------------------------===
                         ... Execution time report ...
===-------------------------------------------------------------------------===
  Total Execution Time: 0.3880 seconds

  ----Wall Time----  ----Name----
    0.3938 (101.5%)  'hal.executable' Pipeline
    0.3880 (100.0%)  root
    0.1966 ( 50.7%)  TranslateAllExecutablesPass
    0.1963 ( 50.6%)  TORQLowerExecutableTarget
    0.0121 (  3.1%)  Canonicalizer
    0.0000 (  0.0%)  (A) DominanceInfo
   -0.3800 (-97.9%)  Rest
    0.3880 (100.0%)  Total
"""


def test_parse_timing_sums_a_pass_over_the_reports_of_torq_compile():
    timing = parse_timing(TORQ_TIMING)
    assert timing.reports == (0.1957, 0.388)
    assert timing.passes[:3] == (("TranslateAllExecutablesPass", 0.1966), ("TORQLowerExecutableTarget", 0.1963),
                                 ("TileAndFuse", 0.0824))
    assert dict(timing.passes)["Canonicalizer"] == pytest.approx(0.0167)
    assert "(A) DominanceInfo" in dict(timing.passes) and "Rest" not in dict(timing.passes)


def _trial(flag, seconds, status="pass", failed_at=None, reason="", sig="", limit=3.5, typical=0.75):
    return Trial(flag, "conv_x", 1, "compile", seconds, limit, typical, status, failed_at, reason, sig)


def test_flag_table_gives_each_flag_its_time_ratio_and_module():
    cut = "compile: timeout"
    trials = [_trial(None, None, "timeout", "compile", "slowcc.sh timed out after 3.5 s", cut),
              _trial("--fast", 0.7), _trial("--also-cut", None, "timeout", "compile", "cut again", cut),
              _trial("--wrong", 0.5, "fail", "verify", "vs onnxruntime: 3 of 4 elements outside | tolerance",
                     "verify: vs onnxruntime: elements outside tolerance"),
              _trial("--broken", 0.2, "error", "compile", "slowcc.sh exit status 1: error: no", "compile: <tool> ...")]
    assert flag_table(trials) == [
        "| flag | compile (s) | x without | module |", "|---|---|---|---|",
        "| (no flag) | > 3.5 (cut) | - | timeout at compile: slowcc.sh timed out after 3.5 s |",
        "| `--fast` | 0.70 | < 0.20 | passes |",
        "| `--also-cut` | > 3.5 (cut) | - | the same failure |",
        "| `--wrong` | 0.50 | < 0.14 | fail at verify: vs onnxruntime: 3 of 4 elements outside \\| tolerance |",
        "| `--broken` | 0.20 | < 0.06 | error at compile: slowcc.sh exit status 1: error: no |"]
    timed = [_trial(None, 4.6), _trial("--fast", 0.46)]
    assert flag_table(timed)[2:] == ["| (no flag) | 4.60 (slow) | 1 | passes |", "| `--fast` | 0.46 | 0.10 | passes |"]
    assert flag_table([]) == []


def test_findings_name_the_flag_that_makes_an_error_disappear_first():
    bucket = "compile: <tool> exit status <n>: <loc>: error: 'linalg.generic' op unsupported in function body"
    mins = [_trial(None, 0.3, "error", "compile", "torq-compile exit status 1: ... unsupported", bucket),
            _trial("--a", 0.3, "error", "compile", "the same", bucket),
            _trial("--b", 0.4), _trial("--c", 0.5, "fail", "verify", "vs x: 1 of 4 elements outside tolerance",
                                       "verify: vs x: elements outside tolerance"),
            _trial("--d", 0.2, "error", "compile", "other", "compile: <tool> killed by signal SIGABRT")]
    said = findings(mins, [], {"conv_x": ["--e"]}, ["--a", "--b", "--c", "--d", "--e"], False, "compile", bucket)
    assert said == [
        "This error disappears with `--b`: the minimal case then compiles (0.40 s), and its module passes: `--b` is a "
        "workaround (not the same test: the flag changes the module).",
        "This error disappears with `--c`: the minimal case then compiles (0.50 s), but its module fails (fail at "
        "verify: vs x: 1 of 4 elements outside tolerance): not a workaround.",
        "With `--d` it fails otherwise: compile: <tool> killed by signal SIGABRT",
        "Not tried on `conv_x`, the bucket's budget being spent: `--e`."]
    none = findings(mins[:2], [], {}, ["--a"], False, "compile", bucket)
    assert none == ["No toggle flag makes the minimal case compile (1 of 1 tried)."]
    assert findings([], [], {}, [], False, "compile", bucket)[0].startswith("The target's profile lists no toggle flags")


def test_a_minimal_case_not_slow_this_time_credits_no_flag_the_original_does():
    """The torq giant's minimal case compiled in 67.6 s when the shrink kept it and in 28.4 s
    when timed again: every flag then looks like it brings it back. Only the original case,
    cut without a flag, can say which flag does."""
    cut = "compile: timeout"
    mins = [_trial(None, 2.0), _trial("--none", 1.5), _trial("--other", 1.9)]  # typical 0.75: not past 3 s
    origs = [_trial(None, None, "timeout", "compile", "cut", cut),
             _trial("--none", 1.2, "timeout", "run", "torq-run-module timed out after 240 s", "run: timeout"),
             _trial("--other", None, "timeout", "compile", "cut", cut)]
    said = findings(mins, origs, {}, ["--none", "--other"], True, "compile", cut)
    assert said[0] == ("`--none` brings the original case's compile time back to normal: 1.20 s, where it was cut "
                       "without it. With it the original case's module fails (timeout at run: torq-run-module timed out "
                       "after 240 s): "
                       "not a workaround.")
    assert len(said) == 2 and "the flags are judged on the original case only" in said[1]
    assert not any("--other" in line for line in said)
    slow_base = findings([_trial(None, 4.0), _trial("--none", 1.5)], origs[:1], {}, ["--none"], True, "compile", cut)
    assert slow_base[0].startswith("`--none` brings the minimal case's compile time back to normal: 1.50 s")


def test_a_non_finite_metric_is_shown_by_its_name():
    from pipeline.triage.bugreport import figure

    assert figure(0.000122225558) == "0.000122226" and figure("inf") == "inf" and figure(None) == "None"


@pytest.mark.slow
def test_a_bucket_failing_at_import_is_reported_with_its_model_file(tmp_path):
    # tosa-converter-for-tflite 2026.2.0 cannot legalize this TFLite conv (a kernel wider than
    # the one-column input, SAME padding): the case never reaches the compiler
    geometry = {"category": "imp", "rank": 2, "spatial": [16, 1], "kernel": [1, 2], "stride": [2, 1], "c_in": 1,
                "c_out": 1, "padding": "same"}
    env = clean_env(CONV_SWEEP_TARGET="llvm-cpu", CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [geometry]),
                    CONV_SWEEP_N=0, CONV_SWEEP_BUILD_DIR=tmp_path / "build")
    assert doit("-n", "2", "sweep", env=env, timeout=600).returncode != 0
    run = doit("bugreport", "--budget", "0", "Could not legalize", env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    folder = next((tmp_path / "build" / "bugreports" / "llvm-cpu").glob("import-*"))
    report = (folder / "report.md").read_text()
    assert "`model.tflite`, which the importer fails on" in report and "stage: import" in report
    assert (folder / "model.tflite").is_file() and not (folder / "model.mlir").exists()
    assert "- file it at: https://github.com/tensorflow/tensorflow/issues\n" in report
    environment = report.split("## Environment")[1].split("\n## ")[0]
    assert "| packages | tosa-converter-for-tflite 2026.2.0, iree-base-compiler " in environment
    assert not re.search(r"keras|tensorflow|iree-compile|iree-run-module", environment)
    # the importer from PATH: the folder its package installed it in, nothing else of the project
    converter = os.path.dirname(tool_path("tosa-converter-for-tflite"))
    repro = subprocess.run(["bash", "repro.sh"], cwd=folder, env={"PATH": f"{converter}:/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=300)
    assert repro.returncode not in (0, 127) and "Could not legalize the TFLite model to TOSA" in repro.stdout + repro.stderr


# torq-compile 2.3.0 on a depthwise Conv1D with 4 channels (conv_onnx_bf16_w1_h1_f4_k1_c4_r1_pvalid_dw1), as the
# sweep's compile.log holds it: the head is verbatim (the toolchain folder renamed, two long lines cut), the
# rest of its 62 stack frames follow in the same form.
TORQ_ROOT = "/home/someone/.cache/conv-sweep/toolchain/torq-2.3.0-2ba559ef001a"
LIB = f"({TORQ_ROOT}/wheels/iree/compiler/_mlir_libs/libIREECompiler.so+0x{{:x}})"
TORQ_ABORT = f"""$ setarch x86_64 -R {TORQ_ROOT}/bin/torq-compile ../model.mlir -o .model.vmfb.w3uvwac5.vmfb --torq-hw=SL2610
# killed by signal SIGABRT after 1.65 s
--- stderr ---
Error: mismatching iterations in DEDR and CEDW
Mismatching iteration counts:
  DEDR: 1
  CEDW: 0
torq-compile: /workspace/code/compiler/torq/Utils/Kernel.cpp:3143: const torq_hw::Ndls &mlir::syna::torq::Slice::getNdls() const: Assertion `ok && "NDL consistency check failed"' failed.
Please report issues to https://github.com/iree-org/iree/issues and include the crash backtrace.
Stack dump:
0.	Program arguments: {TORQ_ROOT}/wheels/torq/_compiler_libs/torq-compile --iree-flow-enable-pad-handling
 #0 0x00007fffee239948 llvm::sys::PrintStackTrace(llvm::raw_ostream&, int) {LIB.format(0x7439948)}
 #1 0x00007fffee2375d0 llvm::sys::RunSignalHandlers() {LIB.format(0x74375d0)}
 #2 0x00007fffee23a6d1 {LIB.format(0x743a6d1)}
 #3 0x00007fffe684bd70 ({TORQ_ROOT}/sysroot/usr/lib/x86_64-linux-gnu/libc.so.6+0x3fd70)
""" + "".join(f"{'#' + str(i):>3} 0x00007ffff0312{i:03x} {LIB.format(0x9512000 + i)}\n" for i in range(4, 62)) + "\n"
TORQ_REASON = "torq-compile killed by signal SIGABRT: Error: mismatching iterations in DEDR and CEDW"
# iree-compile 3.13.0 refusing an ONNX conv with one output column (FoldUnitExtentDims), verbatim but the venv's path
IREE_REFUSAL = """$ /venv/lib/python3.11/site-packages/iree/compiler/_mlir_libs/iree-compile ../model.mlir -o .model.vmfb.nf46eugp.vmfb
# exit status 1 after 0.48 s
--- stderr ---
../model.mlir:6:10: error: 'linalg.generic' op inferred input/output operand #1 has shape's dimension #0 to be 17, but found 9
    %2 = torch.operator "onnx.Conv"(%arg0, %0, %1) {torch.onnx.dilations = [1 : si64, 1 : si64]} : (!torch.vtensor<[1,1,1,17],f32>) -> !torch.vtensor<[1,1,1,1],f32>
         ^
../model.mlir:6:10: note: see current operation: 
%7 = "linalg.generic"(%4, %0, %6) <{indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>], iterator_types = [#linalg.iterator_type<reduction>], operandSegmentSizes = array<i32: 2, 1>}> ({
^bb0(%arg3: f32, %arg4: f32, %arg5: f32):
  %12 = "arith.mulf"(%arg3, %arg4) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
  %13 = "arith.addf"(%arg5, %12) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
  "linalg.yield"(%13) : (f32) -> ()
}) : (tensor<17xf32>, tensor<9xf32>, tensor<f32>) -> tensor<f32>

"""
IREE_REASON = ("iree-compile exit status 1: ../model.mlir:6:10: error: 'linalg.generic' op inferred input/output "
               "operand #1 has shape's dimension #0 to be 17, but found 9")


def test_failing_output_is_what_the_last_failing_invocation_printed():
    passed = "$ iree-compile a.mlir -o a.vmfb\n# exit status 0 after 0.40 s\n--- stdout ---\nall fine\n\n"
    assert failing_output(passed + TORQ_ABORT).startswith("Error: mismatching iterations in DEDR and CEDW\n")
    assert failing_output(TORQ_ABORT + passed).endswith("libIREECompiler.so+0x951203d)")  # the failing one, not the last
    assert failing_output(passed) == "all fine"
    both = "$ tool\n# exit status 2 after 0.1 s\n--- stdout ---\nout\n--- stderr ---\nerr line\n\n"
    assert failing_output(both) == "err line"
    # an importer run in-process logs its command and no output: nothing more than the reason to quote
    assert failing_output("$ tosa-converter-for-tflite model.tflite --bytecode -o m.mlirbc   # run in-process\n") == ""


def test_diagnostic_quotes_the_assertion_the_counts_and_the_stack_first_40_lines():
    lines = diagnostic(failing_output(TORQ_ABORT), TORQ_REASON)
    assert len(lines) == 40 and len(failing_output(TORQ_ABORT).splitlines()) == 70
    assert lines[:4] == ["Error: mismatching iterations in DEDR and CEDW", "Mismatching iteration counts:", "  DEDR: 1",
                         "  CEDW: 0"]
    assert "Kernel.cpp:3143" in lines[4] and 'Assertion `ok && "NDL consistency check failed"\' failed.' in lines[4]
    assert lines[6] == "Stack dump:" and lines[-1].startswith("#31 0x")
    # the line the reason quotes, late in the output (after warnings), starts the quote
    noisy = "\n".join([f"warning: {i}" for i in range(50)] + failing_output(IREE_REFUSAL).splitlines())
    late = diagnostic(noisy, IREE_REASON)
    assert late[0] == IREE_REASON.split(": ", 1)[1] and len(late) == 10
    assert diagnostic(noisy, "")[0] == "warning: 0"
    assert diagnostic("x" * 1000)[0] == "x" * 400


def test_the_diagnostic_section_names_the_tracker_the_tool_text_gets_wrong_and_hides_the_toolchain_folder(tmp_path):
    log = tmp_path / "compile.log"
    log.write_text(TORQ_ABORT)
    manifest = {"tools": {"torq-compile": f"{TORQ_ROOT}/bin/torq-compile",
                          "torq-run-module": f"{TORQ_ROOT}/bin/torq-run-module"}}
    torq = "https://github.com/synaptics-torq/torq-compiler/issues"
    text = "\n".join(_diagnostic_section({"log": str(log), "reason": TORQ_REASON}, manifest, torq))
    assert text.startswith("What the tool printed (the first 40 of its 70 lines):\n\n```\nError: mismatching")
    assert "  DEDR: 1\n  CEDW: 0\n" in text and TORQ_ROOT not in text
    assert "0.\tProgram arguments: <toolchain>/wheels/torq/_compiler_libs/torq-compile" in text
    assert text.endswith("The tool's own text points to https://github.com/iree-org/iree/issues: the default of the "
                         f"framework it is built on; this tool's bugs go to {torq}.\n")
    log.write_text(IREE_REFUSAL)
    iree = _diagnostic_section({"log": str(log), "reason": IREE_REASON}, None, "https://github.com/iree-org/iree/issues")
    assert iree[0] == "What the tool printed (all 10 lines):" and iree[-2:] == ["```", ""]  # no note: its own tracker
    # a one-line output says no more than the reason; no log, nothing
    log.write_text("$ tool\n# exit status 1 after 0.1 s\n--- stderr ---\nerror: one line\n\n")
    assert _diagnostic_section({"log": str(log), "reason": "tool exit status 1: error: one line"}, None, None) == []
    assert _diagnostic_section({"reason": "x"}, None, None) == []


def _case(target: str, backend: str, flavor: str) -> Case:
    return Case(Geometry(1, (8,), (3,), (1,), 4, 4, groups=4), backend, flavor, target=target)


@pytest.fixture(scope="module")
def targets():
    return Config.from_env(clean_env(CONV_SWEEP_TARGET="llvm-cpu,vmvx,torq"))


def test_the_tracker_is_the_profiles_and_an_import_failures_the_importers(targets):
    cfg = targets
    torq, llvm, vmvx = cfg.target("torq"), cfg.target("llvm-cpu"), cfg.target("vmvx")
    for stage in ("compile", "run", "verify"):
        assert tracker(torq, _case("torq", "onnx", "bf16"), stage) == "https://github.com/synaptics-torq/torq-compiler/issues"
        assert tracker(llvm, _case("llvm-cpu", "tflite", "f32"), stage) == "https://github.com/iree-org/iree/issues"
        assert tracker(vmvx, _case("vmvx", "onnx", "f32"), stage) == "https://github.com/iree-org/iree/issues"
    # at import, the target's tools never ran: the TFLite converter's bugs go to TensorFlow, the ONNX importer's to IREE
    assert tracker(torq, _case("torq", "tflite", "w8i8"), "import") == "https://github.com/tensorflow/tensorflow/issues"
    assert tracker(torq, _case("torq", "onnx", "f32"), "import") == "https://github.com/iree-org/iree/issues"


def _rows(cfg, target, case, stage) -> dict:
    return dict(environment(cfg, cfg.target(target), case, stage))


def test_the_environment_lists_only_what_the_failing_stage_ran(targets):
    from importlib.metadata import version

    cfg = targets
    wheels = cfg.target("torq").toolchain["wheels"]
    compiled = _rows(cfg, "torq", _case("torq", "tflite", "f32"), "compile")
    assert list(compiled) == ["target", "compiler", "compiler flags", "compiler started by", "C runtime of the tools"]
    assert compiled["compiler"] == (f"`torq-compile` from torq-compiler {wheels['torq-compiler']['version']} "
                                    f"(wheel sha256 {wheels['torq-compiler']['sha256']})")
    assert compiled["compiler flags"].endswith("--mlir-disable-threading --torq-convert-dtypes --torq-convert-io-dtype")
    assert "libc6 " in compiled["C runtime of the tools"]
    text = json.dumps(compiled)
    assert not any(word in text for word in ("tensorflow", "keras", "torch ", "onnxruntime", "torq-runtime", "IREE compiler version"))
    ran = _rows(cfg, "torq", _case("torq", "onnx", "bf16"), "run")
    assert ran["runner"].startswith(f"`torq-run-module` from torq-runtime {wheels['torq-runtime']['version']} (wheel sha256 ")
    assert ran["runner flags"] == "--torq_hw_type=sim" and "expected output from" not in ran
    checked = _rows(cfg, "llvm-cpu", _case("llvm-cpu", "onnx", "f32"), "verify")
    assert checked["compiler"] == f"`iree-compile` from iree-base-compiler {version('iree-base-compiler')}"
    assert checked["runner"] == f"`iree-run-module` from iree-base-runtime {version('iree-base-runtime')}"
    assert checked["expected output from"] == f"onnxruntime {version('onnxruntime')}, numpy {version('numpy')}"
    assert "C runtime of the tools" not in checked and "compiler started by" not in checked
    imported = _rows(cfg, "torq", _case("torq", "tflite", "w8i8"), "import")
    assert imported == {"importer": "`tosa-converter-for-tflite`, `iree-opt`",
                        "packages": f"tosa-converter-for-tflite {version('tosa-converter-for-tflite')}, "
                                    f"iree-base-compiler {version('iree-base-compiler')}",
                        "python": __import__("platform").python_version()}
    assert _rows(cfg, "llvm-cpu", _case("llvm-cpu", "onnx", "bf16"), "import")["packages"] == \
        f"iree-base-compiler {version('iree-base-compiler')}, onnx {version('onnx')}"


def test_a_compiler_no_package_installed_is_named_by_what_it_says_it_is(tmp_path):
    wrapper = tmp_path / "mycc.sh"
    wrapper.write_text(f"#!/bin/sh\nexec {real_compiler()} \"$@\"\n")
    wrapper.chmod(0o755)
    cfg = Config.from_env(clean_env(CONV_SWEEP_IREE_COMPILE=wrapper, CONV_SWEEP_TOOL_FILES=real_compiler()))
    said = release(cfg.target("llvm-cpu"), "compiler")
    assert said.startswith("not from a package: mycc.sh, IREE") and "iree-base-compiler" not in said
    assert release(cfg.target("llvm-cpu"), "runner").startswith("iree-base-runtime ")


def test_an_import_failures_repro_takes_the_importer_from_path_or_its_variable(tmp_path, targets):
    from pipeline.run.repro import write_import_standalone

    case = _case("llvm-cpu", "onnx", "f32")
    repro = write_import_standalone(case, targets, tmp_path, {"iree-import-onnx": "iree-base-compiler 3.13.0"})
    text = repro.read_text()
    assert "# Needs iree-import-onnx (iree-base-compiler 3.13.0) on PATH" in text
    assert "IREE_IMPORT_ONNX=${IREE_IMPORT_ONNX:-iree-import-onnx}\n" in text
    assert '"$IREE_IMPORT_ONNX" model.onnx -o repro.mlir' in text and "/.venv/" not in text
    missing = subprocess.run(["/bin/bash", str(repro)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert missing.returncode == 127 and "iree-import-onnx not found: put its folder on PATH, or set " \
        "IREE_IMPORT_ONNX=/path/to/iree-import-onnx" in missing.stderr


def test_a_rule_its_probes_contradict_is_learned_again_with_them():
    """The bucket's cases seen all have one channel and stride 4, so their rule is not the hidden
    one (stride past the kernel, c_in odd); the minimal case (stride 2 over kernel 1) and its
    probes contradict it. Learned again with them, the rule is the hidden one, and it is shown."""
    import random

    from pipeline.results.region import features, matches
    from pipeline.results.report import add_regions
    from pipeline.space.cases import make_cases
    from pipeline.triage.bugreport import shown_region, with_probes

    def hidden(g: Geometry) -> bool:
        return g.stride[0] > g.kernel[0] and g.c_in % 2 == 1

    def entry(name: str, g: Geometry, failing: bool) -> dict:
        return {"case": name, "target": "llvm-cpu", "backend": "onnx", "flavor": "f32", "geometry": g.to_dict(),
                "status": "error" if failing else "pass", "stage": "compile" if failing else None,
                "reason": "iree-compile exit status 1: error: injected" if failing else ""}

    rng, entries = random.Random(0), []
    while sum(e["status"] == "error" for e in entries) < 30:  # the bucket's cases seen: one channel, stride 4
        g = Geometry(1, (rng.randint(6, 16),), (rng.randint(1, 3),), (rng.randint(1, 4),), rng.randint(1, 8), 4)
        if hidden(g) and g.c_in == 1 and g.stride == (4,) or not hidden(g) and len(entries) < 200:
            entries.append(entry(f"conv_onnx_f32_{len(entries)}", g, hidden(g)))
    bucket = "compile: <tool> exit status <n>: error: injected"
    region = add_regions([{"signature": bucket}], entries)[0]["region"]
    assert region["status"] == "learned", region
    minimal_g = Geometry(1, (6,), (1,), (2,), 1, 1)
    minimal = next(iter(make_cases([("t", minimal_g)], frozenset(), (), "llvm-cpu", ("onnx_f32",), "random")))
    moves = {"stride": [(1,), (3,), (4,)], "kernel": [(2,), (3,)], "c_in": [2, 3, 4], "c_out": [2, 3],
             "spatial": [(5,), (7,)]}
    probes = []
    for dimension, values in moves.items():
        for v in values:
            g = Geometry.from_dict({**minimal_g.to_dict(), dimension: list(v) if isinstance(v, tuple) else v})
            probes.append({"dimension": dimension, "value": v, "case": f"probe_{dimension}_{v}",
                           "outcome": "same" if hidden(g) else "pass", "geometry": g.to_dict(),
                           "backend": "onnx", "flavor": "f32"})
    assert shown_region(region, minimal, probes)["status"] == "not shown"
    again = with_probes(region, entries, "llvm-cpu", bucket, minimal, probes)
    assert again["status"] == "learned" and again["probes"] == len(probes) + 1, again
    rng = random.Random(7)
    fresh = [Geometry(1, (rng.randint(6, 16),), (rng.randint(1, 3),), (rng.randint(1, 4),), rng.randint(1, 8), 4)
             for _ in range(300)]
    assert all(matches(again["conditions"], features(g.to_dict(), "onnx", "f32")) == hidden(g) for g in fresh), again
    assert with_probes(region, entries, "llvm-cpu", bucket, minimal, None) == shown_region(region, minimal, None)
