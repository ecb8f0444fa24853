"""The culprit-flag search of `doit bugreport`: each of the target's toggle flags (its profile's
`toggle_flags`, compile flags that each turn one optional transformation off) tried on a
bucket's minimal case, and on a timeout bucket's original case too.

A trial is an ordinary case chain, compile then run and check, run by the sweep's stage
functions (pipeline/run/runner.py: run_chain) with the flag after the target's own flags, in
a build folder of its own (<shrink folder>/trials/), with the store of stage outputs off (a
trial is timed) and the model and MLIR copied from the case's folder. Each compile and run
has the limit the sweep would give it; on a timeout bucket the minimal case's compile without a
flag, which carries MLIR's pass timing (pipeline/triage/timing.py), may run on to half of what is left
of the bucket's budget, so that it shows where the time goes. No trial starts once the bucket's
budget is spent: the report names the flags not tried.

What a trial shows: on a compile-error bucket, whether the error disappears with the flag (it
then compiles); on a timeout bucket, whether the flag brings the stage's time back to normal
(at most SLOW_FACTOR times its prediction); and in both whether the module then passes. A flag
changes the module, so it is never the same test: it is called a workaround only when the
module then passes.
"""
from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.config import Config
from pipeline.core.chain import tasks_until
from pipeline.core.tools import logged_runs
from pipeline.outcome.result import COMPILED, PASS, TIMEOUT, read_result
from pipeline.results.report import signature
from pipeline.run.runner import run_chain
from pipeline.space.cases import Case
from pipeline.space.geometry import macs
from pipeline.triage.slow import SLOW_FACTOR, stage_seconds, typical_seconds
from pipeline.triage.timing import TIMING_FLAGS, Timing, growth_table, parse_timing, pass_table, path_points

TRIALS = "trials"


@dataclass(frozen=True)
class Trial:
    """One case compiled (and run and checked) with one toggle flag, or none."""

    flag: str | None  # None: the target's flags alone
    case: str
    macs: int
    stage: str  # the timed stage: compile, or run for a run timeout
    seconds: float | None  # how long that stage ran, where it ended by itself
    limit: float  # the limit it had
    typical: float | None  # its typical seconds (pipeline/triage/slow.py)
    status: str  # pass, compiled, fail, error, timeout, harness
    failed_at: str | None  # the stage it failed at
    reason: str
    signature: str  # its bucket where it failed, else ""
    timing: Timing | None = None  # MLIR's pass timing of its compile, where asked for

    @property
    def compiles(self) -> bool:
        return self.failed_at not in ("model", "import", "compile")

    @property
    def passes(self) -> bool:
        return self.status in (PASS, COMPILED)

    def normal(self, factor: float = SLOW_FACTOR) -> bool:
        """Whether its timed stage ended by itself within `factor` times its prediction."""
        return self.seconds is not None and (self.typical is None or self.seconds <= factor * self.typical)

    def module(self) -> str:
        """What became of the module: passes, or where and how it failed."""
        if self.status == PASS:
            return "passes"
        if self.status == COMPILED:
            return "compiles (a compile-only case: not checked)"
        return f"{self.status} at {self.failed_at}: {self.reason}"


def _trial_config(cfg: Config, case: Case, folder: Path, flags: tuple[str, ...],
                  allowance: tuple[str, float] | None) -> Config:
    """`cfg` building in `folder`, the store off, `flags` after the case's target's own; with an
    `allowance` (stage, seconds), that stage's limit is at least that many seconds."""
    targets = tuple(replace(t, extra_flags=t.extra_flags + flags) if t.name == case.target else t
                    for t in cfg.targets)
    trial = replace(cfg.scratch(folder), cache_dir=None, targets=targets)
    if allowance is None:
        return trial
    budgets = {stage: trial.limit(case, stage).seconds for stage in ("compile", "run")}
    budgets[allowance[0]] = max(budgets[allowance[0]], allowance[1])
    return replace(trial, budgets=tuple(sorted(budgets.items())), predicted_timeouts=False)


