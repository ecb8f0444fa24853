"""`doit bisect <case-or-bucket> --target llvm-cpu --versions 3.9.0..3.13.0`: the first release
of a target's toolchain on which a case fails.

The released versions in the range (PyPI's list, pre-releases left out) are searched in binary
order: the first and the last are run, then the middle of the remaining interval, until a
version that passes sits next to one that fails. Each version is installed on demand, as a
`<target>@<version>` of a sweep is (Config.at_version), and the case runs through the sweep's
own stage functions (pipeline/run/runner.py) in `<build>/bisect/<target>/<target>-<version>/`
(one folder per release, the pinned one too), with the store: the model and its import are
built once and taken from the store by every other version. For a bucket, its smallest
case (by MACs) in this build folder's results is bisected. A version whose compiler cannot read
today's importers' MLIR cannot be tested: it is skipped, and said.

Printed: each version's outcome as it is known, then the last good and the first bad release
with the repro.sh of the case on each (it runs that release's tools); written to bisect.json.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Config
from pipeline.core.chain import TASKS
from pipeline.core.errors import ConfigError
from pipeline.core.layout import folder
from pipeline.core.tools import write_text
from pipeline.run.runner import run_chain
from pipeline.space.cases import Case
from pipeline.space.geometry import Geometry, macs

PASSING = ("pass", "xpass", "compiled")
UNTESTABLE = "untestable"


@dataclass(frozen=True)
class Outcome:
    version: str
    status: str  # a result status, or UNTESTABLE
    signature: str  # the failure's bucket, "" where it passed
    repro: str | None

    @property
    def bad(self) -> bool:
        return self.status not in PASSING and self.status != UNTESTABLE

    def line(self) -> str:
        what = self.status + (f": {self.signature}" if self.signature else "")
        return f"{self.version}: {what}"


def version_range(kind: str, text: str, available: list[str]) -> list[str]:
    """FIRST..LAST: the released versions from FIRST to LAST, oldest first."""
    from packaging.version import InvalidVersion, Version

    first, sep, last = (part.strip() for part in text.partition(".."))
    if not sep or not first or not last:
        raise ConfigError("doit bisect --versions", text, "must be FIRST..LAST, e.g. 3.9.0..3.13.0")
    for end in (first, last):
        if end not in available:
            raise ConfigError("doit bisect --versions", end,
                              f"is not a release of {kind}; available: {', '.join(available)}")
    try:
        lo, hi = Version(first), Version(last)
        chosen = sorted((v for v in available if lo <= Version(v) <= hi and not Version(v).is_prerelease),
                        key=Version)
    except InvalidVersion as err:
        raise ConfigError("doit bisect --versions", text, str(err)) from None
    if len(chosen) < 2:
        raise ConfigError("doit bisect --versions", text, "holds fewer than two releases: nothing to bisect")
    return chosen


def subject(cfg: Config, cases: list[Case], target: str, text: str) -> Case:
    """The case to bisect: the case named `text`, or the smallest case of the bucket it names
    in this build folder's results of `target`."""
    from pipeline.results.report import TOOL_FAILURES, collect, signature
    from pipeline.triage.bugreport import select

    mine = [c for c in cases if c.target == target]
    named = [c for c in mine if text in (c.key, c.name)]
    if named:
        return named[0]
    groups: dict[str, list[dict]] = {}
    for e in collect(mine, cfg.case_dir):
        if e["status"] in TOOL_FAILURES:
            groups.setdefault(signature(e), []).append(e)
    chosen = select(groups, [text], target)
    members = [e for entries in chosen.values() for e in entries]
    smallest = min(members, key=lambda e: (macs(Geometry.from_dict(e["geometry"])), e["case"]))
    return next(c for c in mine if c.name == smallest["case"])


def evaluate(case: Case, cfg: Config, version: str, base: Path | None, log, none: Path) -> Outcome:
    """The case on one release of its target's toolchain, in the bisect folder, judged against
    the empty expected-failures list `none`."""
    from pipeline.results.report import signature

    try:
        there = cfg.at_version(case.target, version, expected_failures=none, base_dir=base,
                               install_to=_Prefixed(log, f"{version}: "), backends={case.backend})
    except ConfigError as err:
        if "cannot read" in err.problem:
            return Outcome(version, UNTESTABLE, err.problem, None)
        raise
    # every release in a folder of its own, named alike (the pinned one too, which is the bare profile)
    release = folder(f"{cfg.target(case.target).profile.base}@{version}")
    there = there.scratch(cfg.layout.bisect_dir(case.target) / release)
    twin = next((c for c in there.cases() if c.name == case.name), None)
    if twin is None:
        raise ConfigError("doit bisect", case.name, f"is no case of {there.targets[0].name}")
    result = run_chain(twin, there, TASKS)
    status = result.get("status", "pass")
    repro = there.case_dir(twin) / "repro.sh"
    return Outcome(version, status, "" if status in PASSING else signature(result),
                   str(repro) if repro.is_file() else None)


