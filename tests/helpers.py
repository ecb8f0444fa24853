"""Running the public commands (doit) the way users do, in a temporary build folder."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOIT = [sys.executable, "-m", "doit"]


def clean_env(**knobs) -> dict:
    """The environment without the user's CONV_SWEEP_* settings, plus `knobs`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_")}
    env.update({k: str(v) for k, v in knobs.items()})
    return env


def doit(*args, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*DOIT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def write_spec(path: Path, geometries: list[dict]) -> Path:
    path.write_text(json.dumps({"geometries": geometries}))
    return path


def results(build_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(Path(build_dir).glob("cases/*/result.json"))}
