"""One entry point per stage, as the task runner calls them: build the stage's output, record
its duration, and turn any failure into the case's outcome in result.json. The verify task of
every case judges its outcome against the target's expected-failures list (pipeline/outcome/verdict.py):
a build task (model, mlir, vmfb) only records a failure at the stage its case is listed at, and
leaves the verdict to it.

The model and import stages are shared by every target (they take the cases of one model on
all selected targets, and write into the model's folder); compile and verify take one case on
its target. Each returns None on success (or a failure its verify task will judge) or a
one-line failure message per case, ending with the case's repro.sh. An exception raised by
this package's own code is a harness error, never expected. Nothing here imports doit.
"""
from __future__ import annotations

import time
import traceback
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from pipeline.space.cases import Case
from pipeline.space.geometry import macs as geometry_macs
from pipeline.targets import cost
from pipeline.config import Config
from pipeline.core.cuts import KnownCuts, known_cut
from pipeline.core.errors import StageError
from pipeline.core.fingerprint import stage_fingerprint, tool_digest
from pipeline.core.integrity import sha256
from pipeline.core.store import key_of
from pipeline.core.chain import MLIR, MLIR_BYTECODE, SHARED_TASKS, TASK_OF_STAGE, VMFB
from pipeline.outcome.result import (ERROR, FAIL, HARNESS, PASS, RESULT_FILE, TIMEOUT, Result, read_all_stages,
                                     read_result, record_stage)
from pipeline.outcome.verdict import judge, message, outcome

FAILURES = (ERROR, FAIL, TIMEOUT, HARNESS)  # outcomes a build task records

def _run(task: str, stage: str, cases: list[Case], cfg: Config, work, prepare=None, stored=None) -> str | None:
    """Run one task's work for `cases` (one model on several targets for the shared model and
    mlir tasks, else one case); `stage` names it in results (a task may fail at a later stage:
    verify fails at run, oracle or verify). `prepare` (one-off set-up, such as a helper process
    importing TensorFlow) runs first and is not counted in the stage's duration.

    A build task (model, mlir, vmfb) records a failure as the case's outcome and succeeds where
    the case is listed to fail at that stage, so that its verify task judges it against the
    list; verify judges every outcome it records (pipeline/outcome/verdict.py).

    `stored` (a build task's): a function giving the store key of its outputs and their names
    (pipeline/core/store.py). Outputs the store has are taken, not built (`prepare` is not
    even run), and a failure it remembers is that failure again; what is built is stored."""
    from pipeline.run.repro import write_repro

    first = cases[0]
    shared = task in SHARED_TASKS
    model_dir = cfg.model_dir(first)
    work_dir = model_dir if shared else cfg.case_dir(first)
    work_dir.mkdir(parents=True, exist_ok=True)
    _ensure_input(first, model_dir)
    repros = {}
    for case in cases:
        cfg.case_dir(case).mkdir(parents=True, exist_ok=True)
        repros[case.key] = write_repro(case, cfg, cfg.model_dir(case), cfg.case_dir(case))
    log = work_dir / f"{stage}.log"

    hit = None

    def failed(status, stage_, reason, log_, cut=None, ran=None):
        messages = []
        for case in cases:
            stages = read_all_stages(cfg.model_dir(case), cfg.case_dir(case))
            if hit and hit.outcome:  # counted as taken from the store, like outputs
                stages[stage] = {"seconds": 0.0, "store": True}
            elif ran is not None:  # a tool that failed by itself took its time as one that passed does
                stages[stage_] = {"seconds": round(ran, 4)}
            if cut is not None and cut.limit is not None:  # a cut tool ran to its limit: the time counts
                stages[stage_] = ({"seconds": 0.0, "store": True, "cut": True, "limit": cut.limit} if cut.remembered
                                  else {"seconds": round(cut.limit, 4), "cut": True})
            result = Result.for_case(case, status, stage=stage_, reason=reason, log=log_, stages=stages)
            messages.append(_record(case, cfg, result, repros[case.key], judge_now=task == "verify"))
        return "\n".join(m for m in messages if m) or None

    store = cfg.store() if stored else None
    from pipeline.core.isolate import waited

    try:
        start, waits = time.monotonic(), waited()
        key, names = stored() if store else (None, ())
        hit = store.get(key, work_dir, names) if store else None
        if hit and hit.outcome:
            _remembered(hit.outcome, store, key, log)
        if hit:
            log.write_text(f"# taken from the store ({store.root}, entry {key[:16]}): {', '.join(names)}\n")
        if not hit:
            if prepare:
                prepare(log)
            start = time.monotonic()
            waits = waited()  # for a helper another thread's task held: not this stage's time
            outcome = _built(work, work_dir, log, store, key, names, what=f"{stage} of {first.name}")
    except StageError as err:
        # the failing stage's time: a build task's whole stage, as a passing one records it; verify's
        # failing part, as its tool measured it (verify records the parts it finished itself)
        ran = None if hit or err.cut else (err.seconds if task == "verify" else
                                           time.monotonic() - start - (waited() - waits))
        return failed(TIMEOUT if err.cut else ERROR, err.stage, err.reason, err.log or str(log),
                      cut=err if err.cut else None, ran=ran)
    except Exception as err:  # our own code raised: a harness error, never an expected failure
        with open(log, "a") as f:
            f.write(traceback.format_exc())
        return failed(HARNESS, stage, f"{type(err).__name__}: {err}".splitlines()[0][:300], str(log))
    if task != "verify":  # verify records its own parts (oracle, run, compare) in result.json
        seconds = time.monotonic() - start - (0.0 if hit else waited() - waits)
        record_stage(work_dir, stage, seconds=round(seconds, 4), **({"store": True} if hit else {}))
        for case in cases:  # a failure this task recorded before is gone (other results stay: an
            _forget_failure(case, cfg, task)  # identical rebuild must not re-run verify)
        return None
    write_repro(first, cfg, model_dir, cfg.case_dir(first))  # now with the check verify wrote
    return _record(first, cfg, outcome, repros[first.key], judge_now=True)


