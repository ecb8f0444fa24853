"""The sweep's outcome, read from every case's result.json: a terminal summary, and
results.json, junit.xml and a self-contained report.html in <build>/report/.

Reports only consume results; they never change a case's status.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from pipeline.core.chain import STAGES, STORED_STAGES
from pipeline.core.layout import Layout
from pipeline.space.cases import Case, geometry_id
from pipeline.targets.perf import by_flavor, describe, slowest_relative
from pipeline.outcome.bucket import signature as bucket_signature
from pipeline.outcome.result import CHANGED, COMPILED, ERROR, FAIL, HARNESS, NOT_RUN, PASS, TIMEOUT, XFAIL, XPASS, read_result
from pipeline.results.causes import describe as describe_cause, root_causes
from pipeline.results import networks
from pipeline.results.region import learn
from pipeline.core.tools import write_text

FAILED = (FAIL, ERROR, TIMEOUT, HARNESS, CHANGED, XFAIL)  # statuses with a failure, grouped in buckets
TOOL_FAILURES = (FAIL, ERROR, TIMEOUT, XFAIL, CHANGED)  # a compiler's or runtime's failures: FAILED but the harness


def collect(cases: list[Case], case_dir) -> list[dict]:
    """One entry per case of the sweep: its result.json, or status "not run"."""
    entries = []
    for case in cases:
        result = read_result(case_dir(case)) or {}
        entry = {"case": case.name, "target": case.target, "backend": case.backend, "flavor": case.flavor,
                 "category": case.category,
                 "geometry": case.geometry.to_dict(), "status": NOT_RUN, "stage": None, "reason": "",
                 "metrics": {}, "notes": {}, "stages": {}, "perf": {}, "log": None, "explanation": None,
                 "repro": str(case_dir(case) / "repro.sh"),
                 "issue": case.expected.issue if case.expected else ""}  # the upstream issue its listing names
        entry.update({k: v for k, v in result.items() if k in entry and k not in ("case", "target", "repro")})
        entries.append(entry)
    return entries


# --- failure buckets ---------------------------------------------------------------------------

def signature(entry: dict) -> str:
    """The entry's failure bucket (pipeline/outcome/bucket.py)."""
    return bucket_signature(entry.get("stage"), entry.get("reason"),
                            (entry.get("notes") or {}).get("outcome") or entry.get("status"))


def failing(entries: list[dict]) -> dict[str, tuple[str, str]]:
    """case -> (stage, bucket) of every entry failing in a tool or a check (listed or not;
    harness errors are this tool's own)."""
    return {e["case"]: (e["stage"], signature(e)) for e in entries if e["status"] in TOOL_FAILURES}


