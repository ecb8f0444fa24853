"""A wrapper's identity covers what it starts (pipeline/core/fingerprint.py, launched): a
compiler given as a script that execs another script that execs the real compiler is compiled
with again, in this build folder and in a fresh one on the same store, once the inner script
is replaced by one that miscompiles; a script whose exec target cannot be read is rebuilt every
run, with one warning. One small case (onnx f32) on llvm-cpu, with the real iree-compile."""
import sys

import pytest

from helpers import by_stage, clean_env, doit, executed, real_compiler, results, write_spec

pytestmark = pytest.mark.slow
TINY = {"category": "tiny", "rank": 2, "spatial": [8, 8], "kernel": [3, 3], "stride": [1, 1], "c_in": 2, "c_out": 2}
ONE_CASE = "verify:conv_onnx_f32*"
# Compiles the imported ONNX model (its first argument) with every weight's sign flipped: the
# weights are an f32 dense_resource blob after its 4-byte alignment header, little-endian, so
# the sign is the top bit of each value's last byte. Then runs the real compiler (argv[1]).
FLIP = r"""import os, re, subprocess, sys, tempfile
real, args = sys.argv[1], sys.argv[2:]
text = open(args[0]).read()
def negated(m):
    values = [m.group(2)[i:i + 8] for i in range(0, len(m.group(2)), 8)]
    return m.group(1) + "".join(v[:6] + format(int(v[6:], 16) ^ 0x80, "02X") for v in values) + '"'
flipped, count = re.subn(r'(weight: "0x08000000)([0-9A-F]+)"', negated, text)
assert count == 1, "no f32 weight blob in " + args[0]
fd, made = tempfile.mkstemp(suffix=".mlir", dir=os.path.dirname(os.path.abspath(args[0])))
with os.fdopen(fd, "w") as f:
    f.write(flipped)
status = subprocess.run([real, made, *args[1:]]).returncode
os.unlink(made)
sys.exit(status)
"""
WARNING = "rebuilt every run"


def _script(path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _env(tmp_path, build: str, compiler: str, **knobs):
    return clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [TINY]), CONV_SWEEP_N=0,
                     CONV_SWEEP_BUILD_DIR=tmp_path / build, CONV_SWEEP_IREE_COMPILE=compiler,
                     CONV_SWEEP_CACHE_DIR=tmp_path / "store", **knobs)


def test_an_inner_script_replaced_by_a_miscompiling_one_fails_the_case(tmp_path):
    w2 = tmp_path / "w2.sh"
    _script(w2, f'exec {real_compiler()} "$@"\n')
    w1 = _script(tmp_path / "w1.sh", f'exec {w2} "$@"\n')
    first = doit(ONE_CASE, env=_env(tmp_path, "a", w1), timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert WARNING not in first.stdout + first.stderr  # followed to the end: nothing to warn of
    [(case, found)] = results(tmp_path / "a").items()
    assert found["status"] == "pass", found
    good = (tmp_path / "a" / "cases" / case / "llvm-cpu" / "model.vmfb").read_bytes()

    (tmp_path / "flip.py").write_text(FLIP)
    _script(w2, f'exec {sys.executable} {tmp_path / "flip.py"} {real_compiler()} "$@"\n')  # w1.sh is unchanged
    again = doit("-r", "json", ONE_CASE, env=_env(tmp_path, "a", w1), timeout=600)
    assert again.returncode != 0
    assert by_stage(executed(again))["vmfb"] == 1  # compiled again, not taken as up to date
    assert WARNING not in again.stdout + again.stderr
    found = results(tmp_path / "a")[case]
    assert (found["status"], found["stage"]) == ("fail", "verify") and "outside tolerance" in found["reason"], found

    fresh = doit("-r", "json", ONE_CASE, env=_env(tmp_path, "b", w1), timeout=600)  # the same store
    assert fresh.returncode != 0
    assert by_stage(executed(fresh))["vmfb"] == 1
    found = results(tmp_path / "b")[case]
    assert (found["status"], found["stage"]) == ("fail", "verify"), found
    module = f"cases/{case}/llvm-cpu/model.vmfb"  # the miscompiled one, stored under its new key
    assert (tmp_path / "b" / module).read_bytes() == (tmp_path / "a" / module).read_bytes() != good


def test_a_script_whose_exec_cannot_be_read_is_rebuilt_every_run_with_one_warning(tmp_path):
    unreadable = _script(tmp_path / "via-variable.sh", 'exec "$REAL_COMPILER" "$@"\n')
    env = _env(tmp_path, "a", unreadable, REAL_COMPILER=real_compiler())
    for _ in range(2):
        run = doit("-r", "json", ONE_CASE, env=env, timeout=600)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert by_stage(executed(run))["vmfb"] == 1  # compiled, the second run too
        said = run.stderr + run.stdout  # doit's json reporter keeps what a run printed in its report
        assert said.count("via-variable.sh line 2") == 1 and said.count(WARNING) == 1, said
    # naming the files that identify it makes it a tool like any other: up to date the next time
    named = _env(tmp_path, "a", unreadable, REAL_COMPILER=real_compiler(), CONV_SWEEP_TOOL_FILES=real_compiler())
    assert doit(ONE_CASE, env=named, timeout=600).returncode == 0
    quiet = doit("-r", "json", ONE_CASE, env=named, timeout=600)
    assert quiet.returncode == 0 and by_stage(executed(quiet))["vmfb"] == 0
    assert WARNING not in quiet.stderr + quiet.stdout