def _built(work, work_dir: Path, log: Path, store, key: str | None, names, what: str):
    """Run the stage's work; store its outputs, or its failure where that is deterministic."""
    try:
        outcome = work(work_dir, log)
    except StageError as err:
        if store and err.deterministic:
            text = Path(err.log or log).read_text(errors="replace") if Path(err.log or log).exists() else ""
            store.put_outcome(key, err.stage, err.reason, text, what)
        raise
    if store:
        store.put(key, work_dir, names, what)
    return outcome


def _remembered(outcome: dict, store, key: str, log: Path) -> None:
    """A failure the store remembers, raised again with its log."""
    log.write_text(f"# taken from the store: the same input, flags and tools failed this way before "
                   f"({store.root}, entry {key[:16]})\n" + outcome.get("log", ""))
    raise StageError(outcome["stage"], outcome["reason"], None, str(log))


def _record(case: Case, cfg: Config, result: Result, repro: Path, judge_now: bool) -> str | None:
    """Write the case's outcome (judged, in the verify task) and return the task's failure
    message, or None. A build task's failure at the stage the case is listed at is left to the
    case's verify task to judge, and does not fail the build task."""
    if judge_now:
        result = judge(case, result)
    result.write(cfg.case_dir(case))
    if not judge_now and result.status in (ERROR, TIMEOUT) and case.expect_stage == result.stage:
        return None
    return message(case, result, repro)


def _forget_failure(case: Case, cfg: Config, task: str) -> None:
    """Remove the case's result.json where it holds a failure at one of `task`'s stages."""
    previous = read_result(cfg.case_dir(case))
    if previous and TASK_OF_STAGE.get(previous.get("stage")) == task and \
            outcome(Result.from_dict(previous)) in FAILURES:
        (cfg.case_dir(case) / RESULT_FILE).unlink(missing_ok=True)