def buckets(entries: list[dict], examples: int = 3) -> list[dict]:
    """Failures (and expected failures) grouped by signature, biggest first."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for entry in entries:
        if entry["status"] in FAILED:
            groups[signature(entry)].append(entry)
    out = [{"signature": sig, "count": len(group), "statuses": dict(Counter(e["status"] for e in group)),
            "examples": [e["case"] for e in group[:examples]],
            "listed_as": sorted({(e.get("notes") or {}).get("expected_bucket") for e in group
                                 if e["status"] == CHANGED}),
            "issues": sorted({e["issue"] for e in group if e.get("issue")})} for sig, group in groups.items()]
    return sorted(out, key=lambda b: (-b["count"], b["signature"]))


def causes(entries: list[dict]) -> list[dict]:
    """The root causes of the failures in a tool or a check (pipeline/results/causes.py)."""
    return root_causes([(signature(e), e) for e in entries if e["status"] in TOOL_FAILURES])


def cause_lines(causes_: list[dict], top: int = 10) -> list[str]:
    """The terminal's lines on root causes (where some join several buckets): each cause, then
    its buckets."""
    if not any(len(c["buckets"]) > 1 for c in causes_):
        return []
    lines = [f"root causes: {len(causes_)} (of {sum(len(c['buckets']) for c in causes_)} buckets)"]
    for number, cause in enumerate(causes_[:top], 1):
        lines.append(f"  cause {number}: {describe_cause(cause)}")
        lines += [f"      [{b[:150]}]" for b in cause["buckets"]]
    return lines


def add_regions(groups: list[dict], entries: list[dict]) -> list[dict]:
    """Give each bucket its "region": the rule of where it lives, learned from `entries`
    (pipeline/results/region.py). A failure to learn is recorded in each region; it never
    loses the report."""
    try:
        learned, failed = learn(entries, signature), None
    except Exception as err:  # noqa: BLE001 - the report matters more than its rules
        learned, failed = {}, {"status": "error", "why": f"{type(err).__name__}: {err}"}
    for group in groups:
        group["region"] = failed or learned.get(group["signature"]) or {
            "status": "not learned", "why": "no case failing in a tool or check among the cases it is learned from "
                                            "(harness errors are conv-sweep's own)"}
    return groups


# --- the summary table -------------------------------------------------------------------------

def _column(entry: dict) -> str:
    if entry["status"] in (ERROR, TIMEOUT):
        return f"{entry['status']}:{entry['stage'] if entry['stage'] in STAGES else 'other'}"
    return entry["status"]


def counts(entries: list[dict], key) -> dict[str, Counter]:
    table: dict[str, Counter] = defaultdict(Counter)
    for entry in entries:
        table[key(entry)][_column(entry)] += 1
    return table


def columns(entries: list[dict]) -> list[str]:
    present = {_column(e) for e in entries}
    fixed = [PASS, COMPILED, FAIL, *(f"error:{s}" for s in STAGES), HARNESS, CHANGED, XFAIL, XPASS, NOT_RUN]
    always = (PASS, FAIL, CHANGED, XFAIL, XPASS)
    return [c for c in fixed if c in present or c in always] + sorted(present - set(fixed))


def flavor_row(entry: dict) -> str:
    """The summary row of an entry's flavor: a w8if32 model whose converter kept the weights in
    float (kernels under 1,024 elements) is an f32 model, and gets a row of its own."""
    variant = f"{entry['backend']}_{entry['flavor']}"
    if entry["flavor"] == "w8if32" and (entry.get("notes") or {}).get("weights_quantized") is False:
        return f"{variant} (float weights)"
    return variant


def summary_rows(entries: list[dict]) -> tuple[list[str], list[list]]:
    cols = columns(entries)
    rows = []
    for title, key in (("flavor", flavor_row), ("category", lambda e: e["category"])):
        table = counts(entries, key)
        for name in sorted(table):
            rows.append([f"{title} {name}", *(table[name][c] for c in cols), sum(table[name].values())])
    total = Counter(_column(e) for e in entries)
    rows.append(["total", *(total[c] for c in cols), len(entries)])
    return cols, rows


def format_table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def slowest(entries: list[dict], top: int = 5) -> list[tuple[str, str, float]]:
    timed = [(e["case"], stage, float(info.get("seconds", 0)))
             for e in entries for stage, info in (e.get("stages") or {}).items()]
    return sorted(timed, key=lambda t: -t[2])[:top]


def stage_totals(entries: list[dict]) -> dict[str, float]:
    totals: Counter = Counter()
    for e in entries:
        for stage, info in (e.get("stages") or {}).items():
            totals[stage] += float(info.get("seconds", 0))
    return dict(totals)


def store_hits(entries: list[dict]) -> dict[str, dict]:
    """Per stage that ran, how many cases took its outputs (or its failure) from the store."""
    counts: dict[str, dict] = {}
    for e in entries:
        for stage, info in (e.get("stages") or {}).items():
            if stage in STORED_STAGES:
                count = counts.setdefault(stage, {"from_store": 0, "of": 0})
                count["of"] += 1
                count["from_store"] += bool(info.get("store"))
    return counts


def int8_allowance(entries: list[dict]) -> dict:
    """How many passing w8i8 cases (and output elements) on a single-rounding target had the
    single-round value required where it differs from TFLite's (requantization ties)."""
    used = [int((e.get("notes") or {}).get("int8_allowance_used", 0)) for e in entries
            if "int8_allowance_used" in (e.get("notes") or {}) and e["status"] in (PASS, XPASS)]
    return {"checked": len(used), "cases": sum(u > 0 for u in used), "elements": sum(used)}


def bias_step(entries: list[dict]) -> dict:
    """How many cases the separate bias step applied to, and how many passing ones needed it."""
    notes = [(e.get("notes") or {}).get("separate_bias_step") for e in entries]
    return {"applies": sum(n is not None for n in notes),
            "needed_by_passing": sum(n == "needed" and e["status"] in (PASS, XPASS) for n, e in zip(notes, entries))}


def oracle_cross_check(entries: list[dict]) -> dict:
    """How many cases had their f32 oracle cross-checked against the float64 conv, and which
    disagreed beyond its bound (the verdict rests on float64: pipeline/checks/verify.py)."""
    checked = [e for e in entries if "oracle_vs_float64" in (e.get("notes") or {})]
    off = [e["case"] for e in checked if "oracle_disagrees" in e["notes"]]
    return {"checked": len(checked), "disagrees": len(off), "cases": off}


