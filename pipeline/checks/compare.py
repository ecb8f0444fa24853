"""Comparing an output with its oracle: shape, then dtype, then values against a tolerance."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pipeline.core.tools import write_bytes, write_text
from pipeline.targets.signature import ELEMENT_TYPES, TensorType


@dataclass(frozen=True)
class Comparison:
    """The outcome of one comparison; `passed` is False as soon as one element is out of bounds."""

    name: str  # what was compared, e.g. "vs tflite interpreter"
    passed: bool
    reason: str  # one line: why it failed, or a summary when it passed
    max_abs_error: float = float("nan")
    max_rel_error: float = float("nan")
    mismatches: int = 0  # elements outside the tolerance
    elements: int = 0
    worst_index: list[int] = field(default_factory=list)  # of the largest error/tolerance ratio
    tolerance_at_worst: float = float("nan")
    max_tolerance: float = float("nan")
    error_to_tolerance: float = float("nan")  # max |a - e| / tol: < 1 passes (inf if tol is 0)
    lsb_histogram: dict[str, int] | None = None  # int8: {difference in LSB: count}

    def to_dict(self) -> dict:
        return asdict(self)


# The coarse shape of a failure, from the worst to the mildest (the first that applies): what the
# output as a whole looks like (a NaN or an infinity in it; every element 0, or every element
# one value, where the expected output is not), then whether every element or only some are
# outside tolerance. The same compiler on the same case and data gives the same shape, so it is
# part of the failure's bucket.
SHAPES = ("non-finite output", "all-zero output", "constant output", "every element", "some elements")


def failure_shape(expected: np.ndarray, actual: np.ndarray, mismatches: int) -> str:
    """The first of SHAPES that describes a failed comparison (`mismatches` > 0) of two arrays
    of one shape."""
    e, a = _as_float(expected), _as_float(actual)
    if not np.isfinite(a).all():
        return SHAPES[0]
    if a.size and not a.any() and e.any():
        return SHAPES[1]
    if a.size > 1 and (a == a.flat[0]).all() and not (e == e.flat[0]).all():
        return SHAPES[2]
    return SHAPES[3] if mismatches == a.size else SHAPES[4]


def _as_float(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def compare(name: str, expected: np.ndarray, actual: np.ndarray, tolerance) -> Comparison:
    """Compare actual with expected; tolerance is an absolute bound, scalar or broadcastable.
    A failure's reason names its shape (SHAPES) after the count of elements outside tolerance.

    A non-finite value anywhere (expected, actual or tolerance) fails its element: no flavor
    allows one (the inputs and weights are finite and bounded, and no conv of the sweep comes
    near the f32 or bf16 range), and a NaN or infinite oracle or bound cannot vouch for anything."""
    if actual.shape != expected.shape:
        return Comparison(name, False, f"shape {actual.shape} != expected {expected.shape}")
    if actual.dtype != expected.dtype:
        return Comparison(name, False, f"dtype {actual.dtype} != expected {expected.dtype}")
    e, a = _as_float(expected), _as_float(actual)
    tol = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), e.shape)
    finite = np.isfinite(e) & np.isfinite(a) & np.isfinite(tol)
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(a - e), np.inf)
    bad = ~finite | (err > tol)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(err == 0, 0.0, err / np.abs(e))
        ratio = np.where(err == 0, 0.0, err / tol)
    ratio = np.where(finite, ratio, np.inf)
    worst = np.unravel_index(int(np.argmax(ratio)), e.shape) if e.size else ()
    histogram = None
    if np.issubdtype(expected.dtype, np.integer):
        diffs, counts = np.unique((a - e).astype(np.int64), return_counts=True)
        histogram = {str(int(d)): int(c) for d, c in zip(diffs, counts)}
    mismatches = int(bad.sum())
    max_abs = float(err.max()) if e.size else 0.0
    max_rel = float(rel.max()) if e.size else 0.0
    if mismatches:
        nonfinite = int((~finite).sum())
        reason = (f"{name}: {mismatches} of {e.size} elements outside tolerance "
                  f"({failure_shape(expected, actual, mismatches)}); "
                  + (f"{nonfinite} non-finite (expected, actual or tolerance NaN or inf); " if nonfinite else "")
                  + f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}, worst at {list(map(int, worst))} "
                  f"(expected {e[worst]:.6g}, got {a[worst]:.6g}, tolerance {tol[worst]:.3g})")
        if histogram is not None:
            reason += f"; LSB differences {histogram}"
    else:
        reason = f"{name}: max abs error {max_abs:.3g} within tolerance"
    return Comparison(name, mismatches == 0, reason, max_abs, max_rel, mismatches, int(e.size),
                      [int(i) for i in worst], float(tol[worst]) if e.size else float("nan"),
                      float(tol.max()) if e.size else float("nan"),
                      float(ratio.max()) if e.size else 0.0, histogram)


def compare_channel_sums(name: str, expected: np.ndarray, actual: np.ndarray, bounds: np.ndarray,
                         channel_axis: int) -> Comparison:
    """The tensor test: per output channel, the summed error sum(actual - expected) against its
    bound (one per channel). A failure's reason says how many channels are outside, with the
    shape `channel sum`; a non-finite sum or bound fails its channel."""
    e, a = _as_float(expected), _as_float(actual)
    if a.shape != e.shape:
        return Comparison(name, False, f"shape {a.shape} != expected {e.shape}")
    with np.errstate(invalid="ignore"):
        sums = np.moveaxis(a - e, channel_axis, 0).reshape(e.shape[channel_axis], -1).sum(axis=1)
    bounds = np.asarray(bounds, dtype=np.float64)
    finite = np.isfinite(sums) & np.isfinite(bounds)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(finite, np.where(sums == 0, 0.0, np.abs(sums) / bounds), np.inf)
    bad = ~finite | (np.abs(np.where(finite, sums, 0.0)) > bounds)
    worst = int(np.argmax(ratio)) if ratio.size else 0
    channels, mismatches = int(ratio.size), int(bad.sum())
    if mismatches:
        reason = (f"{name}: {mismatches} of {channels} channels outside tolerance (channel sum); worst channel "
                  f"{worst}: summed error {sums[worst]:.3g} over {e.size // max(channels, 1)} elements, "
                  f"bound {bounds[worst]:.3g}")
    else:
        reason = f"{name}: largest summed error / bound {float(ratio.max()) if channels else 0.0:.3g}"
    return Comparison(name, mismatches == 0, reason, float(np.abs(sums).max()) if channels else 0.0, float("nan"),
                      mismatches, channels, [worst], float(bounds[worst]) if channels else float("nan"),
                      float(bounds.max()) if channels else float("nan"), float(ratio.max()) if channels else 0.0)


CHECK, EXPECTED_BIN = "check.json", "repro-expected.bin"  # what repro.sh compares with, and how


def write_check(case_dir: Path, expected, mode: str, atol: float = 0.0, rtol: float = 0.0,
                input_arg: str | None = None) -> None:
    """Save the expected output as raw bytes (run tools read int8 .npy as si8 and bf16 .npy as
    an opaque type, neither matching the module's i8/bf16), how repro.sh compares (`exact`, or
    `approximate` with |actual - expected| <= atol + rtol |expected|) and how it passes the input."""
    element = ELEMENT_TYPES[expected.dtype.name]
    spec = TensorType(tuple(expected.shape), element).spec
    nonfinite = not bool(np.isfinite(np.asarray(expected, dtype=np.float64)).all())
    write_bytes(Path(case_dir) / EXPECTED_BIN, expected.tobytes())
    write_text(Path(case_dir) / CHECK, json.dumps({"expected": f"{spec}=@{EXPECTED_BIN}", "mode": mode,
                                                    "atol": atol, "rtol": rtol, "type": element,
                                                    "input": input_arg, "nonfinite": nonfinite}) + "\n")
