"""One entry point per stage, as the task runner calls them: build the stage's output, record
its duration, and turn any failure into result.json, classified against the expected-failures
list of each target.

The model and import stages are shared by every target (they take the cases of one model on
all selected targets, and write into the model's folder); compile and verify take one case on
its target. Each returns None on success (or an expected failure) or a one-line failure
message per case, ending with the case's repro.sh. Nothing here imports doit.
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path

from .cases import Case
from .config import Config
from .errors import StageError
from .expected import TASK_OF_STAGE
from .result import ERROR, FAIL, RESULT_FILE, XFAIL, XPASS, Result, read_all_stages, read_result, record_stage

MLIR, VMFB = "model.mlir", "model.vmfb"


def mlir_input(case: Case, cfg: Config) -> str:
    """The MLIR file the case's target compiler reads: the bytecode where the profile asks for
    it and the importer wrote one (TFLite), else the text."""
    from .importer import bytecode_path

    if case.backend == "tflite" and cfg.target(case.target).profile.mlir == "bytecode":
        return bytecode_path(Path(MLIR)).name
    return MLIR


def _run(task: str, stage: str, cases: list[Case], cfg: Config, work, prepare=None) -> str | None:
    """Run one task's work for `cases` (one model on several targets for the shared model and
    mlir tasks, else one case); `stage` names it in results (a task may fail at a later stage:
    verify fails at run, oracle or verify). `prepare` (one-off set-up, such as a helper process
    importing TensorFlow) runs first and is not counted in the stage's duration."""
    from .repro import write_repro

    first = cases[0]
    shared = task in ("model", "mlir")
    model_dir = cfg.model_dir(first)
    work_dir = model_dir if shared else cfg.case_dir(first)
    work_dir.mkdir(parents=True, exist_ok=True)
    _ensure_input(first, model_dir)
    repros = {}
    for case in cases:
        cfg.case_dir(case).mkdir(parents=True, exist_ok=True)
        repros[case.key] = write_repro(case, cfg, cfg.model_dir(case), cfg.case_dir(case))
    log = work_dir / f"{stage}.log"

    def failed(stage_, reason, log_, result=None):
        messages = [_failed(c, cfg, stage_, reason, log_, repros[c.key], result) for c in cases]
        return "\n".join(m for m in messages if m) or None

    try:
        if prepare:
            prepare(log)
        start = time.monotonic()
        outcome = work(work_dir, log)
    except StageError as err:
        return failed(err.stage, err.reason, err.log or str(log))
    except Exception as err:  # a converter or oracle bug: keep the traceback, fail this case only
        with open(log, "a") as f:
            f.write(traceback.format_exc())
        return failed(stage, f"{type(err).__name__}: {err}".splitlines()[0][:300], str(log))
    if task != "verify":  # verify records its own parts (oracle, run, compare) in result.json
        record_stage(work_dir, stage, seconds=round(time.monotonic() - start, 4))
    if task == "verify":
        write_repro(first, cfg, model_dir, cfg.case_dir(first))  # now with the check verify wrote
    if isinstance(outcome, Result) and outcome.status == FAIL:
        return failed("verify", outcome.reason, None, outcome)
    messages = []
    for case in cases:
        case_dir = cfg.case_dir(case)
        if case.expect_stage and TASK_OF_STAGE[case.expect_stage] == task:
            reason = (f"expected to fail at {case.expect_stage} ({case.expect_reason}) but passed: "
                      "remove it from the expected failures")
            Result.for_case(case, XPASS, stage=case.expect_stage, reason=reason,
                            stages=read_all_stages(model_dir, case_dir),
                            metrics=outcome.metrics if isinstance(outcome, Result) else {},
                            perf=outcome.perf if isinstance(outcome, Result) else {}).write(case_dir)
            messages.append(f"{case.key}: XPASS {reason}; repro: {repros[case.key]}")
            continue
        previous = read_result(case_dir)
        if previous and previous.get("status") in (ERROR, XFAIL) and TASK_OF_STAGE.get(previous.get("stage")) == task:
            (case_dir / RESULT_FILE).unlink(missing_ok=True)  # that failure is gone
    return "\n".join(messages) or None