def judge_recorded(case: Case, cfg: Config) -> str | None:
    """The verify task of a case listed to fail before verify (at model, import or compile):
    judge what that stage recorded. No recorded failure means the stage passed: xpass."""
    from pipeline.run.repro import write_repro

    case_dir = cfg.case_dir(case)
    case_dir.mkdir(parents=True, exist_ok=True)
    repro = write_repro(case, cfg, cfg.model_dir(case), case_dir)
    recorded = read_result(case_dir)
    if recorded:
        result = Result.from_dict(recorded)
    else:
        result = Result.for_case(case, PASS, stages=read_all_stages(cfg.model_dir(case), case_dir))
    return _record(case, cfg, result, repro, judge_now=True)


def _observe(cfg: Config, case: Case, stage: str, seconds: float) -> None:
    """Record a completed invocation in the target's observed costs (its limit rises with it for
    larger cases, pipeline/targets/cost.py)."""
    if cfg.target(case.target).profile.rule(stage):
        cost.observe(cfg.report_dir(case.target), stage, geometry_macs(case.geometry), seconds, case.name, case.convs,
                     cfg.estimated_cycles(case) if stage in cost.BY_CYCLES else None)


@contextmanager
def _observed(case: Case, cfg: Config, stage: str):
    """A tool of `stage` that failed by itself (not cut) still says how long the stage takes."""
    try:
        yield
    except StageError as err:
        if err.stage == stage and err.seconds is not None and not err.cut:
            _observe(cfg, case, stage, err.seconds)
        raise


def _ensure_input(case: Case, model_dir: Path) -> None:
    """The case's input, saved before anything runs, so that repro.sh has it at every stage."""
    from pipeline.checks.verify import INPUT, case_input, save_npy

    if not (model_dir / INPUT).exists():
        from pipeline.space.data import needs_quantization

        model = model_dir / case.model_file
        if model.exists() or not needs_quantization(case):  # else verify saves it, once the model is built
            save_npy(model_dir / INPUT, case_input(case, model))


def record_error(cases: list[Case], cfg: Config, stage: str, reason: str) -> str | None:
    """Record a failure the stage could not record itself (its Dask worker was lost, no answer
    came): a harness error of each case, never an expected failure; the task's failure message."""
    from pipeline.run.repro import write_repro

    messages = []
    for case in cases:
        cfg.case_dir(case).mkdir(parents=True, exist_ok=True)
        repro = write_repro(case, cfg, cfg.model_dir(case), cfg.case_dir(case))
        result = Result.for_case(case, HARNESS, stage=stage, reason=reason,
                                 stages=read_all_stages(cfg.model_dir(case), cfg.case_dir(case)))
        messages.append(_record(case, cfg, result, repro, judge_now=True))
    return "\n".join(m for m in messages if m)


def model(cases: list[Case], cfg: Config) -> str | None:
    from pipeline.core.isolate import call, warm
    from pipeline.frontends import model_onnx, model_tflite

    case = cases[0]
    warm_up, build = {"tflite": (model_tflite.warm_up, model_tflite.build_tflite),
                      "onnx": (model_onnx.warm_up, model_onnx.build_onnx)}[case.backend]

    helper = f"model-{case.backend}"  # one per run where tasks run in threads (isolate.SHARED)

    def work(model_dir: Path, log: Path) -> None:
        call(build, case, model_dir / case.model_file, helper=helper, stage="model",
             timeout=cfg.timeout, log=log)

    def prepare(log: Path) -> None:
        log.unlink(missing_ok=True)
        warm(warm_up, helper=helper, stage="model", log=log)

    def stored():
        return key_of({"stage": "model", **stage_fingerprint("model"), "geometry": case.geometry.to_dict(),
                       "backend": case.backend, "flavor": case.flavor, "data": case.data,
                       **({"data_from": case.data_from.to_dict()} if case.data_from else {}),
                       **({"weights": case.weights.digest} if case.weights else {})}), [case.model_file]

    return _run("model", "model", cases, cfg, work, prepare, stored)


