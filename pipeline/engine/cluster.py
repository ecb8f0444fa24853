"""The stages on a Dask cluster, doit still owning the graph (CONV_SWEEP_SCHEDULER).

doit fans out with its thread runner: each task's action submits its stage to the cluster and
blocks on the result, so up-to-date checks, the dependency DB (written on doit's main thread,
one committed record per finished task) and the reporters stay doit's. The heavy work (model
build, import, compile, run, oracle, compare) runs in the Dask workers, each with its own
helper processes (pipeline/core/isolate.py), imported once per worker process. A local
cluster's model builds are the exception (LOCAL_TASKS): its workers are processes of this
machine, whose TensorFlow and torch would be one set per run anyway, as under doit's own
threads; the driver runs them itself, in its own helpers, while the cluster is still starting.

Artifacts: with a shared filesystem the workers read and write the build folder in place (every
write is atomic already); without one, the driver ships each task's folders to the worker as
bytes and writes back what the task changed, atomically. The mode is detected at start (a
probe file every worker must see) unless CONV_SWEEP_ARTIFACTS names it.

Workers preload this module (`dask worker ... --preload pipeline.engine.cluster`); a worker whose
project code, Python, stage libraries or tools differ from the driver's is refused at start.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import shlex
import sys
import threading
import uuid
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from pipeline.config import SHARED, SHIPPED, Scheduler
from pipeline.core.chain import STAGE_OF_TASK
from pipeline.core.errors import ConfigError

PRELOAD = "pipeline.engine.cluster"
TEXT_SUFFIXES = {".json", ".log", ".sh", ".txt", ".csv"}  # outputs that may name the worker's folder
# The tasks a local cluster's driver runs itself: a model build is a call to a TensorFlow or torch
# helper (isolate.SHARED), one per run on this machine whoever calls it, so a worker would only
# relay it (a Dask round trip, and a worker's CPU, for each of them)
LOCAL_TASKS = ("model",)


# ---------------------------------------------------------------- worker side

def dask_setup(worker=None) -> None:
    """Preload hook: the stage modules, imported once per worker process (their TensorFlow,
    torch and oracle helpers start on first use and then serve every task of the worker)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipeline.checks import oracle  # noqa: F401
    from pipeline.run import stages
    from pipeline.checks import verify


def identity(cfg) -> dict:
    """What a worker must share with the driver: the project's code and data files, Python,
    the stage libraries' versions, and each selected target's tools (size and --version),
    toolchain, and whether its compiler's launcher (setarch -R on torq) starts here."""
    from pipeline.core.fingerprint import STAGE_INPUTS, ask_version, dist_version
    from pipeline.core.integrity import sha256
    from pipeline.core.tools import launch_problem
    from pipeline.targets.profiles import toolchain_identity

    package = Path(__file__).resolve().parents[1]  # pipeline/
    digest = hashlib.sha256()
    for path in sorted([*package.rglob("*.py"), *package.rglob("*.json")]):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    tools = {}
    for target in cfg.targets:
        for role, path in target.tools(cfg.benchmark):
            exists = os.path.isfile(path) and os.access(path, os.X_OK)
            tools[f"{target.name} {role} {path}"] = \
                [os.path.getsize(path), ask_version(path) or sha256(path)] if exists else "missing"
        tools[f"{target.name} toolchain"] = toolchain_identity(target.toolchain)
        if target.compile_launch:  # a worker that cannot start the compiler this way is refused
            tools[f"{target.name} compiler launch `{shlex.join(target.compile_launch)}`"] = \
                launch_problem(target.compile_launch) or "works"
    return {"project code": digest.hexdigest(), "python": sys.version.split()[0],
            "libraries": {d: dist_version(d) for _, dists in STAGE_INPUTS.values() for d in dists},
            "tools": tools}


def sees(path: str, token: str) -> bool:
    """Whether this worker reads the driver's probe file (a shared filesystem)."""
    try:
        return Path(path).read_text() == token
    except OSError:
        return False