def run_trial(cfg: Config, case: Case, folder: Path, flag: str | None, stage: str, model_from: Path | None,
              extra: tuple[str, ...] = (), allowance: float | None = None) -> Trial:
    """Compile `case` with `flag` (and `extra` flags) in `folder`, then run and check it where it
    compiled; the Trial. The model and MLIR come from `model_from` where it has them."""
    shutil.rmtree(folder, ignore_errors=True)
    flags = ((flag,) if flag else ()) + tuple(extra)
    tcfg = _trial_config(cfg, case, folder, flags, (stage, allowance) if allowance else None)
    model_dir = tcfg.model_dir(case)
    tasks = tasks_until("vmfb")
    if model_from is not None and (Path(model_from) / cfg.mlir_input(case)).is_file():
        model_dir.mkdir(parents=True)
        for path in Path(model_from).iterdir():
            if path.is_file():
                shutil.copy2(path, model_dir / path.name)
        tasks = ("vmfb",)
    limit = tcfg.limit(case, stage).seconds
    result = run_chain(case, tcfg, tasks)
    if result["status"] == "pass":
        result = run_chain(case, tcfg, ("verify",))
    recorded = read_result(tcfg.case_dir(case)) or {}
    status = result["status"] if result["status"] != "pass" else recorded.get("status", COMPILED)
    seconds = stage_seconds(tcfg, case, stage)
    if seconds is None and stage == "compile" and result.get("stage") == "compile" and status != TIMEOUT:
        runs = logged_runs(tcfg.case_dir(case) / "compile.log")  # a compile that failed still took its time
        seconds = runs[-1][1] if runs else None
    log = tcfg.case_dir(case) / "compile.log"
    timing = parse_timing(log.read_text(errors="replace")) if TIMING_FLAGS[0] in extra and log.is_file() else None
    return Trial(flag, case.name, macs(case.geometry), stage, seconds, limit, typical_seconds(cfg, case, stage),
                 status, result.get("stage"), result.get("reason") or "",
                 signature(result) if result["status"] != "pass" else "", timing)


def _folder(root: Path, index: int, flag: str | None) -> Path:
    words = re.sub(r"[^a-z0-9]+", "-", (flag or "none").lower()).strip("-")[:48]
    return root / f"{index:02d}-{words}"


@dataclass
class Examination:
    """What the flags did to one bucket: the trials per case, the minimal case's pass timing,
    the flags the budget left untried (per case), and the findings in order."""

    minimal: list[Trial]
    original: list[Trial]
    untried: dict[str, list[str]]
    timing: Timing | None
    findings: list[str]


def examine(cfg: Config, bucket: str, summary: dict, minimal: Case, original: Case, original_model: Path,
            original_reason: str, deadline: float, log=print) -> Examination | None:
    """Try every toggle flag of the target on the minimal case of `bucket` (a compile bucket or a
    timeout bucket), and for a timeout bucket on the original case too (`original_model`: its
    model folder; `original_reason`: how the sweep's run of it failed), until `deadline`
    (time.monotonic()). None for other buckets."""
    timed = bucket.endswith(": timeout")
    if not (timed or bucket.startswith("compile:")):
        return None
    stage = bucket.split(":")[0] if timed else "compile"
    flags = list(cfg.target(minimal.target).profile.toggle_flags)
    root = Path(summary["minimal"]["folder"]).parents[2] / TRIALS
    shutil.rmtree(root, ignore_errors=True)
    extra = TIMING_FLAGS if timed and stage == "compile" else ()
    untried: dict[str, list[str]] = {}
    mins: list[Trial] = []
    # without flags to try, a compile bucket's minimal case needs no compile; a timeout bucket's
    # still shows where its time goes
    for index, flag in enumerate([None, *flags] if flags or timed else []):
        if time.monotonic() > deadline:
            untried.setdefault(minimal.name, []).append(flag or "(no flag)")
            continue
        # the timed compile without a flag may run past its limit to show where the time goes,
        # but for half of what is left at most: the flags keep the rest
        allowance = max(1.0, (deadline - time.monotonic()) / 2) if timed and flag is None else None
        trial = run_trial(cfg, minimal, _folder(root / "minimal", index, flag), flag, stage,
                          Path(summary["minimal"]["folder"]).parent, extra, allowance)
        mins.append(trial)
        log(f"  {flag or '(no flag)'} on {minimal.name}: {_took(trial)}, {trial.module()[:120]}")
    origs: list[Trial] = []
    if timed and original.name != minimal.name:  # the shrink found nothing smaller: one table says it all
        first = (summary.get("tried") or [{}])[0]
        origs.append(Trial(None, original.name, macs(original.geometry), stage, first.get("timed"),
                           first.get("limit") or cfg.limit(original, stage).seconds,
                           typical_seconds(cfg, original, stage), TIMEOUT, stage,
                           original_reason, f"{stage}: timeout"))
        helped = {t.flag for t in mins if t.flag and t.normal()}
        for index, flag in sorted(enumerate(flags, 1), key=lambda item: item[1] not in helped):
            if time.monotonic() > deadline:
                untried.setdefault(original.name, []).append(flag)
                continue
            trial = run_trial(cfg, original, _folder(root / "original", index, flag), flag, stage,
                              original_model, extra)
            origs.append(trial)
            log(f"  {flag} on {original.name}: {_took(trial)}, {trial.module()[:120]}")
    timing = mins[0].timing if mins and mins[0].flag is None else None
    return Examination(mins, origs, untried, timing,
                       findings(mins, origs, untried, flags, timed, stage, bucket))


