"""Expected failures: a checked-in list of cases (shell-style patterns allowed) known to fail
at a given stage, with the reason. A listed case failing at that stage is `xfail` and does not
fail the run; one that passes is `xpass` and does (strict); one failing at another stage is
an ordinary failure.

File format (JSON): {"expected_failures": [{"case": "conv_onnx_bf16_*_k9_*", "stage": "compile",
"reason": "..."}]}. Low-level module: imports only errors.
"""
from __future__ import annotations

import fnmatch
import json
from functools import lru_cache
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import ConfigError, load_json

STAGES = ("model", "import", "compile", "run", "oracle", "verify")
TASK_OF_STAGE = {"model": "model", "import": "mlir", "compile": "vmfb", "run": "verify", "oracle": "verify",
                 "verify": "verify"}
DEFAULT_DIR = Path(__file__).parent / "expected_failures"  # one file per target: <target>.json


@dataclass(frozen=True)
class Expectation:
    case: str  # case name or shell-style pattern
    stage: str  # the stage it is expected to fail at
    reason: str  # why (a bug link, the failure bucket, ...)


def load(path: str | Path, missing_ok: bool = False) -> tuple[Expectation, ...]:
    """The file's entries; with `missing_ok`, a file that does not exist lists none (a target
    without a list of its own)."""
    if missing_ok and not Path(path).exists():
        return ()
    where = f"CONV_SWEEP_EXPECTED_FAILURES ({path})"
    data = load_json(path, "CONV_SWEEP_EXPECTED_FAILURES")
    entries = data.get("expected_failures") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(where, data, 'must be an object {"expected_failures": [...]}')
    out = []
    for i, entry in enumerate(entries):
        here = f"{where}.expected_failures[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"case", "stage", "reason"}:
            raise ConfigError(here, entry, 'must have exactly the fields "case", "stage" and "reason"')
        if not isinstance(entry["case"], str) or not entry["case"]:
            raise ConfigError(f"{here}.case", entry["case"], "must be a case name or pattern")
        if entry["stage"] not in STAGES:
            raise ConfigError(f"{here}.stage", entry["stage"], f"must be one of {', '.join(STAGES)}")
        out.append(Expectation(entry["case"], entry["stage"], str(entry["reason"])))
    return tuple(out)


def match(name: str, expectations: tuple[Expectation, ...]) -> Expectation | None:
    """The entry naming the case exactly, else the first pattern that matches it."""
    exact, patterns = _index(expectations)
    return exact.get(name) or next((e for e in patterns if fnmatch.fnmatchcase(name, e.case)), None)


@lru_cache(maxsize=8)
def _index(expectations: tuple[Expectation, ...]) -> tuple[dict, list]:
    """Exact names in a dict (a list accepted from a sweep names hundreds of cases), patterns in order."""
    exact: dict[str, Expectation] = {}
    for e in expectations:
        exact.setdefault(e.case, e)
    return exact, [e for e in expectations if any(c in e.case for c in "*?[")]


def dump(expectations: list[Expectation]) -> str:
    return json.dumps({"expected_failures": [asdict(e) for e in expectations]}, indent=1) + "\n"


def accept(current: tuple[Expectation, ...], failures: list[tuple[str, str, str]],
           not_run: tuple[str, ...] = (), selection: tuple[str, ...] | None = None) -> list[Expectation]:
    """The list that makes today's failures expected: (case, stage, bucket) for every case that
    fails now. Entries that still hold (match some failure at their stage, or a case with no
    result to judge by, or none of the `selection`'s cases: another profile's or N's) are kept as
    written, with their reasons; a failure they do not cover gets its own entry, its bucket as
    reason."""
    judged = set(selection or ()) - set(not_run)
    kept = [e for e in current
            if any(fnmatch.fnmatchcase(case, e.case) and stage == e.stage for case, stage, _ in failures)
            or any(fnmatch.fnmatchcase(case, e.case) for case in not_run)
            or (selection is not None and not any(fnmatch.fnmatchcase(case, e.case) for case in judged))]
    added = [Expectation(case, stage, bucket) for case, stage, bucket in failures
             if match(case, tuple(kept)) is None or match(case, tuple(kept)).stage != stage]
    return kept + sorted(added, key=lambda e: e.case)
