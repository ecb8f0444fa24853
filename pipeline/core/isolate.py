"""Python work that can crash (TensorFlow's converter, the TFLite interpreter, torch,
onnxruntime) runs in a helper process, never in the task runner: a crash there fails one
call, never the run.

Each runner thread (doit's thread runner, a Dask worker's thread) keeps one helper of each
kind (`python -m pipeline.core.isolate`), so the libraries are imported once, not once per
task; the model builders (SHARED: TensorFlow's and torch's, whose imports cost seconds) are
one per process, shared by its threads one call at a time (a local Dask cluster's driver
builds the models itself: pipeline/engine/cluster.py). A call that outlives its timeout
kills the helper; a helper that dies (a segfault, an OOM kill) fails that call with the
signal; either way the next call starts a fresh helper. While a call runs, the helper's
stdout and stderr go to the case's log (with a Python traceback on a fatal signal).
"""
from __future__ import annotations

import os
import pickle
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager

from pipeline.core.errors import StageError
from pipeline.core.tools import describe_exit

_HEADER = struct.Struct("<Q")
# The module state below, and why it stays: the helpers are child processes of this process (a
# doit run's, or a Dask worker's), kept across calls so that their imports are paid once; each
# is owned by its thread, or shared by the process's threads under its lock, and ends with the
# process (or when a call kills it). Nothing here is configuration or a run's knowledge.
_helpers: dict[tuple, subprocess.Popen] = {}  # _key(helper name) -> helper process
_warm: dict[tuple[int, str], set[str]] = {}  # same key -> warm-up functions that helper has run
# Helpers shared by every thread of a process (one call at a time, under their lock): those
# whose one-off imports cost more than waiting for a busy one does (TensorFlow's and torch's
# imports take seconds, a build a fraction of one: docs/measurements.md). Time spent waiting for
# one is not the call's.
SHARED = ("model-tflite", "model-onnx")
_locks: dict[tuple, threading.Lock] = {}
_locks_lock = threading.Lock()
# Called with the helper's name by a thread that finds a shared helper busy, just before it waits
# for its turn: how an observer (a test) knows a thread is queued. None are set in a run.
waiting_hooks: list = []
_waits = threading.local()
STARTUP_TIMEOUT = 600.0  # seconds for a helper's one-off imports (TensorFlow, torch); not a tool run


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream):
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def _helper(name: str) -> subprocess.Popen:
    """This worker's helper of that name (one per kind of work: native libraries that each
    bundle their own LLVM/MLIR, such as TensorFlow's and IREE's, stay in separate processes)."""
    key = _key(name)
    proc = _helpers.get(key)
    if proc is None or proc.poll() is not None:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.core.isolate"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        _helpers[key] = proc
        _warm[key] = set()
    return proc


def _key(name: str) -> tuple:
    """Helpers belong to one worker process and, where it runs tasks in threads (doit's thread
    runner, a Dask worker with several threads), to one thread, unless SHARED: a helper serves
    one call at a time."""
    return (os.getpid(), name) if name in SHARED else (os.getpid(), threading.get_ident(), name)


@contextmanager
def _turn(name: str):
    """Hold a shared helper for one call (or warm-up); the seconds waited for it are counted
    apart (waited()), so that neither a call's timeout nor a stage's duration includes them."""
    if name not in SHARED:
        yield
        return
    with _locks_lock:
        lock = _locks.setdefault(_key(name), threading.Lock())
    start = time.monotonic()
    if not lock.acquire(blocking=False):
        for hook in waiting_hooks:
            hook(name)
        lock.acquire()
    try:
        _waits.seconds = waited() + time.monotonic() - start
        yield
    finally:
        lock.release()


def waited() -> float:
    """Seconds this thread has waited, in all, for shared helpers that were busy."""
    return getattr(_waits, "seconds", 0.0)


