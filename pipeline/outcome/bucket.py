"""Failure buckets: the signature a failure is grouped, listed and matched by.

A signature is the failing stage and its one-line reason, with everything that varies between
cases or runs of one compiler abstracted: case names, file paths (absolute or ./ ../ relative),
tensor types, shapes (4x8xf32), hex addresses (a stack frame's), and every number (exit
statuses, line and column numbers, sizes, timeouts). The words of the diagnostic stay. A
numeric failure (stage verify) is the names of the checks that failed, each with the coarse shape
of its failure (pipeline/checks/compare.py: SHAPES; a non-finite, all-zero or constant output,
every element wrong or some): how many elements, where the worst one lies and by how much depend
on the geometry and its data, the shape on the failure mode. A listed failure whose shape
changes (a few wrong elements turned into NaN, or into zeros) is a changed bucket.
So a rerun of the same compiler on the same cases gives the same signatures, and one bug seen
on many geometries is one bucket.

The failing tool's own name is abstracted too (`<tool> exit status <n>`): a wrapper script, a
renamed build or a build from source elsewhere fails in the same bucket as the installed
compiler. So is a diagnostic's location (`<loc>: error: ...`): the same error is located in the
imported file by ONNX's importer (`model.mlir:7:10`) and nowhere by TFLite's (`<unknown>:0`), and
it is one bug, one bucket and one report that lists the flavors it was seen in.

A cut at a time limit (outcome `timeout`) is `<stage>: timeout` whatever its limit: how long the
tool had and how long it was predicted to take are in its reason, not in its bucket.
"""
from __future__ import annotations

import re

from pipeline.outcome.result import TIMEOUT
from pipeline.space.expected import TIMEOUT_BUCKET

_NORMALIZE = [
    (re.compile(r"conv_(tflite|onnx)_\w+"), "<case>"),
    # absolute, or ./ ../ relative; not a slash inside a word ("input/output")
    (re.compile(r"(?:[A-Za-z]:|\.\.?|(?<![\w.]))/[^\s'\"():,]+"), "<path>"),
    (re.compile(r"tensor<[^>]*>"), "tensor<...>"),
    (re.compile(r"\b(?:\d+x)+(?:[a-z]+\d*|\d+)\b"), "<shape>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"(?<![A-Za-z_\d.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
    # the failing tool, as run_tool and the compile stage name it at the start of a reason
    (re.compile(r"^\S+ (?=exit status|killed by signal|timed out after|could not start|wrote an )"), "<tool> "),
    # a diagnostic's location: a file and line (and column), or none
    (re.compile(r"(?:<path>|<unknown>|<case>|[\w.-]+\.mlir(?:bc)?)(?::<n>)*: (?=(?:error|warning|note|remark):)"),
     "<loc>: "),
]
_FAILED_CHECK = re.compile(r"(vs .*?): \d+ of \d+ (?:elements|channels) outside tolerance(?: \(([a-z -]+)\))?")


def normalize(text: str) -> str:
    for pattern, replacement in _NORMALIZE:
        text = pattern.sub(replacement, text)
    return text.strip()


def signature(stage: str | None, reason: str | None, outcome: str | None = None) -> str:
    """The bucket of a failure at `stage` with this one-line `reason`; `outcome` is the status
    before judging (pipeline/outcome/verdict.py: outcome)."""
    text, stage = reason or "", stage or "?"
    if outcome == TIMEOUT:
        return f"{stage}: {TIMEOUT_BUCKET}"
    checks = _FAILED_CHECK.findall(text) if stage == "verify" else []
    if checks:
        named = [normalize(check) + (f" [{shape}]" if shape else "") for check, shape in checks]
        return f"verify: {' + '.join(named)}: elements outside tolerance"
    return f"{stage}: {normalize(text)}"
