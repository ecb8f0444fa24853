"""Root causes: failure buckets that are one bug, grouped.

One compiler bug often shows as several buckets: the same geometry fails in two flavors with
two messages (a non-finite output in f32 and in bf16), or one wrong lowering gives different
error texts per frontend. Two buckets are one root cause when

- they fail at the same stage on mostly the same geometries: the geometries failing in both
  are at least half of those of the smaller bucket (in different flavors: a case is in one
  bucket). One bug shows on the same geometries in each flavor it reaches; two bugs that only
  touch (a geometry each frontend fails on for its own reason) are not one, nor chained
  through such a geometry into one;
  or
- both are wrong answers (verify) that the same mis-lowering explains
  (pipeline/checks/explain.py: the `explanation` of their cases, "none matched" aside);

and the relation is closed transitively (connected buckets). Each root cause lists its buckets,
its flavors, its stages, its cases and distinct geometries, and why its buckets were joined.
A bucket linked to no other is a root cause of its own.
"""
from __future__ import annotations

import json
from collections import defaultdict
from itertools import combinations

NONE_MATCHED = "none matched"


def _geometry_key(entry: dict) -> str:
    return json.dumps(entry.get("geometry") or {}, sort_keys=True)


SHARED = 0.5  # of the smaller bucket's geometries (at the stage), failing in the other too, to join them


def _links(failing: list[tuple[str, dict]]) -> list[tuple[str, str, str]]:
    """(bucket, bucket, why) for every pair of buckets joined by mostly shared geometries at
    one stage, or by one explanation."""
    links = []
    geometries: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))  # stage -> bucket -> geometries
    by_explanation: dict[str, set[str]] = defaultdict(set)
    for bucket, entry in failing:
        geometries[str(entry.get("stage"))][bucket].add(_geometry_key(entry))
        explanation = entry.get("explanation")
        if entry.get("stage") == "verify" and explanation and explanation != NONE_MATCHED:
            by_explanation[explanation].add(bucket)
    for stage, buckets in geometries.items():
        for a, b in combinations(sorted(buckets), 2):
            shared = len(buckets[a] & buckets[b])
            if shared and shared >= SHARED * min(len(buckets[a]), len(buckets[b])):
                links.append((a, b, f"mostly the same geometries fail in both at {stage}"))
    for explanation, found in by_explanation.items():
        first, *rest = sorted(found)
        links += [(first, other, f"the same wrong answer: {explanation}") for other in rest]
    return links


def root_causes(failing: list[tuple[str, dict]]) -> list[dict]:
    """The root causes of `failing`: (bucket signature, result entry) of every failing case.
    Biggest first; each {"buckets", "flavors", "stages", "count", "geometries", "joined_by"}."""
    parent: dict[str, str] = {}

    def root(bucket: str) -> str:
        while parent.setdefault(bucket, bucket) != bucket:
            bucket = parent[bucket]
        return bucket

    why: dict[str, set[str]] = defaultdict(set)
    for bucket, _ in failing:
        root(bucket)
    for a, b, reason in _links(failing):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[rb] = ra
        why[root(a)].add(reason)
    members: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for bucket, entry in failing:
        members[root(bucket)].append((bucket, entry))
    causes = []
    for top, cases in members.items():
        counts: dict[str, int] = defaultdict(int)
        for bucket, _ in cases:
            counts[bucket] += 1
        causes.append({
            "buckets": sorted(counts, key=lambda b: (-counts[b], b)),
            "flavors": sorted({f"{e.get('backend')}_{e.get('flavor')}" for _, e in cases}),
            "stages": sorted({str(e.get("stage")) for _, e in cases}),
            "count": len(cases),
            "geometries": len({_geometry_key(e) for _, e in cases}),
            "joined_by": sorted(reason for r, reasons in why.items() if root(r) == top for reason in reasons),
        })
    return sorted(causes, key=lambda c: (-c["count"], c["buckets"][0]))


def describe(cause: dict) -> str:
    """One line: how many buckets, flavors and cases, and why they are one."""
    joined = f"; joined: {'; '.join(cause['joined_by'])}" if cause["joined_by"] else ""
    return (f"{len(cause['buckets'])} bucket{'s' if len(cause['buckets']) != 1 else ''}, "
            f"{cause['count']} cases ({cause['geometries']} geometries) in {', '.join(cause['flavors'])} "
            f"at {', '.join(cause['stages'])}{joined}")
