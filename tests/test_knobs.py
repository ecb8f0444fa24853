"""Every knob in docs/knobs.md's table is checked when dodo.py loads: `doit list` with a bad
value of it fails with one line naming it, and no traceback."""
import re

import pytest

from helpers import ROOT, clean_env, doit

KNOBS_DOC = ROOT / "docs" / "knobs.md"
NOT_KNOBS = {"CONV_SWEEP_REPORT_AT_END"}  # set by a run for its workers; the table says so


def _bad_values(tmp):
    a_file = tmp / "a-file"
    a_file.write_text("")
    return {
        "CONV_SWEEP_N": "ten", "CONV_SWEEP_BUILD_DIR": str(a_file / "build"), "CONV_SWEEP_TARGET": "nope",
        "CONV_SWEEP_TARGETS_FILE": str(tmp / "no-such.json"), "CONV_SWEEP_TOOLCHAIN_DIR": str(a_file / "toolchain"),
        "CONV_SWEEP_COMPILE_FLAGS": "--a 'unclosed", "CONV_SWEEP_IREE_COMPILE": "/nonexistent/iree-compile",
        "CONV_SWEEP_TIMEOUT": "-1", "CONV_SWEEP_CACHE_DIR": str(a_file / "store"), "CONV_SWEEP_TIMEOUTS": "sometimes",
        "CONV_SWEEP_PROFILE": "huge", "CONV_SWEEP_SPEC": str(tmp / "no-spec.json"), "CONV_SWEEP_COMPILE_ONLY": "onnx_int4",
        "CONV_SWEEP_SCHEDULER": "local:x", "CONV_SWEEP_ARTIFACTS": "sometimes", "CONV_SWEEP_SHARD": "3/2",
        "CONV_SWEEP_BENCHMARK": "yes", "CONV_SWEEP_EXPECTED_FAILURES": str(tmp / "no-list.json"),
        "CONV_SWEEP_BUDGET": "compile=soon", "CONV_SWEEP_TOOL_FILES": str(tmp / "no-such-file"),
        "CONV_SWEEP_ORDER": "sideways", "CONV_SWEEP_PROGRESS_INTERVAL": "x", "CONV_SWEEP_JOBS": "0",
    }


def _documented() -> list[str]:
    return sorted(set(re.findall(r"^\| `(CONV_SWEEP_[A-Z_]+)`", KNOBS_DOC.read_text(), re.M)) - NOT_KNOBS)


def test_every_documented_knob_has_a_bad_value_here(tmp_path):
    assert sorted(_bad_values(tmp_path)) == _documented()


@pytest.mark.parametrize("knob", _documented())
def test_a_bad_knob_stops_doit_list_with_one_line_naming_it(knob, tmp_path):
    value = _bad_values(tmp_path)[knob]
    run = doit("list", env=clean_env(**{"CONV_SWEEP_BUILD_DIR": tmp_path / "build", knob: value}), timeout=60)
    assert run.returncode != 0
    assert run.stderr.startswith(f"conv-sweep: bad configuration, nothing was run: {knob}="), run.stderr
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr, run.stderr
