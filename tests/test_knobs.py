"""The knobs are declared once (pipeline/config.py, KNOBS): docs/knobs.md's table lists exactly
them, in order, with their defaults; each is checked when dodo.py loads, so `doit list` with a
bad value of it fails with one line naming it, and no traceback; and a CONV_SWEEP_* variable
that is not a knob is refused the same way."""
import re

import pytest

from pipeline.config import KNOBS

from helpers import ROOT, clean_env, doit

KNOBS_DOC = ROOT / "docs" / "knobs.md"
DECLARED = [k.name for k in KNOBS]
BAD_CONFIGURATION = "conv-sweep: bad configuration, nothing was run: "


def _bad_values(tmp):
    a_file = tmp / "a-file"
    a_file.write_text("")
    return {
        "CONV_SWEEP_N": "ten", "CONV_SWEEP_BUILD_DIR": str(a_file / "build"), "CONV_SWEEP_TARGET": "nope",
        "CONV_SWEEP_TARGETS_FILE": str(tmp / "no-such.json"), "CONV_SWEEP_TOOLCHAIN_DIR": str(a_file / "toolchain"),
        "CONV_SWEEP_COMPILE_FLAGS": "--a 'unclosed", "CONV_SWEEP_IREE_COMPILE": "/nonexistent/iree-compile",
        "CONV_SWEEP_TIMEOUT": "-1", "CONV_SWEEP_CACHE_DIR": str(a_file / "store"), "CONV_SWEEP_TIMEOUTS": "sometimes",
        "CONV_SWEEP_PROFILE": "huge", "CONV_SWEEP_SPEC": str(tmp / "no-spec.json"), "CONV_SWEEP_INCLUDE": str(tmp / "no-found.json"), "CONV_SWEEP_COMPILE_ONLY": "onnx_int4",
        "CONV_SWEEP_SCHEDULER": "local:x", "CONV_SWEEP_ARTIFACTS": "sometimes", "CONV_SWEEP_SHARD": "3/2",
        "CONV_SWEEP_BENCHMARK": "yes", "CONV_SWEEP_EXPECTED_FAILURES": str(tmp / "no-list.json"),
        "CONV_SWEEP_BUDGET": "compile=soon", "CONV_SWEEP_TOOL_FILES": str(tmp / "no-such-file"),
        "CONV_SWEEP_ORDER": "sideways", "CONV_SWEEP_PROGRESS_INTERVAL": "x", "CONV_SWEEP_JOBS": "0",
        "CONV_SWEEP_DATA": "nasty",
    }


def test_the_docs_table_is_the_declaration():
    """Every row of docs/knobs.md's table `| `NAME` | default | meaning |`, in order: the declared
    knobs and no other name, each with its declared default (backticks aside)."""
    rows = re.findall(r"^\| `(CONV_SWEEP_\w+)` \| ([^|]*) \|", KNOBS_DOC.read_text(), re.M)
    assert rows and DECLARED, "no knob rows in docs/knobs.md, or no knob declared: nothing to compare"
    assert [name for name, _ in rows] == DECLARED
    assert [default.replace("`", "").strip() for _, default in rows] == [k.default for k in KNOBS]


def test_every_declared_knob_has_a_bad_value_here(tmp_path):
    assert sorted(_bad_values(tmp_path)) == sorted(DECLARED)


@pytest.mark.parametrize("knob", DECLARED)
def test_a_bad_knob_stops_doit_list_with_one_line_naming_it(knob, tmp_path):
    value = _bad_values(tmp_path)[knob]
    run = doit("list", env=clean_env(**{"CONV_SWEEP_BUILD_DIR": tmp_path / "build", knob: value}), timeout=60)
    assert run.returncode != 0
    assert run.stderr.startswith(f"{BAD_CONFIGURATION}{knob}="), run.stderr
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr, run.stderr


@pytest.mark.parametrize("variable, value, said", [
    ("CONV_SWEEP_TARGT", "torq", "CONV_SWEEP_TARGT='torq': is not a knob; did you mean CONV_SWEEP_TARGET? "
                                 "(docs/knobs.md lists them)"),
    ("CONV_SWEEP_COLOUR", "red", "CONV_SWEEP_COLOUR='red': is not a knob (docs/knobs.md lists them)"),
])
def test_a_variable_that_is_no_knob_stops_doit_list_naming_it_and_the_closest(variable, value, said, tmp_path):
    run = doit("list", env=clean_env(**{"CONV_SWEEP_BUILD_DIR": tmp_path / "build", variable: value}), timeout=60)
    assert run.returncode != 0
    assert run.stderr == f"{BAD_CONFIGURATION}{said}\n"
    assert run.stdout == ""