def _ensure_input(case: Case, model_dir: Path) -> None:
    """The case's input, saved before anything runs, so that repro.sh has it at every stage."""
    from .verify import INPUT, save_npy

    if not (model_dir / INPUT).exists():
        from .data import make_input

        save_npy(model_dir / INPUT, make_input(case))


def _failed(case: Case, cfg: Config, stage: str, reason: str, log: str | None, repro: Path,
            result: Result | None = None) -> str | None:
    """Record a failure; None if it is the expected one (xfail), else the task's failure message."""
    case_dir = cfg.case_dir(case)
    result = result or Result.for_case(case, ERROR, stage=stage, reason=reason, log=log,
                                       stages=read_all_stages(cfg.model_dir(case), case_dir))
    if case.expect_stage == stage:
        result.notes = {**result.notes, "failed_as": result.status, "expected_reason": case.expect_reason}
        result.status = XFAIL
        result.write(case_dir)
        return None
    result.write(case_dir)
    what = "FAILED" if result.status == FAIL else f"{stage} failed:"
    where = f"; log: {log}" if log else ""
    return f"{case.key}: {what} {reason}{where}; repro: {repro}"


def record_error(cases: list[Case], cfg: Config, stage: str, reason: str) -> str | None:
    """Record a failure the stage could not record itself (its Dask worker was lost, no answer
    came): each case's result.json; the task's failure message, or None where expected."""
    from .repro import write_repro

    messages = []
    for case in cases:
        cfg.case_dir(case).mkdir(parents=True, exist_ok=True)
        repro = write_repro(case, cfg, cfg.model_dir(case), cfg.case_dir(case))
        messages.append(_failed(case, cfg, stage, reason, None, repro))
    return "\n".join(m for m in messages if m) or None


def model(cases: list[Case], cfg: Config) -> str | None:
    from .isolate import call, warm

    case = cases[0]
    module = "pipeline.model_tflite" if case.backend == "tflite" else "pipeline.model_onnx"

    def work(model_dir: Path, log: Path) -> None:
        call(f"{module}:build_{case.backend}", case, model_dir / case.model_file, helper="model", stage="model",
             timeout=cfg.timeout, log=log)

    def prepare(log: Path) -> None:
        log.unlink(missing_ok=True)
        warm(f"{module}:warm_up", helper="model", stage="model", log=log)

    return _run("model", "model", cases, cfg, work, prepare)


def mlir(cases: list[Case], cfg: Config) -> str | None:
    from .isolate import call, warm

    case = cases[0]

    def work(model_dir: Path, log: Path) -> None:
        call("pipeline.importer:import_model", case, model_dir / case.model_file, model_dir / MLIR, log, cfg.timeout,
             helper="import", stage="import", timeout=cfg.timeout, log=log)

    def prepare(log: Path) -> None:
        log.unlink(missing_ok=True)
        warm(f"pipeline.importer:warm_up_{case.backend}", helper="import", stage="import", log=log)

    return _run("mlir", "import", cases, cfg, work, prepare)


def vmfb(case: Case, cfg: Config) -> str | None:
    from .compiler import compile_mlir

    target = cfg.target(case.target)

    def work(case_dir: Path, log: Path) -> None:
        log.unlink(missing_ok=True)
        compile_mlir(cfg.model_dir(case) / mlir_input(case, cfg), case_dir / VMFB, compiler=target.compiler,
                     flags=target.compile_flags(case.variant), timeout=cfg.timeout, log=log,
                     profiling=target.profile.profiling)

    return _run("vmfb", "compile", [case], cfg, work)


def verify(case: Case, cfg: Config) -> str | None:
    from .isolate import warm
    from .verify import verify_case

    def work(case_dir: Path, log: Path) -> Result:
        return verify_case(case, cfg.target(case.target), cfg.model_dir(case), case_dir, timeout=cfg.timeout,
                           benchmark=cfg.benchmark)

    def prepare(log: Path) -> None:
        for stale in ("run.log", "oracle.log", "benchmark.log"):
            (log.parent / stale).unlink(missing_ok=True)
        warm("pipeline.oracle:warm_up", helper="oracle", stage="oracle", log=log.parent / "oracle.log")

    return _run("verify", "verify", [case], cfg, work, prepare)
