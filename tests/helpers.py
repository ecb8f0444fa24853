"""Running the public commands (doit) the way users do, in a temporary build folder."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOIT = [sys.executable, "-m", "doit"]


# The user's compiler, its flags and the timeout apply to the tests too; what is swept and
# where it is built is the tests' own.
HONOURED = ("CONV_SWEEP_IREE_COMPILE", "CONV_SWEEP_COMPILE_FLAGS", "CONV_SWEEP_TIMEOUT")


def clean_env(**knobs) -> dict:
    """The environment without the user's sweep selection and build folder, plus `knobs`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_") or k in HONOURED}
    env.update({k: str(v) for k, v in knobs.items()})
    return env


def doit(*args, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*DOIT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def write_spec(path: Path, geometries: list[dict]) -> Path:
    path.write_text(json.dumps({"geometries": geometries}))
    return path


def results(build_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(Path(build_dir).glob("cases/*/result.json"))}


def executed(run: subprocess.CompletedProcess) -> list[str]:
    """Names of the case tasks a `doit -r json ...` run executed (not skipped as up to date,
    not failed for want of a dependency): those doit started."""
    report = json.loads(run.stdout)
    return sorted(t["name"] for t in report["tasks"] if ":conv_" in t["name"] and t["started"])


def by_stage(names: list[str]) -> dict[str, int]:
    counts = {"model": 0, "mlir": 0, "vmfb": 0, "verify": 0}
    for name in names:
        counts[name.split(":")[0]] += 1
    return counts


def tiny_categories(**changes) -> list[dict]:
    """Five small categories (one per default category), fast enough for cache tests."""
    base = dict(spatial=[16, 20], kernel=[1, 3], stride=[1, 2], channels=[1, 8])
    cats = [dict(name=f"t{i}", seed=100 + i, rank=2 if i < 3 else 1, **base) for i in range(5)]
    for name, change in changes.items():
        next(c for c in cats if c["name"] == name).update(change)
    return cats


def write_categories(path: Path, categories: list[dict]) -> Path:
    path.write_text(json.dumps({"categories": categories}))
    return path
