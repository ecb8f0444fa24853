"""The test suite itself: a bad CONV_SWEEP_* variable in the shell leaves the default run whole
(the doit runs of the tests never see it), and the sweep's cases, which read it, fail naming it."""
import re
import subprocess
import sys

from helpers import ROOT, clean_env

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]


def _pytest(*args, env: dict, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([*PYTEST, "--basetemp", str(tmp_path / "t"), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_misspelt_knob_in_the_shell_leaves_the_default_run_collecting_and_fails_only_the_cases(tmp_path):
    shell = {k: v for k, v in clean_env().items() if not k.startswith("PYTEST_")}
    shell["CONV_SWEEP_TARGT"] = "torq"  # CONV_SWEEP_TARGET, misspelt
    assert "CONV_SWEEP_TARGT" not in clean_env(CONV_SWEEP_N=0)  # the tests' doit runs never see it
    collected = _pytest("--collect-only", "-q", env=shell, tmp_path=tmp_path)
    last = collected.stdout.strip().splitlines()[-1]
    assert collected.returncode == 0 and re.fullmatch(r"(\d+)/\d+ tests collected \(\d+ deselected\) in .*", last), \
        collected.stdout[-3000:] + collected.stderr[-3000:]
    assert int(last.split("/")[0]) > 500 and "test_suite.py::test_a_misspelt_knob" in collected.stdout
    front = _pytest("tests/test_conv_sweep.py", "-m", "conv_sweep", env=shell, tmp_path=tmp_path)
    said = "bad configuration, no case was run: CONV_SWEEP_TARGT='torq': is not a knob; did you mean CONV_SWEEP_TARGET?"
    for test in ("compile", "numeric"):
        assert re.search(rf"ERROR at setup of test_conv_sweep_{test}\[bad-configuration\] _+\n{re.escape(said)}",
                         front.stdout), front.stdout[-3000:]
    assert front.returncode == 1 and re.search(r"^=+ 1 warning, 2 errors in ", front.stdout, re.M), front.stdout[-3000:]
