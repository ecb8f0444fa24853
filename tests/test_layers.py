"""The house: the import contract in pyproject.toml holds (layers, and who may import doit,
Dask, TensorFlow and torch), and no two modules of the package import each other, however
indirectly, at the top of a file or inside a function; and the table of layers and modules in
docs/extending.md is the contract's layers and the package's tree."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contract_holds():
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def _cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    modules = sorted(m for m in graph.modules if m.startswith("pipeline"))
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(module):
        index[module] = low[module] = counter[0]
        counter[0] += 1
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.find_modules_directly_imported_by(module)):
            if not other.startswith("pipeline"):
                continue
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("pipeline", cache_dir=None)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for a, b in [("pipeline.a", "pipeline.b"), ("pipeline.b", "pipeline.c"), ("pipeline.c", "pipeline.a"),
                 ("pipeline.c", "pipeline.d")]:
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["pipeline.a", "pipeline.b", "pipeline.c"]]


def _table(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """(layers, modules per layer) of each row of docs/extending.md's table of layers; side by
    side layers are split by an escaped bar, in both columns alike."""
    start = text.index("| layer | modules | holds |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        layer, modules = re.split(r"(?<!\\)\|", line)[1:3]
        names = [re.findall(r"\[`(\w+)`\]", part) for part in layer.split("\\|")]
        listed = [re.findall(r"`(\w+)`", re.sub(r"\(\+[^)]*\)", "", part)) for part in modules.split("\\|")]
        rows.append(([n for part in names for n in part], listed))
    return rows


def test_the_docs_table_of_layers_is_the_contract_and_the_tree():
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    rows = _table((ROOT / "docs" / "extending.md").read_text())
    assert [" | ".join(layers) for layers, _ in rows] == contract["layers"], "the table's rows are the layers, in order"
    for layers, listed in rows:
        assert len(layers) == len(listed), f"{layers}: one list of modules per layer"
        for layer, modules in zip(layers, listed):
            package = ROOT / "pipeline" / layer
            tree = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__") if package.is_dir() \
                else [layer]  # a one-module layer (config)
            assert sorted(modules) == tree, f"docs/extending.md lists {sorted(modules)} for {layer}, the tree has {tree}"


def test_the_table_reader_sees_a_missing_module():
    table = """| layer | modules | holds |
|---|---|---|
| [`a`](x) \\| [`b`](y) | `m`, `n` (+ `data/`) \\| `o` | things |
"""
    assert _table(table) == [(["a", "b"], [["m", "n"], ["o"]])]