def run_stage(stage_fn, subject, config: bytes, shipped: dict | None, driver_root: str):
    """Run one task's stage function (pipeline/run/stages.py) on this worker: (failure message
    or None, files it changed). With
    `shipped` (no shared filesystem: relative path -> bytes), in a private copy of those files
    whose changes come back as relative path -> bytes (None: deleted); else in place."""
    import tempfile

    cfg = _config(config)
    if shipped is None:
        return stage_fn(subject, cfg), None
    with tempfile.TemporaryDirectory(prefix="conv-sweep-") as tmp:
        root = Path(tmp) / "build"
        for rel, data in shipped.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        message = stage_fn(subject, replace(cfg, build_dir=root))
        after = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        changed = {rel: _relocate(rel, data, str(root), driver_root) for rel, data in after.items()
                   if shipped.get(rel) != data}
        changed.update({rel: None for rel in shipped if rel not in after})
        if message:
            message = message.replace(str(root), driver_root)
        return message, changed


@lru_cache(maxsize=4)
def _config(config: bytes):
    """The run's Config, unpickled once per worker (the driver sends it pickled with each task)."""
    return pickle.loads(config)


def _relocate(rel: str, data: bytes, worker_root: str, driver_root: str) -> bytes:
    """Text outputs naming the worker's private folder name the driver's instead."""
    if Path(rel).suffix not in TEXT_SUFFIXES:
        return data
    return data.replace(worker_root.encode(), driver_root.encode())


# ---------------------------------------------------------------- driver side

def task_files(cfg, cases) -> list[Path]:
    """The folders one task reads and writes: its model's folder (top level) and each case's
    folder on its target."""
    folders = {cfg.model_dir(cases[0]), *(cfg.case_dir(c) for c in cases)}
    return sorted(p for folder in folders if folder.is_dir() for p in folder.iterdir() if p.is_file())