def refusal_summary(refused: list) -> list[str]:
    """Lines on the cases not generated, grouped by reason (cases.Refused entries)."""
    if not refused:
        return []
    by_reason: dict[str, list] = {}
    for r in refused:
        by_reason.setdefault(r.reason, []).append(r)
    lines = [f"not generated: {len(refused)} cases, their frontend refuses the geometry or their flavor "
             f"cannot check it (`doit refused` lists them)"]
    for reason, items in sorted(by_reason.items(), key=lambda i: -len(i[1])):
        geometries = {geometry_id(r.name) for r in items}
        lines.append(f"[{len(items)} cases, {len(geometries)} geometries] {reason}\n      e.g. {items[0].name}")
    return lines


def performance_summary(entries: list[dict]) -> list[str]:
    """The MAC rate per flavor and the slowest case relative to its MACs (pipeline/targets/perf.py)."""
    rates = [f"{v} {s['median_rate']:.3g}" for v, s in by_flavor(entries).items() if s["median_rate"] is not None]
    if not rates:
        return []
    slow = slowest_relative(entries, top=1)[0]
    unit = slow[2]
    return [f"MAC rate ({unit}, median of passing cases): " + ", ".join(rates),
            f"slowest relative to its MACs: {slow[0]['case']}: {describe(slow)}"]


def summary(entries: list[dict], buckets_: list[dict] | None = None, report_dir: Path | None = None,
            refused: list = (), causes_: list[dict] | None = None, networks_: list[dict] | None = None) -> str:
    cols, rows = summary_rows(entries)
    parts = [format_table(["", *cols, "total"], rows)]
    parts += networks.lines(networks_ if networks_ is not None else networks.view(entries, signature))
    parts += refusal_summary(list(refused))
    totals = stage_totals(entries)
    if totals:
        parts.append("stage time (s): " + ", ".join(f"{s} {t:.1f}" for s, t in sorted(totals.items(), key=lambda i: -i[1])))
        parts.append("slowest: " + "; ".join(f"{stage} {case} {sec:.2f} s" for case, stage, sec in slowest(entries)))
    hits = store_hits(entries)
    if any(h["from_store"] for h in hits.values()):
        parts.append("from the store: " + ", ".join(f"{stage} {h['from_store']} of {h['of']}" for stage, h in hits.items()))
    parts += performance_summary(entries)
    allowance = int8_allowance(entries)
    if allowance["cases"]:
        parts.append(f"int8 single-round rule (the single-round value, not TFLite's, at requantization ties): "
                     f"served {allowance['cases']} of {allowance['checked']} passing w8i8 cases, "
                     f"{allowance['elements']} elements")
    changed = [e for e in entries if e["status"] == CHANGED]
    if changed:
        parts.append(f"CHANGED: {len(changed)} listed cases failed at their stage with another signature:")
        parts += [f"  {e['case']}: listed as [{e['notes'].get('expected_bucket', '')[:120]}]\n"
                  f"      failed as [{e['notes'].get('observed_bucket', '')[:120]}]" for e in changed[:5]]
    harness = [e for e in entries if e["status"] == HARNESS]
    if harness:
        parts.append(f"HARNESS ERRORS: {len(harness)} cases failed in conv-sweep itself (never expected), e.g. "
                     f"{harness[0]['case']}: {harness[0]['reason'][:160]}")
    cross = oracle_cross_check(entries)
    if cross["disagrees"]:
        parts.append(f"oracle cross-check: {cross['disagrees']} of {cross['checked']} f32 oracles disagree with the "
                     f"float64 conv beyond their bound (the verdicts rest on float64), e.g. {cross['cases'][0]}")
    step = bias_step(entries)
    if step["applies"]:
        parts.append(f"separate bf16 bias step (padded space-to-depth rewrite): applies to {step['applies']} cases, "
                     f"needed by {step['needed_by_passing']} passing ones")
    parts += cause_lines(causes_ if causes_ is not None else causes(entries))
    for b in (buckets_ if buckets_ is not None else buckets(entries))[:10]:
        listed = "".join(f"\n      listed as: {sig[:160]}" for sig in b.get("listed_as", []))
        issues = f"  [issue: {', '.join(b['issues'])}]" if b.get("issues") else ""
        parts.append(f"[{b['count']}] {b['signature'][:160]}{issues}{listed}\n      e.g. {', '.join(b['examples'])}")
    if report_dir:
        parts.append(f"report: {report_dir / 'report.html'} (also results.json, junit.xml)")
    return "\n".join(parts)


# --- files -------------------------------------------------------------------------------------

