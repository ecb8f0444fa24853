"""The per-network view: for each network of the networks profile (pipeline/space/networks.py)
whose conv layers have cases among a report's results, each flavor's verdicts per layer (a
layer passes when its geometry's case of that flavor passes), the failing layers named with
their stage and bucket, and, where the compiler estimates NPU cycles (torq), the cycles of the
whole conv stack: the sum over layers, each layer counted once per use (a geometry used by
three layers counts three times), the MACs per cycle of each layer, and the costliest layers.
A network's conv layers that no geometry expresses (networks.skipped) have no case: the view
names them, apart from its layers.
"""
from __future__ import annotations

from pipeline.outcome.result import COMPILED, NOT_RUN, PASS
from pipeline.space import networks
from pipeline.space.geometry import Geometry

TOP = 5  # the costliest layers shown per network and flavor


def _variant(entry: dict) -> str:
    return f"{entry['backend']}_{entry['flavor']}"


def _cases(entries: list[dict]) -> tuple[dict, list[str], set[Geometry]]:
    """(geometry, flavor) -> its entry, for the cases that ran (a case not run yet is missing);
    the flavors; and the geometries of every case, run or not."""
    by_case, swept = {}, set()
    for e in entries:
        if e.get("geometry"):
            g = Geometry.from_dict(e["geometry"])
            swept.add(g)
            if e["status"] != NOT_RUN:
                by_case[(g, _variant(e))] = e
    return by_case, sorted({v for _, v in by_case}), swept


def view(entries: list[dict], bucket) -> list[dict]:
    """One row per network whose every layer has a case among `entries`, one of them run: {"network", "layers", "flavors": {variant:
    {"layers", "pass", "failing": [{"layer", "status", "stage", "bucket"}], "missing"}},
    "cycles": {variant: {"total", "layers", "of", "per_layer": [{"layer", "cycles",
    "macs_per_cycle"}] costliest first, "top": its first TOP}}, "cases": {layer: the geometry id in
    its cases' names, conv_<backend>_<flavor>_<id>}, "skipped": [the layers no geometry expresses]}.
    `bucket(entry)` names a failing case's bucket. A layer with no case of a flavor that ran (not
    swept, not run yet, or refused) counts as missing, never as passing; one compiled only
    (CONV_SWEEP_COMPILE_ONLY) as compiled, neither passing nor failing."""
    by_case, variants, swept = _cases(entries)
    rows = []
    for network, used in networks.by_network().items():
        if not all(g in swept for _, g in used) or not any((g, v) in by_case for _, g in used for v in variants):
            continue  # the sweep does not hold the whole network, or none of its cases ran
        flavors, cycles = {}, {}
        for v in variants:
            found = [(layer, by_case.get((g, v))) for layer, g in used]
            failing = [{"layer": layer["layer"], "status": e["status"], "stage": e.get("stage"), "bucket": bucket(e)}
                       for layer, e in found if e is not None and e["status"] not in (PASS, COMPILED)]
            flavors[v] = {"layers": len(used), "pass": sum(e is not None and e["status"] == PASS for _, e in found),
                          "compiled": sum(e is not None and e["status"] == COMPILED for _, e in found),
                          "failing": failing, "missing": sum(e is None for _, e in found)}
            costed = [(layer["layer"], (e.get("perf") or {})) for layer, e in found if e is not None]
            costed = [(name, p) for name, p in costed if p.get("estimated_npu_cycles")]
            if costed:
                ranked = sorted(costed, key=lambda item: -item[1]["estimated_npu_cycles"])
                per_layer = [{"layer": name, "cycles": p["estimated_npu_cycles"], "macs_per_cycle": p.get("macs_per_cycle")}
                             for name, p in ranked]
                cycles[v] = {"total": sum(p["estimated_npu_cycles"] for _, p in costed), "layers": len(costed),
                             "of": len(used), "top": per_layer[:TOP], "per_layer": per_layer}
        rows.append({"network": network, "layers": len(used), "flavors": flavors, "cycles": cycles,
                     "cases": {layer["layer"]: g.id for layer, g in used},
                     "skipped": [x["layer"] for x in networks.skipped(network)]})
    return rows


def layer_outcomes(entries: list[dict]) -> dict[tuple[str, str], dict[str, tuple[str, float | None]]]:
    """(network, flavor) -> layer -> (its case's status, its estimated cycles or None), for every
    layer with a case among `entries`."""
    by_case, variants, _ = _cases(entries)
    out: dict[tuple[str, str], dict[str, tuple[str, float | None]]] = {}
    for network, layer, g in networks.layers():
        for v in variants:
            e = by_case.get((g, v))
            if e is not None:
                cycles = (e.get("perf") or {}).get("estimated_npu_cycles")
                out.setdefault((network, v), {})[layer["layer"]] = (e["status"], cycles)
    return out


def compare(old: list[dict], new: list[dict]) -> list[dict]:
    """Per network and flavor with layers in both runs (`old`, `new`: their entries): passing
    layers before and after, the layers newly failing and newly passing, and the conv stack's
    estimated cycles over the layers costed in both runs, with their ratio (new / old)."""
    a, b = layer_outcomes(old), layer_outcomes(new)
    rows = []
    for key in sorted(set(a) & set(b)):
        before, after = a[key], b[key]
        common = sorted(set(before) & set(after))
        costed = [layer for layer in common if before[layer][1] and after[layer][1]]
        cycles_old = sum(before[layer][1] for layer in costed)
        cycles_new = sum(after[layer][1] for layer in costed)
        rows.append({"network": key[0], "flavor": key[1], "layers": len(common),
                     "old_pass": sum(before[layer][0] == PASS for layer in common),
                     "new_pass": sum(after[layer][0] == PASS for layer in common),
                     "newly_failing": [layer for layer in common if before[layer][0] == PASS != after[layer][0]],
                     "newly_passing": [layer for layer in common if after[layer][0] == PASS != before[layer][0]],
                     "costed_in_both": len(costed), "cycles_old": cycles_old, "cycles_new": cycles_new,
                     "cycles_ratio": cycles_new / cycles_old if costed else None})
    return rows


def compare_lines(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        cycles = (f"; conv stack cycles x{r['cycles_ratio']:.3f} ({r['cycles_old']:,.0f} -> {r['cycles_new']:,.0f}, "
                  f"{r['costed_in_both']} layers costed in both)" if r["cycles_ratio"] is not None else "")
        changed = "".join(f"; newly failing: {', '.join(r['newly_failing'][:8])}" if r["newly_failing"] else "") + \
            "".join(f"; newly passing: {', '.join(r['newly_passing'][:8])}" if r["newly_passing"] else "")
        out.append(f"{r['network']} {r['flavor']}: {r['old_pass']} -> {r['new_pass']} of {r['layers']} layers pass"
                   f"{changed}{cycles}")
    return out


def lines(rows: list[dict], target: str = "") -> list[str]:
    """The view in the terminal summary: per network, each flavor's verdicts and failing layers,
    then the conv stack's estimated cycles where there are any."""
    out = []
    on = f" on {target}" if target else ""
    for row in rows:
        out.append(f"{row['network']} ({row['layers']} conv layers){on}:")
        if row.get("skipped"):
            out.append(f"  {len(row['skipped'])} conv layers not expressible (skipped), listed in the table: "
                       f"{', '.join(row['skipped'])}")
        for v, f in row["flavors"].items():
            missing = (f", {f['compiled']} compiled only" if f["compiled"] else "") + \
                (f", {f['missing']} not run" if f["missing"] else "")
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
