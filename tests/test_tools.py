import time

import pytest

from pipeline.core.errors import ConfigError, StageError
from pipeline.core.tools import atomic_output, fixed_addresses_launch, launch_problem, logged_runs, run_tool, write_bytes


def test_run_tool_logs_command_and_output(tmp_path):
    log = tmp_path / "t.log"
    seconds = run_tool(["sh", "-c", "echo hello; echo warn >&2"], stage="x", timeout=10, log=log)
    assert seconds >= 0
    text = log.read_text()
    assert "$ sh -c 'echo hello; echo warn >&2'" in text and "hello" in text and "warn" in text
    assert "exit status 0" in text


def test_nonzero_exit_is_a_stage_error_with_the_last_stderr_line(tmp_path):
    with pytest.raises(StageError) as err:
        run_tool(["sh", "-c", "echo one >&2; echo 'error: two' >&2; exit 4"], stage="compile", timeout=10,
                 log=tmp_path / "t.log")
    assert err.value.stage == "compile"
    assert err.value.reason == "sh exit status 4: error: two"
    assert err.value.command.startswith("sh -c")


def test_crash_names_the_signal(tmp_path):
    with pytest.raises(StageError, match="killed by signal SIGSEGV"):
        run_tool(["sh", "-c", "kill -SEGV $$"], stage="compile", timeout=10, log=tmp_path / "t.log")


def test_timeout_kills_the_tool_and_its_children(tmp_path):
    start = time.monotonic()
    with pytest.raises(StageError, match="timed out after 1 s"):
        run_tool(["sh", "-c", "sleep 60 & sleep 60"], stage="compile", timeout=1, log=tmp_path / "t.log")
    assert time.monotonic() - start < 10
    assert "timed out" in (tmp_path / "t.log").read_text()


def test_missing_tool_is_a_stage_error(tmp_path):
    with pytest.raises(StageError, match="could not start"):
        run_tool([str(tmp_path / "nope")], stage="import", timeout=10, log=tmp_path / "t.log")


def test_atomic_output_keeps_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "model.vmfb"
    write_bytes(target, b"old")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.vmfb"]


# Written under a given umask, in a child process (the umask is the process's): a report, a
# module written through atomic_output, and what file_mode and both ways of reading the umask say.
UMASK_CHILD = """
import json, os, sys
from pathlib import Path
from pipeline.core.tools import atomic_output, file_mode, umask, umask_by_setting, write_text
folder = Path(sys.argv[1])
write_text(folder / "report" / "report.html", "<html></html>")
with atomic_output(folder / "case" / "model.vmfb") as tmp:
    tmp.write_bytes(b"module")
print(json.dumps({"report": os.stat(folder / "report" / "report.html").st_mode & 0o777,
                  "module": os.stat(folder / "case" / "model.vmfb").st_mode & 0o777,
                  "file_mode": file_mode(), "umask": umask(), "by_setting": umask_by_setting(),
                  "after": os.umask(0)}))
"""


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_get_the_mode_the_umask_gives(tmp_path, mask, mode):
    """As open() would, not mkstemp's 0o600: a report a CI web server or a colleague can read."""
    import json
    import subprocess
    import sys

    from helpers import ROOT

    done = subprocess.run([sys.executable, "-c", UMASK_CHILD, str(tmp_path)], cwd=ROOT, umask=mask,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said == {"report": mode, "module": mode, "file_mode": mode, "umask": mask, "by_setting": mask,
                    "after": mask}  # reading the umask left it as it was
    assert sorted(p.name for p in (tmp_path / "case").iterdir()) == ["model.vmfb"]  # no temporary file left


def test_reason_is_the_first_error_line_when_there_is_one(tmp_path):
    script = "echo 'note: a'; echo 'm.mlir:3:5: error: failed to legalize' >&2; echo 'note: b' >&2; exit 1"
    with pytest.raises(StageError) as err:
        run_tool(["sh", "-c", script], stage="compile", timeout=10, log=tmp_path / "t.log")
    assert err.value.reason == "sh exit status 1: m.mlir:3:5: error: failed to legalize"


def test_a_run_tool_s_reason_is_its_iree_status_line_not_its_call_stack(tmp_path):
    """torq-run-module when the simulator outlasts the runtime's wait: the status line says
    what failed; the last line is only where in the module it was."""
    stderr = ("/workspace/code/runtime/driver/TorqExecutable.cc:1644: INTERNAL; torq failed to wait; "
              "while invoking native function hal.device.queue.execute.indirect; while calling import; \n"
              "[ 0] bytecode module.main_graph:382 ../model.mlir:2:3\n"
              "      at ../model.mlir:2:3; invoking function 'main_graph'; `sync func @main_graph(...)`\n")
    (tmp_path / "stderr").write_text(stderr)
    script = f"echo 'Timeout waiting for interrupt'; cat {tmp_path / 'stderr'} >&2; exit 1"
    with pytest.raises(StageError) as err:
        run_tool(["sh", "-c", script], stage="run", timeout=10, log=tmp_path / "t.log")
    assert err.value.reason == ("sh exit status 1: /workspace/code/runtime/driver/TorqExecutable.cc:1644: INTERNAL; "
                                "torq failed to wait; while invoking native function hal.device.queue.execute.indirect; "
                                "while calling import;")


def test_a_launched_tool_runs_with_fixed_addresses_and_keeps_its_name(tmp_path):
    """setarch -R turns address-space randomization off for the tool it starts (its
    personality shows it), is in the logged command, and the reasons and the logged runs
    name the tool, not setarch."""
    launch = fixed_addresses_launch()
    log = tmp_path / "t.log"
    # bit 0x0040000 of /proc/self/personality: ADDR_NO_RANDOMIZE
    probe = ["sh", "-c", 'p=$(cat /proc/self/personality); [ $((0x$p & 0x40000)) -ne 0 ] || exit 7']
    run_tool(probe, stage="compile", timeout=10, log=log, launch=launch)
    with pytest.raises(StageError) as err:
        run_tool(probe, stage="compile", timeout=10, log=log)
    assert err.value.reason == "sh exit status 7"  # without it, randomization stays on
    with pytest.raises(StageError) as err:
        run_tool(["sh", "-c", "echo 'error: bad' >&2; exit 3"], stage="compile", timeout=10, log=log, launch=launch)
    assert err.value.reason == "sh exit status 3: error: bad"
    assert err.value.command.startswith(" ".join(launch) + " sh -c")
    with pytest.raises(StageError, match=r"^compile: sh timed out after 1 s"):
        run_tool(["sh", "-c", "sleep 30"], stage="compile", timeout=1, log=log, launch=launch)
    assert log.read_text().count(f"$ {' '.join(launch)} sh -c") == 3
    runs = logged_runs(log)
    assert [tool for tool, _ in runs] == ["sh"] * 4 and runs[-1][1] is None and runs[0][1] is not None


def test_a_missing_launcher_is_named_in_the_reason(tmp_path):
    """On a machine without the launcher (a cluster worker set up apart), the reason names it,
    not the tool it was to start."""
    with pytest.raises(StageError) as err:
        run_tool(["sh", "-c", "true"], stage="compile", timeout=10, log=tmp_path / "t.log",
                 launch=("no-such-launcher-here", "-R"))
    assert err.value.reason == "sh could not start: no-such-launcher-here: No such file or directory"


def test_fixed_addresses_without_setarch_is_a_config_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no setarch on it
    fixed_addresses_launch.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"^target x: fixed_addresses=True: needs setarch"):
            fixed_addresses_launch("target x: fixed_addresses")
    finally:
        fixed_addresses_launch.cache_clear()


