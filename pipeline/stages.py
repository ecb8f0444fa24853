"""One entry point per stage, as the task runner calls them: build the stage's output for one
case, record its duration, and turn any failure into that case's result.json, classified
against the expected-failures list.

Each returns None on success (or an expected failure) or a one-line failure message ending
with the case's repro.sh. Nothing here imports doit.
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path

from .cases import Case
from .config import Config
from .errors import StageError
from .expected import TASK_OF_STAGE
from .result import ERROR, FAIL, RESULT_FILE, XFAIL, XPASS, Result, read_result, read_stages, record_stage

MLIR, VMFB = "model.mlir", "model.vmfb"


def _run(task: str, stage: str, case: Case, cfg: Config, work, prepare=None) -> str | None:
    """Run one task's work; `stage` names it in results (a task may fail at a later stage:
    verify fails at run, oracle or verify). `prepare` (one-off set-up, such as a helper
    process importing TensorFlow) runs first and is not counted in the stage's duration."""
    from .repro import write_repro

    case_dir = cfg.case_dir(case)
    case_dir.mkdir(parents=True, exist_ok=True)
    _ensure_input(case, case_dir)
    repro = write_repro(case, cfg, case_dir)
    log = case_dir / f"{stage}.log"
    try:
        if prepare:
            prepare(log)
        start = time.monotonic()
        outcome = work(case_dir, log)
    except StageError as err:
        return _failed(case, case_dir, err.stage, err.reason, err.log or str(log), repro)
    except Exception as err:  # a converter or oracle bug: keep the traceback, fail this case only
        with open(log, "a") as f:
            f.write(traceback.format_exc())
        reason = f"{type(err).__name__}: {err}".splitlines()[0][:300]
        return _failed(case, case_dir, stage, reason, str(log), repro)
    record_stage(case_dir, stage, seconds=round(time.monotonic() - start, 4))
    if task == "verify":
        write_repro(case, cfg, case_dir)  # now with the check verify wrote
    if isinstance(outcome, Result) and outcome.status == FAIL:
        return _failed(case, case_dir, "verify", outcome.reason, None, repro, outcome)
    if case.expect_stage and TASK_OF_STAGE[case.expect_stage] == task:
        reason = (f"expected to fail at {case.expect_stage} ({case.expect_reason}) but passed: "
                  "remove it from the expected failures")
        Result.for_case(case, XPASS, stage=case.expect_stage, reason=reason, stages=read_stages(case_dir),
                        metrics=outcome.metrics if isinstance(outcome, Result) else {}).write(case_dir)
        return f"{case.name}: XPASS {reason}; repro: {repro}"
    previous = read_result(case_dir)
    if previous and previous.get("status") in (ERROR, XFAIL) and TASK_OF_STAGE.get(previous.get("stage")) == task:
        (case_dir / RESULT_FILE).unlink(missing_ok=True)  # that failure is gone
    return None


def _ensure_input(case: Case, case_dir: Path) -> None:
    """The case's input, saved before anything runs, so that repro.sh has it at every stage."""
    from .verify import INPUT, save_npy

    if not (case_dir / INPUT).exists():
        from .data import make_input

        save_npy(case_dir / INPUT, make_input(case))


def _failed(case: Case, case_dir: Path, stage: str, reason: str, log: str | None, repro: Path,
            result: Result | None = None) -> str | None:
    """Record a failure; None if it is the expected one (xfail), else the task's failure message."""
    result = result or Result.for_case(case, ERROR, stage=stage, reason=reason, log=log, stages=read_stages(case_dir))
    if case.expect_stage == stage:
        result.notes = {**result.notes, "failed_as": result.status, "expected_reason": case.expect_reason}
        result.status = XFAIL
        result.write(case_dir)
        return None
    result.write(case_dir)
    what = "FAILED" if result.status == FAIL else f"{stage} failed:"
    where = f"; log: {log}" if log else ""
    return f"{case.name}: {what} {reason}{where}; repro: {repro}"


def model(case: Case, cfg: Config) -> str | None:
    from .isolate import call, warm

    module = "pipeline.model_tflite" if case.backend == "tflite" else "pipeline.model_onnx"

    def work(case_dir: Path, log: Path) -> None:
        call(f"{module}:build_{case.backend}", case, case_dir / case.model_file, helper="model", stage="model",
             timeout=cfg.timeout, log=log)

    def prepare(log: Path) -> None:
        log.unlink(missing_ok=True)
        warm(f"{module}:warm_up", helper="model", stage="model", log=log)

    return _run("model", "model", case, cfg, work, prepare)


def mlir(case: Case, cfg: Config) -> str | None:
    from .isolate import call, warm

    def work(case_dir: Path, log: Path) -> None:
        call("pipeline.importer:import_model", case, case_dir / case.model_file, case_dir / MLIR, log, cfg.timeout,
             helper="import", stage="import", timeout=cfg.timeout, log=log)

    def prepare(log: Path) -> None:
        log.unlink(missing_ok=True)
        warm(f"pipeline.importer:warm_up_{case.backend}", helper="import", stage="import", log=log)

    return _run("mlir", "import", case, cfg, work, prepare)


def vmfb(case: Case, cfg: Config) -> str | None:
    from .compiler import compile_mlir

    def work(case_dir: Path, log: Path) -> None:
        log.unlink(missing_ok=True)
        compile_mlir(case_dir / MLIR, case_dir / VMFB, compiler=cfg.iree_compile, flags=cfg.compile_flags,
                     timeout=cfg.timeout, log=log)

    return _run("vmfb", "compile", case, cfg, work)


def verify(case: Case, cfg: Config) -> str | None:
    from .isolate import warm
    from .verify import verify_case

    def work(case_dir: Path, log: Path) -> Result:
        return verify_case(case, case_dir, timeout=cfg.timeout)

    def prepare(log: Path) -> None:
        for stale in ("run.log", "oracle.log"):
            (log.parent / stale).unlink(missing_ok=True)
        warm("pipeline.oracle:warm_up", helper="oracle", stage="oracle", log=log.parent / "oracle.log")

    return _run("verify", "verify", case, cfg, work, prepare)
