"""Flag check: do extra compile flags leave every case's module byte-identical, and what do they save?

    python -m pipeline.dev.flagcheck --flags="--verify=false" [--twice] [--out flagcheck.json]

For every case of the selection (CONV_SWEEP_TARGET, CONV_SWEEP_N, CONV_SWEEP_SPEC, as for doit),
compiles the case's MLIR from the build folder twice: with the target's flags (A), and with the
same flags plus --flags (B). A runs first on every other case, B on the rest, two compiles at a
time (one per core), so that the machine's noise falls on both alike. Each compile writes
model.vmfb in a folder of its own beside the other's, from the same relative input path: the
two command lines differ only in the flags (the cases run on pipeline/run/runner.py's lanes).
A case counts as identical when both modules have the same SHA-256, or both compiles failed
with the same reason; a compile cut at its time limit (or killed from outside) proves nothing
either way and is listed apart. With --twice, A is compiled a second time: a compiler whose
output differs between two identical compiles cannot have a flag proven byte-identical.

Needs the MLIR: run `doit -n 2 mlir` with the same selection first. Prints, per target and
flavor, the identical count and the compile seconds of A and B with their ratio; lists every
case that differs; exits 1 when one does (or was cut), 0 when all are identical, 2 on a bad
selection or a build folder without the MLIR (nothing compiled).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import tempfile
from pathlib import Path

from pipeline.config import Config
from pipeline.core.errors import ConfigError, StageError
from pipeline.dev.benchmark import CORES, ROOT
from pipeline.core.layout import folder
from pipeline.run.runner import run_cases
from pipeline.space.cases import Case


def compile_once(cfg: Config, case: Case, flags: tuple[str, ...], folder: Path) -> dict:
    """One compile of the case's MLIR with `flags` into folder/model.vmfb: its outcome
    (the module's digest, or the failure's reason) and its seconds."""
    from pipeline.core.chain import VMFB
    from pipeline.targets.compiler import compile_mlir

    target = cfg.target(case.target)
    folder.mkdir(parents=True, exist_ok=True)
    vmfb = folder / VMFB
    try:
        seconds = compile_mlir(cfg.model_dir(case) / cfg.mlir_input(case), vmfb, compiler=target.compiler, flags=flags,
                               timeout=cfg.limit(case, "compile").seconds, log=folder / "compile.log",
                               launch=target.compile_launch)
    except StageError as err:
        cut = not err.deterministic  # cut at its limit or killed from outside: says nothing of the flags
        return {"outcome": ("cut: " if cut else "error: ") + err.reason, "seconds": err.seconds or 0.0, "cut": cut}
    digest = hashlib.sha256(vmfb.read_bytes()).hexdigest()
    vmfb.unlink()
    return {"outcome": digest, "seconds": seconds, "cut": False}


def check_case(cfg: Config, case: Case, index: int, extra: tuple[str, ...], twice: bool, scratch: Path) -> dict:
    """Compile one case with and without the extra flags (order alternating with `index`)."""
    flags = cfg.target(case.target).compile_flags(case.variant)
    runs = {"a": flags, "b": flags + extra}
    order = ["a", "b"] if index % 2 == 0 else ["b", "a"]
    if twice:
        order.append("a2")
        runs["a2"] = flags
    # a/ and b/ are siblings: both compiles read the MLIR by the same relative path
    done = {name: compile_once(cfg, case, runs[name], scratch / folder(case.target) / case.name / name) for name in order}
    a, b = done["a"], done["b"]
    if a["cut"] or b["cut"]:
        verdict = "cut"
    else:
        verdict = "identical" if a["outcome"] == b["outcome"] else "differs"
    row = {"case": case.name, "target": case.target, "flavor": case.variant, "verdict": verdict,
           "a": a["outcome"], "b": b["outcome"], "a_seconds": round(a["seconds"], 3), "b_seconds": round(b["seconds"], 3)}
    if twice:
        row["a2"] = done["a2"]["outcome"]
        row["reproducible"] = not done["a2"]["cut"] and done["a2"]["outcome"] == a["outcome"]
    return row


def check(cfg: Config, cases: list[Case], extra: tuple[str, ...], twice: bool, progress=None) -> list[dict]:
    missing = [c.name for c in cases if not (cfg.model_dir(c) / cfg.mlir_input(c)).exists()]
    if missing:
        raise ConfigError("build folder", str(cfg.build_dir),
                          f"lacks the MLIR of {len(missing)} of {len(cases)} cases (first: {missing[0]}); "
                          "run `doit -n 2 mlir` with the same selection first")
    index = {case.key: i for i, case in enumerate(cases)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="conv-sweep-flagcheck-") as scratch:
        def one(case: Case, config: Config) -> dict:
            return check_case(config, case, index[case.key], extra, twice, Path(scratch))

        def done(case: Case, row: dict, line) -> None:
            rows.append(row)
            if progress:
                progress(len(rows), len(cases), row)

        # a compile helper that raised stops the check, not hides it: run_cases raises it
        run_cases(cfg, cases, CORES, work=one, on_done=done)
    return sorted(rows, key=lambda r: (r["target"], r["case"]))


def summary(rows: list[dict]) -> dict:
    """Per target, and per flavor within it: counts of each verdict, seconds of A and B, B / A."""
    out: dict = {}
    for row in rows:
        for key in (row["target"], f"{row['target']} {row['flavor']}"):
            s = out.setdefault(key, {"cases": 0, "identical": 0, "differs": 0, "cut": 0,
                                     "a_seconds": 0.0, "b_seconds": 0.0})
            s["cases"] += 1
            s[row["verdict"]] += 1
            s["a_seconds"] += row["a_seconds"]
            s["b_seconds"] += row["b_seconds"]
            if "reproducible" in row:
                s["not reproducible"] = s.get("not reproducible", 0) + (not row["reproducible"])
    for s in out.values():
        s["a_seconds"], s["b_seconds"] = round(s["a_seconds"], 1), round(s["b_seconds"], 1)
        s["b / a"] = round(s["b_seconds"] / s["a_seconds"], 3) if s["a_seconds"] else None
    return out


def table(extra: tuple[str, ...], rows: list[dict]) -> str:
    lines = [f"flags under test: {shlex.join(extra)}",
             f"{'target / flavor':26} {'cases':>6} {'identical':>9} {'differs':>8} {'cut':>6} "
             f"{'A s':>9} {'B s':>9} {'B / A':>7}"]
    for key, s in summary(rows).items():
        ratio = f"{s['b / a']:.3f}" if s["b / a"] is not None else "-"
        repro = f"  (A not reproducible: {s['not reproducible']})" if s.get("not reproducible") else ""
        lines.append(f"{key:26} {s['cases']:6d} {s['identical']:9d} {s['differs']:8d} {s['cut']:6d} "
                     f"{s['a_seconds']:9.1f} {s['b_seconds']:9.1f} {ratio:>7}{repro}")
    lines += [f"  {r['verdict']}: {r['case']}@{r['target']}  A {r['a'][:60]}  B {r['b'][:60]}"
              for r in rows if r["verdict"] != "identical"]
    return "\n".join(lines)


def main(argv=None) -> int:
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flags", required=True, help="the extra compile flags under test, one shell-quoted string: --flags=\"--verify=false\"")
    parser.add_argument("--twice", action="store_true", help="also compile A a second time: is the compiler reproducible?")
    parser.add_argument("--out", default="flagcheck.json", help="where to write every case's outcome as JSON")
    args = parser.parse_args(argv)
    extra = tuple(shlex.split(args.flags))
    if not extra:
        parser.error("--flags: give at least one flag")
    try:
        cfg = Config.from_env(default_build_dir=ROOT / "build", base_dir=os.getcwd())
        cases = cfg.cases()
        progress = (lambda i, n, row: print(f"[{i}/{n}] {row['verdict']}: {row['case']}@{row['target']}",
                                            file=sys.stderr, flush=True))
        rows = check(cfg, cases, extra, args.twice, progress)
    except ConfigError as err:
        print(f"conv-sweep flagcheck: nothing was compiled: {err}", file=sys.stderr)
        return 2
    print(table(extra, rows))
    Path(args.out).write_text(json.dumps({"flags": list(extra), "summary": summary(rows), "cases": rows}, indent=1) + "\n")
    print(f"outcomes written to {args.out}")
    return 0 if all(r["verdict"] == "identical" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
