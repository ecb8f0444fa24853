"""Running external tools and writing files so that nothing half-written is trusted.

Every tool runs in a subprocess with a timeout; its command line, exit status and
output go to a log file in the case folder.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from pipeline.core.errors import ConfigError, StageError

FIXED_ADDRESSES = "setarch"  # starts a tool with address-space randomization off: setarch <machine> -R


@lru_cache(maxsize=None)
def fixed_addresses_launch(field: str = "fixed_addresses") -> tuple[str, ...]:
    """The command prefix that starts a tool with address-space randomization off, checked
    once to work here: a ConfigError (before any work) where setarch is missing or refused
    (in a container whose seccomp profile forbids the personality call, for one)."""
    import platform

    launch = (FIXED_ADDRESSES, platform.machine(), "-R")
    problem = launch_problem(launch)
    if problem:
        raise ConfigError(field, True, problem)
    return launch


def launch_problem(launch: tuple[str, ...]) -> str | None:
    """Why a tool cannot be started behind the command prefix `launch` here, or None when it
    can (the prefix starts `true`)."""
    import shutil

    if shutil.which(launch[0]) is None:
        return f"needs {launch[0]}{' (util-linux)' if launch[0] == FIXED_ADDRESSES else ''}, which is not on PATH"
    proc = subprocess.run([*launch, "true"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return (f"`{shlex.join(launch)}` fails here: "
                f"{(proc.stderr or proc.stdout).strip() or f'exit status {proc.returncode}'}")
    return None


_UMASK_LOCK = threading.Lock()


def file_mode() -> int:
    """The mode open() gives a new file here: 0o666 less the process's umask."""
    return 0o666 & ~umask()


