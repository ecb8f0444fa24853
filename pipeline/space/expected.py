"""Expected failures: a checked-in list of cases (shell-style patterns allowed), each known to
fail at a given stage in a given bucket (pipeline/outcome/bucket.py: the failure's normalized
signature, as the report groups it).

A listed case failing at that stage with that signature is `xfail` and does not fail the run;
failing there with another signature it is `changed` (red: the known bug may be gone and a new
one in its place); passing that stage it is `xpass` (red, strict); failing at another stage it
is an ordinary failure. Failures of the harness itself are never expected (pipeline/outcome/verdict.py).

File format (JSON): {"expected_failures": [{"case": "conv_onnx_bf16_*_k9_*", "stage": "compile",
"bucket": "compile: ...", "issue": "https://...", "comment": "..."}]}; `issue` (a link or a
tracker id) and `comment` (the user's words) are optional and kept by `doit accept_failures`.
"""
from __future__ import annotations

import fnmatch
import json
from collections import Counter
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from pipeline.core.chain import STAGES
from pipeline.core.errors import ConfigError, load_json

DEFAULT_DIR = Path(__file__).parent / "expected_failures"  # one file per target: <target>.json
_REQUIRED, _OPTIONAL = ("case", "stage", "bucket"), ("issue", "comment")
TIMEOUT_BUCKET = "timeout"  # the bucket of a cut at a time limit, after its stage (pipeline/outcome/bucket.py)


@dataclass(frozen=True)
class Expectation:
    case: str  # case name or shell-style pattern
    stage: str  # the stage it is expected to fail at
    bucket: str  # the failure's signature there (pipeline/outcome/bucket.py)
    issue: str = ""  # the upstream issue tracking it: a URL or a tracker id
    comment: str = ""  # the user's note

    @property
    def may_finish(self) -> bool:
        """A listed timeout: the case's time lies near its budget, so finishing within it is
        accepted as well (pipeline/outcome/verdict.py); its chain runs to the end."""
        return self.bucket == f"{self.stage}: {TIMEOUT_BUCKET}"

    def to_dict(self) -> dict:
        return {"case": self.case, "stage": self.stage, "bucket": self.bucket,
                **({"issue": self.issue} if self.issue else {}), **({"comment": self.comment} if self.comment else {})}


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
        if not isinstance(entry, dict):
            raise ConfigError(here, entry, "must be an object")
        missing = [f for f in _REQUIRED if f not in entry]
        unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
        if missing or unknown:
            problem = (f"lacks {', '.join(missing)}" if missing else f"has unknown fields {', '.join(unknown)}") + \
                f"; an entry has {', '.join(_REQUIRED)} (the failure's bucket signature, as the report prints " \
                f"it; `doit accept_failures` writes them) and optionally {', '.join(_OPTIONAL)}"
            raise ConfigError(here, entry, problem)
        for name in (*_REQUIRED, *_OPTIONAL):
            if name in entry and (not isinstance(entry[name], str) or (name in _REQUIRED and not entry[name])):
                raise ConfigError(f"{here}.{name}", entry[name], "must be a non-empty string" if name in _REQUIRED
                                  else "must be a string")
        if entry["stage"] not in STAGES:
            raise ConfigError(f"{here}.stage", entry["stage"], f"must be one of {', '.join(STAGES)}")
        if not entry["bucket"].startswith(f"{entry['stage']}: "):
            raise ConfigError(f"{here}.bucket", entry["bucket"], f"must be a signature of the stage: "
                              f"'{entry['stage']}: ...'")
        out.append(Expectation(entry["case"], entry["stage"], entry["bucket"], entry.get("issue", ""),
                               entry.get("comment", "")))
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
    return exact, [e for e in expectations if is_pattern(e.case)]


def dump(expectations: list[Expectation]) -> str:
    return json.dumps({"expected_failures": [e.to_dict() for e in expectations]}, indent=1) + "\n"


@dataclass(frozen=True)
class Accepted:
    """The rewritten list, and what changed against the old one."""

    entries: list[Expectation]
    added: int  # failures no entry covered
    changed: int  # entries whose stage or bucket was rewritten to the observed one
    removed: int  # entries whose cases no longer fail


def accept(current: tuple[Expectation, ...], failures: dict[str, tuple[str, str]],
           judged: set[str]) -> Accepted:
    """The list that makes today's failures expected. `failures` maps every failing case of the
    selection to its (stage, signature); `judged` are the selection's cases that reached a
    verdict. An entry none of whose cases were judged (another profile's or N's) is kept as it
    is; an entry whose judged cases all pass is removed; otherwise it takes the stage and bucket
    most of its failing cases have, keeping its issue and comment, and a failing case it covers
    that failed otherwise gets an exact entry of its own (carrying the same issue and comment),
    as does every failure no entry covers."""
    entries, covered = [], set()
    changed = removed = 0
    for e in current:
        cases = [c for c in judged if match(c, current) is e]
        if not cases:
            entries.append(e)
            continue
        failing = [c for c in cases if c in failures]
        if not failing:
            removed += 1
            continue
        stage, bucket = Counter(failures[c] for c in failing).most_common(1)[0][0]
        entries.append(replace(e, stage=stage, bucket=bucket))
        changed += (stage, bucket) != (e.stage, e.bucket)
        covered.update(c for c in failing if failures[c] == (stage, bucket))
        for c in sorted(c for c in failing if failures[c] != (stage, bucket)):
            entries.append(Expectation(c, *failures[c], e.issue, e.comment))
            covered.add(c)
            changed += 1
    added = sorted(c for c in failures if c not in covered)
    entries += [Expectation(c, *failures[c]) for c in added]
    return Accepted(ordered(entries), len(added), changed, removed)


def is_pattern(case: str) -> bool:
    return any(c in case for c in "*?[")


def ordered(entries: list[Expectation]) -> list[Expectation]:
    """The order a list is written in: its patterns as they were, then its exact names sorted."""
    return [e for e in entries if is_pattern(e.case)] + sorted((e for e in entries if not is_pattern(e.case)),
                                                              key=lambda e: e.case)
