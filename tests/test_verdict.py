"""The verdict: an expected failure is a claim about one failure, its stage and its bucket."""
import pytest

from pipeline.outcome.bucket import signature
from pipeline.space.cases import Case
from pipeline.space.expected import Expectation
from pipeline.space.geometry import Geometry
from pipeline.outcome.result import CHANGED, COMPILED, ERROR, FAIL, HARNESS, PASS, TIMEOUT, XFAIL, XPASS, Result
from pipeline.outcome.verdict import judge, message, outcome

G = Geometry(2, (8, 8), (3, 3), (1, 1), 4, 4)
LISTED_REASON = "torq-compile exit status 1: <unknown>:0: error: failed to legalize unresolved materialization"
BUCKET = signature("compile", LISTED_REASON)


def _case(stage="compile", bucket=BUCKET):
    return Case(G, "tflite", "f32", expected=Expectation("conv_*", stage, bucket))


def _result(case, status, stage=None, reason=""):
    return Result.for_case(case, status, stage=stage, reason=reason)


def test_the_listed_failure_is_xfail_even_with_other_numbers_and_paths():
    case = _case()
    reason = LISTED_REASON.replace("status 1", "status 2").replace("<unknown>:0", "<unknown>:17")
    judged = judge(case, _result(case, ERROR, "compile", reason))
    assert judged.status == XFAIL and judged.notes["outcome"] == ERROR


def test_another_signature_at_the_listed_stage_is_changed_with_both():
    case = _case()
    judged = judge(case, _result(case, ERROR, "compile", "torq-compile killed by signal SIGSEGV"))
    assert judged.status == CHANGED
    assert judged.notes["expected_bucket"] == BUCKET
    assert judged.notes["observed_bucket"] == "compile: <tool> killed by signal SIGSEGV"
    text = message(case, judged, "repro.sh")
    assert "CHANGED at compile" in text and BUCKET in text and "SIGSEGV" in text


@pytest.mark.parametrize("status", [HARNESS])
def test_a_harness_error_is_never_expected(status):
    case = _case(stage="verify", bucket="verify: RuntimeError: boom")
    judged = judge(case, _result(case, status, "verify", "RuntimeError: boom"))
    assert judged.status == HARNESS and "HARNESS ERROR" in message(case, judged, "r")


def test_a_failure_at_another_stage_stands():
    case = _case()
    judged = judge(case, _result(case, ERROR, "run", "torq-run-module timed out after 5 s"))
    assert judged.status == ERROR and message(case, judged, "r")


@pytest.mark.parametrize("status", [PASS, COMPILED])
def test_passing_the_listed_stage_is_xpass(status):
    case = _case()
    judged = judge(case, _result(case, status))
    assert judged.status == XPASS and judged.stage == "compile" and "remove it" in judged.reason


def test_unlisted_outcomes_stand_and_only_red_ones_have_a_message():
    case = Case(G, "onnx", "f32")
    for status in (PASS, COMPILED, FAIL, ERROR):
        judged = judge(case, _result(case, status, "verify" if status == FAIL else None))
        assert judged.status == status
        assert (message(case, judged, "r") is None) == (status in (PASS, COMPILED))


def test_judging_again_starts_from_the_outcome():
    """A verdict is judged again when the list changes: from the recorded outcome."""
    case = _case()
    judged = judge(case, _result(case, ERROR, "compile", LISTED_REASON))
    assert judged.status == XFAIL
    unlisted = Case(G, "tflite", "f32")
    again = judge(unlisted, judged)
    assert (again.status, outcome(again), again.stage) == (ERROR, ERROR, "compile")
    relisted = judge(_case(bucket="compile: something else"), again)
    assert relisted.status == CHANGED


def test_a_listed_timeout_is_xfail_when_cut_and_information_when_it_finishes():
    case = _case("run", "run: timeout")
    cut = judge(case, _result(case, TIMEOUT, "run", "torq-run-module timed out after 240 s: its run budget is 240 s"))
    assert cut.status == XFAIL and cut.notes["observed_bucket"] == "run: timeout"
    finished = judge(case, _result(case, PASS))
    assert finished.status == PASS and "finished within its budget" in finished.notes["listed_timeout"]
    assert message(case, finished, "repro.sh") is None
    # finishing is accepted, failing otherwise is not: a numeric failure after a finished run stands
    wrong = judge(case, _result(case, FAIL, "verify", "vs x: 3 of 9 elements outside tolerance"))
    assert wrong.status == FAIL
    # a listed compile error that finishes is still an xpass: only a listed timeout may finish
    strict = judge(_case(), _result(_case(), PASS))
    assert strict.status == XPASS


def test_an_unlisted_timeout_is_red_and_says_timeout():
    case = Case(G, "tflite", "f32")
    judged = judge(case, _result(case, TIMEOUT, "compile", "torq-compile timed out after 300 s: its compile budget"))
    assert judged.status == TIMEOUT
    assert "compile TIMEOUT: torq-compile timed out after 300 s" in message(case, judged, "repro.sh")
    # judged again (the list changed): the outcome is kept
    listed = Case(G, "tflite", "f32", expected=Expectation("conv_*", "compile", "compile: timeout"))
    assert judge(listed, judged).status == XFAIL


def test_a_listed_numeric_failure_whose_shape_changes_is_changed():
    """The same check failing with a few wrong elements is the listed failure; the same check
    failing with NaN everywhere, or all zeros, is not."""
    listed = "verify: vs onnxruntime [some elements]: elements outside tolerance"
    case = _case("verify", listed)
    same = judge(case, _result(case, FAIL, "verify", "vs onnxruntime: 3 of 90 elements outside tolerance "
                                                    "(some elements); max abs error 0.1"))
    assert same.status == XFAIL
    for shape in ("non-finite output", "all-zero output"):
        worse = judge(case, _result(case, FAIL, "verify", f"vs onnxruntime: 90 of 90 elements outside tolerance "
                                                         f"({shape}); max abs error inf"))
        assert worse.status == CHANGED
        assert worse.notes["observed_bucket"] == f"verify: vs onnxruntime [{shape}]: elements outside tolerance"


def test_a_slash_inside_a_word_is_no_path():
    """'input/output' in a diagnostic stays as it is; real paths become <path>."""
    from pipeline.outcome.bucket import normalize

    assert normalize("op inferred input/output operand #1") == "op inferred input/output operand #<n>"
    assert normalize("cannot open /tmp/a/b.mlir, --input=@/tmp/in.npy") == "cannot open <path>, --input=@<path>"
    assert normalize("../model.mlir:7:10: error: x") == "<loc>: error: x"