def _took(t: Trial) -> str:
    if t.seconds is not None:
        return f"{t.stage} {t.seconds:.2f} s"
    if t.status == TIMEOUT and t.failed_at == t.stage:
        return f"{t.stage} cut at {t.limit:g} s"
    return f"{t.stage} not reached"


def findings(mins: list[Trial], origs: list[Trial], untried: dict[str, list[str]], flags: list[str],
             timed: bool, stage: str, bucket: str) -> list[str]:
    """The report's findings, most useful first: which flag makes the failure disappear, and
    whether the module then passes."""
    out = []
    if not flags:
        return ["The target's profile lists no toggle flags (`toggle_flags`, docs/targets.md): no flag was tried."]
    base = mins[0] if mins and mins[0].flag is None else None
    by_flag = {t.flag: t for t in origs if t.flag}
    # a minimal case not slow this time says nothing of a flag's time: only the original case
    # (cut without a flag) does
    weak = timed and base is not None and base.normal()
    for o in (o for o in origs if weak and o.flag and o.normal()):
        out.append(f"`{o.flag}` brings the original case's {stage} time back to normal: {o.seconds:.2f} s, "
                   f"where it was cut without it.{_module_verdict(o, 'the original case')}")
    for t in (t for t in mins if t.flag and not weak):
        if timed and t.normal():
            o = by_flag.get(t.flag)
            text = (f"`{t.flag}` brings the minimal case's {stage} time back to normal: {t.seconds:.2f} s, "
                    f"against {_took(base)[len(stage) + 1:] if base else 'an unknown time'} without it"
                    + (f" (typical {t.typical:.3g} s; anomalous past {SLOW_FACTOR:g} x)." if t.typical else "."))
            if o is None:
                text += " Not tried on the original case (the budget was spent)."
            elif o.normal():
                text += f" On the original case too: {o.seconds:.2f} s, where it was cut without it."
            else:
                text += f" On the original case it does not: {_took(o)}."
            judged = o if o is not None and o.normal() else t
            out.append(text + _module_verdict(judged, "the original case" if judged is o else "the minimal case"))
        elif not timed and t.compiles:
            out.append(f"This error disappears with `{t.flag}`: the minimal case then compiles"
                       + (f" ({t.seconds:.2f} s)" if t.seconds is not None else "")
                       + (f", and its module passes: `{t.flag}` is a workaround (not the same test: the flag "
                          "changes the module)." if t.passes else
                          f", but its module fails ({t.module()}): not a workaround."))
    if not out:
        tried = {t.flag for t in [*(() if weak else mins), *origs] if t.flag}
        out.append(f"No toggle flag {'brings the time back to normal' if timed else 'makes the minimal case compile'}"
                   f" ({len(tried)} of {len(flags)} tried).")
    if not timed:
        other = [t for t in mins if t.flag and not t.compiles and t.signature != bucket]
        out += [f"With `{t.flag}` it fails otherwise: {t.signature}" for t in other]
    if base is not None and not timed and base.signature != bucket:
        out.append(f"Without a flag the minimal case now {base.module()}: the comparison is weak.")
    if base is not None and timed and base.normal():
        out.append(f"Without a flag the minimal case's {stage} took {_took(base)[len(stage) + 1:]} this time, "
                   f"not past {SLOW_FACTOR:g} x its typical seconds (it was when the shrink kept it): the flags are "
                   "judged on the original case only.")
    for name, left in untried.items():
        out.append(f"Not tried on `{name}`, the bucket's budget being spent: " + ", ".join(f"`{f}`" for f in left) + ".")
    return out


