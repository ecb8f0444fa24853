"""Work that can crash runs in a helper process: a crash, a hang or an exception there is one
case's StageError, and the next call gets a fresh helper."""
import json
import os
import signal
import threading
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


def test_a_helper_s_temporary_files_go_with_it(tmp_path):
    """A helper's TMPDIR is its own folder (TensorFlow's autograph leaves a module per traced
    function there): removed when the helper ends by itself, crashes or is killed, and, when
    its whole process tree was killed, by the next helper to start."""
    import subprocess
    import sys
    import tempfile

    from pipeline.core import isolate

    pid = call(os.getpid, helper="tmp", stage="model", timeout=30, log=tmp_path / "log")
    folder = isolate.helper_tmp(pid)
    assert call(tempfile.gettempdir, helper="tmp", stage="model", timeout=30, log=tmp_path / "log") == folder
    assert os.path.isdir(folder)
    with pytest.raises(StageError, match="timed out"):
        call(time.sleep, 60, helper="tmp", stage="model", timeout=1, log=tmp_path / "log")
    assert not os.path.exists(folder)  # killed: removed by the caller
    pid = call(os.getpid, helper="tmp", stage="model", timeout=30, log=tmp_path / "log")
    with pytest.raises(StageError, match="crashed"):
        call(os.abort, helper="tmp", stage="model", timeout=30, log=tmp_path / "log")
    assert not os.path.exists(isolate.helper_tmp(pid))  # crashed: removed by the caller
    helper = subprocess.Popen([sys.executable, "-m", "pipeline.core.isolate"], stdin=subprocess.PIPE)
    for _ in range(500):
        if os.path.isdir(isolate.helper_tmp(helper.pid)):
            break
        time.sleep(0.01)
    assert os.path.isdir(isolate.helper_tmp(helper.pid))
    helper.stdin.close()  # its caller gone (however it went): the helper ends and removes it
    assert helper.wait(timeout=30) == 0 and not os.path.exists(isolate.helper_tmp(helper.pid))
    # killed with its whole process tree, nobody removes it: the next helper to start does
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    os.makedirs(isolate.helper_tmp(gone.pid))
    live = call(os.getpid, helper="tmp2", stage="model", timeout=30, log=tmp_path / "log")
    assert not os.path.exists(isolate.helper_tmp(gone.pid))
    assert os.path.isdir(isolate.helper_tmp(live))  # a live helper's is kept


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


def test_a_shared_helper_serves_every_thread_one_call_at_a_time(tmp_path):
    """Threads share a SHARED helper (one TensorFlow import per run): calls take turns, the
    turn a thread waited for is counted apart (not in its call's timeout or its stage's time),
    and a crash fails the call that ran, not the one waiting, which gets a fresh helper."""
    from pipeline.core import isolate

    name = isolate.SHARED[0]
    first = call(os.getpid, helper=name, stage="model", timeout=30, log=tmp_path / "log")
    found, errors, waits = [], [], {}

    def work(i, function, *args):
        before = isolate.waited()
        try:
            found.append((i, call(function, *args, helper=name, stage="model", timeout=30, log=tmp_path / f"{i}")))
        except StageError as err:
            errors.append((i, err.reason))
        waits[i] = isolate.waited() - before

    threads = [threading.Thread(target=work, args=(0, time.sleep, 1.5))]
    threads[0].start()
    time.sleep(0.3)  # the sleep holds the helper
    threads.append(threading.Thread(target=work, args=(1, os.getpid)))
    threads[1].start()
    for t in threads:
        t.join()
    assert sorted(found) == [(0, None), (1, first)] and not errors  # one helper process for both threads
    assert waits[0] < 0.2 and 0.8 < waits[1] < 1.5, waits

    found.clear()
    threads = [threading.Thread(target=work, args=(0, time.sleep, 5)), threading.Thread(target=work, args=(1, os.getpid))]
    threads[0].start()
    time.sleep(0.3)
    threads[1].start()  # waits for its turn
    time.sleep(0.3)
    os.kill(first, signal.SIGABRT)  # the helper dies under thread 0's call
    for t in threads:
        t.join()
    crashed = [i for i, reason in errors if "SIGABRT" in reason]
    assert crashed == [0] and len(found) == 1 and found[0][0] == 1 and found[0][1] != first, (errors, found)


