"""Sharding for CI matrices, with no cluster (CONV_SWEEP_SHARD=i/N): a deterministic 1/N of the
sweep, balanced by estimated cost rather than by count.

A model's cases on every target go to one shard (they share its model and MLIR tasks). The
cost of a case is an estimate in seconds: what every case pays (model, import, compile: about
1 s, more for TFLite's converter and for int8) plus its multiply-accumulates at a per-flavor
rate (run and oracle). Shards are filled greedily, largest first, each model to the shard with
the least cost so far (ties by name): the spread between shards stays below one model's cost.
"""
from __future__ import annotations

from pipeline.space.cases import Case
from pipeline.space.geometry import macs as geometry_macs
from pipeline.core.errors import ConfigError

FIXED_SECONDS = {"tflite_f32": 1.2, "tflite_w8if32": 1.3, "tflite_w8i8": 1.4, "onnx_f32": 0.9, "onnx_bf16": 1.0}
SECONDS_PER_GMAC = {"tflite_f32": 2.0, "tflite_w8if32": 3.0, "tflite_w8i8": 2.0, "onnx_f32": 2.0, "onnx_bf16": 6.0}


def parse(text: str | None) -> tuple[int, int] | None:
    """'i/N' -> (i, N), 1 <= i <= N."""
    text = (text or "").strip()
    if not text:
        return None
    parts = text.split("/")
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or not 1 <= int(parts[0]) <= int(parts[1]):
        raise ConfigError("CONV_SWEEP_SHARD", text, "must be i/N with 1 <= i <= N, e.g. 2/3")
    return int(parts[0]), int(parts[1])


def macs(case: Case) -> int:
    return geometry_macs(case.geometry)


def cost(case: Case) -> float:
    """Estimated seconds for one case on one target."""
    return FIXED_SECONDS[case.variant] + macs(case) / 1e9 * SECONDS_PER_GMAC[case.variant]


def select(cases: list[Case], shard: tuple[int, int] | None) -> list[Case]:
    """The cases of shard i of N (all of them without a shard), in sweep order."""
    if shard is None:
        return cases
    index, count = shard
    models: dict[str, float] = {}
    for case in cases:
        models[case.name] = models.get(case.name, 0.0) + cost(case)
    loads = [0.0] * count
    owner = {}
    for name, seconds in sorted(models.items(), key=lambda item: (-item[1], item[0])):
        slot = min(range(count), key=lambda s: (loads[s], s))
        owner[name] = slot
        loads[slot] += seconds
    return [c for c in cases if owner[c.name] == index - 1]
