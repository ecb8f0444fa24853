"""The sweep on a real Dask cluster, through `doit`: a local:2 cluster gives the same statuses
and the same .vmfb bytes as doit's own workers, with the build folder shared and with the
artifacts shipped as bytes; reruns run nothing; misbehaving compilers (one of them killing its
Dask worker) fail their own cases only; a scheduler and workers started as the README says
run the sweep, and a worker with other project code, or one that cannot start the compiler
the way its target asks, is refused."""
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipeline.engine import cluster
from helpers import ROOT, clean_env, doit, executed, real_compiler, results, tools_tmpdir, write_spec, write_wrapper
from test_dodo import SMALL, swept  # noqa: F401  (swept: the reference, the same cases under doit -n 2)



@pytest.fixture(autouse=True)
def _dask_scratch_in_the_session_tmp():
    """A cluster started in this process keeps its scratch space in the session's TMPDIR, as the
    tools the tests start do (helpers.clean_env), not in /tmp."""
    import dask

    with dask.config.set({"temporary-directory": str(tools_tmpdir())}):
        yield


def _vmfbs(build: Path) -> dict[str, bytes]:
    return {p.parent.parent.name: p.read_bytes() for p in sorted(build.glob("cases/*/llvm-cpu/model.vmfb"))}


@pytest.mark.slow
@pytest.mark.parametrize("artifacts, said", [("auto", "artifacts: shared filesystem"),
                                             ("shipped", "artifacts: shipped as bytes (no shared filesystem)")])
