"""Work that can crash runs in a helper process: a crash, a hang or an exception there is one
case's StageError, and the next call gets a fresh helper."""
import errno
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
    deadline = time.monotonic() + 120  # its start: a Python interpreter and its imports
    while not os.path.isdir(isolate.helper_tmp(helper.pid)) and time.monotonic() < deadline:
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


def _write_end_once_read(fifo, timeout: float = 120) -> int:
    """The FIFO's write end, opened once something has opened it for reading: the `cat` a
    helper runs for a call has started, so that call holds the helper. `cat` reads until this
    end is closed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as err:  # ENXIO: no reader yet
            if err.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
        time.sleep(0.01)


def test_a_shared_helper_serves_every_thread_one_call_at_a_time(tmp_path):
    """Threads share a SHARED helper (one TensorFlow import per run): calls take turns, the
    turn a thread waited for is counted apart (not in its call's timeout or its stage's time),
    and a crash fails the call that ran, not the one waiting, which gets a fresh helper."""
    import subprocess

    from pipeline.core import isolate

    name = isolate.SHARED[0]
    first = call(os.getpid, helper=name, stage="model", timeout=30, log=tmp_path / "log")
    found, errors, waits, spans = [], [], {}, {}
    queued, waiting = [], threading.Event()

    def work(i, function, *args):
        began = time.monotonic()
        before = isolate.waited()
        try:
            found.append((i, call(function, *args, helper=name, stage="model", timeout=300, log=tmp_path / f"{i}")))
        except StageError as err:
            errors.append((i, err.reason))
        waits[i] = isolate.waited() - before
        spans[i] = (began, time.monotonic())

    def found_busy(helper):
        queued.append((threading.current_thread().name, helper))
        waiting.set()

    hold = tmp_path / "hold"
    os.mkfifo(hold)
    holding = (subprocess.call, ["cat", str(hold)])  # a call that lasts until the test closes the FIFO
    isolate.waiting_hooks.append(found_busy)
    try:
        threads = [threading.Thread(target=work, args=(0, *holding), name="t0"),
                   threading.Thread(target=work, args=(1, os.getpid), name="t1")]
        threads[0].start()
        writer = _write_end_once_read(hold)  # thread 0's call runs in the helper: it has its turn
        try:
            holding_since = time.monotonic()
            threads[1].start()
            assert waiting.wait(timeout=120)  # thread 1 found the helper busy, and waits
            seen = time.monotonic()
            time.sleep(0.5)  # the helper stays busy a while longer; any length would do
            released = time.monotonic()
        finally:
            os.close(writer)  # thread 0's call ends
        for t in threads:
            t.join(timeout=300)
        assert sorted(found) == [(0, 0), (1, first)] and not errors  # one helper process for both threads
        assert queued == [("t1", name)]  # thread 0 had its turn at once
        # thread 0's wait ended before its call began; thread 1 waited from before it was seen
        # queued to after the helper was released, and no longer than its whole call
        assert waits[0] <= holding_since - spans[0][0], (waits, spans)
        assert released - seen <= waits[1] <= spans[1][1] - spans[1][0], (waits, spans, seen, released)

        found.clear()
        queued.clear()
        waiting.clear()
        threads = [threading.Thread(target=work, args=(0, *holding), name="t0"),
                   threading.Thread(target=work, args=(1, os.getpid), name="t1")]
        threads[0].start()
        writer = _write_end_once_read(hold)  # thread 0's call holds the helper
        try:
            threads[1].start()
            assert waiting.wait(timeout=120)  # thread 1 waits for its turn
            os.kill(first, signal.SIGABRT)  # the helper dies under thread 0's call
            for t in threads:
                t.join(timeout=300)
        finally:
            os.close(writer)  # the orphaned cat ends
    finally:
        isolate.waiting_hooks.remove(found_busy)
    crashed = [i for i, reason in errors if "SIGABRT" in reason]
    assert crashed == [0] and len(found) == 1 and found[0][0] == 1 and found[0][1] != first, (errors, found)
    assert queued == [("t1", name)]