def junit_xml(entries: list[dict]) -> str:
    fails = sum(e["status"] in (FAIL, XPASS, CHANGED) for e in entries)
    errors = sum(e["status"] in (ERROR, TIMEOUT, HARNESS) for e in entries)
    skipped = sum(e["status"] in (XFAIL, NOT_RUN) for e in entries)
    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f'<testsuites><testsuite name="conv_sweep" tests="{len(entries)}" failures="{fails}" '
             f'errors="{errors}" skipped="{skipped}">']
    for e in entries:
        seconds = sum(float(i.get("seconds", 0)) for i in (e.get("stages") or {}).values())
        head = (f'  <testcase classname={quoteattr("conv_sweep." + e["backend"] + "_" + e["flavor"])} '
                f'name={quoteattr(e["case"])} time="{seconds:.3f}"')
        message = quoteattr(f"{e['stage']}: {e['reason']}"[:2000])
        detail = f"repro: {e['repro']}" + (f"\nlog: {e['log']}" if e.get("log") else "")
        if e["status"] == CHANGED:
            notes = e.get("notes") or {}
            message = quoteattr(f"changed at {e['stage']}: listed as [{notes.get('expected_bucket')}], failed as "
                                f"[{notes.get('observed_bucket')}]: {e['reason']}"[:2000])
        if e["status"] in (FAIL, XPASS, CHANGED):
            lines.append(f"{head}><failure message={message} type={quoteattr(e['status'])}>"
                         f"{escape(detail)}</failure></testcase>")
        elif e["status"] in (ERROR, TIMEOUT, HARNESS):
            kind = e["status"]
            lines.append(f"{head}><error message={message} type={quoteattr(kind + ':' + str(e['stage']))}>"
                         f"{escape(detail)}</error></testcase>")
        elif e["status"] in (XFAIL, NOT_RUN):
            reason = f"expected failure at {e['stage']}: {e['reason']}" if e["status"] == XFAIL else NOT_RUN
            lines.append(f"{head}><skipped message={quoteattr(reason[:2000])}/></testcase>")
        else:
            lines.append(f"{head}/>")
    lines.append("</testsuite></testsuites>")
    return "\n".join(lines) + "\n"


def write_report(entries: list[dict], report_dir: Path, tools: dict, refused: list = ()) -> dict:
    """Write results.json, junit.xml and report.html; return the buckets, the root causes, the
    per-network view and the case table's rows (explorer.records)."""
    from pipeline.results.explorer import records
    from pipeline.results.html import render

    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    groups = add_regions(buckets(entries), entries)
    cols, rows = summary_rows(entries)
    found = causes(entries)
    document = {"tools": tools, "summary": {"columns": cols, "rows": rows}, "root_causes": found, "buckets": groups,
                "int8_allowance": int8_allowance(entries), "separate_bias_step": bias_step(entries),
                "oracle_cross_check": oracle_cross_check(entries),
                "stage_seconds": stage_totals(entries), "store": store_hits(entries),
                "performance": by_flavor(entries), "networks": networks.view(entries, signature),
                "refused": [{"case": r.name, "variant": r.variant, "category": r.category, "reason": r.reason}
                            for r in refused],
                "cases": entries}
    write_text(report_dir / "results.json", json.dumps(document, indent=1) + "\n")
    write_text(report_dir / "junit.xml", junit_xml(entries))
    cases = records(entries)
    write_text(report_dir / "report.html", render(entries, cols, rows, groups, tools, refused, cases, found,
                                                  document["networks"]))
    return {"buckets": groups, "causes": found, "networks": document["networks"], "records": cases}


def tool_versions(cfg, target) -> dict:
    from pipeline.core.fingerprint import STAGE_INPUTS, describe_identity, executable_identity, stage_fingerprint
    from pipeline.targets.profiles import toolchain_identity

    versions = {}
    for stage in STAGE_INPUTS:
        versions.update(stage_fingerprint(stage)["versions"])
    versions["target"] = f"{target.name}: {target.profile.doc}"
    for role, path in (("compiler", target.compiler), ("runner", target.runner)):
        identity = executable_identity(path)
        versions[role] = f"{identity['path']}: {describe_identity(identity)}"
    toolchain = toolchain_identity(target.toolchain)
    if toolchain:
        versions["toolchain"] = json.dumps(toolchain, sort_keys=True)
    versions["compile flags"] = " ".join(target.profile.flags + target.extra_flags) or "(none)"
    return versions


def _selection_key(cfg, cases: list[Case]) -> str:
    import hashlib

    h = hashlib.sha256()
    for case in cases:
        h.update(f"{case.key} {case.expected}\n".encode())
    h.update(str(cfg.build_dir).encode())
    return h.hexdigest()


