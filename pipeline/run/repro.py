"""repro.sh: one case on its target, outside the tool, with only the target's tools (and the
importer of the model's format): re-import, re-compile with the exact flags the sweep used,
run on the saved input and check against the saved expected output with the run tool's own
--expected_output. Toolchain tools that need a private C runtime are started through its
loader, spelled out in the script. A bug report's repro.sh (write_standalone,
write_import_standalone) ships the compiler's input (or, for an import failure, the model) and
takes each tool from PATH or its variable (TORQ_COMPILE=/path/to/torq-compile): it names no
folder of this machine."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from pipeline.checks.compare import CHECK
from pipeline.core.chain import MLIR_BYTECODE
from pipeline.space.cases import Case
from pipeline.config import Config
from pipeline.core.executables import tool_path
from pipeline.core.tools import write_text

REPRO = "repro.sh"


def _check(case_dir: Path) -> dict | None:
    try:
        return json.loads((Path(case_dir) / CHECK).read_text())
    except (OSError, ValueError):
        return None


def _check_flags(check: dict) -> list[str]:
    flags = [f"--expected_output={check['expected']}", f"--equality_mode={check['mode']}"]
    if check["mode"] == "approximate":
        flags += [f"--expected_{check['type']}_threshold={check['atol']:.9g}", f"--expected_rtol={check['rtol']:.9g}"]
    return flags


# For run tools whose --expected_output cannot take the check (torq-run-module's older IREE has
# no approximate mode, no rtol and no i8/bf16 thresholds), and wherever the expected output holds
# a NaN or an infinity (no run tool's check is known to fail those as the sweep does): the
# output goes to a file, and Python's standard library compares it with the expected bytes,
# failing every element where either side is not finite, as pipeline/checks/compare.py does.
_STDLIB_CHECK = r"""python3 - <<'PY'
import json, math, struct, sys
check = json.load(open("check.json"))
fmt = {"f32": "f", "bf16": "H", "i8": "b"}[check["type"]]
def values(path):
    data = open(path, "rb").read()
    items = struct.unpack(f"<{len(data) // struct.calcsize(fmt)}{fmt}", data)
    if fmt == "H":  # bf16: the high half of an f32
        items = struct.unpack(f"<{len(items)}f", struct.pack(f"<{len(items)}I", *(v << 16 for v in items)))
    return items
want, got = values("repro-expected.bin"), values("repro-actual.bin")
if len(want) != len(got):
    sys.exit(f"FAILED: {len(got)} output elements, expected {len(want)}")
limit = [0.0 if check["mode"] == "exact" else check["atol"] + check["rtol"] * abs(w) for w in want]
bad = [i for i, (w, g, t) in enumerate(zip(want, got, limit))
       if not (math.isfinite(w) and math.isfinite(g) and math.isfinite(t) and abs(g - w) <= t)]
if bad:
    i = bad[0]
    sys.exit(f"FAILED: {len(bad)} of {len(want)} elements outside tolerance; first at {i}: "
             f"expected {want[i]}, got {got[i]}, tolerance {limit[i]:.3g}")
