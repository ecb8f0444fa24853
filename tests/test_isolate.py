"""Work that can crash runs in a helper process: a crash, a hang or an exception there is one
case's StageError, and the next call gets a fresh helper."""
import json
import os
import time

import pytest

from pipeline.core.errors import StageError, load_json
from pipeline.core.isolate import HarnessError, call


def test_value_comes_back_from_another_process(tmp_path):
    pid = call(os.getpid, helper="t", stage="model", timeout=30, log=tmp_path / "log")
    assert isinstance(pid, int) and pid != os.getpid()
    assert call(os.getpid, helper="t", stage="model", timeout=30, log=tmp_path / "log") == pid  # kept


def test_crash_is_a_stage_error_and_the_next_call_gets_a_new_helper(tmp_path):
    before = call(os.getpid, helper="t", stage="model", timeout=30, log=tmp_path / "log")
    with pytest.raises(StageError, match=r"abort crashed the helper process \(killed by signal SIGABRT\)"):
        call(os.abort, helper="t", stage="model", timeout=30, log=tmp_path / "log")
    assert call(os.getpid, helper="t", stage="model", timeout=30, log=tmp_path / "log") != before


def test_hang_times_out_and_kills_the_helper(tmp_path):
    with pytest.raises(StageError, match="sleep timed out after 1 s"):
        call(time.sleep, 60, helper="t", stage="oracle", timeout=1, log=tmp_path / "log")
    assert call(os.getpid, helper="t", stage="model", timeout=30, log=tmp_path / "log")


def test_exception_names_the_function_and_error_and_keeps_the_traceback(tmp_path):
    with pytest.raises(StageError) as err:
        call(json.loads, "{not json", helper="t", stage="oracle", timeout=30, log=tmp_path / "log")
    assert err.value.stage == "oracle" and err.value.reason.startswith("loads: JSONDecodeError")
    assert "Traceback" in (tmp_path / "log").read_text()


def test_an_exception_raised_by_our_own_code_is_a_harness_error(tmp_path):
    """A library's exception is the stage's failure; one raised by this package's code is ours."""
    with pytest.raises(HarnessError, match="load_json: ConfigError"):
        call(load_json, str(tmp_path / "absent.json"), "X", helper="t", stage="oracle",
             timeout=30, log=tmp_path / "log")
    assert not issubclass(HarnessError, StageError)