def mlir(cases: list[Case], cfg: Config) -> str | None:
    from pipeline.core.isolate import call, warm
    from pipeline.frontends.importer import WARM_UP, import_model

    case = cases[0]

    def work(model_dir: Path, log: Path) -> None:
        call(import_model, case, model_dir / case.model_file, model_dir / MLIR, log, cfg.timeout,
             helper="import", stage="import", timeout=cfg.timeout, log=log)

    def prepare(log: Path) -> None:
        log.unlink(missing_ok=True)
        warm(WARM_UP[case.backend], helper="import", stage="import", log=log)

    def stored():
        model_dir = cfg.model_dir(case)
        return key_of({"stage": "mlir", **stage_fingerprint("mlir"), "input": sha256(model_dir / case.model_file),
                       "backend": case.backend}), [MLIR, MLIR_BYTECODE] if case.backend == "tflite" else [MLIR]

    return _run("mlir", "import", cases, cfg, work, prepare, stored)


def vmfb(case: Case, cfg: Config) -> str | None:
    from pipeline.targets.compiler import compile_mlir

    target = cfg.target(case.target)
    limit = cfg.limit(case, "compile")

    def work(case_dir: Path, log: Path) -> None:
        log.unlink(missing_ok=True)
        (case_dir / VMFB).unlink(missing_ok=True)  # a compile that fails leaves no older module to be run
        store = cfg.store()
        cuts = KnownCuts(store, stored()[0], f"compile of {case.key}", cfg.retry_timeouts) if store else None
        with _observed(case, cfg, "compile"), known_cut(cuts, "compile", limit.seconds, log):
            seconds = compile_mlir(cfg.model_dir(case) / cfg.mlir_input(case), case_dir / VMFB,
                                   compiler=target.compiler, flags=target.compile_flags(case.variant),
                                   timeout=limit.seconds, log=log, profiling=target.profile.profiling,
                                   timeout_note=limit.cut_note(), launch=target.compile_launch)
        _observe(cfg, case, "compile", seconds)

    @cache  # asked by _run (the outputs' entry) and by work (the cut's): the MLIR is hashed once
    def stored():
        from pipeline.targets.compiler import PROFILE
        from pipeline.targets.profiles import toolchain_identity

        profile = target.profile
        key = key_of({"stage": "vmfb", **stage_fingerprint("vmfb"),
                      "input": sha256(cfg.model_dir(case) / cfg.mlir_input(case)),
                      "compiler": tool_digest(target.compiler, **target.launchers), "toolchain": toolchain_identity(target.toolchain),
                      "flags": list(target.compile_flags(case.variant)), "profiling": list(profile.profiling),
                      **({"launch": list(target.compile_launch)} if target.compile_launch else {})})
        return key, [VMFB, PROFILE] if profile.profiling else [VMFB]

    return _run("vmfb", "compile", [case], cfg, work, stored=stored)


def verify(case: Case, cfg: Config) -> str | None:
    """Run and check the case, and judge it; a case listed to fail before verify is judged
    on what its listed stage recorded."""
    if case.expect_stage and TASK_OF_STAGE[case.expect_stage] != "verify" and \
            not (case.expected.may_finish and (cfg.case_dir(case) / VMFB).exists()):
        return judge_recorded(case, cfg)  # listed to fail earlier, or a listed timeout that was cut
    from pipeline.checks.verify import verify_case

    def work(case_dir: Path, log: Path) -> Result:
        with _observed(case, cfg, "run"):
            result = verify_case(case, cfg.target(case.target), cfg.model_dir(case), case_dir, timeout=cfg.timeout,
                                 benchmark=cfg.benchmark, run_limit=cfg.limit(case, "run"), store=cfg.store(),
                                 retry_timeouts=cfg.retry_timeouts)
        if "run" in result.stages and not result.stages["run"].get("store"):
            _observe(cfg, case, "run", result.stages["run"]["seconds"])
        return result

    def prepare(log: Path) -> None:  # the oracle helper starts when verify needs it (not from the store)
        for stale in ("run.log", "oracle.log", "benchmark.log"):
            (log.parent / stale).unlink(missing_ok=True)

    return _run("verify", "verify", [case], cfg, work, prepare)


TASK_FUNCTIONS = {"model": model, "mlir": mlir, "vmfb": vmfb, "verify": verify}  # pipeline/core/chain.py's TASKS
