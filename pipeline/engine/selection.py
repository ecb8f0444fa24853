"""Task selection that forgives: a case's name selects it on every selected target, and a
pattern that matches no task is an error, not an empty run that succeeds.

The per-target tasks are named `vmfb:<case>@<target>` and `verify:<case>@<target>`, while the
report prints the case's name; `doit verify:<case>` (and `vmfb:`) selects that case's task on
every selected target. A pattern (`*`) that matches nothing stops the command before any
task, naming the pattern: doit would otherwise run nothing and exit 0.

doit has no hook for how the command line selects tasks, so this module wraps one method of its
private TaskControl (doit.control), written against doit 0.37.0, the version pyproject.toml
pins: install() patches only that exact method source and says so loudly otherwise, and
tests/test_selection.py fails when doit changes. Nothing is added to the task list, so
`doit list` costs what it did.
"""
from __future__ import annotations

import hashlib
import inspect
import sys

from doit.control import TaskControl
from doit.exceptions import InvalidCommand

PER_TARGET = ("vmfb", "verify")  # the tasks named <case>@<target>

# sha256 of inspect.getsource(TaskControl._process_filter) + (TaskControl._get_wild_tasks) in doit 0.37.0
WRITTEN_FOR = "09dec4d3f14c3d4c46405a0d57055757ad944908ad3aeae51f684c9e37bfab64"


_process_filter = TaskControl._process_filter  # doit's own, before install() replaces it


def selection_digest() -> str:
    source = inspect.getsource(_process_filter) + inspect.getsource(TaskControl._get_wild_tasks)
    return hashlib.sha256(source.encode()).hexdigest()


def closest(pattern: str, names: list[str], wild, most: int = 3) -> list[str]:
    """Task names close to a pattern that matched none: what it matches with a trailing `*`,
    else the names most like it."""
    import difflib

    found = wild(pattern + "*") if not pattern.endswith("*") else []
    if found:
        return found[:most]
    stage = pattern.split(":", 1)[0] + ":"
    same_stage = [n for n in names if n.startswith(stage)] or names
    return difflib.get_close_matches(pattern.replace("*", ""), same_stage, n=most, cutoff=0.5)


def expand(selection: list[str], names: list[str], wild, positional: frozenset = frozenset()) -> list[str]:
    """The command line's selection with every `<stage>:<case>` of a per-target stage replaced by
    that case's tasks on each target (`names`: every task, in order); a pattern matching no
    task (`wild(pattern)` lists what it matches) is an InvalidCommand naming it and the closest
    task names. After a task taking positional arguments (`positional`), the rest is its own."""
    known = set(names)
    out = []
    for i, item in enumerate(selection):
        if item in positional:
            return out + selection[i:]
        if "*" in item:
            if not wild(item):
                hint = "" if item.endswith("*") else "; a pattern matches whole task names: end it with * to match a prefix"
                near = closest(item, names, wild)
                guess = f"; did you mean {', '.join(near)}?" if near else ""
                raise InvalidCommand(f'"{item}" matches no task{hint}{guess} (`doit list --all` lists them)')
            out.append(item)
            continue
        stage, sep, case = item.partition(":")
        if sep and stage in PER_TARGET and item not in known and "@" not in case:
            on_targets = [n for n in names if n.startswith(f"{item}@")]
            if on_targets:
                out.extend(on_targets)
                continue
        out.append(item)
    return out


def _process_filter_forgiving(self, task_selection):
    positional = frozenset(name for name, task in self.tasks.items() if task.pos_arg)
    return _process_filter(self, expand(list(task_selection), list(self._def_order), self._get_wild_tasks, positional))


def install() -> None:
    if selection_digest() != WRITTEN_FOR:
        print("conv-sweep: this doit's task selection is not the one pipeline/engine/selection.py was written for "
              "(doit 0.37.0): a case name does not select its tasks, and a pattern matching nothing runs nothing",
              file=sys.stderr)
        return
    TaskControl._process_filter = _process_filter_forgiving
