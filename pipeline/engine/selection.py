"""Task selection that forgives: a case's name selects it on every selected target, and a
pattern that matches no task is an error, not an empty run that succeeds.

The per-target tasks are named `vmfb:<case>@<target>` and `verify:<case>@<target>`, while the
report prints the case's name; `doit verify:<case>` (and `vmfb:`) selects that case's task on
every selected target. A pattern (`*`) that matches nothing stops the command before any
task, naming the pattern: doit would otherwise run nothing and exit 0.

`<stage>:net:<network>` (`doit 'verify:net:mobilenet_v2'`) selects the stage's tasks of every
case whose geometry is one of that network's conv layers (the networks profile:
pipeline/space/networks.py), on every selected target.

The run, clean, forget, ignore and reset-dep commands (pipeline/engine/command.py) expand
their selection with `expand` before doit reads it: a pattern is matched here, once, and doit
and the run command read the task names it matched. Nothing is added to the task list, so
`doit list` costs what it did.
"""
from __future__ import annotations

from doit.exceptions import InvalidCommand

from pipeline.core.chain import SHARED_TASKS, TASKS
from pipeline.core.errors import ConfigError
from pipeline.space.cases import geometry_id as case_geometry_id

PER_TARGET = tuple(t for t in TASKS if t not in SHARED_TASKS)  # the tasks named <case>@<target>


NETWORK = "net:"  # <stage>:net:<network>


def geometry_id(task: str) -> str:
    """The geometry id in a case task's name (<stage>:<case>@<target>)."""
    return case_geometry_id(task.split(":", 1)[-1].rsplit("@", 1)[0])


def network_tasks(item: str, stage: str, network: str, names: list[str]) -> list[str]:
    """The stage's tasks of the cases of a network's conv layers; an InvalidCommand when the
    network is unknown or none of its cases is in the sweep."""
    from pipeline.space.networks import geometry_ids

    try:
        ids = geometry_ids(network)
    except ConfigError as err:
        raise InvalidCommand(f'"{item}": {err}') from None
    found = [n for n in names if n.startswith(f"{stage}:conv_") and "@" in n and geometry_id(n) in ids]
    if not found:
        raise InvalidCommand(f'"{item}" matches no task: none of the {len(ids)} geometries of {network} is in '
                             f"this sweep (CONV_SWEEP_PROFILE=networks sweeps them)")
    return found


def closest(pattern: str, names: list[str], wild, most: int = 3) -> list[str]:
    """Task names close to a pattern or name that matched none: what it matches with a trailing
    `*`, else the names of its stage most like it: first those holding more of its literal
    parts after the stage (split on `*`) in order, then those sharing a longer start with it,
    then by difflib's ratio; a name holding none of the parts only with a ratio of 0.5 or more."""
    import difflib
    import os

    found = wild(pattern + "*") if not pattern.endswith("*") else []
    if found:
        return found[:most]
    stage = pattern.split(":", 1)[0] + ":"
    same_stage = [n for n in names if n.startswith(stage)]
    skip = len(stage) if same_stage else 0  # the stage, shared by every candidate, tells none apart
    parts = [p for p in pattern[skip:].split("*") if p]

    def likeness(name: str) -> tuple[int, int, float]:
        held, at = 0, skip
        for part in parts:
            where = name.find(part, at)
            if where >= 0:
                held, at = held + 1, where + len(part)
        ratio = difflib.SequenceMatcher(None, pattern.replace("*", ""), name).ratio()
        return held, len(os.path.commonprefix([pattern, name])), ratio

    scored = sorted(((likeness(n), n) for n in same_stage or names), key=lambda s: s[0], reverse=True)
    return [n for (held, _, ratio), n in scored if held or ratio >= 0.5][:most]


def expand(selection: list[str], names: list[str], wild, positional: frozenset = frozenset()) -> list[str]:
    """The command line's selection with every pattern replaced by the tasks it matches
    (`wild(pattern)` lists them), and every `<stage>:<case>` of a per-target stage by that
    case's tasks on each target (`names`: every task, in order); a pattern matching no task,
    and a `<task>:<name>` under a task with subtasks that is no task, are an InvalidCommand
    naming it and the closest task names.
    After a task taking positional arguments (`positional`), the rest is its own; anything
    else (a plain task name, a file) is doit's."""
    known = set(names)
    groups = {n.split(":", 1)[0] for n in names if ":" in n}  # tasks with subtasks <task>:<name>

    def guess(item: str) -> str:
        near = closest(item, names, wild)
        return (f"; did you mean {', '.join(near)}?" if near else "") + " (`doit list --all` lists them)"

    out = []
    for i, item in enumerate(selection):
        if item in positional:
            return out + selection[i:]
        if "*" in item:
            matched = wild(item)
            if not matched:
                hint = "" if item.endswith("*") else "; a pattern matches whole task names: end it with * to match a prefix"
                raise InvalidCommand(f'"{item}" matches no task{hint}{guess(item)}')
            out.extend(matched)
            continue
        stage, sep, case = item.partition(":")
        if sep and case.startswith(NETWORK):
            out.extend(network_tasks(item, stage, case[len(NETWORK):], names))
            continue
        if sep and stage in PER_TARGET and item not in known and "@" not in case:
            on_targets = [n for n in names if n.startswith(f"{item}@")]
            if on_targets:
                out.extend(on_targets)
                continue
        if sep and stage in groups and item not in known:
            raise InvalidCommand(f'"{item}" is not a task{guess(item)}')
        out.append(item)
    return out

