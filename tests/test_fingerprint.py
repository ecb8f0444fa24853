"""What identifies a stage's inputs: the verify key covers every module that can change a
verdict, and a tool without --version is never identified by its error message."""
import ast
import json
import os
import sys
from pathlib import Path

import pytest

from pipeline.core.fingerprint import STAGE_INPUTS, VERIFY_KEY_EXEMPT, describe_identity, executable_identity, module_file
from pipeline.core.executables import tool_path



def _imports(module: str) -> set[str]:
    """The package's modules `module` ("checks.verify") imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(module_file(module).read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pipeline."):
            name = node.module.removeprefix("pipeline.")
            found |= {name} if module_file(name).is_file() else {f"{name}.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "pipeline":
            found |= {a.name for a in node.names}
    return found


def test_the_verify_key_covers_every_module_a_verdict_reaches():
    reached, stack = set(), ["run.stages", "checks.verify", "outcome.verdict", "checks.oracle"]
    while stack:
        module = stack.pop()
        if module not in reached:
            reached.add(module)
            stack += sorted(_imports(module))
    keyed = set(STAGE_INPUTS["verify"][0])
    assert {"run.stages", "space.expected", "outcome.verdict", "outcome.bucket", "space.geometry", "space.cases"} <= keyed
    assert reached - keyed == set(VERIFY_KEY_EXEMPT), "a module the verdict reaches is neither keyed nor exempt"


def test_a_tool_without_version_is_identified_by_package_and_digest(tmp_path):
    runner = tool_path("iree-run-module")  # answers --version with a flag error
    identity = executable_identity(runner, tmp_path / "tool-versions.json")
    assert identity["version"] is None
    assert identity["package"].startswith("iree-base-runtime ") and len(identity["sha256"]) == 64
    line = describe_identity(identity)
    assert "iree-base-runtime" in line and "FLAGS" not in line and "\x1b" not in line
    assert (tmp_path / "tool-versions.json").is_file()
    assert executable_identity(runner, tmp_path / "tool-versions.json") == identity  # kept: asked once per identity


def test_a_tool_with_version_is_identified_by_it(tmp_path):
    identity = executable_identity(tool_path("iree-compile"), tmp_path / "tool-versions.json")
    assert "IREE" in identity["version"] and "sha256" not in identity


def test_code_text_follows_the_code_not_its_imports_or_prose(tmp_path):
    from pipeline.core.fingerprint import code_text

    one, two, three = tmp_path / "one.py", tmp_path / "two.py", tmp_path / "three.py"
    one.write_text('"""Doc."""\nfrom .errors import X\n\ndef f(a):\n    """Say."""\n    return a + 1  # note\n')
    two.write_text('"""Other doc."""\nfrom ..core.errors import X\n\n\ndef f(a):\n    return a + 1\n')
    three.write_text('from .errors import X\n\ndef f(a):\n    return a + 2\n')
    assert code_text(one) == code_text(two)  # moved and reworded: the same code
    assert code_text(one) != code_text(three)  # the code changed


def test_code_digests_are_kept_on_disk_per_file_size_and_mtime(tmp_path, monkeypatch):
    import os

    from pipeline.core import fingerprint

    modules = ("space.geometry", "core.tools")
    fingerprint.code_digest.cache_clear()
    expected = fingerprint.code_digest(modules)  # as computed from the code
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the user cache is found when asked, not at import
    fingerprint.code_digest.cache_clear()
    assert fingerprint.code_digest(modules) == expected and (tmp_path / "conv-sweep" / "code-digests.json").is_file()
    parsed = []
    real = fingerprint.code_text
    monkeypatch.setattr(fingerprint, "code_text", lambda path: parsed.append(path) or real(path))
    fingerprint.code_digest.cache_clear()
    assert fingerprint.code_digest(modules) == expected and parsed == []  # read back, nothing parsed
    source = fingerprint.module_file("core.tools")
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # the file changed: parsed again
    try:
        fingerprint.code_digest.cache_clear()
        assert fingerprint.code_digest(modules) == expected and len(parsed) == 2
    finally:
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        fingerprint.code_digest.cache_clear()


def _sh(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_a_launcher_is_followed_through_literal_relative_and_path_names(tmp_path, monkeypatch):
    from pipeline.core.fingerprint import launched

    binary = tmp_path / "bin" / "real-tool"
    binary.parent.mkdir()
    binary.write_bytes(b"\x7fELF not a script")
    binary.chmod(0o755)
    inner = _sh(tmp_path / "inner.sh", "exec bin/real-tool \"$@\"\n")  # relative to its folder
    outer = _sh(tmp_path / "outer.sh", f"FOO=1\nexec {inner} \"$@\"  # the dev build\n")
    files, problem = launched(str(outer))
    assert problem is None and [f for f, _ in files] == [str(inner), str(binary)]
    monkeypatch.setenv("PATH", f"{binary.parent}:/usr/bin:/bin")
    by_name = _sh(tmp_path / "by-name.sh", "exec real-tool\n")
    assert [f for f, _ in launched(str(by_name))[0]] == [str(binary)]
    before = dict(files)[str(inner)]
    _sh(inner, "exec bin/real-tool --other \"$@\"\n")
    assert dict(launched(str(outer))[0])[str(inner)] != before  # the inner script's change shows


@pytest.mark.parametrize("body, why", [
    ('exec "$REAL" "$@"\n', "cannot be read"),
    ("exec $(which iree-compile)\n", "cannot be read"),
    ("iree-compile \"$@\"\n", "no exec line"),
    ("exec ./missing-tool\n", "is not a file"),
])
def test_a_launcher_whose_target_cannot_be_read_says_why(tmp_path, body, why):
    from pipeline.core.fingerprint import launched

    assert why in launched(str(_sh(tmp_path / "w.sh", body)))[1]


def test_a_cycle_and_trusted_or_installed_targets(tmp_path):
    from pipeline.core.fingerprint import launched, launched_identity

    a, b = tmp_path / "a.sh", tmp_path / "b.sh"
    _sh(a, f"exec {b}\n")
    _sh(b, f"exec {a}\n")
    assert "starts itself again" in launched(str(a))[1]
    # a script whose target cannot be read: trusted (the toolchain's launchers), or named by the user
    unread = _sh(tmp_path / "u.sh", 'exec "$X"\n')
    assert launched_identity(str(unread), trusted=frozenset({str(unread)})) == {}
    named = launched_identity(str(unread), extra=(str(a),))
    assert "unreadable" not in named and named["named"][0][0] == str(a)
    assert "unreadable" in launched_identity(str(unread))
    # the venv's iree-compile is a Python script its package installed: identified by the package
    import sys
    venv_tool = Path(sys.executable).parent / "iree-compile"
    assert venv_tool.read_bytes().startswith(b"#!")
    assert launched_identity(os.path.realpath(venv_tool)) == {}


def test_an_exec_counts_after_assignments_and_operators_and_its_literal_arguments_are_followed(tmp_path):
    from pipeline.core.fingerprint import launched, tool_digest

    assert "cannot be read" in launched(str(_sh(tmp_path / "a.sh", 'LD_LIBRARY_PATH=/x exec "$REAL" "$@"\n')))[1]
    either = _sh(tmp_path / "b.sh", 'case "$1" in\n  *.mlirbc) exec /bin/true;;\nesac\n'
                                    '[ -n "$DEV" ] && exec "$DEV" "$@"\nexec /bin/true "$@"\n')
    assert "line 5" in launched(str(either))[1]  # the second exec, after &&, is not read past
    flip = tmp_path / "flip.py"
    flip.write_text("print('v1')\n")
    through = _sh(tmp_path / "c.sh", f'exec {sys.executable} ./flip.py "$@" 2>/dev/null\n')
    files, problem = launched(str(through))
    assert problem is None and [f for f, _ in files] == [os.path.realpath(sys.executable), str(flip)]
    before = tool_digest(str(through))
    flip.write_text("print('v2')\n")  # the interpreter's script is what changed
    assert tool_digest(str(through)) != before


def test_a_script_not_run_by_a_shell_or_too_deep_cannot_be_read(tmp_path):
    from pipeline.core.fingerprint import MAX_DEPTH, launched

    python = tmp_path / "w.py"
    python.write_text("#!/usr/bin/env python3\nimport os\nos.execv('/bin/true', ['true'])\n")
    assert "is a python3 script" in launched(str(python))[1]
    chain = _sh(tmp_path / "s0.sh", "exec /bin/true\n")
    for i in range(1, MAX_DEPTH + 1):
        chain = _sh(tmp_path / f"s{i}.sh", f"exec {chain}\n")
    assert "scripts deep" in launched(str(chain))[1]
    assert launched(str(tmp_path / f"s{MAX_DEPTH - 1}.sh"))[1] is None


def test_the_toolchains_launchers_are_identified_by_its_manifest_without_a_warning(tmp_path, capsys):
    from pipeline.core.fingerprint import TOOLCHAIN_MANIFEST, launched_identity, tool_digest
    from pipeline.targets import toolchain

    assert TOOLCHAIN_MANIFEST == toolchain.MANIFEST
    for through_loader in (True, False):
        install = tmp_path / f"torq-{through_loader}"
        (install / "bin").mkdir(parents=True)
        launcher = install / "bin" / "torq-compile"
        toolchain._write_launcher(launcher, toolchain.TOOLS["torq-compile"], through_loader)
        assert launched_identity(str(launcher))  # its exec target names $top: not read on its own
        (install / TOOLCHAIN_MANIFEST).write_text(json.dumps({"tools": {"torq-compile": str(launcher)}}))
        assert launched_identity(str(launcher)) == {}
        assert tool_digest(str(launcher)) == tool_digest(str(launcher))  # no value new every call
    capsys.readouterr()
    for through_loader in (True, False):
        launched_identity(str(tmp_path / f"torq-{through_loader}" / "bin" / "torq-compile"))
    assert capsys.readouterr().err == ""


def test_an_executable_identity_is_asked_again_once_the_script_it_execs_changes(tmp_path, capsys):
    cache = tmp_path / "tool-versions.json"
    w2 = _sh(tmp_path / "w2.sh", 'exec /bin/echo "tool 1"\n')
    w1 = _sh(tmp_path / "w1.sh", f'exec {w2} "$@"\n')
    first = executable_identity(str(w1), cache)
    assert first["version"] == "tool 1" and [f for f, _ in first["launches"]] == [str(w2), os.path.realpath("/bin/echo")]
    _sh(w2, 'exec /bin/echo "tool 2"\n')  # w1.sh keeps its size and mtime
    assert executable_identity(str(w1), cache)["version"] == "tool 2"
    # one whose target cannot be read: a value new every time, never kept, one warning
    unread = _sh(tmp_path / "u.sh", 'exec "$REAL" "$@"\n')
    a, b = executable_identity(str(unread), cache), executable_identity(str(unread), cache)
    assert a["unreadable"] != b["unreadable"] and str(unread) not in cache.read_text()
    assert capsys.readouterr().err.count("rebuilt every run") == 1


def test_a_script_that_cannot_start_says_so_before_any_warning(tmp_path, capsys):
    broken = _sh(tmp_path / "iree-compile", 'echo "$0: error while loading shared libraries: x.so" >&2\nexit 127\n')
    assert "error while loading" in executable_identity(str(broken), tmp_path / "v.json")["version"]
    assert capsys.readouterr().err == ""
