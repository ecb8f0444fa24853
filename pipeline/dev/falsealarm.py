"""False alarms of the f32 accumulation bound: how often a correct summation exceeds it.

    python -m pipeline.dev.falsealarm [--elements SCALE] [--seed S] [--tile T] [--out FILE.json]

pipeline/checks/tolerance.py claims, under its rounding model, that an element's f32
accumulation error exceeds A = LAMBDA u sqrt(K + 4) Q (accumulation_bound, F = 1) with
probability at most 1e-9, for any data and any summation order, and that a channel's summed
error exceeds channel_error_bound with probability at most 1e-9.  This measures it: it
simulates correct implementations in numpy and counts the elements (and channels) the bounds
would fail.

Each data set is one output channel: a weights vector w of length K (float32) and a matrix X
(elements x K, float32) of its input windows, bias 0, at K = 9, 576, 4,608 and 41,472.  The
weights' scale is a = float32(1 / sqrt(K)) (the bound is scale-invariant: Q, and the errors
with it, scale with the data).  The data sets the bound covers:
  random        w ~ U(-a, a), x ~ U(-1, 1)  (the sweep's own kind of data);
  plus-minus    w = +a for the first ceil(K / 2) taps, -a for the rest; x = 1 + U(-1/16, 1/16);
  sorted        w = sorted U(-a, a); x ~ U(0, 1);
  bright-patch  w ~ U(0, a); x ~ U(0, 0.1), except the windows of a bright patch (elements i
                with i mod 100 < 10: 10%, in runs of 10), x ~ 1 + U(0, 0.1);
  offset-100    w ~ U(-a, a), x = 100 + U(-0.01, 0.01);
and the documented limits of the model (rounding errors that repeat with one sign), reported
apart, never counted as false alarms:
  average-flat     w = float32(1 / K) everywhere, every window constant (x ~ U(0, 1) per element);
  difference-flat  w = +a for the first ceil(K / 2) taps, -a (1 + 2**-9) for the rest, on a
                   constant window (x ~ U(0, 1) per element).

Each element's products p_j = w_j x_j are rounded to f32 and summed three ways:
  in-order    sequential f32 accumulation, np.cumsum(products, dtype=float32)[:, -1];
  pairwise    np.add.reduce over each float32 row: numpy's pairwise summation (blocks of 8
              accumulators up to 128 terms, halves above);
  bf16-tiles  the running sum held in bf16: each tile of `tile` (16) products added to it one
              by one in f32, the sum then rounded to bf16 (ml_dtypes, nearest even) - a target
              whose profile says accumulation "bf16" (tolerance.bf16_accumulation_bound).
The reference S is the float64 sum of the exact products of the same f32 operands (a product
of two f32 numbers is exact in float64; the float64 summation's own error, ~log2(K) 2**-53
sum |p|, is below 1e-7 A), sum |p| the float64 sum of their magnitudes, and
Q = tolerance.partial_sum_bound(S, sum |p|, 0).  For each (data, K, order): the elements, those
with |y - S| > A (the f32 bound), max |y - S| / A, and for bf16-tiles the same against the
bf16 accumulation's worst-case bound (no tensor test: its errors may share a sign).  The
tensor test: consecutive `channel` (64) elements
form a channel (they share w, as one output channel's outputs do; the rows of X are its
windows); a channel fails when |sum of its errors| exceeds tolerance.channel_error_bound of
the elements' accumulation_variance (elements whose sums lie within each other's bound grouped).

The default budget is about 10**7 elements over the covered data sets, in-order and pairwise
(K = 9: 10**6 per cell, 576: 2 10**5, 4,608: 5 10**4, 41,472: 2 10**4; each a multiple of the
channel); --elements scales it.  Work goes in chunks of about 2**23 products (under 200 MB of
buffers).  Under the model, 10**7 elements should show no false alarm (1e-9 each): any on a
covered data set contradicts the bound, and the command exits 1 (each order is judged against
its own accumulation's bound: bf16-tiles against the bf16 one).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

from pipeline.checks import tolerance

KS = (9, 576, 4_608, 41_472)
BASE_ELEMENTS = {9: 1_000_000, 576: 200_000, 4_608: 50_000, 41_472: 20_000}
COVERED = ("random", "plus-minus", "sorted", "bright-patch", "offset-100")
LIMITS = ("average-flat", "difference-flat")
DATASETS = COVERED + LIMITS
ORDERS = ("in-order", "pairwise", "bf16-tiles")
CHANNEL = 64  # elements per channel in the tensor test
TILE = 16  # products per bf16 tile
CHUNK_PRODUCTS = 1 << 23
FACTORS = 1  # the products' rounding: one family of rounded factors


def scale(k: int) -> np.float32:
    """a: the weights' magnitude, float32(1 / sqrt(K))."""
    return np.float32(1.0 / np.sqrt(k))


