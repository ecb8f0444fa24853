"""A sweep killed with kill -9 loses nothing it finished; a second run on the same folder refuses."""
import json
import os
import signal
import subprocess
import time

import pytest

from helpers import DOIT, ROOT, clean_env, doit, executed, real_compiler, results, write_spec

pytestmark = pytest.mark.slow
GEOMETRIES = [{"category": "small", "rank": 2 if i % 2 else 1, "spatial": [12 + i] * (2 if i % 2 else 1),
               "kernel": [3] * (2 if i % 2 else 1), "stride": [1 + i % 3] * (2 if i % 2 else 1),
               "c_in": 2 ** (i % 4), "c_out": 4} for i in range(6)]
SLOTS = 2  # doit -n
FREE = 4  # compiles that run before the rest are held
# While {hold} exists, the first FREE compiles run and every later one takes its ticket (a folder
# in {tickets}: made atomically) and waits until the file is gone, then fails: the run it was part
# of has been killed (its tools run in sessions of their own, which the kill does not reach).
# Once SLOTS compiles wait, nothing runs: every task that finished has been recorded, and most
# of the sweep is still to do.
HOLDING_COMPILER = """#!/bin/sh
case " $* " in *" -o "*)
  if [ -e "{hold}" ]; then
    n=0
    while ! mkdir "{tickets}/$n" 2>/dev/null; do n=$((n + 1)); done
    if [ "$n" -ge {free} ]; then
      while [ -e "{hold}" ]; do sleep 0.05; done
      exit 1
    fi
  fi;;
esac
exec {real} "$@"
"""
TARGETS = {"model": ("model.tflite", "model.onnx"), "mlir": ("model.mlir",), "vmfb": ("llvm-cpu/model.vmfb",),
           "verify": ("llvm-cpu/result.json",)}


def _finished_tasks(build):
    done = set()
    for case_dir in (build / "cases").iterdir() if (build / "cases").is_dir() else ():
        for stage, names in TARGETS.items():
            if any((case_dir / name).exists() for name in names):
                done.add(f"{stage}:{case_dir.name}" + ("@llvm-cpu" if stage in ("vmfb", "verify") else ""))
    return done


def _outcome(build):
    """What a run produced: per case its status, metrics and output bytes."""
    out = {}
    for name, result in results(build).items():
        arrays = tuple((build / "cases" / name / f).read_bytes()
                       for f in ("input.npy", "llvm-cpu/expected.npy", "llvm-cpu/actual.npy"))
        out[name] = (result["status"], json.dumps(result["metrics"], sort_keys=True), arrays)
    return out


@pytest.mark.parametrize("scheduler", [None, "local:2"])
def test_kill_9_keeps_finished_tasks_and_a_second_run_refuses(tmp_path, scheduler):
    """Killed while every slot waits in a compile, with most of the sweep still to do. With a
    scheduler, the driver is killed first, then what is left of its process group (its Dask
    workers)."""
    spec = write_spec(tmp_path / "spec.json", GEOMETRIES)
    hold, tickets = tmp_path / "hold", tmp_path / "tickets"
    tickets.mkdir()
    hold.touch()
    compiler = tmp_path / "holding-iree-compile"
    compiler.write_text(HOLDING_COMPILER.format(hold=hold, tickets=tickets, free=FREE, real=real_compiler()))
    compiler.chmod(0o755)
    # an empty store of its own: a run that takes its work from the store ends before the kill;
    # the held compiles' limit is the budget (not the few seconds their cost predicts), which
    # they never reach before the kill
    env = clean_env(CONV_SWEEP_SPEC=spec, CONV_SWEEP_N=0, CONV_SWEEP_BUILD_DIR=tmp_path / "build",
                    CONV_SWEEP_CACHE_DIR=tmp_path / "store", CONV_SWEEP_IREE_COMPILE=compiler,
                    CONV_SWEEP_TIMEOUTS="fixed", CONV_SWEEP_BUDGET="compile=3000",
                    **({"CONV_SWEEP_SCHEDULER": scheduler} if scheduler else {}))
    build = tmp_path / "build"
    proc = subprocess.Popen([*DOIT, "-n", str(SLOTS), "sweep"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 1800
        while len(list(tickets.iterdir())) < FREE + SLOTS:  # until every slot waits in a held compile
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "the sweep never held a compile in every slot"
            time.sleep(0.1)

        second = doit("sweep", env=env, timeout=600)
        assert second.returncode != 0
        assert "another doit run" in second.stderr and str(build) in second.stderr

        finished = _finished_tasks(build)
        if scheduler:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        hold.unlink(missing_ok=True)  # the held compiles end; every later compile runs
    assert proc.returncode == -signal.SIGKILL  # killed, not ended
    assert len(list(tickets.iterdir())) == FREE + SLOTS  # nothing ran between the stall and the kill
    assert 3 * FREE <= len(finished) < 4 * 5 * len(GEOMETRIES)  # each free compile, its model and its mlir

    rerun = doit("-n", str(SLOTS), "-r", "json", "sweep", env=env, timeout=1800)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    again = set(executed(rerun))
    assert not again & finished, sorted(again & finished)
    assert again, "the killed run cannot have finished everything"

    reference = tmp_path / "uninterrupted"
    whole = doit("-n", str(SLOTS), "sweep", env={**env, "CONV_SWEEP_BUILD_DIR": str(reference)}, timeout=1800)
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert _outcome(build) == _outcome(reference)
    assert all(status == "pass" for status, _, _ in _outcome(build).values())