def test_launch_problem_says_why_a_launcher_cannot_start_a_tool():
    assert launch_problem(fixed_addresses_launch()) is None
    assert launch_problem(("no-such-launcher-here", "-R")) == "needs no-such-launcher-here, which is not on PATH"
    refusing = ("sh", "-c", "echo 'not permitted' >&2; exit 1")  # as setarch where seccomp forbids it
    assert launch_problem(refusing).endswith("` fails here: not permitted")
    assert launch_problem(("sh", "-c", "exit 4")) == "`sh -c 'exit 4'` fails here: exit status 4"


# torq-compile 2.3.0 aborting on an ONNX conv followed by Clip (verbatim but the toolchain folder and
# the stack's middle frames): the reason is the assertion, without its source location, not a stack frame
ABORT = """torq-compile: iree/third_party/llvm-project/llvm/include/llvm/Support/Casting.h:656: decltype(auto) \
llvm::dyn_cast(From *) [To = mlir::arith::ConstantOp, From = mlir::Operation]: Assertion \
`detail::isPresent(Val) && "dyn_cast on a non-existent value"' failed.
Please report issues to https://github.com/iree-org/iree/issues and include the crash backtrace.
Stack dump:
0.\tProgram arguments: /t/wheels/torq/_compiler_libs/torq-compile ../model.mlir -o m.vmfb
 #0 0x00007fffee239948 llvm::sys::PrintStackTrace(llvm::raw_ostream&, int) (/t/libIREECompiler.so+0x7439948)
#67 0x00007ffff7fb9fa5 (/t/wheels/torq/_compiler_libs/torq-compile+0x1fa5)
"""


def _reason_of(tmp_path, stderr: str, crash: str = "ABRT") -> str:
    (tmp_path / "err.txt").write_text(stderr)
    with pytest.raises(StageError) as err:
        run_tool(["sh", "-c", f"cat {tmp_path / 'err.txt'} >&2; kill -{crash} $$"], stage="compile", timeout=10,
                 log=tmp_path / "t.log")
    return err.value.reason


def test_a_crash_is_named_by_its_assertion_not_by_its_stack(tmp_path):
    assert _reason_of(tmp_path, ABORT) == (
        "sh killed by signal SIGABRT: decltype(auto) llvm::dyn_cast(From *) [To = mlir::arith::ConstantOp, "
        "From = mlir::Operation]: Assertion `detail::isPresent(Val) && \"dyn_cast on a non-existent value\"' failed.")
    # a diagnostic printed before the crash says more than the assertion it led to
    assert _reason_of(tmp_path, "Error: mismatching iterations in DEDR and CEDW\n  DEDR: 1\n" + ABORT) == \
        "sh killed by signal SIGABRT: Error: mismatching iterations in DEDR and CEDW"
    # LLVM's unreachable, with its message (the line before it)
    assert _reason_of(tmp_path, "unexpected element type\nUNREACHABLE executed at /src/Lower.cpp:88!\n"
                      "Stack dump:\n #0 0x1 f (/t/lib.so+0x1)\n") == \
        "sh killed by signal SIGABRT: unexpected element type: UNREACHABLE executed"
    # no words of its own before the stack: the signal alone, never a stack frame
    assert _reason_of(tmp_path, "Stack dump:\n #0 0x1 f (/t/lib.so+0x1)\n", "SEGV") == "sh killed by signal SIGSEGV"
