import json

import pytest

from pipeline.errors import ConfigError
from pipeline.expected import Expectation, accept, load, match


def test_load_and_match_patterns(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"expected_failures": [
        {"case": "conv_onnx_bf16_*_k9_*", "stage": "compile", "reason": "bug 1"},
        {"case": "conv_tflite_w8i8_w5_h5_f1_k1_c1_pvalid", "stage": "verify", "reason": "bug 2"}]}))
    entries = load(path)
    assert match("conv_onnx_bf16_w20_h20_f4_k9_c2_pvalid", entries).reason == "bug 1"
    assert match("conv_onnx_f32_w20_h20_f4_k9_c2_pvalid", entries) is None


@pytest.mark.parametrize("content, field", [
    ('{"expected_failures": [{"case": "x", "stage": "link", "reason": ""}]}', "expected_failures[0].stage"),
    ('{"expected_failures": [{"case": "x", "stage": "compile"}]}', "expected_failures[0]"),
    ('{"failures": []}', "CONV_SWEEP_EXPECTED_FAILURES"),
])
def test_bad_entries_name_the_field(tmp_path, content, field):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert field in err.value.field


def test_accept_keeps_what_holds_adds_new_drops_stale():
    current = (Expectation("conv_a_*", "compile", "known bug"), Expectation("conv_b", "verify", "fixed since"),
               Expectation("conv_c", "run", "not run this time"))
    failures = [("conv_a_1", "compile", "b1"), ("conv_a_2", "compile", "b1"), ("conv_d", "import", "b2"),
                ("conv_a_3", "verify", "b3")]
    new = accept(current, failures, not_run=("conv_c",))
    assert new == [Expectation("conv_a_*", "compile", "known bug"), Expectation("conv_c", "run", "not run this time"),
                   Expectation("conv_a_3", "verify", "b3"), Expectation("conv_d", "import", "b2")]


def test_accept_keeps_entries_for_cases_outside_the_selection():
    """Accepting a smaller sweep (another N or profile) keeps what it could not judge."""
    current = (Expectation("conv_big", "compile", "seen at N = 50"), Expectation("conv_b", "verify", "fixed since"))
    selection = ("conv_b", "conv_d")
    new = accept(current, [("conv_d", "import", "b2")], (), selection)
    assert new == [Expectation("conv_big", "compile", "seen at N = 50"), Expectation("conv_d", "import", "b2")]


def test_an_exact_name_wins_over_an_earlier_pattern():
    entries = (Expectation("conv_a_*", "compile", "pattern"), Expectation("conv_a_3", "verify", "exact"))
    assert match("conv_a_3", entries).reason == "exact"
    assert match("conv_a_1", entries).reason == "pattern"
