"""Detection power: which miscompiles the checks catch, per flavor and reduction size.

    python -m pipeline.dev.detection [--out DIR] [--target llvm-cpu] [--data random,adversarial]

For each data mode it sweeps a spec of one geometry per decade of K (9 to 41,472) with the
target's own compiler (every case must pass: a failure there is a false alarm, and is printed),
then once per mutant with the compiler wrapped by pipeline/dev/mutants.py, which builds each
module from a mutated copy of its MLIR. A mutant case that fails at verify is caught; one that
passes is missed; one the mutant does not apply to (no bias, a one-tap kernel) is left out.
Everything runs through `doit sweep`, as a user would, in DIR (default: a temporary folder).

Each case it misses is listed with its figures: the mutant's effect (the largest change it
made to the module's output), the clean module's own error against S (the accumulation noise)
and the largest element bound of the clean case's check. A miss is `cannot show` where the
output did not change at all (a w8i8 output saturated or rounded back), `below the bound` where
the effect stays within the bound, and `above the bound` otherwise (a gap in the checks).
`--target torq` runs the same on the simulator (the wrapper reads its MLIR bytecode).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (category, geometry): one per decade of K = c_in x kernel area; 8 output channels (every role
# of the adversarial data), stride 1, unpadded
DECADES = [
    ("k9", {"rank": 2, "spatial": [12, 12], "kernel": [3, 3], "stride": [1, 1], "c_in": 1, "c_out": 8}),
    ("k72", {"rank": 2, "spatial": [12, 12], "kernel": [3, 3], "stride": [1, 1], "c_in": 8, "c_out": 8}),
    ("k576", {"rank": 2, "spatial": [10, 10], "kernel": [3, 3], "stride": [1, 1], "c_in": 64, "c_out": 8}),
    ("k4608", {"rank": 2, "spatial": [8, 8], "kernel": [3, 3], "stride": [1, 1], "c_in": 512, "c_out": 8}),
    ("k41472", {"rank": 2, "spatial": [12, 12], "kernel": [9, 9], "stride": [1, 1], "c_in": 512, "c_out": 8}),
]


def _env(out: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_")}
    env.update({"CONV_SWEEP_SPEC": str(out / "spec.json"), "CONV_SWEEP_CACHE_DIR": str(out / "store"),
                "PYTHONPATH": str(ROOT)}, **{k: str(v) for k, v in extra.items()})
    return env


def _sweep(env: dict, log: Path) -> int:
    doit = Path(sys.executable).with_name("doit")
    with open(log, "w") as f:
        return subprocess.run([str(doit), "-n", "2", "sweep"], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                              check=False).returncode


def _wrapper(out: Path, mutant: str, compiler: str) -> Path:
    path = out / "wrappers" / f"mutant-{mutant}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m pipeline.dev.mutants {mutant} '
                    f'"{compiler}" "$@"\n')
    path.chmod(0o755)
    return path


def _results(build: Path, folder: str) -> dict[str, dict]:
    out = {}
    for path in (build / "cases").glob(f"*/{folder}/result.json"):
        out[path.parent.parent.name] = json.loads(path.read_text())
    return out


def _load(path: Path):
    """An output as float64 (numpy keeps bf16 as 2-byte void), or None."""
    import ml_dtypes
    import numpy as np

    try:
        values = np.load(path)
    except OSError:
        return None
    return (values.view(ml_dtypes.bfloat16) if values.dtype.kind == "V" else values).astype(np.float64)


def miss_figures(mutant_dir: Path, clean_dir: Path, clean_result: dict) -> dict:
    """Why a mutant went unseen: its effect on the output, the clean module's error against S,
    the largest element bound of the clean case's first check, and the verdict on that."""
    import numpy as np

    mutated, clean, exact = (_load(d / n) for d, n in ((mutant_dir, "actual.npy"), (clean_dir, "actual.npy"),
                                                       (clean_dir, "exact.npy")))
    if mutated is None or clean is None or mutated.shape != clean.shape:
        return {"kind": "no output"}
    effect = float(np.abs(mutated - clean).max(initial=0.0))
    noise = float(np.abs(clean - exact).max(initial=0.0)) if exact is not None else None
    metrics = list((clean_result.get("metrics") or {}).values())
    bound = metrics[0].get("max_tolerance") if metrics else None
    kind = "cannot show" if effect == 0 else \
        "below the bound" if bound is not None and effect <= bound else "above the bound"
    return {"kind": kind, "effect": effect, "noise": noise, "bound": bound}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--target", default="llvm-cpu")
    parser.add_argument("--data", default="random,adversarial")
    parser.add_argument("--mutants", default="sign,lsb,bias,tap")
    args = parser.parse_args(argv)
    from pipeline.config import Config
    from pipeline.core.layout import folder as target_folder
    from pipeline.dev.mutants import MUTANTS

    out = args.out or Path(tempfile.mkdtemp(prefix="conv-sweep-detection-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps({"geometries": [{"category": c, **g} for c, g in DECADES]}))
    cfg = Config.from_env(_env(out, CONV_SWEEP_TARGET=args.target, CONV_SWEEP_BUILD_DIR=out / "probe"))
    compiler, folder = cfg.targets[0].compiler, target_folder(args.target)
    mutants = [m for m in args.mutants.split(",") if m]
    unknown = set(mutants) - set(MUTANTS)
    if unknown:
        parser.error(f"--mutants: {sorted(unknown)[0]} is not one of {', '.join(MUTANTS)}")
    table = defaultdict(lambda: [0, 0])  # (data, mutant, flavor, category) -> [caught, applicable]
    misses = []  # every applicable case a mutant passed, with its figures
    for data in [d for d in args.data.split(",") if d]:
        clean_build = out / data / "clean"
        _sweep(_env(out, CONV_SWEEP_TARGET=args.target, CONV_SWEEP_DATA=data, CONV_SWEEP_BUILD_DIR=clean_build),
               out / f"{data}-clean.log")
        clean = _results(clean_build, folder)
        alarms = {n: r for n, r in clean.items() if r.get("status") != "pass"}
        # a clean module failing at verify is a false alarm; one failing before it (a known
        # compile bug of the target) leaves its case out of the table
        print(f"{data}: clean sweep, {len(clean)} cases, {len(alarms)} not passing" + "".join(
            f"\n  {'FALSE ALARM' if r.get('stage') == 'verify' else 'not checkable'} {n}: {r.get('stage')}: "
            f"{(r.get('reason') or '')[:200]}" for n, r in sorted(alarms.items())), flush=True)
        for mutant in mutants:
            build = out / data / mutant
            _sweep(_env(out, CONV_SWEEP_TARGET=args.target, CONV_SWEEP_DATA=data, CONV_SWEEP_BUILD_DIR=build,
                        CONV_SWEEP_IREE_COMPILE=_wrapper(out, mutant, compiler),
                        CONV_SWEEP_TOOL_FILES=Path(__file__).with_name("mutants.py")), out / f"{data}-{mutant}.log")
            for name, result in sorted(_results(build, folder).items()):
                if name in alarms:
                    continue
                status, stage = result.get("status"), result.get("stage")
                if status in ("error", "harness") and "does not apply" in (result.get("reason") or ""):
                    continue
                flavor = "_".join(name.split("_")[1:3])
                category = result.get("category") or "?"
                caught = status == "fail" and stage == "verify"
                cell = table[(data, mutant, flavor, category)]
                cell[0] += caught
                cell[1] += 1
                if not caught:
                    misses.append({"data": data, "mutant": mutant, "flavor": flavor, "k": category[1:], "case": name,
                                   "status": status, **miss_figures(build / "cases" / name / folder,
                                                                    clean_build / "cases" / name / folder, clean[name])})
            print(f"{data}: mutant {mutant} done", flush=True)
    categories = [c for c, _ in DECADES]
    flavors = sorted({key[2] for key in table})
    print(f"\ndetection on {args.target} (caught/applicable), one geometry per K; build folders in {out}")
    for data in args.data.split(","):
        print(f"\n{data} data")
        print("| mutant | flavor | " + " | ".join(f"K={c[1:]}" for c in categories) + " |")
        print("|---|---|" + "---|" * len(categories))
        for mutant in mutants:
            for flavor in flavors:
                cells = [table.get((data, mutant, flavor, c)) for c in categories]
                print(f"| {mutant} | {flavor} | " + " | ".join(f"{c[0]}/{c[1]}" if c else "n/a" for c in cells) + " |")
    print("\nmisses (effect: the largest change of the output; noise: the clean module's error against S;"
          " bound: the clean check's largest element bound)")
    for m in misses:
        figures = ", ".join(f"{key} {m[key]:.3g}" for key in ("effect", "noise", "bound") if m.get(key) is not None)
        print(f"- {m['data']} {m['mutant']} {m['flavor']} K={m['k']}: {m['kind']} ({m['status']}; {figures})")
    (out / "detection.json").write_text(json.dumps({
        "target": args.target, "misses": misses,
        "table": [{"data": d, "mutant": mu, "flavor": f, "k": c[1:], "caught": v[0], "applicable": v[1]}
                  for (d, mu, f, c), v in sorted(table.items())]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
