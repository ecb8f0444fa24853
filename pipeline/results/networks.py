"""The per-network view: for each network of the networks profile (pipeline/space/networks.py)
whose conv layers have cases among a report's results, each flavor's verdicts per layer (a
layer passes when its geometry's case of that flavor passes), the failing layers named with
their stage and bucket, and, where the compiler estimates NPU cycles (torq), the cycles of the
whole conv stack: the sum over layers, each layer counted once per use (a geometry used by
three layers counts three times), the MACs per cycle of each layer, and the costliest layers.
"""
from __future__ import annotations

from pipeline.outcome.result import PASS
from pipeline.space import networks
from pipeline.space.geometry import Geometry

TOP = 5  # the costliest layers shown per network and flavor


def _variant(entry: dict) -> str:
    return f"{entry['backend']}_{entry['flavor']}"


def view(entries: list[dict], bucket) -> list[dict]:
    """One row per network with a case among `entries`: {"network", "layers", "flavors": {variant:
    {"layers", "pass", "failing": [{"layer", "status", "stage", "bucket"}], "missing"}},
    "cycles": {variant: {"total", "layers", "of", "top": [{"layer", "cycles", "macs_per_cycle"}]}}}.
    `bucket(entry)` names a failing case's bucket. A layer with no case of a flavor (not swept, or
    refused) counts as missing, never as passing."""
    by_case = {(Geometry.from_dict(e["geometry"]), _variant(e)): e for e in entries if e.get("geometry")}
    variants = sorted({v for _, v in by_case})
    rows = []
    for network, net in networks.table().items():
        used = [(layer, Geometry.from_dict(layer["geometry"])) for layer in net["layers"]]
        if not any((g, v) in by_case for _, g in used for v in variants):
            continue
        flavors, cycles = {}, {}
        for v in variants:
            found = [(layer, by_case.get((g, v))) for layer, g in used]
            failing = [{"layer": layer["layer"], "status": e["status"], "stage": e.get("stage"), "bucket": bucket(e)}
                       for layer, e in found if e is not None and e["status"] != PASS]
            flavors[v] = {"layers": len(used), "pass": sum(e is not None and e["status"] == PASS for _, e in found),
                          "failing": failing, "missing": sum(e is None for _, e in found)}
            costed = [(layer["layer"], (e.get("perf") or {})) for layer, e in found if e is not None]
            costed = [(name, p) for name, p in costed if p.get("estimated_npu_cycles")]
            if costed:
                ranked = sorted(costed, key=lambda item: -item[1]["estimated_npu_cycles"])
                cycles[v] = {"total": sum(p["estimated_npu_cycles"] for _, p in costed), "layers": len(costed),
                             "of": len(used),
                             "top": [{"layer": name, "cycles": p["estimated_npu_cycles"],
                                      "macs_per_cycle": p.get("macs_per_cycle")} for name, p in ranked[:TOP]]}
        rows.append({"network": network, "layers": len(used), "flavors": flavors, "cycles": cycles})
    return rows


def lines(rows: list[dict], target: str = "") -> list[str]:
    """The view in the terminal summary: per network, each flavor's verdicts and failing layers,
    then the conv stack's estimated cycles where there are any."""
    out = []
    on = f" on {target}" if target else ""
    for row in rows:
        out.append(f"{row['network']} ({row['layers']} conv layers){on}:")
        for v, f in row["flavors"].items():
            missing = f", {f['missing']} not swept" if f["missing"] else ""
            failing = "; ".join(f"{x['layer']} ({x['status']} at {x['stage']}: {x['bucket'][:80]})"
                                for x in f["failing"][:5])
            more = f"; and {len(f['failing']) - 5} more" if len(f["failing"]) > 5 else ""
            out.append(f"  {v}: {f['pass']} of {f['layers']} pass{missing}"
                       + (f"; {len(f['failing'])} fail: {failing}{more}" if f["failing"] else ""))
        for v, c in row["cycles"].items():
            top = ", ".join(f"{t['layer']} {t['cycles']:,.0f}" for t in c["top"])
            out.append(f"  {v}: conv stack {c['total']:,.0f} estimated NPU cycles ({c['layers']} of {c['of']} layers); "
                       f"costliest: {top}")
    return out
