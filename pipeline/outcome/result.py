"""A case's outcome, as written to its result.json. Reports only read these."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.space.cases import Case
from pipeline.core.tools import write_text

PASS, FAIL, ERROR, XFAIL, XPASS = "pass", "fail", "error", "xfail", "xpass"
CHANGED = "changed"  # listed as an expected failure at its stage, but failed there with another signature
HARNESS = "harness"  # the harness itself failed (an exception in our code, a lost worker): never expected
COMPILED = "compiled"  # a compile-only case: compiled, never run or compared
NOT_RUN = "not run"  # a case of the selection with no result yet (the report lists it)
TIMEOUT = "timeout"  # a compile or run cut at its time limit (its budget, or its predicted cost below it)
RED = (FAIL, ERROR, TIMEOUT, CHANGED, HARNESS, XPASS)  # statuses that fail the run
RESULT_FILE = "result.json"
STAGES_FILE = "stages.json"  # per-stage durations and tool versions, written as stages finish


@dataclass
class Result:
    case: str
    backend: str
    flavor: str
    category: str
    geometry: dict
    status: str  # pass, compiled, fail, error, timeout, harness; judged against the list: xfail, changed, xpass
    stage: str | None = None  # the failing stage: model, import, compile, run, verify
    reason: str = ""  # one line
    compile_only: bool = False
    metrics: dict = field(default_factory=dict)  # comparison name -> Comparison.to_dict()
    notes: dict = field(default_factory=dict)  # e.g. weights_quantized for w8if32
    stages: dict = field(default_factory=dict)  # stage -> {"seconds": ...}
    log: str | None = None  # the failing stage's log
    target: str = "llvm-cpu"  # the target profile the case ran on
    perf: dict = field(default_factory=dict)  # MACs, .vmfb size, compile time, execution time (pipeline/targets/perf.py)
    # a numeric verify failure's mis-lowering that its output matches (pipeline/checks/explain.py); else absent
    explanation: str | None = None

    @classmethod
    def for_case(cls, case: Case, status: str, **kwargs) -> "Result":
        return cls(case.name, case.backend, case.flavor, case.category, case.geometry.to_dict(), status,
                   compile_only=case.compile_only, target=case.target, **kwargs)

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        """A Result from its result.json (as read_result gives it)."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def write(self, case_dir: Path) -> None:
        data = asdict(self)
        if data["explanation"] is None:
            del data["explanation"]
        write_text(Path(case_dir) / RESULT_FILE, json.dumps(_finite(data), indent=1) + "\n")


def _finite(value):
    """JSON has no NaN or infinity: write them as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def read_result(case_dir: Path) -> dict | None:
    path = Path(case_dir) / RESULT_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_stages(case_dir: Path) -> dict:
    try:
        return json.loads((Path(case_dir) / STAGES_FILE).read_text())
    except (OSError, ValueError):
        return {}


def read_all_stages(model_dir: Path, case_dir: Path) -> dict:
    """The target-independent stages (model, import) and the target's own."""
    return {**read_stages(model_dir), **read_stages(case_dir)}


def record_stage(case_dir: Path, stage: str, **info) -> None:
    stages = read_stages(case_dir)
    stages[stage] = info
    write_text(Path(case_dir) / STAGES_FILE, json.dumps(stages, indent=1) + "\n")