def weights(data: str, k: int, rng: np.random.Generator) -> np.ndarray:
    """The data set's weights vector (float32, length K)."""
    a = scale(k)
    half = (k + 1) // 2
    if data in ("random", "offset-100"):
        return ((rng.random(k, dtype=np.float32) * 2 - 1) * a).astype(np.float32)
    if data == "plus-minus":
        return np.concatenate([np.full(half, a), np.full(k - half, -a)]).astype(np.float32)
    if data == "sorted":
        return np.sort((rng.random(k, dtype=np.float32) * 2 - 1) * a).astype(np.float32)
    if data == "bright-patch":
        return (rng.random(k, dtype=np.float32) * a).astype(np.float32)
    if data == "average-flat":
        return np.full(k, np.float32(1.0 / k), dtype=np.float32)
    if data == "difference-flat":
        return np.concatenate([np.full(half, a, dtype=np.float32),
                               np.full(k - half, -np.float64(a) * (1 + 2.0 ** -9)).astype(np.float32)])
    raise ValueError(f"unknown data set {data!r}")


def bright(start: int, rows: int) -> np.ndarray:
    """Which of elements start .. start + rows - 1 lie in bright-patch's bright patch."""
    return (np.arange(start, start + rows) % 100) < 10


def windows(data: str, k: int, start: int, rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    """Fill `out` (rows x K, float32) with the input windows of elements start, start + 1, ..."""
    rows = out.shape[0]
    if data in LIMITS:
        out[:] = rng.random((rows, 1), dtype=np.float32)  # constant over each window
        return out
    rng.random(out.shape, dtype=np.float32, out=out)  # U(0, 1)
    if data == "random":
        out *= 2
        out -= 1
    elif data == "plus-minus":
        out -= 0.5
        out *= np.float32(1 / 8)
        out += 1
    elif data == "sorted":
        pass
    elif data == "bright-patch":
        out *= np.float32(0.1)
        out[bright(start, rows)] += 1
    elif data == "offset-100":
        out -= 0.5
        out *= np.float32(0.02)
        out += 100
    else:
        raise ValueError(f"unknown data set {data!r}")
    return out


def exact(w: np.ndarray, x: np.ndarray, scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(S, sum |p|) per row of x: float64 sums of the exact products of the f32 operands."""
    products = np.multiply(x, w.astype(np.float64), out=scratch)  # f32 x f32 is exact in float64
    total = np.add.reduce(products, axis=1)
    np.abs(products, out=products)
    return total, np.add.reduce(products, axis=1)


def accumulate(products: np.ndarray, order: str, tile: int = TILE, scratch: np.ndarray | None = None) -> np.ndarray:
    """Each row of f32 `products` summed in `order` (see the module docstring), float32 out."""
    if order == "in-order":
        return np.cumsum(products, axis=1, dtype=np.float32, out=scratch)[:, -1].copy()
    if order == "pairwise":
        return np.add.reduce(products, axis=1, dtype=np.float32)
    if order == "bf16-tiles":
        rows, k = products.shape
        running = np.zeros(rows, dtype=np.float32)
        for first in range(0, k, tile):
            for j in range(first, min(k, first + tile)):
                np.add(running, products[:, j], out=running)
            running = running.astype(ml_dtypes.bfloat16).astype(np.float32)
        return running
    raise ValueError(f"unknown order {order!r}")


def bounds(total: np.ndarray, abs_sum: np.ndarray, k: int, accumulation: str, channel: int = CHANNEL,
           tile: int = TILE) -> tuple[np.ndarray, np.ndarray | None]:
    """(A per element, channel_error_bound per channel) of an accumulation ("f32", or "bf16":
    a running sum rounded to bf16 every `tile` terms, which gets no tensor test), for a batch
    of elements whose consecutive `channel` elements form a channel (a trailing part channel
    is left out of the tensor test)."""
    total, abs_sum = np.asarray(total, dtype=np.float64), np.asarray(abs_sum, dtype=np.float64)
    q = tolerance.partial_sum_bound(total, abs_sum, 0.0)
    if accumulation == "bf16":
        return tolerance.bf16_accumulation_bound(k, q, tile, FACTORS), None
    shape = (total.size // channel, channel)
    used = shape[0] * channel
    variance = tolerance.accumulation_variance(k, q[:used].reshape(shape), factors=FACTORS)
    within = tolerance.accumulation_bound(k, q, factors=FACTORS)
    return within, tolerance.channel_error_bound(variance, total[:used].reshape(shape), within[:used].reshape(shape), 0)


def _ratio(value: np.ndarray, bound: np.ndarray) -> np.ndarray:
    return np.divide(value, bound, out=np.where(value == 0, 0.0, np.inf), where=bound > 0)


def judge(error: np.ndarray, element_bound: np.ndarray, channel_bound: np.ndarray, channel: int = CHANNEL) -> dict:
    """Counts for one batch of elements against bounds(): the elements over A, max |error| / A,
    the sum of (|error| / A)**2, the channels whose |summed error| exceeds their bound and the
    largest |summed error| / bound."""
    error = np.asarray(error, dtype=np.float64)
    if channel_bound is None:  # no tensor test
        channel_bound = np.empty(0)
    channels = channel_bound.size
    summed = np.abs(error[:channels * channel].reshape(channels, channel).sum(axis=1))
    size = np.abs(error)
    ratio = _ratio(size, element_bound)
    return {"elements": int(error.size), "over": int(np.count_nonzero(size > element_bound)),
            "max_ratio": float(ratio.max(initial=0.0)), "sum_sq_ratio": float(np.square(ratio).sum()),
            "channels": int(channels), "channels_over": int(np.count_nonzero(summed > channel_bound)),
            "max_channel_ratio": float(_ratio(summed, channel_bound).max(initial=0.0))}


def _merge(into: dict, part: dict) -> dict:
    for key, value in part.items():
        into[key] = max(into.get(key, 0.0), value) if key.startswith("max_") else into.get(key, 0) + value
    return into


def units(order: str) -> tuple[str, ...]:
    """The accumulations' bounds an order is judged against: f32 always, bf16 for bf16-tiles."""
    return ("f32", "bf16") if order == "bf16-tiles" else ("f32",)


def simulate(data: str, k: int, elements: int, seed: int = 0, orders=ORDERS, tile: int = TILE,
             channel: int = CHANNEL, chunk_products: int = CHUNK_PRODUCTS) -> dict:
    """One data set at one K: {order: {unit: judge counts}} over `elements` elements (rounded
    up to whole channels), in chunks of about `chunk_products` products."""
    index = DATASETS.index(data)
    w = weights(data, k, np.random.default_rng([seed, index, k]))
    elements = -(-elements // channel) * channel
    rows = min(elements, max(channel, chunk_products // k // channel * channel))
    x = np.empty((rows, k), dtype=np.float32)
    products = np.empty_like(x)
    sums = np.empty_like(x) if "in-order" in orders else None
    wide = np.empty((rows, k), dtype=np.float64)
    result = {order: {name: {} for name in units(order)} for order in orders}
    for start in range(0, elements, rows):
        m = min(rows, elements - start)
        xs, ps = windows(data, k, start, np.random.default_rng([seed, index, k, start]), x[:m]), products[:m]
        np.multiply(xs, w, out=ps)  # the products, rounded to f32
        total, abs_sum = exact(w, xs, wide[:m])
        judged = {}  # unit -> bounds, shared by the orders
        for order in orders:
            y = accumulate(ps, order, tile, None if sums is None else sums[:m])
            error = y.astype(np.float64) - total
            for name in units(order):
                if name not in judged:
                    judged[name] = bounds(total, abs_sum, k, name, channel, tile)
                _merge(result[order][name], judge(error, *judged[name], channel))
    return result


def cell_rows(data: str, k: int, result: dict) -> list[dict]:
    """One JSON row per order of a simulate() result."""
    rows = []
    for order, by_unit in result.items():
        f32 = by_unit["f32"]
        row = {"data": data, "covered": data in COVERED, "k": k, "order": order, "elements": f32["elements"],
               "over_f32": f32["over"], "max_ratio_f32": f32["max_ratio"],
               "rms_ratio_f32": float(np.sqrt(f32["sum_sq_ratio"] / max(f32["elements"], 1))),
               "channels": f32["channels"], "channels_over_f32": f32["channels_over"],
               "max_channel_ratio_f32": f32["max_channel_ratio"]}
        if "bf16" in by_unit:
            b = by_unit["bf16"]
            row.update({"over_bf16": b["over"], "max_ratio_bf16": b["max_ratio"], "channels_bf16": b["channels"],
                        "channels_over_bf16": b["channels_over"], "max_channel_ratio_bf16": b["max_channel_ratio"]})
        rows.append(row)
    return rows


def false_alarms(row: dict) -> tuple[int, int]:
    """(element, tensor) false alarms of a row: over its own accumulation's bound (bf16-tiles:
    the bf16 bound; the f32 bound is not its bound)."""
    unit = "bf16" if row["order"] == "bf16-tiles" else "f32"
    return row[f"over_{unit}"], row[f"channels_over_{unit}"]


def totals(rows: list[dict]) -> dict:
    """Per order, over the covered data sets and over the limits apart: elements, element false
    alarms, channels, tensor false alarms (each order against its own accumulation's bound)."""
    out = {}
    for group, covered in (("covered", True), ("limits", False)):
        out[group] = {}
        for order in ORDERS:
            picked = [r for r in rows if r["covered"] == covered and r["order"] == order]
            if not picked:
                continue
            alarms = [false_alarms(r) for r in picked]
            out[group][order] = {"elements": sum(r["elements"] for r in picked),
                                 "element_false_alarms": sum(a for a, _ in alarms),
                                 "channels": sum(r["channels_bf16" if order == "bf16-tiles" else "channels"]
                                                 for r in picked),
                                 "tensor_false_alarms": sum(t for _, t in alarms),
                                 "max_ratio": max(r["max_ratio_bf16" if order == "bf16-tiles" else "max_ratio_f32"]
                                                  for r in picked)}
    return out


def run(factor: float = 1.0, seed: int = 0, datasets=DATASETS, ks=KS, orders=ORDERS, tile: int = TILE,
        channel: int = CHANNEL, progress=None) -> dict:
    """The whole simulation: rows per (data, K, order), totals, parameters and the runtime."""
    began = time.perf_counter()
    rows = []
    for data in datasets:
        for k in ks:
            elements = max(channel, int(round(BASE_ELEMENTS.get(k, 10_000) * factor)))
            cell_began = time.perf_counter()
            rows.extend(cell_rows(data, k, simulate(data, k, elements, seed, orders, tile, channel)))
            if progress:
                progress(f"{data} K={k}: {time.perf_counter() - cell_began:.1f} s")
    return {"parameters": {"scale": factor, "seed": seed, "tile": tile, "channel": channel, "lambda": tolerance.LAMBDA,
                           "weight_scale": "float32(1 / sqrt(K))", "bias": 0.0},
            "rows": rows, "totals": totals(rows), "seconds": round(time.perf_counter() - began, 1)}


def table(report: dict) -> str:
    """The rows and totals as a markdown table."""
    lines = ["| data | K | order | elements | over f32 A | max err/A f32 | over bf16 A | max err/A bf16 "
             "| channels | ch over f32 | max Z/B f32 | ch over bf16 | max Z/B bf16 |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        bf = r["order"] == "bf16-tiles"
        name = r["data"] if r["covered"] else f"{r['data']} (limit)"
        lines.append(f"| {name} | {r['k']} | {r['order']} | {r['elements']} | {r['over_f32']} | {r['max_ratio_f32']:.3g} | "
                     + (f"{r['over_bf16']} | {r['max_ratio_bf16']:.3g} | " if bf else "- | - | ")
                     + f"{r['channels']} | {r['channels_over_f32']} | {r['max_channel_ratio_f32']:.3g} | "
                     + (f"{r['channels_over_bf16']} | {r['max_channel_ratio_bf16']:.3g} |" if bf else "- | - |"))
    lines += ["", "| group | order | elements | element false alarms | max err/A | channels | tensor false alarms |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for group, by_order in report["totals"].items():
        for order, t in by_order.items():
            lines.append(f"| {group} | {order} | {t['elements']} | {t['element_false_alarms']} | {t['max_ratio']:.3g} | "
                         f"{t['channels']} | {t['tensor_false_alarms']} |")
    lines.append(f"\n(bf16-tiles: false alarms against the bf16 bound; {report['seconds']} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=float, default=1.0, help="scale factor on the elements per cell (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tile", type=int, default=TILE, help="products per bf16 tile (default 16)")
    parser.add_argument("--out", type=Path, help="write the rows and totals here as JSON")
    args = parser.parse_args(argv)
    report = run(args.elements, args.seed, tile=args.tile, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(table(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    covered = report["totals"]["covered"]
    return 1 if any(t["element_false_alarms"] or t["tensor_false_alarms"] for t in covered.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