def test_local_cluster_gives_the_same_results_as_doit_workers(swept, tmp_path, artifacts, said):
    _, local_run, reference = swept
    assert reference.returncode == 0, reference.stderr[-2000:]
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", SMALL), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_SCHEDULER="local:2",
                    CONV_SWEEP_ARTIFACTS=artifacts)
    run = doit("sweep", env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    # said once the cluster is up: a local one starts while the driver builds the first models
    line = [x for x in run.stderr.splitlines() if x.startswith("conv-sweep: the stages run on Dask")]
    assert len(line) == 1 and line[0].startswith("conv-sweep: the stages run on Dask, a local cluster of 2 worker")
    assert said in line[0]
    theirs, ours = results(local_run), results(tmp_path / "build")
    assert sorted(ours) == sorted(theirs) and len(ours) == 10
    assert {n: r["status"] for n, r in ours.items()} == {n: r["status"] for n, r in theirs.items()}
    assert all(r["status"] == "pass" for r in ours.values())
    assert _vmfbs(tmp_path / "build") == _vmfbs(local_run)
    text = "".join(p.read_text() for p in (tmp_path / "build").rglob("*") if p.suffix in (".json", ".log", ".sh"))
    assert "conv-sweep-" not in text  # no worker's private folder named in what came back

    rerun = doit("-r", "json", "sweep", env=env)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert executed(rerun) == []


# For the Conv1D geometry: a crash, a hang, and a compile that kills its own Dask worker.
WRAPPER = """#!/bin/sh
case "$PWD/$1" in
  *conv_tflite_f32_*_r1_*) kill -SEGV $$;;
  *conv_tflite_w8i8_*_r1_*) sleep 600;;
  *conv_onnx_f32_*_r1_*) kill -9 $PPID; sleep 5; exit 1;;
esac
exec {real} "$@"
"""


@pytest.mark.slow
def test_misbehaving_compilers_fail_only_their_cases(tmp_path):
    wrapper = write_wrapper(tmp_path / "iree-compile-wrapper", WRAPPER, real_compiler())
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", SMALL), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_SCHEDULER="local:2",
                    CONV_SWEEP_IREE_COMPILE=wrapper, CONV_SWEEP_BUDGET="compile=5")
    start = time.monotonic()
    run = doit("sweep", env=env, timeout=600)
    print(f"local:2 sweep with three misbehaving compiles: {time.monotonic() - start:.1f} s")
    assert run.returncode != 0
    found = results(tmp_path / "build")
    assert len(found) == 10
    bad = {"tflite_f32": "killed by signal SIGSEGV", "tflite_w8i8": "timed out after 5 s",
           "onnx_f32": "its Dask worker died running it, twice (KilledWorker)"}
    for name, result in found.items():
        variant = f"{result['backend']}_{result['flavor']}"
        if result["category"] == "small1d" and variant in bad:
            # a lost worker is a failure of the harness, not of the compiler
            status = "harness" if variant == "onnx_f32" else "timeout" if "timed out" in bad[variant] else "error"
            assert (result["status"], result["stage"]) == (status, "compile"), name
            assert bad[variant] in result["reason"], (name, result["reason"])
        else:
            assert result["status"] == "pass", (name, result["reason"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv, env, log):
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_workers(address: str, count: int, timeout: float = 300) -> None:
    import distributed

    with distributed.Client(address, timeout=30) as client:
        deadline = time.monotonic() + timeout
        while len(client.scheduler_info()["workers"]) != count:
            assert time.monotonic() < deadline, f"the scheduler never had {count} workers"
            time.sleep(0.5)


@pytest.mark.slow
def test_scheduler_and_workers_started_by_hand(tmp_path):
    """`dask scheduler` and `dask worker --preload pipeline.engine.cluster`, as in the README; then a
    worker running a changed copy of the project is refused before any task."""
    dask = str(Path(sys.executable).parent / "dask")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    base = {**{k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_")}, "TMPDIR": str(tools_tmpdir())}
    log = open(tmp_path / "cluster.log", "w")
    procs = [_start([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                    {**base, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}, log)]
    worker = [dask, "worker", address, "--nthreads", "1", "--preload", "pipeline.engine.cluster", "--no-dashboard"]
    try:
        procs.append(_start(worker, base, log))
        env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", SMALL[:1]), CONV_SWEEP_N=0,
                        CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_SCHEDULER=address)
        run = doit("-n", "1", "sweep", env=env)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert f"the scheduler {address} (1 workers, 1 threads); artifacts: shared filesystem" in run.stderr
        assert [r["status"] for r in results(tmp_path / "build").values()] == ["pass"] * 5

        old = procs.pop()
        old.terminate()
        old.wait(timeout=30)
        _wait_for_workers(address, 0)
        other = tmp_path / "other"
        shutil.copytree(ROOT / "pipeline", other / "pipeline")
        with open(other / "pipeline" / "cases.py", "a") as f:
            f.write("\n# a different version\n")
        procs.append(_start(worker, {**base, "PYTHONPATH": str(other)}, log))
        _wait_for_workers(address, 1)
        env["CONV_SWEEP_BUILD_DIR"] = str(tmp_path / "build2")
        refused = doit("-n", "1", "sweep", env=env)
        assert refused.returncode != 0
        assert "differs from this driver in its project code" in refused.stderr, refused.stderr[-2000:]
        assert not (tmp_path / "build2" / "cases").exists()

        # a worker where the compiler's launcher is refused (setarch in a container whose
        # seccomp profile forbids it), for a target that starts its compiler at fixed addresses
        old = procs.pop()
        old.terminate()
        old.wait(timeout=30)
        _wait_for_workers(address, 0)
        refusing = tmp_path / "refusing-bin"
        refusing.mkdir()
        (refusing / "setarch").write_text("#!/bin/sh\necho 'setarch: failed to set personality: Operation not permitted' >&2\nexit 1\n")
        (refusing / "setarch").chmod(0o755)
        procs.append(_start(worker, {**base, "PATH": f"{refusing}:{base['PATH']}"}, log))
        _wait_for_workers(address, 1)
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps({"targets": {"llvm-cpu": {"fixed_addresses": True}}}))
        env.update(CONV_SWEEP_BUILD_DIR=str(tmp_path / "build3"), CONV_SWEEP_TARGETS_FILE=str(targets))
        refused = doit("-n", "1", "sweep", env=env)
        assert refused.returncode != 0
        assert "differs from this driver in its tools (llvm-cpu compiler launch `setarch " in refused.stderr, \
            refused.stderr[-2000:]
        assert "driver 'works', worker '`setarch" in refused.stderr and "Operation not permitted" in refused.stderr
        assert not (tmp_path / "build3" / "cases").exists()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


@pytest.mark.slow
def test_a_lone_worker_killed_under_its_task_fails_that_case_only(tmp_path):
    """local:1: the one worker dies under its task, is restarted, dies again under the retry;
    the tasks waiting for it run on the restarted worker (the configuration travels with each
    task, so none is lost with the worker)."""
    wrapper = write_wrapper(tmp_path / "iree-compile-wrapper", WRAPPER, real_compiler())
    lost = "conv_onnx_f32_w20_h1_f8_k5_c4_r1_s1x2_pvalid"
    listed = tmp_path / "expected.json"  # a lost worker is never an expected failure, whatever the list says
    listed.write_text(json.dumps({"expected_failures": [
        {"case": lost, "stage": "compile", "bucket": "compile: its Dask worker died running it, twice (KilledWorker): "
                                                     "a crash or an OOM kill"}]}))
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", SMALL), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_SCHEDULER="local:1",
                    CONV_SWEEP_IREE_COMPILE=wrapper, CONV_SWEEP_BUDGET="compile=5",
                    CONV_SWEEP_EXPECTED_FAILURES=listed)
    run = doit("sweep", env=env, timeout=600)
    assert run.returncode != 0
    found = results(tmp_path / "build")
    broken = {n: r for n, r in found.items() if r["status"] != "pass"}
    assert sorted(broken) == ["conv_onnx_f32_w20_h1_f8_k5_c4_r1_s1x2_pvalid", "conv_tflite_f32_w20_h1_f8_k5_c4_r1_s1x2_pvalid",
                              "conv_tflite_w8i8_w20_h1_f8_k5_c4_r1_s1x2_pvalid"]
    assert "KilledWorker" in broken[lost]["reason"] and broken[lost]["status"] == "harness"
    assert len(found) == 10


class _Gate(threading.BoundedSemaphore):
    """A local cluster's gate (a turn per worker), which also tells the threads that found no
    turn free and wait for one."""

    def __init__(self, value: int):
        super().__init__(value)
        self.waiting: list[str] = []  # their names, in order
        self.changed = threading.Condition()

    def acquire(self, blocking=True, timeout=None):
        if super().acquire(blocking=False):
            return True
        if not blocking:
            return False
        with self.changed:
            self.waiting.append(threading.current_thread().name)
            self.changed.notify_all()
        return super().acquire(True, timeout)

    __enter__ = acquire

    def wait_until(self, condition, timeout: float = 300) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: condition(self.waiting), timeout)


