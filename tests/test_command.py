"""The run command (pipeline/engine/command.py) through doit, as users type it: the build
folder's lock refuses a second run and lets the tasks that work in folders of their own
through; `doit clean` expands a case's name to its tasks on every target; `--retry-timeouts`
reaches the run's Config before any task; `doit toolchain` is a command that needs no sweep
configuration beyond the targets, and refuses a misspelt knob."""
import fcntl
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, clean_env, doit, write_spec
from test_dodo import IDS, SMALL


def _env(tmp_path, **more):
    return clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", SMALL), CONV_SWEEP_N=0,
                     CONV_SWEEP_BUILD_DIR=tmp_path / "build", **more)


def test_a_held_build_folder_refuses_what_would_write_it(tmp_path):
    env = _env(tmp_path)
    lock = tmp_path / "build" / ".doit.db.lock"
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, b"pid 12345")
    try:
        for command in (["-n", "2", "sweep"], ["clean"], ["forget", "verify"], ["report"]):
            run = doit(*command, env=env, timeout=120)
            assert run.returncode != 0, command
            assert "another doit run (pid 12345) is using" in run.stderr, (command, run.stderr[-500:])
        listed = doit("list", "--all", env=env, timeout=120)  # reading needs no lock
        assert listed.returncode == 0 and "verify:" in listed.stdout
        shrink = doit("shrink", "conv_nothing", env=env, timeout=120)  # works in a folder of its own
        assert "another doit run" not in shrink.stderr and "is not a case of this run" in shrink.stdout + shrink.stderr
    finally:
        os.close(fd)


@pytest.mark.slow
def test_clean_expands_a_case_name_to_its_tasks_on_every_target(tmp_path):
    env = _env(tmp_path, CONV_SWEEP_TARGET="llvm-cpu,vmvx")
    case = f"conv_onnx_f32_{IDS[1]}"
    assert doit(f"verify:{case}", env=env).returncode == 0
    folders = [tmp_path / "build" / "cases" / case / t for t in ("llvm-cpu", "vmvx")]
    assert all((f / "result.json").is_file() for f in folders)
    cleaned = doit("clean", f"verify:{case}", env=env)
    assert cleaned.returncode == 0, cleaned.stderr[-2000:]
    assert not any(f.exists() for f in folders)
    again = doit("-r", "json", f"verify:{case}", env=env)
    started = {t["name"] for t in json.loads(again.stdout)["tasks"] if t["started"]}
    assert {f"verify:{case}@llvm-cpu", f"verify:{case}@vmvx"} <= started


def test_clean_removes_the_triage_folders_made_from_the_cases(tmp_path):
    env = _env(tmp_path)
    build = tmp_path / "build"
    made = [build / name / "x" for name in ("cases", "report", "shrink", "bugreports", "compare", "bisect", "hunt")]
    for path in made:
        path.parent.mkdir(parents=True)
        path.write_text("x")
    cleaned = doit("clean", env=env)
    assert cleaned.returncode == 0, cleaned.stderr[-2000:]
    assert not [p.parent.name for p in made if p.parent.exists()]


def test_toolchain_is_a_command_that_reads_no_sweep_configuration(tmp_path):
    # a bad sweep knob stops every task command, but not the toolchain's (it only reads its folder)
    env = clean_env(CONV_SWEEP_N="ten", CONV_SWEEP_TOOLCHAIN_DIR=tmp_path / "a-file" / "toolchain")
    (tmp_path / "a-file").write_text("")
    listed = doit("list", env=env, timeout=120)
    assert listed.returncode != 0 and "bad configuration, nothing was run: CONV_SWEEP_N=" in listed.stderr
    run = doit("toolchain", env=env, timeout=120)
    assert "CONV_SWEEP_N" not in run.stderr
    assert run.returncode != 0 and "CONV_SWEEP_TOOLCHAIN_DIR" in run.stdout + run.stderr
    assert "toolchain" in doit("help", env=env, timeout=120).stdout


def test_toolchain_refuses_a_misspelt_knob_naming_it(tmp_path):
    env = clean_env(CONV_SWEEP_TARGT="torq", CONV_SWEEP_TOOLCHAIN_DIR=tmp_path / "toolchain")
    run = doit("toolchain", env=env, timeout=120)
    assert run.returncode == 3
    assert run.stderr == ("conv-sweep: bad configuration, nothing was installed: CONV_SWEEP_TARGT='torq': is not a "
                          "knob; did you mean CONV_SWEEP_TARGET? (docs/knobs.md lists them)\n")
    assert not (tmp_path / "toolchain").exists()


def test_retry_timeouts_reaches_the_run_s_config_before_any_task(tmp_path):
    probe = ("import sys; from doit.doit_cmd import DoitMain; rc = DoitMain().run(sys.argv[1:]); "
             "run = sys.modules['dodo'].RUN; print('RETRY', run.cfg.retry_timeouts, run.verbosity); sys.exit(rc)")
    for argv, said in ((["refused"], "RETRY False 0"), (["--retry-timeouts", "-v", "2", "refused"], "RETRY True 2")):
        done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, env=_env(tmp_path), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert said in done.stdout