print(f"[SUCCESS] all {len(want)} output elements within tolerance ({check['mode']})")
PY"""


def tool_variable(tool: str) -> str:
    """The variable a repro.sh takes a tool from: TORQ_COMPILE for torq-compile."""
    return Path(tool).name.upper().replace("-", "_").replace(".", "_")


def _command(target, path: str) -> list[str]:
    """How to start one of the target's tools without this project: a toolchain tool by its
    loader command, anything else by its path."""
    for name, launcher in (target.toolchain or {}).get("tools", {}).items():
        if launcher == path:
            return target.toolchain["commands"][name]
    return [path]


def _compile_line(target, case: Case, compiler: str, mlir_name: str) -> str:
    """The sweep's compile, its launch prefix (setarch -R) first where the profile has one;
    `compiler` is how the script names the compiler (an array's items, or a variable)."""
    launch = shlex.join(target.compile_launch) + " " if target.compile_launch else ""
    return f'{launch}{compiler} {mlir_name} -o repro.vmfb ' + shlex.join(target.compile_flags(case.variant))


def _launch_note(target) -> list[str]:
    if not target.compile_launch:
        return []
    return [f"# {Path(target.compiler).name} starts with address-space randomization off, as in the sweep: "
            "it then writes the same module every time (for these file names: their lengths move its allocations)"]


def _tool_lines(tools: dict[str, list[str]]) -> list[str]:
    return [f'if [ -n "${{{name}:-}}" ]; then {name}=("${name}"); else {name}=({shlex.join(argv)}); fi'
            for name, argv in tools.items()]


def _path_tool_lines(tools: dict[str, str]) -> list[str]:
    """Each tool from its variable, else by its name on PATH; a missing one is named (exit 127)."""
    lines = []
    for variable, name in tools.items():
        lines += [f"{variable}=${{{variable}:-{name}}}",
                  f'command -v "${variable}" >/dev/null || {{ echo "{name} not found: put its folder on PATH, '
                  f'or set {variable}=/path/to/{name}" >&2; exit 127; }}']
    return lines


def _needs(tools: dict[str, str], releases: dict[str, str] | None) -> str:
    """The header line naming the tools a bug report's repro.sh needs, with their releases."""
    releases = releases or {}
    named = [f"{name} ({releases[name]})" if releases.get(name) else name for name in tools.values()]
    return (f"# Needs {', '.join(named)} on PATH, or named in {'its variable' if len(tools) == 1 else 'their variables'} "
            f"(e.g. {next(iter(tools))}=/path/to/{next(iter(tools.values()))} bash repro.sh).")


def write_standalone(case: Case, cfg: Config, folder: Path, mlir_name: str, check: dict | None,
                     limits: dict[str, float], input_file: str | None, releases: dict[str, str] | None = None) -> Path:
    """repro.sh for a bug report: compile `mlir_name` (the compiler's own input, in `folder`)
    with the sweep's exact flags, run it on the saved input and check against the saved
    expected output with the sweep's tolerance; each tool under `timeout` with the limit the
    sweep gave it (`limits`: stage -> seconds), so a hang ends the script too. Takes the
    target's tools from PATH or their variables (TORQ_COMPILE, ...), named in its header with
    their `releases` (tool name -> release); needs nothing else (python3 for the check); exits
    non-zero while the failure is there."""
    target = cfg.target(case.target)
    compiler, runner = tool_variable(target.profile.compiler), tool_variable(target.profile.runner)
    tools = {compiler: Path(target.profile.compiler).name}
    if input_file is not None:
        tools[runner] = Path(target.profile.runner).name
    limit = {stage: f"timeout -k 5 {max(1, round(seconds))} " if seconds else "" for stage, seconds in limits.items()}

    def timed(stage: str, line: str) -> str:  # a timeout says so, and exits 124 as timeout does
        if not limit.get(stage):
            return line
        return (f'{limit[stage]}{line} || {{ status=$?; [ "$status" -ne 124 ] || '
                f'echo "{stage} timed out after {max(1, round(limits[stage]))} s (the sweep\'s limit)" >&2; exit "$status"; }}')
    lines = [
        "#!/usr/bin/env bash",
        f"# {case.name} on {target.name}: " + ("compile, run and check" if input_file is not None else "compile")
        + ". Exits non-zero while the failure is there.",
        _needs(tools, releases),
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        *_path_tool_lines(tools),
        "set -x",
        *_launch_note(target),
        timed("compile", _compile_line(target, case, _plain(compiler), mlir_name)),
    ]
    if input_file is not None:
        run = [_plain(runner), "--module=repro.vmfb",
               *map(shlex.quote, target.profile.run_flags), f"--function={target.profile.function(case.backend)}",
               shlex.quote(input_file)]
        if check:
            lines += ["# checks the output against the saved oracle output, with the sweep's tolerance",
                      timed("run", " ".join(run + ["--output=@repro-actual.bin"])), _STDLIB_CHECK]
        else:
            lines += [timed("run", " ".join(run))]
    path = Path(folder) / REPRO
    write_text(path, "\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


IMPORT_TOOLS = {"TOSA_CONVERTER": "tosa-converter-for-tflite", "IREE_OPT": "iree-opt",
                "IREE_IMPORT_ONNX": "iree-import-onnx"}  # variable -> an importer's tool


def _importing(case: Case, cfg: Config, model: str, call) -> tuple[dict[str, str], list[str], str]:
    """The importer's tools (variable -> name) and command lines for the model file `model`,
    each tool started as `call(variable)` spells it; and the MLIR file the compiler then reads."""
    if case.backend == "tflite":
        importing = [f'{call("TOSA_CONVERTER")} {model} --bytecode -o repro.mlirbc']
        if cfg.mlir_input(case) == MLIR_BYTECODE:
            return _tools("TOSA_CONVERTER"), importing, "repro.mlirbc"
        importing.append(f'{call("IREE_OPT")} repro.mlirbc -o repro.mlir')
        return _tools("TOSA_CONVERTER", "IREE_OPT"), importing, "repro.mlir"
    return _tools("IREE_IMPORT_ONNX"), [f'{call("IREE_IMPORT_ONNX")} {model} -o repro.mlir'], "repro.mlir"


def _tools(*variables: str) -> dict[str, str]:
    return {v: IMPORT_TOOLS[v] for v in variables}


def _array(variable: str) -> str:
    return f'"${{{variable}[@]}}"'


def _plain(variable: str) -> str:
    return f'"${variable}"'


def write_import_standalone(case: Case, cfg: Config, folder: Path, releases: dict[str, str] | None = None) -> Path:
    """repro.sh for a bug report of a failure at import: the importer, from PATH or its
    variable, on the model file beside it (the case never reached the compiler); exits
    non-zero while the importer fails."""
    tools, importing, _ = _importing(case, cfg, case.model_file, _plain)
    lines = ["#!/usr/bin/env bash",
             f"# {case.name}: import {case.model_file} to MLIR, as the sweep does. Exits non-zero while the "
             "importer fails.", _needs(tools, releases), "set -euo pipefail", 'cd "$(dirname "$0")"',
             *_path_tool_lines(tools), "set -x", *importing, ""]
    path = Path(folder) / REPRO
    write_text(path, "\n".join(lines))
    path.chmod(0o755)
    return path


def write_repro(case: Case, cfg: Config, model_dir: Path, case_dir: Path) -> Path:
    target = cfg.target(case.target)
    case_dir = Path(case_dir)
    model = f"../{case.model_file}"
    names, importing, compiled = _importing(case, cfg, model, _array)
    tools = {variable: [tool_path(name) or name] for variable, name in names.items()}
    compiler, runner = tool_variable(target.compiler), tool_variable(target.runner)
    tools[compiler] = _command(target, target.compiler)
    tools[runner] = _command(target, target.runner)
    compile_line = "\n".join([*_launch_note(target), _compile_line(target, case, _array(compiler), compiled)])
    check = _check(case_dir)
    input_arg = (check or {}).get("input") or "--input=@../input.npy"
    run = [_array(runner), "--module=repro.vmfb", *map(shlex.quote, target.profile.run_flags),
           f"--function={target.profile.function(case.backend)}", shlex.quote(input_arg)]
    if check and target.profile.expected_output and not check.get("nonfinite", True):
        run_line = " ".join(run + [shlex.quote(f) for f in _check_flags(check)])
        run_note = "# checks the output against the saved oracle output, with the sweep's tolerance"
    elif check:
        run_line = " ".join(run + ["--output=@repro-actual.bin"]) + "\n" + _STDLIB_CHECK
        run_note = "# checks the output against the saved oracle output, with the sweep's tolerance"
    else:
        run_line = " ".join(run)
        run_note = "# no saved expected output yet: prints the output for comparison"
    lines = [
        "#!/usr/bin/env bash",
        f"# Reproduce {case.name} on {target.name} outside conv-sweep.",
        f"# Needs only the {target.name} tools and the importer; each defaults to the one the sweep used.",
        f"# Override one with e.g. {compiler}=/path/to/{Path(target.compiler).name} bash repro.sh",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        *_tool_lines(tools),
        "set -x",
        *importing,
        compile_line,
        run_note,
        run_line,
        "",
    ]
    path = case_dir / REPRO
    write_text(path, "\n".join(lines))
    path.chmod(0o755)
    return path