def _beside(subject, cfg):
    """A stage function: whether its worker holds another task (queued or running) while it
    runs. It looks until it sees one, or until the test has given the others their chance to
    arrive (the file `release` in the build folder)."""
    from distributed import get_worker

    worker = get_worker()
    mine = worker.get_current_task()
    release = cfg.build_dir / "release"
    deadline = time.monotonic() + 300
    while True:
        others = [key for key, task in worker.state.tasks.items()
                  if key != mine and task.state in ("waiting", "ready", "constrained", "executing")]
        if others:
            return f"{len(others)} other tasks on its worker"
        if release.exists() or time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def test_a_local_cluster_is_handed_a_task_only_when_a_worker_is_free(tmp_path):
    """doit runs one thread more than a local cluster has workers; the extra one submits only
    once a worker is free, so that no task waits on a worker that may die under another."""
    from pipeline.config import Config

    cfg = Config.from_env({"CONV_SWEEP_SPEC": str(write_spec(tmp_path / "spec.json", SMALL)), "CONV_SWEEP_N": "0",
                           "CONV_SWEEP_BUILD_DIR": str(tmp_path / "build"), "CONV_SWEEP_SCHEDULER": "local:1"})
    case = cfg.cases()[0]
    cfg.build_dir.mkdir()
    release = cfg.build_dir / "release"
    driver = cluster.Cluster(cfg)
    driver.start()
    try:
        def three_at_once(arrived):
            """Three tasks at once, each looking for the others on its worker; released once
            `arrived(found)` says the others have had their chance to be there."""
            release.unlink(missing_ok=True)
            found = []
            threads = [threading.Thread(target=lambda: found.append(driver.run(_beside, case))) for _ in range(3)]
            for thread in threads:
                thread.start()
            try:
                assert arrived(found)
            finally:
                release.touch()
                for thread in threads:
                    thread.join(timeout=300)
            return found

        # gated: one runs, looking for the others until both wait at the gate; then each in turn
        gate = driver.free = _Gate(1)
        assert three_at_once(lambda found: gate.wait_until(lambda waiting: len(waiting) == 2)) == [None, None, None]

        driver.free = None  # ungated, Dask queues them all on the one worker at once: the check can fail
        deadline = time.monotonic() + 300

        def one_has_returned(found):
            while not found and time.monotonic() < deadline:
                time.sleep(0.01)
            return bool(found)

        assert any(three_at_once(one_has_returned))
    finally:
        driver.close()


def _tool_environment(subject, cfg):
    """A stage function: the environment a tool it starts sees, as text (`env`'s output)."""
    return subprocess.run(["env", "-0"], capture_output=True, text=True, check=True).stdout


def _variables(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split("\0") if "=" in item)