def by_target(cfg, cases: list[Case]) -> list[tuple]:
    """(target, its cases) for every selected target, in the selection's order."""
    return [(target, [c for c in cases if c.target == target.name]) for target in cfg.targets]


def report_run(cfg, cases: list[Case], out=None, changed: bool = True) -> None:
    """Read every case's result, write each target's report files and print its summary. A run
    that changed nothing (`changed` False) prints the summaries kept from the last report of
    the same cases instead of re-reading 1,250 results and redrawing the pages."""
    import sys

    out = out or sys.stdout
    every: list[dict] = []  # the case table's rows of every target, for the page that spans them
    unchanged: list[list[Case]] = []  # targets whose report stands as it was
    for target, selected in by_target(cfg, cases):
        folder = cfg.report_dir(target.name)
        key = _selection_key(cfg, selected)
        cached = folder / "summary.txt"
        heading = f"target {target.name}: {len(selected)} cases\n"
        if not changed and (folder / "summary.key").is_file() and cached.is_file():
            if (folder / "summary.key").read_text() == key:
                print(heading + cached.read_text(), end="", file=out)
                unchanged.append(selected)
                continue
        entries = collect(selected, cfg.case_dir)
        refused = [r for r in cfg.refused() if r.variant in target.profile.flavors]
        written = write_report(entries, folder, tool_versions(cfg, target), refused)
        groups = written["buckets"]
        every += written["records"]
        text = summary(entries, groups, folder, refused, written["causes"], written["networks"]) + "\n"
        write_text(cached, text)
        write_text(folder / "summary.key", key)
        print(heading + text, end="", file=out)
    if len(cfg.targets) > 1 and every:  # some target's report changed: the page of every target too
        from pipeline.results.explorer import records

        for selected in unchanged:
            every += records(collect(selected, cfg.case_dir))
        write_all_targets(cfg.layout.reports, every, [t.name for t in cfg.targets])
        print(f"every target's cases in one table: {cfg.layout.reports / 'report.html'}", file=out)


def write_all_targets(folder: Path, rows: list[dict], targets: list[str]) -> None:
    """report/report.html: the case table of every selected target in one page, from each
    target's rows (explorer.records; each target's own page has its summary, buckets and
    pictures)."""
    from pipeline.results.explorer import section
    from pipeline.results.html import page

    links = " ".join(f'<a href="{t}/report.html">{t}</a>' for t in targets)
    write_text(Path(folder) / "report.html", page("conv-sweep report: every target", f"""<h1>conv-sweep report</h1>
<p>{len(rows)} cases on {len(targets)} targets. Each target's own report: {links}.</p>
{section(rows)}"""))


def merge_reports(sources: list[str], cfg, out=None) -> None:
    """One report per target from several build folders (their report/<target>/results.json) or
    results.json files, e.g. the shards of a CI matrix; written to cfg's report folder."""
    import sys

    from pipeline.space.cases import Refused
    from pipeline.core.errors import ConfigError

    documents = []
    for source in sources:
        path = Path(source)
        found = Layout(path).report_files() if path.is_dir() else [path]
        if not found or not all(p.is_file() for p in found):
            raise ConfigError("report --merge", source, "is neither a build folder with a report nor a results.json")
        documents += [(p, json.loads(p.read_text())) for p in found]
    by_target: dict[str, dict] = {}
    for path, document in documents:
        for entry in document["cases"]:
            merged = by_target.setdefault(entry["target"], {"tools": document["tools"], "cases": {}, "refused": {}})
            key = entry["case"]
            if key in merged["cases"]:
                raise ConfigError("report --merge", str(path), f"repeats {key}@{entry['target']} (already in "
                                  f"{merged['cases'][key][0]})")
            merged["cases"][key] = (path, entry)
        for target in {entry["target"] for entry in document["cases"]}:  # a results.json is one target's
            for r in document.get("refused", []):
                by_target[target]["refused"].setdefault(r["case"], Refused(r["case"], r["variant"], r["category"],
                                                                          r["reason"]))
    for target, merged in by_target.items():
        entries = [entry for _, entry in merged["cases"].values()]
        folder = cfg.report_dir(target)
        refused = list(merged["refused"].values())
        written = write_report(entries, folder, merged["tools"], refused)
        print(f"target {target}: {len(entries)} cases, merged from {len(documents)} reports\n"
              + summary(entries, written["buckets"], folder, refused, written["causes"], written["networks"]),
              file=out or sys.stdout)
