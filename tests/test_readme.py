"""The documentation holds: README.md stays short, every relative link and `pipeline/` path in
README.md and docs/*.md names a file that exists, every JSON example parses, and the cheap
shell commands the documents show run as written, from the project root, with the venv's
bin on PATH and a temporary build folder.

A command line may end with a comment saying what it does:
    CONV_SWEEP_N=x doit list     # fails: CONV_SWEEP_N='x': must be an integer
    doit refused                 # prints: cases not generated
`fails:` means it must exit non-zero with one line naming the knob it sets and holding the
text after `fails:`; `prints:` means it must succeed and print that text. Any other command
must succeed.

The README's test line, marked `# .ci/run runs this line`, is what .ci/run runs (CI): it
installs everything the tests need, system packages included, so that it passes on a fresh
machine as it does in CI.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import ROOT, clean_env

README = ROOT / "README.md"
README_LIMIT = 12_000  # bytes
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent

# Cheap commands: nothing is built, each takes a few seconds. A documented command runs here
# when, after its CONV_SWEEP_* assignments, it is exactly one of these.
CHEAP = ("doit list", "doit list --all", "doit report", "doit refused", "lint-imports --no-cache")

# The files whose commands this test covers, and the fewest cheap commands it must find in each
# (so that a change to the extraction cannot leave it running nothing).
COVERED = {
    "README.md": 5,
    "docs/knobs.md": 8,
    "docs/targets.md": 3,
    "docs/scale-out.md": 3,
    "docs/extending.md": 3,
    "docs/triage.md": 2,
}

BAD_CONFIGURATION = "conv-sweep: bad configuration, nothing was run: "
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.M | re.S)
SHELL = {"sh", "bash", "shell", "console"}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _split_comment(line: str) -> tuple[str, str]:
    """(command, comment): the comment starts at the first `#` outside quotes after a blank."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _shell_lines(text: str):
    for lang, body in FENCE.findall(text):
        if lang in SHELL:
            for line in body.replace("\\\n", " ").splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    yield line.strip()