def helpers_cpu() -> float:
    """CPU seconds of this process's live helpers and of their finished children (Linux: from
    /proc): a helper is not waited for until it ends, so RUSAGE_CHILDREN leaves it out."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for proc in list(_helpers.values()):
        try:
            with open(f"/proc/{proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone, or not Linux
            continue
        total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return total / tick


def _discard(name: str, proc: subprocess.Popen) -> None:
    _helpers.pop(_key(name), None)
    _end(proc)


def _end(proc: subprocess.Popen) -> None:
    """Kill a helper, and remove the temporary folder it could not remove itself."""
    proc.kill()
    proc.wait()
    shutil.rmtree(helper_tmp(proc.pid), ignore_errors=True)


_TMP_PREFIX = "conv-sweep-helper-"


def helper_tmp(pid: int) -> str:
    """A helper's own temporary folder (TMPDIR): what its libraries leave there (TensorFlow's
    autograph writes a module per traced function) goes when the helper does."""
    return os.path.join(tempfile.gettempdir(), f"{_TMP_PREFIX}{pid}")


def _name(function) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def warm(warm_up, *, helper: str, stage: str, log) -> None:
    """Run `warm_up` (a function doing one-off imports) once per helper, under STARTUP_TIMEOUT,
    so that a call's own timeout and duration measure the work itself."""
    with _turn(helper):
        _helper(helper)
        if _name(warm_up) not in _warm[_key(helper)]:
            _call(helper, warm_up, (), {}, stage, STARTUP_TIMEOUT, log)
            _warm[_key(helper)].add(_name(warm_up))


def call(function, *args, helper: str, stage: str, timeout: float, log, **kwargs):
    """Run function(*args, **kwargs) in this worker's helper `helper` and return its value. The
    function goes to the helper by its qualified name (pickle): a module-level function, whose
    module imports its heavy libraries (TensorFlow, torch) inside the function, not at the top.

    Raises StageError on a timeout, a crash of the helper, or an exception a library raised in
    the function; HarnessError on an exception raised by this package's own code.
    """
    with _turn(helper):
        return _call(helper, function, args, kwargs, stage, timeout, log)


def _call(helper: str, function, args, kwargs, stage: str, timeout: float, log):
    what = function.__name__
    proc = _helper(helper)
    try:
        _send(proc.stdin, (function, args, kwargs, str(log)))
    except BrokenPipeError:
        _discard(helper, proc)
        raise StageError(stage, f"{what}: helper process died before the call", None, str(log)) from None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        _discard(helper, proc)
        raise StageError(stage, f"{what} timed out after {timeout:g} s", None, str(log))
    reply = _receive(proc.stdout)
    if reply is None:
        returncode = proc.wait()
        _discard(helper, proc)  # it crashed: its folder is left to remove
        raise StageError(stage, f"{what} crashed the helper process ({describe_exit(returncode)})",
                         None, str(log))
    ok, value = reply
    if ok:
        return value
    kind, *detail = value
    if kind == "stage":
        raise StageError(*detail)
    name, message, ours = detail
    text = f"{what}: {name}: {message}".splitlines()[0][:300]
    if ours:  # raised by this package's own code: a harness error, never a tool's failure
        raise HarnessError(text)
    raise StageError(stage, text, None, str(log))


class HarnessError(RuntimeError):
    """An exception raised in a helper by this package's own code (not by a library it called)."""


def _raised_here(err: BaseException) -> bool:
    """Whether the innermost frame of the exception's traceback is this package's code."""
    import os.path

    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # pipeline/
    return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(package + os.sep)


def _remove_stale() -> None:
    """Remove the folders of helpers that are gone without removing theirs: killed with their
    whole process tree (SIGKILL to a run's process group), nobody was left to do it."""
    for name in os.listdir(tempfile.gettempdir()):
        pid = name[len(_TMP_PREFIX):]
        if not name.startswith(_TMP_PREFIX) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(helper_tmp(int(pid)), ignore_errors=True)
        except OSError:  # alive (another user's): left alone
            pass


def _serve() -> None:
    _remove_stale()
    folder = helper_tmp(os.getpid())
    os.makedirs(folder, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = folder  # its tools' too
    try:
        _serve_requests()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _serve_requests() -> None:
    import faulthandler

    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    quiet = os.dup(2)
    while (request := _receive(requests)) is not None:
        function, args, kwargs, log = request
        log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        faulthandler.enable(file=os.fdopen(os.dup(log_fd), "w"), all_threads=False)
        try:
            reply = (True, function(*args, **kwargs))
        except StageError as err:
            reply = (False, ("stage", err.stage, err.reason, err.argv, err.log))
        except Exception as err:  # reported to the caller as this case's failure
            traceback.print_exc()
            reply = (False, ("exception", type(err).__name__, str(err), _raised_here(err)))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(null, 1)
            os.dup2(quiet, 2)
            os.close(log_fd)
        _send(replies, reply)


if __name__ == "__main__":
    _serve()