class Cluster:
    """The driver's connection: started once per run, shared by doit's task threads."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.scheduler: Scheduler = cfg.scheduler
        self.client = None
        self.local = None
        self.mode = None
        self.line = ""
        self.starting = False
        self.started = threading.Event()  # set once start() has ended, well or not (self.failure)
        self.failure: BaseException | None = None
        # a local cluster's worker threads, one task each: doit runs one thread more (tasks.py),
        # which checks and prepares the next task while every worker is busy, and submits it
        # only once a worker is free (a result came back). Dask would hand it to a busy worker
        # at once (worker-saturation does not stop it), and a worker that dies would take that
        # innocent task down with it. An existing cluster's threads are its own: not gated.
        self.free = threading.BoundedSemaphore(self.scheduler.local_workers) if self.scheduler.local_workers else None
        self.held = threading.local()  # each doit thread's last future, released after its next submit
        self.closing, self.closed = threading.Lock(), False
        self.config = pickle.dumps(cfg)

    def start_in_background(self) -> None:
        """Start the cluster on a thread of its own: a local cluster's worker processes start
        while the driver builds the first models (LOCAL_TASKS); the other tasks wait for it."""
        def starting():
            try:
                self.start()
            except BaseException:  # noqa: BLE001 - kept (self.failure) for every task that waits for it
                pass

        threading.Thread(target=starting, name="conv-sweep-cluster-start", daemon=True).start()

    def ready(self) -> None:
        """Wait until the cluster has started; raise what stopped it."""
        self.started.wait()
        if self.failure is not None:
            raise self.failure

    def start(self) -> None:
        self.starting = True
        try:
            self._start()
        except BaseException as err:
            self.failure = err
            raise
        finally:
            self.started.set()

    def _start(self) -> None:
        import logging

        import dask
        import distributed

        if self.scheduler.address is None:
            # a worker that dies running a task (a crash, an OOM kill) fails it at the second death.
            # Dask's own bookkeeping off or slowed: its statistical profiler (a stack sample of every
            # worker thread each 10 ms), event-loop tick, system and memory monitors and work
            # stealing (pointless with tasks submitted one at a time) cost a sizeable share of a
            # small sweep's core-seconds, the profiler most of it (docs/measurements.md). The
            # workers inherit this config. They are forked from a server process that imported
            # distributed once, rather than each spawned to import it again (they also stop faster).
            dask.config.set({"distributed.scheduler.allowed-failures": 1,
                             "distributed.worker.multiprocessing-method": "forkserver",
                             "distributed.worker.profile.enabled": False,
                             "distributed.admin.tick.interval": "1s",
                             "distributed.admin.system-monitor.interval": "5s",
                             "distributed.worker.memory.monitor-interval": "1s",
                             "distributed.scheduler.work-stealing": False,
                             # the nannies run in this process and, before starting each worker,
                             # write their pre-spawn environment into its os.environ
                             # (MALLOC_TRIM_THRESHOLD_=65536, OMP/MKL/OPENBLAS_NUM_THREADS=1): every
                             # tool and helper started after that, on the workers and here, would
                             # run in another environment than under doit, and this process's
                             # helpers in one or the other by when they started
                             "distributed.nanny.pre-spawn-environ": {}})
            self.local = distributed.LocalCluster(
                n_workers=self.scheduler.local_workers, threads_per_worker=1, processes=True,
                dashboard_address=None, silence_logs=logging.ERROR, preload=[PRELOAD], death_timeout=60)
            self.client = distributed.Client(self.local)
            where = f"a local cluster of {self.scheduler.local_workers} worker processes"
        else:
            try:
                self.client = distributed.Client(self.scheduler.address, timeout=30)
            except OSError as err:
                raise ConfigError("CONV_SWEEP_SCHEDULER", self.scheduler.address,
                                  f"no scheduler answers there ({err})") from None
            allowed = self.client.run_on_scheduler(_allowed_failures)
            if allowed > 1:
                raise ConfigError("CONV_SWEEP_SCHEDULER", self.scheduler.address,
                                  f"the scheduler retries a task whose worker died {allowed} times; start it "
                                  "with DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1, so that one crashing "
                                  "case cannot take several workers down")
            self.client.wait_for_workers(1, timeout=120)
            where = f"the scheduler {self.scheduler.address}"
        self._check_versions()
        self.mode = self._artifact_mode()
        workers = self.client.scheduler_info()["workers"]
        threads = sum(w["nthreads"] for w in workers.values())
        self.line = (f"conv-sweep: the stages run on Dask, {where} ({len(workers)} workers, {threads} threads); "
                     f"artifacts: {'shared filesystem' if self.mode == SHARED else 'shipped as bytes (no shared filesystem)'}")
        print(self.line, file=sys.stderr, flush=True)

    def _check_versions(self) -> None:
        mine = identity(self.cfg)
        for address, theirs in self.client.run(identity, self.cfg).items():
            for key, value in mine.items():
                if theirs.get(key) != value:
                    detail = _first_difference(value, theirs.get(key))
                    raise ConfigError("CONV_SWEEP_SCHEDULER", self.scheduler.address or "local",
                                      f"worker {address} differs from this driver in its {key} ({detail}): "
                                      "install the same project and tools on every worker")

    def _artifact_mode(self) -> str:
        if self.cfg.artifacts != "auto":
            return self.cfg.artifacts
        token = uuid.uuid4().hex
        probe = self.cfg.build_dir / f".probe-{token}"
        probe.write_text(token)
        try:
            seen = self.client.run(sees, str(probe), token)
        finally:
            probe.unlink(missing_ok=True)
        return SHARED if seen and all(seen.values()) else SHIPPED

    def run(self, stage_fn, subject) -> str | None:
        """Run one task's stage function on the cluster; its failure message, or None."""
        task = stage_fn.__name__  # the task it runs: its name in pipeline/core/chain.py's TASKS
        if self.free is not None and task in LOCAL_TASKS:
            with self.free:  # it takes a worker's turn: no more tools at once than workers
                return stage_fn(subject, self.cfg)
        # imported only here, past the local branch: while the cluster-start thread imports
        # distributed, an import in the driver's model builds would wait on its import lock
        # at the start of a run (docs/measurements.md)
        import distributed

        from pipeline.run.stages import record_error
        from pipeline.core.tools import write_bytes

        self.ready()
        cases = subject if isinstance(subject, list) else [subject]
        shipped = None
        if self.mode == SHIPPED:
            shipped = {p.relative_to(self.cfg.build_dir).as_posix(): p.read_bytes() for p in task_files(self.cfg, cases)}
        # the worker enforces each tool's timeout; the driver gives up too, well after that
        wait = 3 * self.cfg.timeout + 900
        with self.free or contextlib.nullcontext():
            # the Config travels with each task, pickled (a few KB): a scattered copy is data Dask
            # cannot recompute, lost with the last worker holding it, cancelling every task waiting
            # on it; and as a dataclass Dask would walk its fields for futures at every submit
            # (latency and driver CPU on every task: docs/measurements.md)
            future = self.client.submit(run_stage, stage_fn, subject, self.config, shipped, str(self.cfg.build_dir),
                                        key=f"{task}-{cases[0].key}-{uuid.uuid4().hex[:8]}", pure=False)
            # The client batches its messages to the scheduler 10 ms apart (distributed's own,
            # fixed): a future released just before a submit (as when the last one went out of
            # scope) held the submit back by up to 10 ms, a worker idle all that while. So a
            # thread's last future is released after its next submit, in the same batch.
            self.held.future = future
            try:
                message, changed = future.result(timeout=wait)
            except distributed.TimeoutError:
                future.cancel()
                failure = f"no result from the Dask cluster within {wait:g} s (the task was cancelled)"
            except distributed.client.FutureCancelledError:
                failure = "the Dask cluster cancelled the task (the cluster shut down)"
            except distributed.KilledWorker:
                failure = "its Dask worker died running it, twice (KilledWorker): a crash or an OOM kill"
            else:
                failure = None
        if failure:
            return record_error(cases, self.cfg, STAGE_OF_TASK[task], failure)
        for rel, data in (changed or {}).items():
            path = self.cfg.build_dir / rel
            if data is None:
                path.unlink(missing_ok=True)
            else:
                write_bytes(path, data)
        return message

    def close(self) -> None:
        with self.closing:  # once: when the report starts (stopped), and at exit
            if not self.closed:
                self.closed = True
                self._close()

    def _close(self) -> None:
        if self.starting:
            self.started.wait(timeout=300)  # a cluster still starting is stopped once it has
        for thing in (self.client, self.local):
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # noqa: BLE001 - closing at exit: nothing left to report to
                    pass


