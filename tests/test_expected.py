import json

import pytest

from pipeline.core.errors import ConfigError
from pipeline.space.expected import Expectation, accept, dump, load, match

COMPILE_BUG = "compile: tool exit status <n>: error: bug <n>"


def test_load_and_match_patterns(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"expected_failures": [
        {"case": "conv_onnx_bf16_*_k9_*", "stage": "compile", "bucket": COMPILE_BUG, "issue": "https://x/1"},
        {"case": "conv_tflite_w8i8_w5_h5_f1_k1_c1_pvalid", "stage": "verify",
         "bucket": "verify: vs a: elements outside tolerance", "comment": "seen on 2.3.0"}]}))
    entries = load(path)
    found = match("conv_onnx_bf16_w20_h20_f4_k9_c2_pvalid", entries)
    assert (found.stage, found.bucket, found.issue, found.comment) == ("compile", COMPILE_BUG, "https://x/1", "")
    assert match("conv_onnx_f32_w20_h20_f4_k9_c2_pvalid", entries) is None
    assert load(path.with_name("y.json").resolve(), missing_ok=True) == ()
    path.write_text(dump(list(entries)))  # round trip: optional fields only where set
    assert load(path) == entries


@pytest.mark.parametrize("content, field, words", [
    ('{"expected_failures": [{"case": "x", "stage": "link", "bucket": "link: x"}]}', "expected_failures[0].stage",
     "must be one of"),
    ('{"expected_failures": [{"case": "x", "stage": "compile"}]}', "expected_failures[0]", "lacks bucket"),
    ('{"expected_failures": [{"case": "x", "stage": "compile", "reason": "old format"}]}', "expected_failures[0]",
     "lacks bucket"),
    ('{"expected_failures": [{"case": "x", "stage": "compile", "bucket": "compile: x", "link": "y"}]}',
     "expected_failures[0]", "unknown fields link"),
    ('{"expected_failures": [{"case": "x", "stage": "compile", "bucket": "run: x"}]}', "expected_failures[0].bucket",
     "signature of the stage"),
    ('{"expected_failures": [{"case": "x", "stage": "compile", "bucket": "compile: x", "issue": 7}]}',
     "expected_failures[0].issue", "string"),
    ('{"failures": []}', "CONV_SWEEP_EXPECTED_FAILURES", "must be an object"),
])
def test_bad_entries_name_the_field(tmp_path, content, field, words):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert field in err.value.field and words in err.value.problem


def test_accept_rewrites_signatures_keeps_links_adds_and_removes():
    current = (Expectation("conv_a_*", "compile", "compile: old words", "https://bugs/7", "the LRAM one"),
               Expectation("conv_b", "verify", "verify: x: elements outside tolerance"),
               Expectation("conv_c", "run", "run: hang", comment="not run this time"))
    failures = {"conv_a_1": ("compile", "compile: new words"), "conv_a_2": ("compile", "compile: new words"),
                "conv_a_3": ("verify", "verify: y: elements outside tolerance"), "conv_d": ("import", "import: b2")}
    judged = {"conv_a_1", "conv_a_2", "conv_a_3", "conv_b", "conv_d"}  # conv_c was not run
    out = accept(current, failures, judged)
    assert out.entries == [
        Expectation("conv_a_*", "compile", "compile: new words", "https://bugs/7", "the LRAM one"),
        Expectation("conv_a_3", "verify", "verify: y: elements outside tolerance", "https://bugs/7", "the LRAM one"),
        Expectation("conv_c", "run", "run: hang", comment="not run this time"),
        Expectation("conv_d", "import", "import: b2")]
    assert (out.added, out.changed, out.removed) == (1, 2, 1)


def test_accept_of_what_is_listed_changes_nothing():
    current = (Expectation("conv_a", "compile", "compile: x", "ISSUE-1"),)
    out = accept(current, {"conv_a": ("compile", "compile: x")}, {"conv_a"})
    assert out.entries == list(current) and (out.added, out.changed, out.removed) == (0, 0, 0)


def test_accept_keeps_entries_for_cases_outside_the_selection():
    """Accepting a smaller sweep (another N or profile) keeps what it could not judge."""
    current = (Expectation("conv_big", "compile", "compile: seen at N = 50"), Expectation("conv_b", "verify", "verify: x"))
    out = accept(current, {"conv_d": ("import", "import: b2")}, {"conv_b", "conv_d"})
    assert out.entries == [Expectation("conv_big", "compile", "compile: seen at N = 50"),
                           Expectation("conv_d", "import", "import: b2")]


def test_an_exact_name_wins_over_an_earlier_pattern():
    entries = (Expectation("conv_a_*", "compile", "compile: pattern"), Expectation("conv_a_3", "verify", "verify: exact"))
    assert match("conv_a_3", entries).bucket == "verify: exact"
    assert match("conv_a_1", entries).bucket == "compile: pattern"