def _module_verdict(t: Trial, whose: str) -> str:
    """Whether the module built with the trial's flag passes, as the end of a finding."""
    return (f" With it {whose}'s module passes: `{t.flag}` is a workaround (not the same test: the flag "
            "changes the module)." if t.passes else f" With it {whose}'s module fails ({t.module()}): not a workaround.")


def flag_table(trials: list[Trial], factor: float = SLOW_FACTOR) -> list[str]:
    """Markdown: per trial, its flag, its timed stage's seconds and their ratio to the trial
    without a flag (the first, where there is one), its slowest pass where timed, and what
    became of the module."""
    if not trials:
        return []
    stage = trials[0].stage
    base = trials[0] if trials[0].flag is None else None
    timing = any(t.timing for t in trials)
    lines = [f"| flag | {stage} (s) | x without | " + ("slowest pass | " if timing else "") + "module |",
             "|---|---|---|" + ("---|" if timing else "") + "---|"]
    for t in trials:
        took = f"{t.seconds:.2f}" if t.seconds is not None else \
            f"> {t.limit:g} (cut)" if t.status == TIMEOUT and t.failed_at == t.stage else "-"
        if t.typical and t.seconds is not None and t.seconds > factor * t.typical:
            took += " (slow)"
        if base is None or t is base:
            ratio = "1" if t is base and base.seconds is not None else "-"
        elif t.seconds is not None and base.seconds:
            ratio = f"{t.seconds / base.seconds:.2f}"
        elif t.seconds is not None and base.status == TIMEOUT:
            ratio = f"< {t.seconds / base.limit:.2f}"
        else:
            ratio = "-"
        top = ""
        if timing:
            first = t.timing.top(1) if t.timing else ()
            top = f"{first[0][0]} {first[0][1]:.3g} s | " if first else "- | "
        same = base is not None and t is not base and t.signature and t.signature == base.signature
        cell = "the same failure" if same else t.module().replace("|", "\\|").replace("\n", " ")[:200]
        lines.append(f"| {f'`{t.flag}`' if t.flag else '(no flag)'} | {took} | {ratio} | {top}{cell} |")
    return lines


def sections(exam: Examination, summary: dict, minimal: Case, original: Case) -> list[str]:
    """Markdown: where the time goes (a timeout bucket's: the minimal case's slowest passes, the
    time against the size along the shrink's path), then the flag tables, the minimal case's first."""
    lines = []
    kept = summary.get("predicate") or {}
    if kept.get("kind") in ("slow", "timeout"):
        stage = kept["stage"]
        lines += ["## Where the time goes", ""]
        base = exam.minimal[0] if exam.minimal and exam.minimal[0].flag is None else None
        if exam.timing is not None:
            lines += [f"The minimal case compiled once more with `{' '.join(TIMING_FLAGS)}`, in "
                      f"{_took(base)[len(stage) + 1:]}; its slowest passes:", "",
                      *pass_table(exam.timing, base.seconds if base else None), ""]
        elif stage == "compile":
            lines += ["No pass timing: the minimal case's compile with MLIR's timing "
                      + ("did not end within what was left of the budget." if base else "was not run (the budget was spent)."), ""]
        points = path_points(summary.get("path") or [])
        if points:
            lines += [f"The {stage} time along the shrink's path:", "",
                      *growth_table(points, stage, kept.get("factor", SLOW_FACTOR)), ""]
    lines += ["## Toggle flags", "",
             "Each of the target's toggle flags (compile flags that each turn one optional transformation off) "
             "after the sweep's flags; each compile and run within the limit the sweep gives it. A flag changes "
             "the module: it is a workaround only where the module then passes.", ""]
    for title, case, trials in (("the minimal case", minimal, exam.minimal), ("the original case", original,
                                                                               exam.original)):
        if trials:
            lines += [f"On {title}, `{case.name}` ({macs(case.geometry):,} MACs):", "", *flag_table(trials), ""]
    return lines
