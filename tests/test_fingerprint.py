"""What identifies a stage's inputs: the verify key covers every module that can change a
verdict, and a tool without --version is never identified by its error message."""
import ast
import os
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
    monkeypatch.setattr(fingerprint, "CODE_DIGESTS", tmp_path / "code-digests.json")
    fingerprint.code_digest.cache_clear()
    assert fingerprint.code_digest(modules) == expected and (tmp_path / "code-digests.json").is_file()
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