def umask() -> int:
    """The process's umask, read from /proc/self/status: nothing changes that another thread
    could see. Where the kernel does not show it, umask_by_setting()."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return umask_by_setting()


def umask_by_setting() -> int:
    """The process's umask, set and restored under a lock, for that moment as 0o077: a file
    another thread creates then is private, never more open than it should be."""
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def temp_beside(path: Path, suffix: str) -> str:
    """A new empty file in `path`'s folder (mkstemp: a name no one else has) with the mode open()
    would give `path` (mkstemp's own is 0o600: unreadable to a web server or a colleague)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


@contextmanager
def atomic_output(path: Path, suffix: str | None = None):
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds.
    The file gets the mode the umask gives, as open() would."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path, suffix or path.suffix or ".tmp")
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(path: Path, data: bytes) -> None:
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


# signals a tool raises on itself when it crashes (an assertion, a bad access): the same input crashes it again
_CRASHES = {signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


# an IREE runtime status: `<source>:<line>: <CODE>; <message>; <context>...`
_IREE_STATUS = re.compile(r"^\S+:\d+: [A-Z_]+; ")
# a crash's own words, without where in the tool's source it was raised: a failed assertion
# (`<tool>: <file>:<line>: <function>: Assertion `<expr>' failed.`), or LLVM's unreachable, whose
# message is the line before its `UNREACHABLE executed at <file>:<line>!`
_ASSERTION = re.compile(r"^(?:\S+: )?\S+:\d+: (.*\bAssertion\b.*\bfailed\.?)$")
# where a crashing LLVM-based tool's own words end and its stack dump (or the request to
# report it) begins
_CRASH_TAIL = re.compile(r"^(?:Stack dump:|PLEASE submit a bug report|Please report issues to)")


def _diagnostic(text: str) -> str:
    """The line that says what went wrong: the first "error:" line (a compiler diagnostic),
    else a crash's failed assertion or unreachable (without its source location), else the
    first IREE status line (a run tool's failure: its code and message, where the last line is
    only the call stack's), else the last line before a crash's stack dump."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tail = next((i for i, line in enumerate(lines) if _CRASH_TAIL.match(line)), len(lines))
    lines = lines[:tail]
    errors = [line for line in lines if "error:" in line.lower()]
    crashes = [m.group(1) for m in map(_ASSERTION.match, lines) if m] + \
        [": ".join([*lines[i - 1:i], "UNREACHABLE executed"]) for i, line in enumerate(lines)
         if line.startswith("UNREACHABLE executed")]
    status = [line for line in lines if _IREE_STATUS.match(line)]
    found = errors or crashes or status
    return (found[0] if found else (lines or [""])[-1])[:300]


def run_tool(argv: list[str], *, stage: str, timeout: float, log: Path, env: dict | None = None,
             cwd: Path | None = None, timeout_note: str | None = None, launch: tuple[str, ...] = ()) -> float:
    """Run argv (in `cwd`, if given); append its command line and output to `log`; return its
    wall time in seconds. `launch` (fixed_addresses_launch) goes before argv: it is in the
    logged command, and the reasons name argv's tool.

    Raises StageError (with a one-line reason) on a non-zero exit, a signal or a timeout; a
    timeout (StageError.cut) has the reason `<tool> timed out after <limit> s`, followed by
    `timeout_note` (why the limit was what it was), if given.
    """
    return run_tool_output(argv, stage=stage, timeout=timeout, log=log, env=env, cwd=cwd,
                           timeout_note=timeout_note, launch=launch)[0]


def run_tool_output(argv: list[str], *, stage: str, timeout: float, log: Path,
                    env: dict | None = None, cwd: Path | None = None,
                    timeout_note: str | None = None, launch: tuple[str, ...] = ()) -> tuple[float, str]:
    """run_tool, also returning what the tool printed on stdout."""
    tool = Path(str(argv[0])).name
    argv = [str(a) for a in (*launch, *argv)]
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        # A new session, so that a timeout kills the tool and every process it started: a
        # grandchild left holding the output pipes would otherwise block the read for ever.
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    except OSError as err:
        _append_log(log, argv, f"could not start: {err}", b"", b"")
        via = f"{launch[0]}: " if launch else ""  # the launcher is what failed to start
        raise StageError(stage, f"{tool} could not start: {via}{err.strerror}", argv, str(log)) from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        said = f"timed out after {timeout:g} s" + (f": {timeout_note}" if timeout_note else "")
        _append_log(log, argv, said, stdout, stderr)
        raise StageError(stage, f"{tool} {said}", argv, str(log), cut=True, limit=timeout) from None
    finally:
        _kill_group(proc)  # nothing the tool started outlives it
    elapsed = time.monotonic() - start
    _append_log(log, argv, describe_exit(proc.returncode) + f" after {elapsed:.2f} s", stdout, stderr)
    if proc.returncode != 0:
        detail = _diagnostic(stderr.decode(errors="replace")) or _diagnostic(stdout.decode(errors="replace"))
        reason = f"{tool} {describe_exit(proc.returncode)}"
        raise StageError(stage, f"{reason}: {detail}" if detail else reason, argv, str(log), seconds=elapsed,
                         deterministic=proc.returncode > 0 or -proc.returncode in _CRASHES)
    return elapsed, stdout.decode(errors="replace")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _append_log(log: Path, argv: list[str], status: str, stdout, stderr) -> None:
    with open(log, "a") as f:
        f.write(f"$ {shlex.join(argv)}\n# {status}\n")
        for name, data in (("stdout", stdout), ("stderr", stderr)):
            text = (data or b"").decode(errors="replace") if isinstance(data, (bytes, type(None))) else data
            if text.strip():
                f.write(f"--- {name} ---\n{text.rstrip()}\n")
        f.write("\n")


_STATUS = re.compile(r"^# (exit status -?\d+|killed by signal \w+) after ([\d.]+) s$")


def logged_runs(log: Path) -> list[tuple[str, float | None]]:
    """(tool name, wall seconds) of every invocation a log records; seconds is None where the
    tool did not end by itself (timed out, could not start)."""
    try:
        lines = Path(log).read_text(errors="replace").splitlines()
    except OSError:
        return []
    runs = []
    for command, status in zip(lines, lines[1:]):
        if command.startswith("$ ") and status.startswith("# "):
            words = command[2:].split(maxsplit=3)
            if words[:1] == [FIXED_ADDRESSES] and len(words) == 4 and words[2] == "-R":
                words = words[3].split(maxsplit=1)  # the tool it launched
            match = _STATUS.match(status)
            runs.append((Path(words[0]).name if words else "", float(match.group(2)) if match else None))
    return runs
