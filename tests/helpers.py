"""Running the public commands (doit) the way users do, in a temporary build folder."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOIT = [sys.executable, "-m", "doit"]


# The user's compiler, its flags and the timeout apply to the tests too; what is swept and
# where it is built is the tests' own.
HONOURED = ("CONV_SWEEP_IREE_COMPILE", "CONV_SWEEP_COMPILE_FLAGS", "CONV_SWEEP_TIMEOUT", "CONV_SWEEP_TOOLCHAIN_DIR")


# The session's folders, by name: made on first use (or given by the xdist controller:
# conftest.py) and removed when the process that made them ends.
_session: dict[str, Path] = {}
SESSION_FOLDERS = ("store", "tmp")


def session_folder(name: str) -> Path:
    """One of the session's folders (SESSION_FOLDERS): its xdist workers share the ones the
    controller made, else there is one per test process; never the user's own."""
    if name not in _session:
        _session[name] = Path(tempfile.mkdtemp(prefix=f"test-{name}-"))
        atexit.register(shutil.rmtree, _session[name], ignore_errors=True)
    return _session[name]


def test_store() -> Path:
    """The store of stage outputs the tests' runs share (a user's sweeps share theirs)."""
    return session_folder("store")


def tools_tmpdir() -> Path:
    """TMPDIR of every tool the tests start: what a tool leaves there goes with the session (a
    Dask cluster's scratch space, the socket folder of a forkserver whose process a test killed
    with -9, a browser's singleton folder)."""
    return session_folder("tmp")


def clean_env(**knobs) -> dict:
    """The environment without the user's sweep selection, build folder and store, plus
    `knobs`; the store is the test session's unless `knobs` names one, and so is TMPDIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONV_SWEEP_") or k in HONOURED}
    env["CONV_SWEEP_CACHE_DIR"] = str(test_store())
    env["TMPDIR"] = str(tools_tmpdir())
    env.update({k: str(v) for k, v in knobs.items()})
    return env


def doit(*args, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*DOIT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def write_spec(path: Path, geometries: list[dict]) -> Path:
    path.write_text(json.dumps({"geometries": geometries}))
    return path


def results(build_dir: Path, target: str = "llvm-cpu") -> dict[str, dict]:
    """case name -> its result.json on the target."""
    return {p.parent.parent.name: json.loads(p.read_text())
            for p in sorted(Path(build_dir).glob(f"cases/*/{target}/result.json"))}


def executed(run: subprocess.CompletedProcess) -> list[str]:
    """Names of the case tasks a `doit -r json ...` run executed (not skipped as up to date,
    not failed for want of a dependency): those doit started."""
    report = json.loads(run.stdout)
    return sorted(t["name"] for t in report["tasks"] if ":conv_" in t["name"] and t["started"])


def by_stage(names: list[str]) -> dict[str, int]:
    """Task counts per stage."""
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


# An iree-compile that gives an f32 TOSA module bf16 I/O (stock IREE has no flag for it): the
# entry function becomes private, and a new public @main converts around it
# (arith.extf / call / arith.truncf). Other inputs go to the real compiler unchanged.
BF16_IO_WRAPPER = """#!{python}
import os, re, subprocess, sys, tempfile
args = sys.argv[1:]
made = None
text = open(args[0]).read()
m = re.search(r"func\\.func @main\\(%arg0: tensor<([0-9x]+)xf32>[^)]*\\) -> \\(tensor<([0-9x]+)xf32>", text)
if m:
    i, o = m.group(1), m.group(2)
    text = text.replace("func.func @main(", "func.func private @main_f32(", 1)
    entry = (f"  func.func @main(%a: tensor<{{i}}xbf16>) -> tensor<{{o}}xbf16> {{{{\\n"
             f"    %x = arith.extf %a : tensor<{{i}}xbf16> to tensor<{{i}}xf32>\\n"
             f"    %y = call @main_f32(%x) : (tensor<{{i}}xf32>) -> tensor<{{o}}xf32>\\n"
             f"    %r = arith.truncf %y : tensor<{{o}}xf32> to tensor<{{o}}xbf16>\\n"
             f"    return %r : tensor<{{o}}xbf16>\\n  }}}}\\n")
    end = text.rindex("}}")
    fd, made = tempfile.mkstemp(suffix=".mlir")
    with os.fdopen(fd, "w") as f:
        f.write(text[:end] + entry + text[end:])
    args[0] = made
status = subprocess.run([{real!r}, *args]).returncode
if made:
    os.unlink(made)
sys.exit(status)
"""


# A compiler that rewrites the .mlir file it is given, then runs the real one on the rewritten
# copy: `{rewrite}` is Python that turns `text` (the file's text) into the rewritten text
# (escaped for str.format, as every template here)
REWRITING_COMPILER = """#!{python}
import os, re, subprocess, sys, tempfile
args = sys.argv[1:]
made = None
source = next((i for i, a in enumerate(args) if a.endswith(".mlir") and os.path.isfile(a)), None)
if source is not None:
    text = open(args[source]).read()
{rewrite}
    fd, made = tempfile.mkstemp(suffix=".mlir")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    args[source] = made
status = subprocess.run([{real!r}, *args]).returncode
if made:
    os.unlink(made)
sys.exit(status)
"""


def rewriting_compiler(rewrite: str) -> str:
    """REWRITING_COMPILER with `rewrite` (unindented lines) in its place: a template for write_wrapper."""
    import textwrap

    return REWRITING_COMPILER.replace("{rewrite}", textwrap.indent(textwrap.dedent(rewrite).strip("\n"), "    "))


def write_wrapper(path: Path, template: str, real: str) -> Path:
    """An executable wrapper around the real compiler, from a template with {real} (and {python})."""
    path.write_text(template.format(real=real, python=sys.executable))
    path.chmod(0o755)
    return path


def real_compiler() -> str:
    """The stock iree-compile the llvm-cpu target resolves to."""
    from pipeline.config import Config

    return Config.from_env(clean_env()).target("llvm-cpu").compiler


def assert_patch_holds(digest: str, written_for: str, what: str, module: str) -> None:
    """A patch of doit's private code holds only for the pinned doit, whose code it was
    written against (its digest): re-check `module` against `what` when either changed."""
    from importlib import metadata

    pinned = next(r for r in metadata.requires("conv-sweep") if r.startswith("doit"))
    assert pinned == f"doit=={metadata.version('doit')}" == "doit==0.37.0", pinned
    assert digest == written_for, f"doit's {what} changed: re-check {module} against it, then update WRITTEN_FOR"
