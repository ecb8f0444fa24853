"""The Torq suite's xfail file, both ways: `tests/test_conv_sweep-xfails.txt` as upstream's
`torq/testing/xfail.py` (synaptics-torq/torq-compiler) reads it.

The format, as that parser reads it: each line is stripped; an empty line or one starting
with `#` is a comment; any other line splits on single spaces into one or two fields, the test
name (what follows `::` in the pytest node id) and optionally an issue; more fields are an error
(so an issue holds no space, and no comment may follow an entry). A listed test is marked xfail.

Upstream's tests/test_conv_sweep.py gives each case two tests, `test_conv_sweep_numeric[<case>-
<runtime>-<chip>]` and `test_conv_sweep_compile[...]`, each set up with the compiled model (the
numeric test with the run's outputs too) and then run or skipped by flavor: tflite_w8i8 and
onnx_bf16 are compared in the numeric test, the other flavors only compiled. So a case failing to
compile (or to build its model or import it) fails both tests; one failing to run (or hanging)
fails the numeric test only; a numeric mismatch fails the numeric test of a compared flavor, and
no test of a compile-only flavor.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.core.errors import ConfigError

MODULE = "test_conv_sweep"
FILE_NAME = f"{MODULE}-xfails.txt"
DEFAULT_PARAMS = "sim-sl2610-v1"  # upstream's defaults: --torq-runtime-hw-type=sim, chip sl2610-v1
NUMERIC, COMPILE = "test_conv_sweep_numeric", "test_conv_sweep_compile"
COMPARED = ("tflite_w8i8", "onnx_bf16")  # the flavors upstream's numeric test compares
_TEST_NAME = re.compile(rf"^(?P<test>{NUMERIC}|{COMPILE})\[(?P<case>[^-\[\]]+)-(?P<params>[^\[\]]+)\]$")


def failing_tests(variant: str, stage: str) -> tuple[str, ...]:
    """Which of upstream's two tests a case of `variant` failing at `stage` fails."""
    if stage in ("model", "import", "compile"):
        return NUMERIC, COMPILE
    if stage == "run":
        return (NUMERIC,)
    return (NUMERIC,) if variant in COMPARED else ()  # oracle, verify: only a compared flavor checks numbers


def test_name(test: str, case: str, params: str = DEFAULT_PARAMS) -> str:
    return f"{test}[{case}-{params}]"


@dataclass(frozen=True)
class Line:
    test_name: str
    issue: str | None


def parse(text: str, where: str) -> list[Line]:
    """The entries of an xfail file, read as upstream's parser reads it (comments dropped); a
    line it would refuse is a ConfigError naming the line."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(" ")
        if len(fields) > 2:
            raise ConfigError(f"{where}, line {number}", raw, "has more than a test name and an issue "
                              "separated by one space (upstream's parser refuses it)")
        out.append(Line(fields[0], fields[1] if len(fields) == 2 else None))
    return out


def case_of(name: str) -> tuple[str, str] | None:
    """(case, params) of one of upstream's conv-sweep test names, or None."""
    found = _TEST_NAME.match(name)
    return (found["case"], found["params"]) if found else None


def export(target: str, entries: list[dict], expectations, params: str = DEFAULT_PARAMS) -> tuple[str, int, list[str]]:
    """The xfail file of one target's judged entries (report.collect's, each with its `bucket`
    signature): every case the expected-failures list
    names and that fails (xfail, or changed: it fails, in another bucket), under a comment
    line with its bucket; its issue link where the list has one. Returns (text, test names
    written, notes on the listed cases left out)."""
    from pipeline.outcome.result import CHANGED, XFAIL
    from pipeline.space.expected import match

    groups: dict[str, list[tuple[dict, object]]] = {}
    notes = []
    for entry in sorted(entries, key=lambda e: e["case"]):
        listed = match(entry["case"], expectations)
        if listed is None:
            continue
        if entry["status"] not in (XFAIL, CHANGED):
            notes.append(f"{entry['case']}: {entry['status']} in this run, not exported")
            continue
        groups.setdefault(entry["bucket"], []).append((entry, listed))
    lines = [f"# conv-sweep's expected failures on {target}, as upstream's {MODULE}.py names its tests",
             f"# (parameters {params}); regenerate with `doit export_xfails`"]
    written = 0
    for bucket in sorted(groups, key=lambda b: (-len(groups[b]), b)):
        lines += ["", f"# {bucket} ({len(groups[bucket])} cases)"]
        for entry, listed in groups[bucket]:
            tests = failing_tests(f"{entry['backend']}_{entry['flavor']}", entry["stage"])
            if not tests:
                lines.append(f"# {entry['case']}: a numeric failure of a flavor upstream only compiles")
                continue
            issue = listed.issue
            if issue and any(c.isspace() for c in issue):
                raise ConfigError(f"expected failure {listed.case}: issue", issue,
                                  "holds a space, which upstream's xfail file cannot carry")
            for test in tests:
                lines.append(test_name(test, entry["case"], params) + (f" {issue}" if issue else ""))
                written += 1
    return "\n".join(lines) + "\n", written, notes


def merge(current, lines: list[Line], failures: dict[str, tuple[str, str]]):
    """The expected-failures list with the xfail file's cases added: each case's stage and
    bucket as this run observed them (`failures`: case -> (stage, bucket)), its issue from the
    file (else the one it had). Returns (entries, cases imported, notes on lines not imported)."""
    from dataclasses import replace

    from pipeline.space.expected import Expectation, ordered

    issues: dict[str, str | None] = {}
    notes = []
    for line in lines:
        found = case_of(line.test_name)
        if found is None:
            notes.append(f"{line.test_name}: not a test of upstream's {MODULE}.py")
            continue
        case = found[0]
        if issues.get(case) is None:
            issues[case] = line.issue
    entries = list(current)
    exact = {e.case: i for i, e in enumerate(entries)}
    imported = 0
    for case, issue in issues.items():
        if case not in failures:
            notes.append(f"{case}: does not fail in this run (or is not in its selection): not imported")
            continue
        stage, bucket = failures[case]
        if case in exact:
            old = entries[exact[case]]
            entries[exact[case]] = replace(old, stage=stage, bucket=bucket, issue=issue or old.issue)
        else:
            entries.append(Expectation(case, stage, bucket, issue or ""))
        imported += 1
    return ordered(entries), imported, notes
