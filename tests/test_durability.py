"""A sweep killed with kill -9 loses nothing it finished; a second run on the same folder refuses."""
import json
import os
import signal
import subprocess
import time

import pytest

from helpers import DOIT, ROOT, clean_env, doit, executed, results, write_spec

pytestmark = pytest.mark.slow
GEOMETRIES = [{"category": "small", "rank": 2 if i % 2 else 1, "spatial": [12 + i] * (2 if i % 2 else 1),
               "kernel": [3] * (2 if i % 2 else 1), "stride": [1 + i % 3] * (2 if i % 2 else 1),
               "c_in": 2 ** (i % 4), "c_out": 4} for i in range(6)]
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
    """With a scheduler, only the driver is killed (its Dask workers are left to find it gone)."""
    spec = write_spec(tmp_path / "spec.json", GEOMETRIES)
    # an empty store of its own: a run that takes its work from the store ends before the kill
    env = clean_env(CONV_SWEEP_SPEC=spec, CONV_SWEEP_N=0, CONV_SWEEP_BUILD_DIR=tmp_path / "build",
                    CONV_SWEEP_CACHE_DIR=tmp_path / "store", **({"CONV_SWEEP_SCHEDULER": scheduler} if scheduler else {}))
    build = tmp_path / "build"
    proc = subprocess.Popen([*DOIT, "-n", "2", "sweep"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(_finished_tasks(build)) < 12:
            assert proc.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.2)

        second = doit("sweep", env=env, timeout=120)
        assert second.returncode != 0
        assert "another doit run" in second.stderr and str(build) in second.stderr

        finished = _finished_tasks(build)
        time.sleep(2)  # every task finished above has long been recorded
        if scheduler:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            time.sleep(1)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert 12 <= len(finished) < 4 * 5 * len(GEOMETRIES)

    rerun = doit("-n", "2", "-r", "json", "sweep", env=env)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    again = set(executed(rerun))
    assert not again & finished, sorted(again & finished)
    assert again, "the killed run cannot have finished everything"

    reference = tmp_path / "uninterrupted"
    whole = doit("-n", "2", "sweep", env={**env, "CONV_SWEEP_BUILD_DIR": str(reference)})
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert _outcome(build) == _outcome(reference)
    assert all(status == "pass" for status, _, _ in _outcome(build).values())