def _allowed_failures() -> int:
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures"))


def _first_difference(mine, theirs) -> str:
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                return f"{key}: driver {mine.get(key)!r}, worker {theirs.get(key)!r}"
    return f"driver {mine!r}, worker {theirs!r}"


# The one module state here, and why it stays: a Dask client, its local cluster's processes and
# their sockets belong to this process (doit's task threads and the run command share them), so
# they live as long as it does and are closed at its exit (atexit) or when the run ends (stopped).
_lock = threading.Lock()
_cluster: Cluster | None = None


def connect(cfg, wait: bool = True) -> Cluster:
    """The run's cluster, started on first use (by the reporter before any task, or doit's first
    task thread). With wait=False, a local cluster starts in the background (its tasks wait for
    it: Cluster.ready); an existing cluster is always waited for, as what it refuses (another
    project's workers, a scheduler that retries killed tasks) must stop the run before any task."""
    global _cluster
    with _lock:
        if _cluster is None:
            import atexit

            cluster = Cluster(cfg)
            if wait or not cfg.scheduler.local_workers:
                try:
                    cluster.start()
                except BaseException:
                    cluster.close()
                    raise
            else:
                cluster.start_in_background()
            atexit.register(cluster.close)
            _cluster = cluster
        return _cluster


def stopped() -> threading.Thread | None:
    """Stop the run's cluster, if one started, in the background (every task has ended): the
    report is written meanwhile. Join the thread before the report's run ends."""
    if _cluster is None:
        return None
    thread = threading.Thread(target=_cluster.close, name="conv-sweep-cluster-close", daemon=True)
    thread.start()
    return thread
