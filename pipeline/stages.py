"""One entry point per stage, as the task runner calls them: build the stage's output for one
case, record its duration, and turn any failure into that case's result.json.

Each returns None on success or a one-line failure message. Nothing here imports doit.
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path

from .cases import Case
from .config import Config
from .errors import StageError
from .result import ERROR, FAIL, RESULT_FILE, Result, read_result, read_stages, record_stage

MLIR, VMFB = "model.mlir", "model.vmfb"


def _run(stage: str, case: Case, cfg: Config, work) -> str | None:
    case_dir = cfg.case_dir(case)
    case_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    log = case_dir / f"{stage}.log"
    try:
        work(case_dir, log)
    except StageError as err:
        return _record_error(case, case_dir, err.stage, err.reason, err.log or str(log))
    except Exception as err:  # a converter or oracle bug: keep the traceback, fail this case only
        with open(log, "a") as f:
            f.write(traceback.format_exc())
        reason = f"{type(err).__name__}: {err}".splitlines()[0][:300]
        return _record_error(case, case_dir, stage, reason, str(log))
    record_stage(case_dir, stage, seconds=round(time.monotonic() - start, 4))
    previous = read_result(case_dir)
    if previous and previous.get("status") == ERROR and previous.get("stage") == stage:
        (case_dir / RESULT_FILE).unlink(missing_ok=True)  # that error is fixed
    return None


def _record_error(case: Case, case_dir: Path, stage: str, reason: str, log: str) -> str:
    Result.for_case(case, ERROR, stage=stage, reason=reason, log=log, stages=read_stages(case_dir)).write(case_dir)
    return f"{case.name}: {stage} failed: {reason} (log: {log})"


def model(case: Case, cfg: Config) -> str | None:
    from .isolate import call

    module = "pipeline.model_tflite" if case.backend == "tflite" else "pipeline.model_onnx"
    builder = f"{module}:build_{case.backend}"

    def work(case_dir: Path, log: Path) -> None:
        log.unlink(missing_ok=True)
        call(builder, case, case_dir / case.model_file, stage="model", timeout=cfg.timeout, log=log,
             warm_up=f"{module}:warm_up")

    return _run("model", case, cfg, work)


def mlir(case: Case, cfg: Config) -> str | None:
    from .importer import import_model

    def work(case_dir: Path, log: Path) -> None:
        log.unlink(missing_ok=True)
        import_model(case, case_dir / case.model_file, case_dir / MLIR, timeout=cfg.timeout, log=log)

    return _run("import", case, cfg, work)


def vmfb(case: Case, cfg: Config) -> str | None:
    from .compiler import compile_mlir

    def work(case_dir: Path, log: Path) -> None:
        log.unlink(missing_ok=True)
        compile_mlir(case_dir / MLIR, case_dir / VMFB, compiler=cfg.iree_compile, flags=cfg.compile_flags,
                     timeout=cfg.timeout, log=log)

    return _run("compile", case, cfg, work)


def verify(case: Case, cfg: Config) -> str | None:
    from .verify import verify_case

    outcome: dict = {}

    def work(case_dir: Path, log: Path) -> None:
        for stale in ("run.log", "oracle.log"):
            (case_dir / stale).unlink(missing_ok=True)
        outcome["result"] = verify_case(case, case_dir, timeout=cfg.timeout)

    error = _run("verify", case, cfg, work)
    if error:
        return error
    result = outcome["result"]
    if result.status == FAIL:
        return f"{case.name}: FAILED {result.reason}"
    return None
