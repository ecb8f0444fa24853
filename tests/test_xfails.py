"""The upstream xfail file's pieces: which of upstream's two tests a failure fails, the
parser's rules, an export read back."""
import pytest

from pipeline.core.errors import ConfigError
from pipeline.curate import xfails
from pipeline.space.expected import Expectation


@pytest.mark.parametrize("variant, stage, tests", [
    ("tflite_w8i8", "compile", ("test_conv_sweep_numeric", "test_conv_sweep_compile")),
    ("tflite_f32", "compile", ("test_conv_sweep_numeric", "test_conv_sweep_compile")),
    ("onnx_f32", "import", ("test_conv_sweep_numeric", "test_conv_sweep_compile")),
    ("tflite_f32", "run", ("test_conv_sweep_numeric",)),  # its numeric test runs the module before it skips
    ("onnx_bf16", "verify", ("test_conv_sweep_numeric",)),
    ("tflite_w8if32", "verify", ()),  # upstream only compiles that flavor
])
def test_which_upstream_tests_a_failure_fails(variant, stage, tests):
    assert xfails.failing_tests(variant, stage) == tests


def test_parse_reads_comments_blank_lines_and_optional_issues():
    text = "# bucket\n\n  test_a[x-sim-sl2610-v1] org/repo#1  \ntest_b[y-sim-sl2610-v1]\n   # indented comment\n"
    assert xfails.parse(text, "f") == [xfails.Line("test_a[x-sim-sl2610-v1]", "org/repo#1"),
                                      xfails.Line("test_b[y-sim-sl2610-v1]", None)]


@pytest.mark.parametrize("line", ["test_a[x] issue # comment", "test_a[x]  issue", "test_a[x] one two"])
def test_parse_refuses_what_upstream_refuses(line):
    with pytest.raises(ConfigError, match="f, line 2"):
        xfails.parse("# ok\n" + line, "f")


def test_case_of_a_test_name():
    assert xfails.case_of("test_conv_sweep_numeric[conv_tflite_w8i8_w9_h10_f4_k3_c4_pvalid-sim-sl2610-v1]") == \
        ("conv_tflite_w8i8_w9_h10_f4_k3_c4_pvalid", "sim-sl2610-v1")
    assert xfails.case_of("test_keras_model_torq[model082-sim-sl2610-v1]") is None


def _entry(case, status, stage, bucket):
    backend, flavor = case.split("_")[1:3]
    return {"case": case, "backend": backend, "flavor": flavor, "status": status, "stage": stage, "bucket": bucket}


def test_export_then_merge_gives_the_list_back():
    listed = (Expectation("conv_onnx_bf16_a", "compile", "compile: x", "org/repo#7"),
              Expectation("conv_tflite_f32_*", "run", "run: hang"),
              Expectation("conv_tflite_w8i8_c", "verify", "verify: y", "https://example.org/i/3"))
    entries = [_entry("conv_onnx_bf16_a", "xfail", "compile", "compile: x"),
               _entry("conv_tflite_f32_b", "xfail", "run", "run: hang"),
               _entry("conv_tflite_w8i8_c", "xfail", "verify", "verify: y"),
               _entry("conv_tflite_w8i8_d", "pass", None, ""),
               _entry("conv_onnx_f32_e", "error", "compile", "compile: z")]  # not listed: not exported
    text, written, notes = xfails.export("torq", entries, listed)
    lines = xfails.parse(text, "exported")
    assert written == len(lines) == 4 and notes == []
    assert xfails.Line("test_conv_sweep_numeric[conv_tflite_f32_b-sim-sl2610-v1]", None) in lines
    assert not any("test_conv_sweep_compile[conv_tflite_f32_b" in line.test_name for line in lines)
    failures = {e["case"]: (e["stage"], e["bucket"]) for e in entries if e["status"] != "pass"}
    merged, imported, notes = xfails.merge((), lines, failures)
    assert imported == 3 and notes == []
    assert merged == [Expectation("conv_onnx_bf16_a", "compile", "compile: x", "org/repo#7"),
                      Expectation("conv_tflite_f32_b", "run", "run: hang"),
                      Expectation("conv_tflite_w8i8_c", "verify", "verify: y", "https://example.org/i/3")]


def test_an_issue_with_a_space_cannot_be_exported():
    listed = (Expectation("conv_onnx_bf16_a", "compile", "compile: x", "see bug 7"),)
    with pytest.raises(ConfigError, match="holds a space"):
        xfails.export("torq", [_entry("conv_onnx_bf16_a", "xfail", "compile", "compile: x")], listed)


def test_merge_keeps_an_entry_and_updates_its_issue_and_bucket():
    current = (Expectation("conv_onnx_bf16_a", "compile", "compile: old", "", "my note"),)
    lines = [xfails.Line("test_conv_sweep_compile[conv_onnx_bf16_a-sim-sl2610-v1]", "org/repo#8")]
    merged, imported, _ = xfails.merge(current, lines, {"conv_onnx_bf16_a": ("compile", "compile: new")})
    assert merged == [Expectation("conv_onnx_bf16_a", "compile", "compile: new", "org/repo#8", "my note")]
