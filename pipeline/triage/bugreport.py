"""`doit bugreport`: a failure bucket as an issue ready to file upstream.

For each selected bucket of a target (default: every failure bucket of the run, harness
errors aside: those are this tool's), <build>/bugreports/<target>/<slug>/ holds:
- report.md: a title from the bucket (its first line); the failing tool by its name and the
  release of the wheel that ships it; where to file it (the profile's `tracker`, or the
  importer's); the tool's own output (its first DIAGNOSTIC_LINES lines: an assertion with
  its file:line, what follows, the stack); the exact commands; for a numeric failure,
  expected against actual at the worst elements with the tolerance, and where no mis-lowering
  explains it, what the module computes, probed with impulses (impulses.json beside it,
  pipeline/triage/impulses.py, within IMPULSE_SHARE of what the shrink left); the minimal case's MLIR
  inline when short (else beside it); the environment of the failing stage alone (its tools,
  their releases and flags); how many of the sweep's cases fall in the bucket and the range
  of geometry they span;
- the minimal case's files (the compiler's MLIR input, the module's input, the expected
  output and its check; for an import failure, the model file) and repro.sh, which takes the
  target's tools from PATH or their variables (TORQ_COMPILE, ...) and needs nothing else
  (python3 for a numeric check), and exits non-zero while the failure is there;
and <build>/bugreports/<target>/index.md lists every bucket with its count and title.

The minimal case comes from `doit shrink`'s search (pipeline/triage/shrink.py), started from
the bucket's smallest case: an earlier shrink.json of the bucket is reused while its failure,
tools, flags and predicate are those of today; else the bucket is shrunk within SHRINK_SHARE of
the budget (seconds per bucket; 0 takes the smallest case as it is). A timeout bucket shrinks
on "anomalously slow" rather than on the cut; its report shows where the minimal case's time
goes. Then, within the rest of the budget, the target's toggle flags are tried on a compile or
timeout bucket's cases (pipeline/triage/culprit.py): the report's first findings.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import time
from importlib import metadata
from pathlib import Path

from pipeline.config import Config
from pipeline.core.chain import MLIR, MLIR_BYTECODE
from pipeline.core.errors import ConfigError
from pipeline.core.tools import write_text
from pipeline.outcome.result import read_result
from pipeline.results.region import describe as describe_region, render_conjunction
from pipeline.space.cases import Case
from pipeline.space.geometry import Geometry, macs

INLINE_MLIR = 12000  # characters of MLIR shown inline in report.md; longer, it is a file beside it
PROBED = "probed as"  # a boundary probe's bucket, as its region entry carries it (with_probes)
SHRINK_SHARE = 0.5  # of a bucket's budget, what its shrink may take; impulses, boundary probes and flags get the rest
BOUNDARY_SHARE = 0.5  # of what the shrink and the impulses left, what the boundary probes may take; the flags the rest
IMPULSE_SHARE = 0.5  # of what the shrink left, what a wrong answer's impulse probes may take, before the boundary
DIAGNOSTIC_LINES = 40  # lines of the failing tool's own output a report quotes
LINE_WIDTH = 400  # characters kept of each quoted line (a stack frame's symbol can run longer)
# A model format's importer: its tools, the packages that ship them (and what they read the
# model with), and where its bugs are filed. tosa-converter-for-tflite (Arm's package) runs
# TensorFlow's TFLite-to-TOSA legalization (its library holds org_tensorflow's legalize_tfl.cc):
# its bugs go to TensorFlow. iree-import-onnx is IREE's; it reads the model with onnx.
IMPORTERS = {"tflite": (("tosa-converter-for-tflite", "iree-opt"), ("tosa-converter-for-tflite", "iree-base-compiler"),
                        "https://github.com/tensorflow/tensorflow/issues"),
             "onnx": (("iree-import-onnx",), ("iree-base-compiler", "onnx"), "https://github.com/iree-org/iree/issues")}
TOOL_PACKAGES = {"tosa-converter-for-tflite": "tosa-converter-for-tflite", "iree-opt": "iree-base-compiler",
                 "iree-import-onnx": "iree-base-compiler"}  # an importer's tool -> the package that ships it


def slug(bucket: str) -> str:
    """A folder name for a bucket: its words, shortened, and a digest that keeps it unique."""
    words = re.sub(r"[^a-z0-9]+", "-", _plain(bucket).lower()).strip("-")[:64].strip("-")
    return f"{words}-{hashlib.sha256(bucket.encode()).hexdigest()[:8]}"


# a crash's failed assertion, as pipeline/core/tools.py (_diagnostic) quotes it, and the name of the
# function in its signature (`LogicalResult ns::Pattern<T>::transform(A, B &) const [T = ...]`)
_ASSERTION = re.compile(r"^(.*?): .*?killed by signal \w+: (.*): Assertion `(.*)' failed\.?$")
_FUNCTION = re.compile(r"((?:[\w~]+(?:<[^()]*>)?::)*[\w~]+)\([^()]*\)(?: const)?(?: \[.*\])?$")


def _plain(bucket: str) -> str:
    """The bucket's words without its placeholders and the exit-status boilerplate; a failed
    assertion as the function it failed in (without namespaces) and its expression as printed."""
    crash = _ASSERTION.match(bucket)
    if crash:
        stage, signature, expression = crash.groups()
        function = _FUNCTION.search(signature)
        name = re.sub(r"\b[a-z_][a-z0-9_]*::", "", function.group(1)) if function else signature
        return f"{stage}: assertion failed in {name}: {expression.replace('<n>', 'N')}"
    text = re.sub(r"(<tool>\s*)?exit status <n>:\s*|<tool>\s*|<loc>:\s*", "", bucket)
    text = re.sub(r"(<(path|unknown|hex)>(:<n>)*:?\s*)+", "", text)
    text = re.sub(r"\(\s*\)|#<n>|\berror:\s*", "", text).replace("<n>", "N")
    return re.sub(r"\s+", " ", text).strip(" :")


def title(bucket: str, target: str) -> str:
    """The issue's title: what failed where, the bucket's message without its placeholders."""
    return f"[{target}] {_plain(bucket)}"[:160]


def select(groups: dict[str, list[dict]], wanted: list[str], target: str) -> dict[str, list[dict]]:
    """The buckets named by `wanted` (a slug, a signature or a part of one, a case name or
    name@target); all of them when `wanted` is empty. A name matching no bucket is an error."""
    if not wanted:
        return groups
    chosen: dict[str, list[dict]] = {}
    for text in wanted:
        name = text.split("@")[0]
        found = [b for b, entries in groups.items()
                 if text in (b, slug(b)) or any(e["case"] == name for e in entries)]
        found = found or [b for b in groups if text in b]
        if not found:
            raise ConfigError("doit bugreport", text, f"names no failure bucket of {target} in this run (a bucket's "
                              "slug or signature, or a failing case's name; `doit report` lists them)")
        for b in found:
            chosen[b] = groups[b]
    return chosen


def _earlier(cfg: Config, target, bucket: str, identity: dict, keep_data: bool) -> dict | None:
    """The smallest minimum of an earlier shrink of this bucket, still valid today (for a
    timeout bucket: shrunk on today's predicate)."""
    from pipeline.outcome.result import STAGES_FILE
    from pipeline.triage.slow import SLOW_FACTOR, TYPICAL

    best = None
    for path in sorted(cfg.layout.shrink_dir(target.name).glob("*/shrink.json")):
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if summary.get("signature") != bucket or summary.get("tools") != identity or \
                bool(summary.get("keep_data")) != keep_data:
            continue
        predicate = summary.get("predicate") or {"kind": "same"}
        if bucket.endswith(": timeout") and (predicate["kind"] == "same" or predicate.get("factor") != SLOW_FACTOR
                                             or predicate.get("typical") != TYPICAL):
            continue  # shrunk on another predicate: another factor, or seconds typical by another measure
        folder = Path(summary["minimal"]["folder"])
        if read_result(folder) is None and not (folder / STAGES_FILE).is_file():
            continue
        if best is None or summary["minimal"]["macs"] < best["minimal"]["macs"]:
            best = summary
    return best


def _geometry_range(entries: list[dict]) -> list[str]:
    """Per geometry field, the values the bucket's cases span."""
    rows = []
    order = ("rank", "spatial", "kernel", "stride", "dilation", "c_in", "c_out", "groups", "padding")
    fields = sorted({k for e in entries for k in e["geometry"]},
                    key=lambda k: (order.index(k) if k in order else len(order), k))
    for field in fields:
        values = [e["geometry"].get(field) for e in entries if field in e["geometry"]]
        if all(isinstance(v, list) for v in values):
            axes = max(len(v) for v in values)
            spans = []
            for i in range(axes):
                axis = [v[i] for v in values if len(v) > i]
                spans.append(f"{min(axis)}" if min(axis) == max(axis) else f"{min(axis)}-{max(axis)}")
            rows.append(f"| {field} | {' x '.join(spans)} |")
        elif all(isinstance(v, (int, float)) for v in values):
            rows.append(f"| {field} | {min(values)}" + (f"-{max(values)}" if max(values) != min(values) else "") + " |")
        else:
            rows.append(f"| {field} | {', '.join(sorted({str(v) for v in values}))} |")
    counts = [macs(Geometry.from_dict(e["geometry"])) for e in entries]
    rows.append(f"| MACs | {min(counts):,}" + (f"-{max(counts):,}" if max(counts) != min(counts) else "") + " |")
    return rows


def _copy_case(case: Case, cfg: Config, folder: Path) -> tuple[str | None, dict | None, str | None]:
    """Copy the case's compiler input, module input, expected output and check into `folder`;
    (MLIR file name, check, the run's --input argument or None where it never ran). A case that
    failed at import has no MLIR: its model file is copied, and the MLIR file name is None."""
    from pipeline.checks.compare import CHECK, EXPECTED_BIN
    from pipeline.targets import signature
    from pipeline.targets.runner import input_arg, input_file_name

    model_dir, case_dir = cfg.model_dir(case), cfg.case_dir(case)
    mlir_name = cfg.mlir_input(case)
    if not (model_dir / mlir_name).is_file():  # it failed at import: the importer's input is the model file
        shutil.copy2(model_dir / case.model_file, folder / case.model_file)
        return None, None, None
    shutil.copy2(model_dir / mlir_name, folder / mlir_name)
    if mlir_name != MLIR and (model_dir / MLIR).is_file():
        shutil.copy2(model_dir / MLIR, folder / MLIR)  # the same module as text, to read
    check = None
    if (case_dir / CHECK).is_file():
        check = json.loads((case_dir / CHECK).read_text())
        shutil.copy2(case_dir / EXPECTED_BIN, folder / EXPECTED_BIN)
        write_text(folder / CHECK, json.dumps(check) + "\n")
    if not (case_dir / "model.vmfb").is_file():
        return mlir_name, check, None  # it never compiled: nothing runs
    target = cfg.target(case.target)
    sig = signature.read(target.dump_tool, case_dir / "model.vmfb", model_dir / MLIR,
                         target.profile.function(case.backend), stage="run", timeout=cfg.timeout,
                         log=folder / "signature.log")
    (folder / "signature.log").unlink(missing_ok=True)
    ttype = sig.inputs[0]
    name = input_file_name(ttype, target.profile.io)
    source = case_dir / name if (case_dir / name).is_file() else model_dir / "input.npy"
    shutil.copy2(source, folder / source.name)
    return mlir_name, check, input_arg(source.name, ttype, target.profile.io)


def _worst(case_dir: Path, top: int = 5) -> list[str]:
    """The elements furthest outside the check's tolerance: index, expected, actual, tolerance."""
    import numpy as np

    from pipeline.results.explorer import check_arrays

    arrays = check_arrays(case_dir)
    if arrays is None:
        return []  # the output's shape is what failed: the reason says so
    want, got, limit = arrays
    excess = np.where(np.isfinite(got) & np.isfinite(want), np.abs(got - want) - limit, np.inf)
    order = np.argsort(-excess, axis=None)[:top]
    rows = []
    for flat in order:
        if excess.flat[flat] <= 0:
            break
        index = tuple(int(i) for i in np.unravel_index(flat, want.shape))
        rows.append(f"| {list(index)} | {want.flat[flat]:.9g} | {got.flat[flat]:.9g} | "
                    f"{abs(got.flat[flat] - want.flat[flat]):.9g} | {limit.flat[flat]:.9g} |")
    return rows


def _slow(shrunk: dict | None, entries: list[dict]) -> tuple[dict, float] | None:
    """For a timeout bucket shrunk on "anomalously slow": what happened to the minimal case (as a
    result entry) and the seconds past which it is anomalous; else None."""
    kept = (shrunk or {}).get("predicate") or {}
    m = (shrunk or {}).get("minimal") or {}
    if kept.get("kind") != "slow" or not m.get("typical"):
        return None
    stage, threshold = kept["stage"], kept["factor"] * m["typical"]
    took = f"took {m['timed']:.3g} s" if m.get("timed") is not None else f"was cut at {m['limit']:g} s"
    swept = next((e for e in entries if e["case"] == shrunk["original"]["case"]), entries[0])
    reason = (f"The minimal case's {stage} {took}, more than {kept['factor']:g} x its typical "
              f"{m['typical']:.3g} s: anomalously slow. The sweep's `{swept['case']}` was cut: {swept['reason']}")
    return {"stage": stage, "reason": reason}, threshold


def failing_output(log_text: str) -> str:
    """What the last failing invocation in a tool log (pipeline/core/tools.py's format) printed:
    its stderr, else its stdout; "" where it printed nothing (or ran in-process)."""
    blocks = re.split(r"(?m)^\$ ", log_text)[1:]
    failing = [b for b in blocks if not re.search(r"(?m)^# exit status 0 after ", b)]
    block = (failing or blocks or [""])[-1]
    found = dict(re.findall(r"(?ms)^--- (stdout|stderr) ---\n(.*?)(?=^--- (?:stdout|stderr) ---$|\Z)", block))
    return (found.get("stderr") or found.get("stdout") or "").rstrip()


def diagnostic(output: str, reason: str = "", count: int = DIAGNOSTIC_LINES) -> list[str]:
    """The tool's first `count` lines (an assertion with its file:line, the lines after it, the
    stack), from its start, or from the line the reason quotes where that comes late."""
    lines = output.splitlines()
    quoted = reason.split(": ", 1)[-1].strip()
    at = next((i for i, line in enumerate(lines) if quoted and line.strip()[:300] == quoted), 0)
    start = at if at >= count // 2 else 0
    return [line[:LINE_WIDTH] for line in lines[start:start + count]]


def _anonymous(lines: list[str], manifest: dict | None) -> list[str]:
    """Quoted output with the user's toolchain folder shown as <toolchain>."""
    tools = list(((manifest or {}).get("tools") or {}).values())
    if not tools:
        return lines
    root = str(Path(os.path.commonpath(tools)).parent)
    return [line.replace(root, "<toolchain>") for line in lines]


def explanation_lines(explanation: str) -> list[str]:
    """The wrong answer explained (pipeline/checks/explain.py): the mis-lowering whose output,
    computed by the float64 reference, the module's output matches within the check's own
    tolerance, or that none of them does."""
    from pipeline.checks.explain import CANDIDATES, NONE

    if explanation == NONE:
        return [f"The wrong answer explained: none matched. None of the {len(CANDIDATES)} mis-lowerings tried "
                f"({', '.join(CANDIDATES)}) gives the module's output within the check's own tolerance.", ""]
    return [f"The wrong answer explained: **{explanation}**. The module's output matches, within the check's "
            "own tolerance, the float64 conv computed with that mistake.", ""]


def _diagnostic_section(result: dict, manifest: dict | None, where: str | None) -> list[str]:
    """report.md's quote of the failing tool's own output, when its log holds more than the
    reason's one line; a tracker the output names, other than the profile's, is pointed out."""
    try:
        output = failing_output(Path(result["log"]).read_text(errors="replace"))
    except (KeyError, TypeError, OSError):
        return []
    lines = _anonymous(diagnostic(output, result.get("reason") or ""), manifest)
    if len(lines) < 2:
        return []
    total = len(output.splitlines())
    said = f"the first {len(lines)} of its {total} lines" if total > len(lines) else f"all {total} lines"
    other = sorted({u for u in re.findall(r"https://\S*issues\b", output) if u != where})
    note = [f"The tool's own text points to {', '.join(other)}: the default of the framework it is built on; "
            f"this tool's bugs go to {where}.", ""] if other and where else []
    return [f"What the tool printed ({said}):", "", "```", *lines, "```", "", *note]


def _shipped_by(path: str, dist: str) -> bool:
    """Whether the installed distribution `dist` installed the file `path` (resolved)."""
    real = os.path.realpath(path)
    try:
        files = metadata.files(dist) or ()
    except metadata.PackageNotFoundError:
        return False
    return any(f.name == Path(real).name and os.path.realpath(f.locate()) == real for f in files)


def _wheel(target, role: str) -> tuple[str, dict | None]:
    """The distribution that ships the target's compiler or runner, and its wheel's entry in the
    toolchain manifest (version and digest) where the target has one."""
    from pipeline.targets.profiles import toolchain_kind
    from pipeline.targets.toolchain import KINDS

    dist = KINDS[toolchain_kind(target.profile)].dists[0 if role == "compiler" else 1]
    return dist, ((target.toolchain or {}).get("wheels") or {}).get(dist)


def release(target, role: str) -> str:
    """The release of the target's compiler or runner (`role`), from the installed wheels:
    the toolchain's, else the Python environment's package; a tool no package installed
    (a user's own build or wrapper) is named by what it says it is."""
    from pipeline.core.fingerprint import describe_identity, executable_identity

    dist, wheel = _wheel(target, role)
    if wheel:
        return f"{dist} {wheel['version']}"
    path = getattr(target, role)
    if _shipped_by(path, dist):
        return f"{dist} {metadata.version(dist)}"
    return f"not from a package: {Path(path).name}, {describe_identity(executable_identity(path, **target.launchers))}"


def _packages(dists) -> str:
    from pipeline.core.fingerprint import dist_version

    return ", ".join(f"{d} {dist_version(d)}" for d in dists)


def _references(case: Case) -> tuple[str, ...]:
    """The packages the expected output of a numeric check comes from (pipeline/checks/oracle.py)."""
    oracle = ("onnxruntime",) if case.variant == "onnx_f32" else ("ai-edge-litert",) if case.backend == "tflite" else ()
    return (*oracle, "numpy")


def environment(cfg: Config, target, case: Case, stage: str | None) -> list[tuple[str, str]]:
    """(what, which) rows of what the failing stage ran: an import failure's importer and its
    packages; else the compiler with its flags (and its C runtime where the toolchain brings
    one), and the run tool and the expected output's packages where the stage ran them."""
    if stage == "import":
        tools, dists, _ = IMPORTERS[case.backend]
        return [("importer", ", ".join(f"`{t}`" for t in tools)), ("packages", _packages(dists)),
                ("python", platform.python_version())]
    rows = [("target", f"{target.name}: {target.profile.doc}")]
    for role, flags in (("compiler", target.compile_flags(case.variant)), ("runner", target.profile.run_flags)):
        if role == "runner" and stage not in ("run", "verify"):
            break
        dist, wheel = _wheel(target, role)
        digest = f" (wheel sha256 {wheel['sha256']})" if wheel else ""
        rows += [(role, f"`{Path(getattr(target.profile, role)).name}` from {release(target, role)}{digest}"),
                 (f"{role} flags", shlex.join(flags) or "(none)")]
    if target.compile_launch:
        rows.append(("compiler started by", f"`{shlex.join(target.compile_launch)}` (address-space randomization off)"))
    c_runtime = (target.toolchain or {}).get("c_runtime")
    if c_runtime:
        rows.append(("C runtime of the tools", ", ".join(f"{k} {v}" for k, v in sorted(c_runtime.items()))))
    if stage == "verify":
        rows.append(("expected output from", _packages(_references(case))))
    return rows


def tracker(target, case: Case, stage: str | None) -> str | None:
    """Where the bug is filed: the importer's tracker for an import failure, else the target
    profile's `tracker`."""
    return IMPORTERS[case.backend][2] if stage == "import" else target.profile.tracker


def figure(value) -> str:
    """A metric as report.md shows it: a number to 6 significant digits; a non-finite one is
    stored as its name ("inf", "nan": JSON has no such numbers) and shown as it is."""
    return f"{value:.6g}" if isinstance(value, (int, float)) else str(value)


def region_section(region: dict | None) -> list[str]:
    """report.md's lines on where the bucket lives (pipeline/results/region.py): the rule, its
    conditions, its held-out figures and the cases it was learned from; or why there is none."""
    lines = ["## Where this bucket lives", ""]
    if not region:
        return lines + ["Not learned.", ""]
    if region.get("status") != "learned":
        return lines + [f"{str(region.get('status', '')).capitalize()}: {region.get('why', '')}.", ""]
    held, train, conditions = region["held_out"], region["train"], region["conditions"]
    precision = "n/a" if held.get("precision") is None else f"{held['precision']:.2f}"
    lines += [describe_region(region), "",
              f"A shallow decision tree over geometry features (depth {region.get('depth', '?')}), learned from "
              f"{train['cases']} cases ({train['positives']} of this bucket, the rest passing"
              + (", among them the minimal case and its boundary probes" if region.get("probes") else "")
              + ") and simplified on them, reads as the rule: "
              + ("a case is in the bucket when all of these hold:" if len(conditions) == 1
                 else "a case is in the bucket when any of these holds:"), ""]
    lines += [f"- {render_conjunction([c])}" for c in conditions[0]] if len(conditions) == 1 else \
        [f"- {render_conjunction(c)}" for c in conditions]
    lines += ["", f"On {held['cases']} cases held out of the learning ({held['positives']} of this bucket): "
              f"accuracy {held['accuracy']:.2f}, recall {held['recall']:.2f}, precision {precision}. "
              f"Of every case: {region['positives']} in this bucket, {region['negatives']} passing; cases of "
              "other buckets are left out.", ""]
    return lines


def boundary_section(boundary: list[dict], minimal: Case) -> list[str]:
    """report.md's boundary facts (pipeline/triage/boundary.py): where the minimal case, moved one
    dimension at a time, still fails the same way, passes, or fails otherwise."""
    from pipeline.triage.boundary import table

    lines = ["## Boundary facts", ""]
    if not boundary:
        return lines + ["No probe ran within the budget.", ""]
    outcomes = _count(p["outcome"] if not p["outcome"].startswith("other") else "other" for p in boundary)
    return lines + [f"The minimal case moved one dimension at a time ({len(boundary)} probes, each a case of its own; "
                    f"{outcomes.get('same', 0)} fail the same way, {outcomes.get('pass', 0)} pass, "
                    f"{outcomes.get('other', 0)} fail otherwise; every probe in `boundary.json`):", "",
                    *[f"- {line}" for line in table(boundary, minimal.geometry, minimal.variant)], ""]


def shown_region(region: dict | None, minimal: Case, boundary: list[dict] | None) -> dict | None:
    """The region as the report may show it: a learned rule only where it holds on the minimal
    case and on every boundary probe, and uses only features that vary among them
    (boundary.rule_holds); else why it is not shown."""
    from pipeline.triage.boundary import rule_holds

    if not region or region.get("status") != "learned":
        return region
    entry = {"geometry": minimal.geometry.to_dict(), "backend": minimal.backend, "flavor": minimal.flavor}
    if rule_holds(region["conditions"], entry, boundary or []):
        return region
    return {"status": "not shown", "why": "the rule learned from the sweep's cases does not hold on the minimal "
                                          "case and every boundary probe (or uses a feature they do not vary); "
                                          "the boundary facts above say what holds"}


def with_probes(region: dict | None, entries: list[dict], target: str, bucket: str, minimal: Case,
                boundary: list[dict] | None) -> dict | None:
    """The region as shown (shown_region), learned again with the minimal case and its boundary
    probes among the cases where the rule learned from `entries` (the target's) alone is not
    shown: a probe that failed the same way is a case of the bucket, one that passed a passing
    case, one that failed otherwise a case of its own bucket (left out). The first reason
    stands where the second rule is not shown either."""
    from pipeline.outcome.result import ERROR, PASS
    from pipeline.results.region import learn
    from pipeline.results.report import signature

    shown = shown_region(region, minimal, boundary)
    if not boundary or (shown or {}).get("status") == "learned":
        return shown
    probed = [{"case": minimal.name, "geometry": minimal.geometry.to_dict(), "backend": minimal.backend,
               "flavor": minimal.flavor, "outcome": "same"}, *boundary]
    cases = [{"case": p["case"], "target": target, "geometry": p["geometry"], "backend": p["backend"],
              "flavor": p["flavor"], "status": PASS if p["outcome"] == "pass" else ERROR,
              PROBED: bucket if p["outcome"] == "same" else p["outcome"]} for p in probed]
    try:
        again = learn(cases + list(entries), lambda e: e[PROBED] if PROBED in e else signature(e)).get(bucket)
    except Exception:  # noqa: BLE001 - the report matters more than its rule (as report.add_regions)
        return shown
    again = shown_region(again, minimal, boundary)
    if (again or {}).get("status") != "learned":
        return shown
    return {**again, "probes": len(probed)}


def write_report(cfg: Config, target, bucket: str, entries: list[dict], minimal: Case, shrunk: dict | None,
                 folder: Path, findings: list[str] = (), sections: list[str] = (),
                 region: dict | None = None, boundary: list[dict] | None = None,
                 impulses: dict | None = None) -> Path:
    """One bucket's folder: the minimal case's files, repro.sh, boundary.json (the probes of
    `boundary`, when given), impulses.json (the wrong answer's impulse probes, when given),
    report.md (with `findings` first and `sections` after what happened; the boundary facts;
    where the bucket lives from `region`, when given)."""
    from pipeline.run.repro import write_standalone
    from pipeline.triage import impulses as impulse_probes
    from pipeline.triage.boundary import write_boundary

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if boundary is not None:
        write_boundary(folder, boundary)
    if impulses is not None:
        write_text(folder / impulse_probes.IMPULSES, json.dumps(impulses) + "\n")
    mlir_name, check, input_file = _copy_case(minimal, cfg, folder)
    result = read_result(cfg.case_dir(minimal)) or {}
    limits = {stage: cfg.limit(minimal, stage).seconds for stage in ("compile", "run")}
    slow = _slow(shrunk, entries)
    if slow is not None:  # repro.sh fails while the stage is anomalously slow
        result, limits[slow[0]["stage"]] = slow[0], slow[1]
    stage = result.get("stage") if mlir_name else "import"
    releases = _releases(target, minimal, stage)
    if mlir_name is None:
        from pipeline.run.repro import write_import_standalone

        repro = write_import_standalone(minimal, cfg, folder, releases)
    else:
        repro = write_standalone(minimal, cfg, folder, mlir_name, check if stage == "verify" else None,
                                 limits, input_file if stage in ("run", "verify") else None, releases)
    text_mlir = (folder / MLIR).read_text() if (folder / MLIR).is_file() else None
    geometry = minimal.geometry
    where = tracker(target, minimal, stage)
    lines = [f"# {title(bucket, target.name)}", "", _failing_tool(target, minimal, stage, releases)
             + ("is cut at its time limit" if slow else "fails the same way")
             + f" on {len(entries)} convolution case{'s' if len(entries) != 1 else ''} of a conv-sweep run; "
             + ("the smallest found still anomalously slow:" if slow else "the smallest found:"),
             "", f"- case: `{minimal.name}` ({macs(geometry):,} MACs)",
             f"- geometry: `{json.dumps(geometry.to_dict())}`",
             f"- model: {minimal.backend} {minimal.flavor}, "
             + (f"imported to MLIR ({mlir_name})" if mlir_name else f"`{minimal.model_file}`, which the importer fails on"),
             f"- stage: {stage}",
             f"- file it at: {where}" if where else f"- file it at: (the {target.name} profile names no `tracker`)", ""]
    if findings:
        lines += ["## Findings", "", *[f"- {f}" for f in findings], ""]
    lines += ["## What happens", "", "```", (result.get("reason") or "")[:3000], "```", ""]
    if result.get("stage") == "verify" and result.get("explanation"):
        lines += explanation_lines(result["explanation"])
    if impulses is not None:
        lines += impulse_probes.lines(impulses)
    if slow is None and stage != "verify":
        lines += _diagnostic_section(result, target.toolchain, where)
    if slow is not None:
        lines += [f"`repro.sh` gives the {slow[0]['stage']} {max(1, round(slow[1]))} s ({shrunk['predicate']['factor']:g} "
                  "x its typical seconds, from the sweep's other cases of that size), so it fails while the "
                  f"{slow[0]['stage']} is anomalously slow.", ""]
    if result.get("stage") == "verify" and check:
        failed = [m for m in (result.get("metrics") or {}).values() if not m.get("passed")]
        lines += ["## Expected against actual", "",
                  f"Tolerance of the check repro.sh runs: {check['mode']}"
                  + (f", |actual - expected| <= {check['atol']:.3g} + {check['rtol']:.3g} x |expected|"
                     if check["mode"] == "approximate" else ", bit-exact") + f" ({check['type']} output).", ""]
        for m in failed:
            lines.append(f"- {m['name']}: {m.get('mismatches')} of {m.get('elements')} elements outside; "
                         f"max abs error {figure(m.get('max_abs_error'))}, worst at {m.get('worst_index')} "
                         f"(tolerance there {figure(m.get('tolerance_at_worst'))})")
        worst = _worst(cfg.case_dir(minimal))
        if worst:
            lines += ["", "| index | expected | actual | abs error | tolerance |", "|---|---|---|---|---|", *worst]
        lines.append("")
    lines += list(sections)
    lines += ["## Reproduce", "",
              (f"`bash repro.sh` in this folder imports `{minimal.model_file}` as the sweep does"
               if mlir_name is None else "`bash repro.sh` in this folder compiles the MLIR below with the exact flags")
              + (", runs the module on the saved input and checks its output against the saved expected output"
                 if input_file else "")
              + "; it exits non-zero while the failure is there.", "", "```bash",
              *repro.read_text().splitlines(), "```", ""]
    if mlir_name is None:
        pass  # no MLIR: the importer failed
    elif text_mlir is not None and len(text_mlir) <= INLINE_MLIR:
        lines += [f"## The MLIR ({MLIR})", "", "```mlir", text_mlir.rstrip(), "```", ""]
    else:
        lines += [f"## The MLIR", "", f"In `{MLIR}` beside this report ({len(text_mlir or '')} characters)"
                  + (f"; the compiler reads `{mlir_name}`." if mlir_name != MLIR else "."), ""]
    lines += ["## Environment", "", f"What the {stage} stage ran:", "", "| | |", "|---|---|",
              *[f"| {k} | {_cell(v)} |" for k, v in environment(cfg, target, minimal, stage)], ""]
    lines += [f"## The sweep's cases in this bucket: {len(entries)}", "",
              "Flavors: " + ", ".join(f"{v} {n}" for v, n in sorted(_count(e["backend"] + "_" + e["flavor"]
                                                                              for e in entries).items())), "",
              "| geometry | range |", "|---|---|", *_geometry_range(entries), "",
              "Examples: " + ", ".join(f"`{e['case']}`" for e in sorted(entries, key=lambda e: e["case"])[:5]), ""]
    if boundary is not None:
        lines += boundary_section(boundary, minimal)
    if region is not None:
        lines += region_section(region)
    if shrunk:
        lines += ["## How the minimal case was found", "",
                  f"Shrunk from `{shrunk['original']['case']}` ({shrunk['original']['macs']:,} MACs) in "
                  f"{shrunk['attempts']} attempts ({shrunk['seconds']:.0f} s)"
                  + (", stopped by the time budget: the smallest found in it" if shrunk.get("stopped_by_budget") else "")
                  + (", each attempt failing the same way." if (shrunk.get("predicate") or {}).get("kind") != "slow"
                     else f", each attempt's {shrunk['predicate']['stage']} more than {shrunk['predicate']['factor']:g} "
                          "x its typical seconds (or cut at a limit past that)."), ""]
    lines += ["---", f"Bucket: `{bucket}`", ""]
    path = folder / "report.md"
    write_text(path, "\n".join(lines))
    return path


def _releases(target, case: Case, stage: str | None) -> dict[str, str]:
    """Tool name -> its release, for the tools the failing stage ran."""
    if stage == "import":
        return {t: _packages([TOOL_PACKAGES[t]]) for t in IMPORTERS[case.backend][0]}
    roles = ("compiler", "runner") if stage in ("run", "verify") else ("compiler",)
    return {Path(getattr(target.profile, r)).name: release(target, r) for r in roles}


def _failing_tool(target, case: Case, stage: str | None, releases: dict[str, str]) -> str:
    """The report's first words: the tool that fails, by its name and release."""
    if stage == "import":
        first = IMPORTERS[case.backend][0][0]
        return f"The importer of {case.backend} models, `{first}` ({releases[first]}), "
    name = Path(target.profile.runner if stage == "run" else target.profile.compiler).name
    return f"`{name}` ({releases[name]}) "


def _cell(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text.replace("|", "\\|").replace("\n", " ")


def _count(items) -> dict:
    from collections import Counter

    return dict(Counter(items))


def _short(region: dict) -> str:
    """index.md's region column: the rule, or its status."""
    return region["rule"] if region.get("status") == "learned" else str(region.get("status"))


def _probe(cfg: Config, minimal: Case, bucket: str, deadline: float, log) -> list[dict]:
    """The minimal case's boundary probes (pipeline/triage/boundary.py), on two lanes, with the
    store and the sweep's limits, none starting past BOUNDARY_SHARE of the bucket's time left."""
    from pipeline.triage.boundary import run_probes

    left = max(0.0, deadline - time.monotonic())
    probed = run_probes(cfg, minimal, bucket, lanes=2, deadline=time.monotonic() + left * BOUNDARY_SHARE)
    same = sum(p["outcome"] == "same" for p in probed)
    log(f"  boundary: {len(probed)} probes of {minimal.name}: {same} fail the same way")
    return probed


def cause_index(entries: list[dict], chosen: dict, target: str) -> list[str]:
    """index.md's root causes (pipeline/results/causes.py), before its buckets: each with its
    flavors, stages and why its buckets are one, and its buckets (linked where reported)."""
    from pipeline.results.causes import describe
    from pipeline.results.report import causes

    found = causes(entries)
    lines = ["## Root causes", "", f"{len(found)} root causes of {sum(len(c['buckets']) for c in found)} buckets.", ""]
    for number, cause in enumerate(found, 1):
        lines.append(f"{number}. {describe(cause)}")
        lines += [f"   - [{title(b, target)}]({slug(b)}/report.md)" if b in chosen else f"   - {title(b, target)} "
                  "(not reported here)" for b in cause["buckets"]]
    return lines + ["", "## Buckets", ""]


def report_md(cfg: Config, target: str, bucket: str) -> Path:
    """Where the report.md of a bucket of `target` goes."""
    return cfg.layout.bugreports(target) / slug(bucket) / "report.md"


def _report_bucket(cfg: Config, target, bucket: str, members: list[dict], by_name: dict, identity: dict,
                   region: dict | None, budget: float, keep_data: bool, log,
                   learned_from: list[dict]) -> tuple[Path, dict | None]:
    """One bucket's report: its minimal case (an earlier shrink of it, or a shrink now within
    SHRINK_SHARE of `budget`), the boundary probes and the flag trials in the rest; the
    report.md path and the region as shown (with_probes)."""
    from dataclasses import replace

    from pipeline.triage.culprit import examine, sections
    from pipeline.triage.shrink import shrink

    folder = report_md(cfg, target.name, bucket).parent
    smallest = min(members, key=lambda e: (macs(Geometry.from_dict(e["geometry"])), e["case"]))
    case = by_name[smallest["case"]]
    deadline = time.monotonic() + budget
    summary = _earlier(cfg, target, bucket, identity, keep_data)
    if summary is not None:
        log(f"{target.name}: {slug(bucket)}: reusing the shrink of {summary['case']} "
            f"({summary['minimal']['macs']:,} MACs)")
    elif budget > 0:
        log(f"{target.name}: {slug(bucket)}: shrinking {case.name} within {budget * SHRINK_SHARE:g} s")
        try:
            summary = shrink(case, cfg, log=lambda line: log("  " + line), budget=budget * SHRINK_SHARE,
                             keep_data=keep_data)
        except ConfigError as err:  # it does not fail now: report the sweep's case as it failed
            log(f"  {err}; reporting the sweep's case as it is")
            summary = None
        if summary is not None and summary["signature"] != bucket:
            log(f"  it fails differently now ({summary['signature']}); reporting the sweep's case")
            summary = None
    origin = by_name.get(summary["original"]["case"]) if summary is not None else None
    if origin is None:
        region = shown_region(region, case, None)
        return write_report(cfg, target, bucket, members, case, None, folder, region=region,
                            impulses=_impulses(cfg, case, deadline, log)), region
    # the case the shrink started from (any case of the bucket)
    shrunk_cfg = cfg.scratch(Path(summary["minimal"]["folder"]).parents[2])
    minimal = replace(origin, category="shrink", expected=None,
                      geometry=Geometry.from_dict(summary["minimal"]["geometry"]),
                      data_from=origin.geometry if summary.get("keep_data") else None)
    original = replace(origin, category="shrink", expected=None)
    swept = next((e for e in members if e["case"] == origin.name), {})
    impulses = _impulses(shrunk_cfg, minimal, time.monotonic() + max(0.0, deadline - time.monotonic()) * IMPULSE_SHARE,
                         log)
    probed = _probe(cfg, minimal, bucket, deadline, log) if budget > 0 else None
    region = with_probes(region, learned_from, target.name, bucket, minimal, probed)
    exam = examine(cfg, bucket, summary, minimal, original, cfg.model_dir(origin), swept.get("reason", ""),
                   deadline, log) if budget > 0 else None
    path = write_report(shrunk_cfg, target, bucket, members, minimal, summary, folder,
                        exam.findings if exam else (), sections(exam, summary, minimal, original) if exam else (),
                        region=region, boundary=probed, impulses=impulses)
    return path, region


def _impulses(cfg: Config, case: Case, deadline: float, log) -> dict | None:
    """For a wrong answer that no mis-lowering explains, what the case's module computes,
    measured with impulses (pipeline/triage/impulses.py) where they end by `deadline`; else None."""
    from pipeline.checks.explain import NONE
    from pipeline.triage.impulses import probe

    result = read_result(cfg.case_dir(case)) or {}
    if result.get("stage") != "verify" or result.get("explanation") != NONE:
        return None
    return probe(cfg, case, deadline, log)


def bugreports(cfg: Config, cases: list[Case], wanted: list[str], budget: float, log=print,
               keep_data: bool = False, region_entries: list[dict] | None = None,
               reported: set[str] = frozenset(), on_report=None) -> list[Path]:
    """Write the bug reports of the selected buckets of every selected target; the report.md
    paths. With `keep_data`, shrinks keep the original case's data (pipeline/triage/shrink.py).
    Each bucket's region rule is learned from the target's entries of `region_entries` (e.g. with
    cases evaluated elsewhere) when given, else from every case of the target in this run; where
    that rule is not shown, again with the boundary probes among them (with_probes).
    A bucket whose report.md is in `reported` (paths, written before) is listed, not redone;
    `on_report(bucket, path)` is called as each report is written."""
    from pipeline.results.report import TOOL_FAILURES, add_regions, by_target, collect, signature
    from pipeline.triage.shrink import tool_identity

    written = []
    for target, selected in by_target(cfg, cases):
        every = collect(selected, cfg.case_dir)
        entries = [{**e, "bucket": signature(e)} for e in every if e["status"] in TOOL_FAILURES]
        groups: dict[str, list[dict]] = {}
        for e in entries:
            groups.setdefault(e["bucket"], []).append(e)
        chosen = select(groups, wanted, target.name)
        if not chosen:
            log(f"{target.name}: no failures in this run: no bug reports")
            continue
        learned_from = every if region_entries is None else \
            [e for e in region_entries if e.get("target", target.name) == target.name]
        regions = {g["signature"]: g["region"] for g in add_regions([{"signature": b} for b in chosen], learned_from)}
        identity = tool_identity(cfg, target)
        root = cfg.layout.bugreports(target.name)
        by_name = {c.name: c for c in selected}
        index = []
        for bucket in sorted(chosen, key=lambda b: (-len(chosen[b]), b)):
            members = chosen[bucket]
            path = report_md(cfg, target.name, bucket)
            if str(path) in reported:  # written before (a resumed hunt): listed, not redone
                regions[bucket] = {"status": "in its report"}
                log(f"{target.name}: {slug(bucket)}: reported before: {path}")
            else:
                path, regions[bucket] = _report_bucket(cfg, target, bucket, members, by_name, identity, regions[bucket],
                                                       budget, keep_data, log, learned_from)
                if on_report is not None:
                    on_report(bucket, path)
            written.append(path)
            index.append(f"| [{slug(bucket)}]({slug(bucket)}/report.md) | {len(members)} | {title(bucket, target.name)} "
                         f"| {_cell(_short(regions[bucket]))} |")
            log(f"{target.name}: {path}")
        write_text(root / "index.md", "\n".join([f"# Bug reports: {target.name}", "",
                                                   f"{len(entries)} failing cases of this run in {len(groups)} buckets"
                                                   + (f"; {len(chosen)} reported here" if len(chosen) != len(groups) else "")
                                                   + ".", "", *cause_index(entries, chosen, target.name),
                                                   "| bucket | cases | title | region |", "|---|---|---|---|",
                                                   *index, ""]))
        log(f"{target.name}: {root / 'index.md'}")
    return written