class _Prefixed:
    """A stream that hands each line of an install's progress to `log`, prefixed."""

    def __init__(self, log, prefix: str):
        self.log, self.prefix, self.pending = log, prefix, ""

    def write(self, text: str) -> None:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            self.log(self.prefix + line)

    def flush(self) -> None:
        pass


def search(versions: list[str], probe) -> tuple[str | None, str | None]:
    """(last good, first bad) by binary search over `versions` (oldest first), `probe(version)`
    giving an Outcome; untestable versions are stepped over. (None, None) where the first
    release already fails or the last still passes."""
    first, last = probe(versions[0]), probe(versions[-1])
    if first.status == UNTESTABLE or last.status == UNTESTABLE:
        end = versions[0] if first.status == UNTESTABLE else versions[-1]
        raise ConfigError("doit bisect --versions", end, "cannot be tested (its compiler cannot read today's "
                          "importers' MLIR): choose another end of the range")
    if first.bad or not last.bad:
        return None, None
    lo, hi = 0, len(versions) - 1
    while hi - lo > 1:
        middle = (lo + hi) // 2
        order = sorted(range(lo + 1, hi), key=lambda i: (abs(i - middle), i))
        tested = next(((i, o) for i in order if (o := probe(versions[i])).status != UNTESTABLE), None)
        if tested is None:
            break  # every release between is untestable: the change is somewhere in there
        if tested[1].bad:
            hi = tested[0]
        else:
            lo = tested[0]
    return versions[lo], versions[hi]


def bisect(cfg: Config, cases: list[Case], text: str, target: str, versions_text: str,
           base: Path | None = None, log=print) -> dict:
    """Bisect the case or bucket `text` of `target` over the releases of `versions_text`;
    returns what bisect.json holds."""
    from pipeline.targets import toolchain
    from pipeline.targets.profiles import toolchain_kind

    names = [t.name for t in cfg.targets]
    if target not in names:
        raise ConfigError("doit bisect --target", target, f"is not a selected target ({', '.join(names)}); "
                          "CONV_SWEEP_TARGET selects them")
    profile = cfg.target(target).profile
    if profile.version:
        raise ConfigError("doit bisect --target", target, f"names a version: give the target alone ({profile.base})")
    kind = toolchain_kind(profile)
    try:
        available = toolchain.available_versions(kind)
    except toolchain.ToolchainError as err:
        raise ConfigError("doit bisect --versions", versions_text, str(err)) from None
    versions = version_range(kind, versions_text, available)
    case = subject(cfg, cases, target, text)
    log(f"bisect {case.name} on {target}: {len(versions)} releases of {kind}, {versions[0]} .. {versions[-1]}")
    outcomes: dict[str, Outcome] = {}
    folder = cfg.layout.bisect_dir(target)
    folder.mkdir(parents=True, exist_ok=True)
    none = folder / "no-expected-failures.json"  # every release judged as it fails, none as listed
    write_text(none, json.dumps({"expected_failures": []}) + "\n")

    def probe(version: str) -> Outcome:
        if version not in outcomes:
            outcomes[version] = evaluate(case, cfg, version, base, log, none)
            log(outcomes[version].line())
        return outcomes[version]

    good, bad = search(versions, probe)
    document = {"case": case.name, "target": target, "versions": versions,
                "outcomes": [vars(outcomes[v]) for v in versions if v in outcomes],
                "last_good": good, "first_bad": bad,
                "repro": {v: outcomes[v].repro for v in (good, bad) if v}}
    write_text(folder / "bisect.json", json.dumps(document, indent=1) + "\n")
    if good is None:
        first, last = outcomes[versions[0]], outcomes[versions[-1]]
        log(f"no transition in {versions[0]} .. {versions[-1]}: {first.line()}; {last.line()}")
    else:
        log(f"last good: {outcomes[good].line()}\n  repro: {outcomes[good].repro}")
        log(f"first bad: {outcomes[bad].line()}\n  repro: {outcomes[bad].repro}")
        skipped = versions[versions.index(good) + 1:versions.index(bad)]
        if skipped:
            log(f"between them, untestable: {', '.join(skipped)}")
    log(f"bisect: {folder / 'bisect.json'}")
    return document