def _cheap(line: str) -> dict | None:
    """The command's parts if it is cheap, else None."""
    command, comment = _split_comment(line)
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    knobs = {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        name, value = words.pop(0).split("=", 1)
        knobs[name] = value
    if " ".join(words) not in CHEAP or any(not k.startswith("CONV_SWEEP_") for k in knobs):
        return None
    if "CONV_SWEEP_BUILD_DIR" in knobs:  # it would write where the document says, not in a temporary folder
        return None
    expect, _, text = comment.partition(":")
    if expect not in ("fails", "prints"):
        expect, text = "", ""
    return {"line": line, "command": " ".join(words), "knobs": knobs, "expect": expect, "text": text.strip()}


def _commands() -> list[tuple[str, dict]]:
    return [(_rel(doc), cmd) for doc in DOCS for line in _shell_lines(doc.read_text())
            if (cmd := _cheap(line)) is not None]


def _key(line: str) -> str:
    return " ".join(shlex.split(_split_comment(line)[0]))


COMMANDS = _commands()


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every cheap command line, run once as written (several at a time), each in its own
    temporary build folder."""
    lines = list(dict.fromkeys(cmd["line"] for _, cmd in COMMANDS))
    first = {}  # one run per command as the shell sees it (the same command may be shown twice)
    for line in lines:
        first.setdefault(_key(line), line)

    builds = {line: tmp_path_factory.mktemp("build") for line in first.values()}  # here: mktemp is not thread-safe

    def run(line):
        build = builds[line]
        env = clean_env(CONV_SWEEP_BUILD_DIR=build)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300), build

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = dict(zip(first.values(), pool.map(run, first.values())))
    return {line: done[first[_key(line)]] for line in lines}


def test_readme_is_short():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, over {README_LIMIT}: move detail to docs/"


@pytest.mark.parametrize("doc", sorted(COVERED))
def test_commands_are_found(doc):
    found = [cmd["line"] for name, cmd in COMMANDS if name == doc]
    assert len(found) >= COVERED[doc], f"{doc}: {len(found)} cheap commands found, expected {COVERED[doc]}: {found}"


@pytest.mark.parametrize("doc,cmd", COMMANDS, ids=[f"{doc}: {cmd['line']}" for doc, cmd in COMMANDS])
def test_documented_command(doc, cmd, ran):
    if cmd["expect"]:  # an empty `fails:` or `prints:` text would hold in any output
        assert cmd["text"], f"{doc}: `{cmd['line']}` says {cmd['expect']}: with no text to look for"
    run, build = ran[cmd["line"]]
    out = run.stdout + run.stderr
    said = f"{doc}: `{cmd['line']}` exited {run.returncode}:\n{out[-3000:]}"
    if cmd["expect"] == "fails":
        lines = [l for l in out.splitlines() if l.strip()]
        assert run.returncode != 0, said
        assert len(lines) == 1 and lines[0].startswith(BAD_CONFIGURATION), said
        assert any(knob in lines[0] for knob in cmd["knobs"]), f"the message names none of {list(cmd['knobs'])}: {said}"
        assert cmd["text"] in lines[0], f"{cmd['text']!r} not in the message: {said}"
        return
    assert run.returncode == 0, said
    assert BAD_CONFIGURATION not in out, said
    if cmd["expect"] == "prints":  # a text that starts a word starts one: "0 cases" is not in "27 cases"
        start = r"(?<![\w.])" if re.match(r"\w", cmd["text"]) else ""
        assert re.search(start + re.escape(cmd["text"]), out), f"{cmd['text']!r} not printed: {said}"
    if cmd["command"] == "doit report":
        assert (build / "report" / "llvm-cpu" / "results.json").is_file(), f"no report in the build folder: {said}"


CI_MARK = "# .ci/run runs this line"
CI_RUN = ROOT / ".ci" / "run"


def _ci_print(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(root / ".ci" / "run"), "--print"], env=clean_env(CI="true"),
                          capture_output=True, text=True, timeout=60)


def test_ci_runs_the_readme_s_test_line_which_installs_what_the_tests_need():
    marked = [line for line in _shell_lines(README.read_text()) if line.endswith(CI_MARK)]
    assert len(marked) == 1, f"README.md: {len(marked)} shell lines end with {CI_MARK!r}, expected its one test line"
    line = _split_comment(marked[0])[0]
    done = _ci_print(ROOT)
    assert done.returncode == 0 and done.stdout == line + "\n", done.stdout + done.stderr
    steps = [shlex.split(step) for step in line.split("&&")]
    installed = {word for step in steps if step[:2] == ["apt-get", "install"] for word in step[2:]
                 if not word.startswith("-")}
    # Debian's chromium and its driver: the report in a real browser (tests/test_explorer.py, tests/test_report.py)
    assert {"chromium", "chromium-driver"} <= installed, installed
    assert ["apt-get", "update"] in steps and steps.index(["apt-get", "update"]) < \
        next(i for i, step in enumerate(steps) if step[:2] == ["apt-get", "install"])
    assert [".venv/bin/pip", "install", "-e", ".[test]"] in steps  # the test extra (selenium, ...)
    assert [".venv/bin/doit", "toolchain"] in steps  # the Torq tools the slow tests run
    # the full tier, as `pytest` in "Tests: which tier when", on both cores (pytest-xdist)
    assert steps[-1] == [".venv/bin/pytest", "-n", "2"]


@pytest.mark.parametrize("marks", [0, 2])
def test_ci_refuses_a_readme_without_its_one_test_line(tmp_path, marks):
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_bytes(CI_RUN.read_bytes())
    (tmp_path / "README.md").write_text("```sh\n" + f"true  {CI_MARK}\n" * marks + "```\n")
    done = _ci_print(tmp_path)
    assert done.returncode == 2 and done.stdout == "" and "exactly one line ending with" in done.stderr


def _prose(text: str) -> str:
    """The text without fenced blocks (their brackets are code, not links)."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", _prose(path.read_text()), re.M)}


LINKS = list(dict.fromkeys(
    (doc, target) for doc in DOCS
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`\n]*`(?!\]\()", "", _prose(doc.read_text())))
    if not re.match(r"^[a-z][a-z0-9+.-]*:", target)))  # not https:, mailto:, ...


def test_links_are_found():
    assert len(LINKS) > 20 and {doc for doc, _ in LINKS} >= {README, ROOT / "docs" / "README.md"}


@pytest.mark.parametrize("doc,target", LINKS, ids=[f"{_rel(d)}: {t}" for d, t in LINKS])
def test_relative_link_points_to_a_file(doc, target):
    path, _, anchor = target.partition("#")
    dest = (doc.parent / path).resolve() if path else doc
    assert dest.exists(), f"{_rel(doc)}: link {target} points to {dest}, which does not exist"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), f"{_rel(doc)}: no heading #{anchor} in {dest.name}: {sorted(_anchors(dest))}"


def test_named_paths_exist():
    """Every `pipeline/...` and `tests/test_*.py` path the documents name exists (a placeholder
    such as `<target>.json` ends the path: its folder must exist)."""
    missing, named = [], 0
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"(?<![\w./-])((?:pipeline|tests)/[\w./-]*)", text):
            path = m.group(1).rstrip(".")
            if text[m.end():m.end() + 1] in ("<", "{", "*"):  # a placeholder: its folder
                path = path.rsplit("/", 1)[0]
            named += 1
            if not (ROOT / path).exists():
                missing.append(f"{_rel(doc)}: {path}")
    assert named > 10 and not missing, missing


def test_json_examples_parse():
    parsed = 0
    for doc in DOCS:
        for lang, body in FENCE.findall(doc.read_text()):
            if lang == "json":
                json.loads(body)
                parsed += 1
    assert parsed > 0, "no ```json block found in README.md or docs/: the extraction or the documents changed"
