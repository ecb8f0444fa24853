"""What each stage's output depends on besides its input file: tool versions and the code
that implements the stage. Feeds the task runner's up-to-date checks.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from pipeline.core.executables import cannot_start
from pipeline.core.integrity import sha256
from pipeline.core.layout import user_cache
from pipeline.core.tools import write_text

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # pipeline/
CODE_DIGESTS = "code-digests.json"  # in the user cache: code digests, per file size and mtime
TOOL_VERSIONS = "tool-versions.json"  # in the user cache: facts about files, per resolved path, size and mtime

# stage -> (modules whose code shapes its output, distributions whose version does)
STAGE_INPUTS = {
    "model": (("frontends.model_tflite", "frontends.model_onnx", "space.data", "space.geometry", "space.cases",
               "space.given", "core.tools"),
              ("tensorflow-cpu", "keras", "torch", "onnx", "ml-dtypes", "numpy")),
    "mlir": (("frontends.importer", "core.tools"), ("tosa-converter-for-tflite", "iree-base-compiler")),
    "vmfb": (("targets.compiler", "core.tools"), ("iree-base-compiler",)),
    # verify gives the verdict: every module it reaches that can change one (checks, tolerances,
    # the judging against the expected failures, the stage wrapper, the case and geometry
    # definitions, repro.sh's commands); tests/test_fingerprint.py holds it to that
    "verify": (("checks.verify", "checks.explain", "checks.oracle", "checks.tolerance", "checks.compare",
                "checks.reference",
                "targets.runner", "targets.signature", "space.data", "outcome.result", "run.repro", "core.tools",
                "run.stages", "space.expected", "outcome.verdict", "outcome.bucket", "space.geometry", "space.cases",
                "targets.compiler", "core.isolate", "core.errors", "targets.perf", "targets.profiles",
                "core.executables", "space.refusal", "frontends.importer", "core.chain", "frontends.model_tflite",
                "frontends.model_onnx", "frontends.tflite_file", "frontends.activations",
                "space.given"),
               ("iree-base-runtime", "ai-edge-litert", "onnxruntime", "onnx", "numpy", "ml-dtypes")),
}


# Modules the verify stage reaches that cannot change a verdict: they resolve the configuration
# (its values, such as the expected failures and the profile, are in the key as data), run the
# engine, or install tools (whose identities are in the key).
VERIFY_KEY_EXEMPT = {
    "config": "resolves the environment into a Config; the values that matter are in the key",
    "space.shard": "picks which cases a run takes",
    "space.sweep": "samples the geometries: which cases exist, not their verdicts",
    "space.networks": "lists the networks' conv layers: which cases exist, not their verdicts",
    "targets.toolchain": "installs the toolchains' tools, whose identities are in the key",
    "targets.cost": "the time limits: whether a tool may finish, not what a finished one produced",
    "core.cuts": "a cut the store holds at this limit or more: whether a tool may finish, not what a finished one produced",
    "core.store": "gives back files built before; verify keys on the files themselves (doit's file_dep digests)",
    "core.fingerprint": "computes keys (this table, the store's keys); it decides no verdict",
    "core.integrity": "digests files for keys and the store; it decides no verdict",
    "core.layout": "names where the build folder's files are; verify keys on the files themselves",
}


@lru_cache(maxsize=None)
def dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


class _CodeOnly(ast.NodeTransformer):
    """Drops import statements and docstrings: what is left is the code a stage runs."""

    def visit_Import(self, node):
        return None

    visit_ImportFrom = visit_Import

    def generic_visit(self, node):
        super().generic_visit(node)
        body = getattr(node, "body", None)
        if isinstance(body, list):
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body.pop(0)
            if not body and not isinstance(node, ast.Module):
                body.append(ast.Pass())
        return node


def code_text(path: Path) -> str:
    """A module's code without its imports, docstrings, comments or layout: moving a module
    to another folder (which rewrites its imports) or editing its prose leaves it unchanged.
    What the module imports from this package is keyed on its own (STAGE_INPUTS lists every
    module a stage reaches; tests/test_fingerprint.py holds the verify key to that)."""
    return ast.unparse(_CodeOnly().visit(ast.parse(path.read_text())))


def module_file(name: str) -> Path:
    """The file of this package's module `name` ("checks.verify"), found without importing it."""
    return PACKAGE_DIR.joinpath(*name.split(".")).with_suffix(".py")


