"""Detection power: which miscompiles the checks catch, per flavor and reduction size.

    python -m pipeline.dev.detection [--out DIR] [--target llvm-cpu] [--data random,adversarial]

For each data mode it sweeps a spec of one geometry per decade of K (9 to 41,472) with the
target's own compiler (every case must pass: a failure there is a false alarm, and is printed),
then once per mutant with the compiler wrapped by pipeline/dev/mutants.py, which builds each
module from a mutated copy of its MLIR. A mutant case that fails at verify is caught; one that
passes is missed; one the mutant does not apply to (no bias, a one-tap kernel) is left out.
Everything runs through `doit sweep`, as a user would, in DIR (default: a temporary folder).

For ONNX bf16 it also judges each mutant's output with the bound before 2026-12-05
(ulp_bf16(|e|) + A against the bf16-rounded reference e) beside today's (half a step at |S| + A
against the exact sum S), and prints both rates.
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


def _old_bf16_verdict(case_dir: Path, model_dir: Path) -> bool | None:
    """ONNX bf16 against the bound before 2026-12-05: ulp_bf16(|e|) + A, e the bf16-rounded reference."""
    import ml_dtypes
    import numpy as np

    from pipeline.checks import tolerance
    from pipeline.checks.oracle import onnx_weights

    def load(path):  # numpy saves bf16 as 2-byte void
        values = np.load(path)
        return (values.view(ml_dtypes.bfloat16) if values.dtype.kind == "V" else values).astype(np.float64)

    try:
        e, a, x = load(case_dir / "expected.npy"), load(case_dir / "actual.npy"), load(model_dir / "input.npy")
    except OSError:
        return None
    weights = onnx_weights(model_dir / "model.onnx")
    k = int(np.prod(weights.kernel.shape[1:]))
    t = float(np.abs(weights.kernel).max()) * float(np.abs(x).max())
    tol = tolerance.bf16_ulp(e) + tolerance.f32_accumulation(k, t, float(np.abs(weights.bias).max()), 1)
    return bool((np.abs(a - e) <= tol).all())


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
    old = defaultdict(lambda: [0, 0])  # (data, mutant, category) -> [caught, applicable], ONNX bf16, old bound
    for data in [d for d in args.data.split(",") if d]:
        clean_build = out / data / "clean"
        _sweep(_env(out, CONV_SWEEP_TARGET=args.target, CONV_SWEEP_DATA=data, CONV_SWEEP_BUILD_DIR=clean_build),
               out / f"{data}-clean.log")
        clean = _results(clean_build, folder)
        alarms = {n: r.get("reason") for n, r in clean.items() if r.get("status") != "pass"}
        print(f"{data}: clean sweep, {len(clean)} cases, {len(alarms)} not passing"
              + "".join(f"\n  FALSE ALARM {n}: {why}" for n, why in sorted(alarms.items())), flush=True)
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
                if flavor == "onnx_bf16":
                    verdict = _old_bf16_verdict(build / "cases" / name / folder, build / "cases" / name)
                    if verdict is not None:
                        old_cell = old[(data, mutant, category)]
                        old_cell[0] += not verdict
                        old_cell[1] += 1
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
            cells = [old.get((data, mutant, c)) for c in categories]
            print(f"| {mutant} | onnx_bf16, bound before 2026-12-05 | "
                  + " | ".join(f"{c[0]}/{c[1]}" if c else "n/a" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
