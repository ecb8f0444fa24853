"""Failure buckets: the signature a failure is grouped, listed and matched by.

A signature is the failing stage and its one-line reason, with everything that varies between
cases or runs of one compiler abstracted: case names, file paths (absolute or ./ ../ relative),
tensor types, shapes (4x8xf32), hex addresses (a stack frame's), and every number (exit
statuses, line and column numbers, sizes, timeouts). The words of the diagnostic stay. A
numeric failure (stage verify) is the names of the checks that failed: how many elements, where
the worst one lies and by how much depend on the geometry and its data, not on the failure mode.
So a rerun of the same compiler on the same cases gives the same signatures, and one bug seen
on many geometries is one bucket.
"""
from __future__ import annotations

import re

_NORMALIZE = [
    (re.compile(r"conv_(tflite|onnx)_\w+"), "<case>"),
    (re.compile(r"(?:[A-Za-z]:|\.\.?)?/[^\s'\"():,]+"), "<path>"),  # absolute, or ./ ../ relative
    (re.compile(r"tensor<[^>]*>"), "tensor<...>"),
    (re.compile(r"\b(?:\d+x)+(?:[a-z]+\d*|\d+)\b"), "<shape>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"(?<![A-Za-z_\d.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
]
_FAILED_CHECK = re.compile(r"(vs .*?): \d+ of \d+ elements outside tolerance")


def normalize(text: str) -> str:
    for pattern, replacement in _NORMALIZE:
        text = pattern.sub(replacement, text)
    return text.strip()


def signature(stage: str | None, reason: str | None) -> str:
    """The bucket of a failure at `stage` with this one-line `reason`."""
    text, stage = reason or "", stage or "?"
    checks = _FAILED_CHECK.findall(text) if stage == "verify" else []
    if checks:
        return f"verify: {' + '.join(normalize(c) for c in checks)}: elements outside tolerance"
    return f"{stage}: {normalize(text)}"