@lru_cache(maxsize=None)
def code_digest(modules: tuple[str, ...]) -> str:
    """The digest of the modules' code_text. Parsing them costs a noticeable part of a second
    per process (the run's main process and each worker; docs/measurements.md), so it is kept
    on disk per file size and mtime, as a tool's digest is (CODE_DIGESTS; a stale entry needs
    an edit that keeps both)."""
    files = [module_file(name) for name in modules]
    try:
        stats = json.dumps([[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files])
    except OSError:
        stats = None
    kept_in = user_cache() / CODE_DIGESTS
    known = _read_json(kept_in)
    if stats is not None and isinstance(known.get(stats), str):
        return known[stats]
    h = hashlib.sha256()
    for f in files:
        h.update(code_text(f).encode() + b"\0")
    digest = h.hexdigest()[:16]
    if stats is not None:
        kept = dict(list(known.items())[-63:])  # the latest few sets of files: this checkout's
        kept[stats] = digest
        try:
            write_text(kept_in, json.dumps(kept))
        except OSError:
            pass  # a read-only cache folder: computed again next time
    return digest


def _read_json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@lru_cache(maxsize=None)
def stage_fingerprint(stage: str) -> dict:
    modules, dists = STAGE_INPUTS[stage]
    return {"code": code_digest(modules), "versions": {d: dist_version(d) for d in dists}}


def executable_identity(path: str, cache: Path | None = None, trusted: frozenset = frozenset(),
                        extra: tuple = ()) -> dict:
    """An executable's identity (resolved path, size, modification time) and what its
    `--version` prints. A tool with no `--version` (iree-run-module answers it with a flag
    error) is identified by the version of the package that installed it, where one did, and
    by its file's SHA-256. Worked out once per identity and kept in `cache` (TOOL_VERSIONS,
    shared by every build folder of the machine: a second folder does not ask again). A
    launcher script's identity also holds what it starts (`launched_identity`), read every
    time and part of the cache's key: a script that execs another is not the same tool once
    that one changes. One whose launches cannot be read is asked every time, never kept."""
    real = os.path.realpath(path)
    st = os.stat(real)
    launches, problem = _launches(real, trusted, extra)
    identity = {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns, **launches}
    key = json.dumps(identity, sort_keys=True)
    cache = Path(cache or user_cache() / TOOL_VERSIONS)
    known = _read_json(cache)
    if key not in known or not isinstance(known[key], dict):
        version = ask_version(real)
        if version is not None and cannot_start(version):  # never kept: the next run asks again
            return {**identity, "version": version}
        _warn(real, problem)
        found = {"version": version} if version is not None else \
            {"version": None, "package": _package_of(real), "sha256": sha256(real)}
        if "unreadable" in identity:
            return {**identity, **found}
        known[key] = found
        try:
            write_text(cache, json.dumps(known, indent=1) + "\n")
        except OSError:
            pass  # a read-only cache folder: asked again next time
    return {**identity, **known[key]}


@lru_cache(maxsize=None)
def _content_digest(real: str, size: int, mtime_ns: int) -> str:
    with open(real, "rb") as f:
        data = f.read()
    if data.startswith(b"#!"):  # a script: its interpreter line names the venv it is installed in
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return hashlib.sha256(data).hexdigest()


def tool_digest(path: str, trusted: frozenset = frozenset(), extra: tuple = ()) -> str:
    """A tool's identity that holds on any machine: the SHA-256 of its file's content (a
    script's without its #! line, which names where it is installed), worked out once per
    path, size and mtime, and, for a launcher script, of what it starts (`launched`; their
    digests, not their paths)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    digest = _content_digest(real, st.st_size, st.st_mtime_ns)
    launches = launched_identity(real, trusted, extra)
    if not launches:
        return digest
    launches = {k: [d for _, d in v] if isinstance(v, list) else v for k, v in launches.items()}
    return hashlib.sha256(json.dumps([digest, launches], sort_keys=True).encode()).hexdigest()


# ------------------------------------------------------------------ what a launcher script starts

TOOLCHAIN_MANIFEST = "toolchain.json"  # pipeline/targets/toolchain.py's MANIFEST (core imports no target module)
MAX_DEPTH = 8  # scripts followed through, one starting the next
SHELLS = ("sh", "bash", "dash", "ash", "ksh", "mksh", "zsh")  # interpreters whose scripts are read for exec
_KEYWORDS = {"then", "do", "else", "elif", "if", "while", "until", "!", "{", "}", "time"}  # a command follows
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATOR = re.compile(r"^[();<>|&]+$")
# Module state that stays, and why: the tools this process has warned about (a warning is said
# once per process, whichever run or thread meets the tool first).
_warned: set[str] = set()


def launched(path: str, trusted: frozenset = frozenset(),
             _seen: frozenset = frozenset()) -> tuple[list[tuple[str, str]], str | None]:
    """What a launcher script starts: (file, SHA-256) of every executable it `exec`s, followed
    through the scripts among them, with the files named as literal paths among their
    arguments (`exec python3 ./flip.py "$@"`: the interpreter and flip.py), and why it cannot be
    read (None where it can). A file that is not a script (no #!) starts nothing this can see:
    ([], None). An exec target must be a literal path (absolute, or relative to the script's
    folder) or a name on PATH; one built from a variable or a command's output, a script without
    an exec line, one not run by a shell, a cycle or a chain deeper than MAX_DEPTH cannot be
    read. A target that a Python distribution installed (the venv's iree-compile), one of
    `trusted` or a launcher of an installed Torq toolchain is not followed: its package or
    toolchain identifies it."""
    real = os.path.realpath(path)
    try:
        with open(real, "rb") as f:
            head = f.read(2)
            if head != b"#!":
                return [], None
            text = (head + f.read()).decode(errors="replace")
    except OSError as err:
        return [], f"{real} cannot be read: {err.strerror}"
    if real in _seen:
        return [], f"{real} starts itself again"
    if len(_seen) >= MAX_DEPTH:
        return [], f"{real} is more than {MAX_DEPTH} scripts deep"
    shell = _interpreter(text.split("\n", 1)[0])
    if shell not in SHELLS:
        return [], f"{real} is a {shell or 'non-shell'} script: what it runs cannot be read"
    found, targets = [], []
    for number, line, words in _exec_commands(text):
        command = words[0] if words else ""
        if not command or any(c in command for c in "$`"):
            return [], f"{real} line {number}: `{line.strip()}` starts a command that cannot be read"
        target = _literal_file(command, real) if "/" in command else shutil.which(command)
        if not target or not os.path.isfile(target):
            return [], f"{real} line {number}: `{line.strip()}`: {command} is not a file"
        targets.append((os.path.realpath(target), [f for f in (_literal_file(w, real) for w in words[1:]) if f]))
    if not targets:
        return [], f"{real} has no exec line whose command can be read: what it runs is unknown"
    for target, arguments in targets:
        found += [(f, _file_digest(f)) for f in (target, *arguments)]
        if target in trusted or _toolchain_launcher(target) or _package_of_cached(target):
            continue
        more, problem = launched(target, trusted, _seen | {real})
        if problem:
            return [], problem
        found += more
    return found, None


def launched_identity(real: str, trusted: frozenset = frozenset(), extra: tuple = ()) -> dict:
    """What joins a tool's identity besides its own file: for a launcher script (not one a
    Python distribution installed, which its package's version identifies, nor one of
    `trusted` or an installed Torq toolchain's launcher, which its wheel digests identify), the
    files it starts (`launched`) and the files the user names (CONV_SWEEP_TOOL_FILES,
    `extra`); where neither tells what it runs, a value new at every call, so that neither the
    store nor an up-to-date check ever reuses what it built (with one warning per process)."""
    launches, problem = _launches(real, trusted, extra)
    _warn(real, problem)
    return launches


def _launches(real: str, trusted: frozenset, extra: tuple) -> tuple[dict, str | None]:
    """launched_identity's value, and why what the tool runs cannot be read (None where it can)."""
    if real in trusted or not _is_script(real) or _toolchain_launcher(real) or _package_of_cached(real):
        return {}, None
    files, problem = launched(real, trusted)
    named = [(f, _file_digest(os.path.realpath(f))) for f in extra]
    if problem and not named:
        return {"unreadable": uuid.uuid4().hex}, problem
    return {"launches": [list(f) for f in files], "named": [list(f) for f in named]}, None


def _warn(real: str, problem: str | None) -> None:
    """Say once per process that a tool's outputs are rebuilt every run, and why."""
    if problem and real not in _warned:
        _warned.add(real)
        print(f"conv-sweep: warning: {problem}; {real}'s outputs are rebuilt every run (name the files "
              f"that identify it in CONV_SWEEP_TOOL_FILES)", file=sys.stderr, flush=True)


def _exec_commands(text: str):
    """(line number, line, words) of every `exec` of a shell script that runs a command: its
    command and arguments, quotes removed, without exec's options and the redirections. An
    exec counts wherever a command may start: after assignments (`VAR=x exec ...`), `;`, `&&`,
    `||`, a case pattern's `)`, `then`, `do`; one on a line that cannot be split has no words."""
    number, lines = 0, text.split("\n")
    while number < len(lines):
        start, line = number + 1, lines[number]
        number += 1
        while line.endswith("\\") and number < len(lines):  # a continued line
            line, number = line[:-1] + " " + lines[number], number + 1
        words = shlex.shlex(line, posix=True, punctuation_chars=True)
        words.whitespace_split, words.commenters = True, ""
        try:
            tokens = list(words)
        except ValueError:
            if re.search(r"(^|[\s;&|()])exec(\s|$)", line):
                yield start, line, []
            continue
        tokens = tokens[:next((i for i, t in enumerate(tokens) if t.startswith("#")), len(tokens))]
        at_command, i = True, 0
        while i < len(tokens):
            token = tokens[i]
            if _OPERATOR.match(token):
                i += 2 if ("<" in token or ">" in token) else 1  # a redirection and its file
                at_command = at_command or not ("<" in token or ">" in token)
                continue
            if at_command and (token in _KEYWORDS or _ASSIGNMENT.match(token)):
                i += 1
                continue
            if at_command and token == "exec":
                command, i = _exec_words(tokens, i + 1)
                if command:
                    yield start, line, command
            else:
                i += 1
            at_command = False


def _exec_words(tokens: list[str], i: int) -> tuple[list[str], int]:
    """The command exec runs from tokens[i] on (none for an exec of redirections only), and
    where its command ends."""
    words = []
    while i < len(tokens) and not (_OPERATOR.match(tokens[i]) and not ("<" in tokens[i] or ">" in tokens[i])):
        if _OPERATOR.match(tokens[i]):
            i += 2  # a redirection and its file
        elif tokens[i].isdigit() and i + 1 < len(tokens) and tokens[i + 1][:1] in "<>":
            i += 1  # the descriptor a redirection names
        else:
            words.append(tokens[i])
            i += 1
    while words[:1] and words[0] in ("-c", "-l", "-cl", "-lc", "-a"):
        words = words[2:] if words[0] == "-a" else words[1:]
    return words, i


def _interpreter(first_line: str) -> str:
    """The name of the program a #! line runs the script with (`env`'s program for /usr/bin/env)."""
    words = first_line[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return os.path.basename(words[0]) if words else ""


def _literal_file(word: str, script: str) -> str | None:
    """The existing file a literal path names (absolute, or relative to the script's folder)."""
    if "/" not in word or any(c in word for c in "$`*?") or word.startswith("-"):
        return None
    path = os.path.realpath(os.path.join(os.path.dirname(script), word))
    return path if os.path.isfile(path) else None


def _file_digest(real: str) -> str:
    """The SHA-256 of a file's content (a script's without its #! line), once per size and mtime."""
    st = os.stat(real)
    return _content_digest(real, st.st_size, st.st_mtime_ns)


def _toolchain_launcher(real: str) -> bool:
    """Whether `real` is a launcher `doit toolchain` wrote (bin/<tool> of an install folder whose
    manifest lists the tool): its wheels' digests identify it (profiles.toolchain_identity)."""
    folder = Path(real).parent
    if folder.name != "bin":
        return False
    manifest = _read_json(folder.parent / TOOLCHAIN_MANIFEST)
    return isinstance(manifest.get("tools"), dict) and Path(real).name in manifest["tools"]


def _is_script(real: str) -> bool:
    try:
        with open(real, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


@lru_cache(maxsize=None)
def _package_of_cached(real: str) -> str | None:
    """'name version' of the distribution that installed the file `real` (resolved), a
    console script in the venv's bin/ included, or None."""
    name = os.path.basename(real)
    for dist in metadata.distributions():
        for f in dist.files or ():
            if f.name == name and os.path.realpath(dist.locate_file(f)) == real:
                return f"{dist.metadata['Name']} {dist.version}"
    return None


def describe_identity(identity: dict) -> str:
    """One line for a report: what the tool says its version is, else its package and digest."""
    if identity.get("version"):
        lines = [line.strip() for line in identity["version"].splitlines() if line.strip()]
        return " / ".join(lines[:3])
    package = identity.get("package") or "no package"
    return f"no --version; {package}, sha256 {str(identity.get('sha256'))[:16]}"


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NOT_A_VERSION = ("not recognized", "unknown flag", "unknown option", "unrecognized option", "FLAGS ERROR",
                  "invalid option")


def ask_version(path: str) -> str | None:
    """What `path --version` prints, or None when that is not a version: a non-zero exit, an
    error about the flag, no output. A tool that cannot start says so (executables.cannot_start)."""
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    except OSError as err:
        return f"cannot start: {err.strerror}"
    except subprocess.TimeoutExpired:
        return None
    text = _ANSI.sub("", proc.stdout + proc.stderr).strip()
    if cannot_start(text):
        return text[:2000]
    if proc.returncode != 0 or not text or any(marker.lower() in text.lower() for marker in _NOT_A_VERSION):
        return None
    return text[:2000]


def _package_of(path: str) -> str | None:
    """'name version' of the installed distribution whose files include `path`, if any."""
    return _package_of_cached(os.path.realpath(path))