def test_a_local_cluster_s_tools_run_in_the_driver_s_environment(tmp_path):
    """Dask's nannies (run in the driver) set their pre-spawn environment in the driver's own
    os.environ before starting each worker: a malloc trim threshold and one OpenMP/BLAS thread.
    A local cluster starts none of it: its workers' tools, and the driver's after the start,
    see the variables the driver had."""
    from pipeline.config import Config

    cfg = Config.from_env({"CONV_SWEEP_SPEC": str(write_spec(tmp_path / "spec.json", SMALL)), "CONV_SWEEP_N": "0",
                           "CONV_SWEEP_BUILD_DIR": str(tmp_path / "build"), "CONV_SWEEP_SCHEDULER": "local:1"})
    cfg.build_dir.mkdir()
    watched = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    before = {name: os.environ.get(name) for name in watched}
    driver = cluster.Cluster(cfg)
    driver.start()
    try:
        on_worker = _variables(driver.run(_tool_environment, cfg.cases()[0]))
    finally:
        driver.close()
    assert {name: os.environ.get(name) for name in watched} == before
    assert {name: on_worker.get(name) for name in watched} == before


# ---------------------------------------------------------------- the pieces, without a cluster

def model(subject, cfg):
    """A stage function named as the model task: it says where it ran (process, thread)."""
    return f"{os.getpid()} {threading.current_thread().name}"


def test_a_local_cluster_s_driver_builds_the_models_itself_taking_a_worker_s_turn(tmp_path):
    """Its model builds run in the driver (one TensorFlow and one torch there, as under doit's
    threads), before the cluster has started; each takes one of the workers' turns."""
    from pipeline.config import Config

    cfg = Config.from_env({"CONV_SWEEP_SPEC": str(write_spec(tmp_path / "spec.json", SMALL)), "CONV_SWEEP_N": "0",
                           "CONV_SWEEP_BUILD_DIR": str(tmp_path / "build"), "CONV_SWEEP_SCHEDULER": "local:1"})
    driver = cluster.Cluster(cfg)  # never started
    gate = driver.free = _Gate(1)  # its one worker's turn
    assert driver.run(model, [cfg.cases()[0]]) == f"{os.getpid()} {threading.current_thread().name}"
    assert not driver.started.is_set() and driver.client is None
    assert gate.acquire(blocking=False)  # the turn was given back
    try:
        blocked = []
        thread = threading.Thread(target=lambda: blocked.append(driver.run(model, [cfg.cases()[0]])), name="waiter")
        thread.start()
        assert gate.wait_until(lambda waiting: "waiter" in waiting)  # the one worker's turn is taken: it waits
        assert thread.is_alive() and not blocked
    finally:
        driver.free.release()
    thread.join(timeout=30)
    assert blocked and blocked[0].startswith(str(os.getpid()))


def test_sees_reads_the_probe_only_where_the_token_matches(tmp_path):
    probe = tmp_path / "probe"
    probe.write_text("token-1")
    assert cluster.sees(str(probe), "token-1")
    assert not cluster.sees(str(probe), "token-2")
    assert not cluster.sees(str(tmp_path / "absent"), "token-1")


def test_relocate_rewrites_the_worker_folder_in_text_outputs_only():
    text = b"log of /scratch/w1/cases/c/model.mlir"
    assert cluster._relocate("cases/c/import.log", text, "/scratch/w1", "/home/u/build") == \
        b"log of /home/u/build/cases/c/model.mlir"
    assert cluster._relocate("cases/c/llvm-cpu/model.vmfb", text, "/scratch/w1", "/home/u/build") == text


def test_first_difference_names_the_key_that_differs():
    mine = {"python": "3.11.7", "project code": "a", "tools": {"x": 1}}
    theirs = {"python": "3.11.7", "project code": "b", "tools": {"x": 1}}
    assert cluster._first_difference(mine, theirs) == "project code: driver 'a', worker 'b'"
    assert cluster._first_difference("a", "b") == "driver 'a', worker 'b'"


def test_identity_is_stable_and_names_every_tool_of_the_targets(tmp_path):
    from pipeline.config import Config

    cfg = Config.from_env({"CONV_SWEEP_BUILD_DIR": str(tmp_path / "build")})
    before = cluster.identity(cfg)
    assert before == cluster.identity(cfg) and before["python"] == sys.version.split()[0]
    assert "llvm-cpu toolchain" in before["tools"]
    assert {key.split()[1] for key in before["tools"]} >= {"compiler", "runner", "toolchain"}
