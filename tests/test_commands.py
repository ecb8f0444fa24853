"""The commands beside the case tasks (pipeline/engine/commands.py): one spec per command, each
listed by dodo.py; every command runs through one wrapper, where a ConfigError (an option or
argument that is wrong) or a failed outcome becomes doit's task failure; the checks name the
option and its value; options may follow a command's positional arguments. Unit tests: no
doit run, no run of the sweep (the run they are given is a stand-in)."""
import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
from doit.exceptions import TaskFailed

from pipeline.core.errors import ConfigError
from pipeline.core.layout import Layout
from pipeline.engine import commands
from pipeline.engine.commands import SPECS, CommandSpec, options_after, perform

from helpers import ROOT

COMMANDS = ["sweep", "report", "compare", "shrink", "bugreport", "hunt", "bisect", "refused", "extract", "export_xfails",
            "import_xfails", "prune_store", "calibrate", "accept_failures"]
RUN = SimpleNamespace(cfg=SimpleNamespace(layout=Layout(Path("build"))))  # a stand-in: the checks never look at it


def _defaults(spec: CommandSpec, **given) -> dict:
    options = {p["name"]: p["default"] for p in spec.params}
    if spec.pos_arg:
        options[spec.pos_arg] = []
    return {**options, **given}


def test_every_command_is_one_spec_and_dodo_lists_each_once():
    assert [s.name for s in SPECS] == COMMANDS
    tree = ast.parse((ROOT / "dodo.py").read_text())
    listed = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id.startswith("task_"):
            call = node.value
            assert ast.unparse(call.func) == "commands.creator", ast.unparse(node)
            listed[node.targets[0].id] = ast.unparse(call.args[0])
    assert listed == {f"task_{s.name}": f"commands.{s.name.upper()}" for s in SPECS}
    assert all(getattr(commands, s.name.upper()) is s for s in SPECS)


def test_a_spec_makes_its_task_with_its_doc_options_and_positional_arguments():
    create = commands.creator(commands.BISECT, RUN)
    assert create.__doc__ == commands.BISECT.doc and create.__name__ == "task_bisect"
    task = create()
    assert task["actions"] == [(perform, [commands.BISECT, RUN])]  # every command runs through perform
    assert task["params"] == list(commands.BISECT.params) and task["pos_arg"] == "subject"
    assert task["uptodate"] == [False] and task["verbosity"] == 2
    for spec in SPECS:
        if spec.action is not None:
            assert commands.task(spec, RUN)["actions"] == [(perform, [spec, RUN])], spec.name


def test_the_commands_that_work_in_folders_of_their_own_take_no_lock():
    class Task:
        def __init__(self, meta):
            self.meta = meta

    unlocked = {s.name for s in SPECS if not commands.takes_lock(Task(commands.task(s, RUN)["meta"]))}
    assert unlocked == {"shrink", "calibrate", "prune_store", "extract"}
    assert commands.takes_lock(Task(None)) and commands.takes_lock(Task({"conv_sweep": {"stage": "vmfb"}}))


def _spec(action, check=None, params=(), pos_arg=None) -> CommandSpec:
    return CommandSpec("probe", "a probe", action, params=params, pos_arg=pos_arg, check=check)


def test_perform_turns_a_config_error_or_a_failed_outcome_into_a_task_failure():
    def wrong(**_):
        raise ConfigError("doit probe --x", -1, "must be >= 0")

    failed = perform(_spec(lambda run, **_: pytest.fail("the action runs after a failed check"), check=wrong), RUN)
    assert isinstance(failed, TaskFailed) and failed.message == "conv-sweep: doit probe --x=-1: must be >= 0"
    failed = perform(_spec(lambda run: wrong()), RUN)  # raised by the action (found only once it runs)
    assert isinstance(failed, TaskFailed) and failed.message == "conv-sweep: doit probe --x=-1: must be >= 0"
    failed = perform(_spec(lambda run: "2 regressions"), RUN)
    assert isinstance(failed, TaskFailed) and failed.message == "conv-sweep: 2 regressions"
    assert perform(_spec(lambda run: None), RUN) is None
    with pytest.raises(ZeroDivisionError):  # anything else is doit's to report, with its traceback
        perform(_spec(lambda run: 1 / 0), RUN)


def test_what_a_check_reads_reaches_the_action():
    seen = {}
    spec = _spec(lambda run, x: seen.update(x=x), check=lambda x: {"x": int(x)},
                 params=({"name": "x", "long": "x", "default": "0"},))
    assert perform(spec, RUN, x="7") is None and seen == {"x": 7}


@pytest.mark.parametrize("spec, given, field", [
    (commands.HUNT, {"budget": -1.0}, "doit hunt --budget"),
    (commands.HUNT, {"budget": 0.0}, "doit hunt --budget"),
    (commands.HUNT, {"strategy": "random"}, "doit hunt --strategy"),
    (commands.HUNT, {"lanes": -2}, "doit hunt --lanes"),
    (commands.HUNT, {"flavors": "onnx_f64"}, "doit hunt --flavors"),
    (commands.HUNT, {"cases": -1}, "doit hunt --cases"),
    (commands.SHRINK, {"cases": ["conv_a"], "budget": -1.0}, "doit shrink --budget"),
    (commands.BUGREPORT, {"budget": -5.0}, "doit bugreport --budget"),
    (commands.COMPARE, {"old": "a", "new": "b", "noise_floor": -0.1}, "doit compare --noise-floor"),
    (commands.EXPORT_XFAILS, {"params": "sim sl2610"}, "doit export_xfails --params"),
    (commands.EXPORT_XFAILS, {"params": ""}, "doit export_xfails --params"),
    (commands.PRUNE_STORE, {"days": -1.0}, "doit prune_store --days"),
    (commands.PRUNE_STORE, {"max_gb": -1.0}, "doit prune_store --max-gb"),
])
def test_an_option_check_names_the_option_and_its_value(spec, given, field):
    options = _defaults(spec, **given)
    with pytest.raises(ConfigError) as err:
        spec.check(**options)
    name = field.rsplit("--", 1)[1].replace("-", "_")
    assert err.value.field == field and err.value.value == options.get(name, options.get(field.split()[-1]))
    assert str(err.value).startswith(f"{field}=")
    failed = perform(spec, RUN, **options)  # the same, as the task says it
    assert failed.message == f"conv-sweep: {err.value}"


def test_the_defaults_pass_every_option_check():
    given = {"compare": {"old": "a", "new": "b"}, "shrink": {"cases": ["conv_a"]}, "import_xfails": {"files": ["x"]},
             "bisect": {"subject": ["conv_a"], "versions": "3.9.0..3.13.0"}, "extract": {"model": ["m.tflite"]}}
    for spec in SPECS:
        if spec.check:
            spec.check(**_defaults(spec, **given.get(spec.name, {})))


@pytest.mark.parametrize("spec, given, said", [
    (commands.SHRINK, {"cases": []}, "doit shrink takes one case: doit shrink <case>@<target>"),
    (commands.SHRINK, {"cases": ["a", "b"]}, "doit shrink takes one case"),
    (commands.COMPARE, {"old": "a"}, "doit compare needs --old and --new"),
    (commands.IMPORT_XFAILS, {"files": []}, "doit import_xfails FILE: name one xfail file"),
    (commands.BISECT, {"subject": ["a"]}, "doit bisect takes one case or bucket and --versions FIRST..LAST"),
])
def test_wrong_arguments_say_what_the_command_takes(spec, given, said):
    with pytest.raises(ConfigError, match="^" + said):
        spec.check(**_defaults(spec, **given))


def test_options_after_the_positional_arguments_are_read_once_from_the_spec():
    given = _defaults(commands.BISECT, subject=["conv_a", "--target", "vmvx", "--versions=3.9.0..3.13.0"])
    assert options_after(commands.BISECT, given) == {"subject": ["conv_a"], "target": "vmvx",
                                                      "versions": "3.9.0..3.13.0"}
    before = _defaults(commands.BISECT, subject=["conv_a"], target="llvm-cpu")  # given before it: doit read it
    assert options_after(commands.BISECT, before)["target"] == "llvm-cpu"
    both = _defaults(commands.BISECT, subject=["conv_a", "--target", "vmvx"], target="llvm-cpu")
    assert options_after(commands.BISECT, both)["target"] == "vmvx"  # the later one
    typed = options_after(commands.SHRINK, _defaults(commands.SHRINK, cases=["conv_a", "--budget", "60", "--keep-data"]))
    assert typed == {"cases": ["conv_a"], "budget": 60.0, "keep_data": True}
    ended = options_after(commands.BUGREPORT, _defaults(commands.BUGREPORT, buckets=["--", "--budget"]))
    assert ended["buckets"] == ["--budget"] and ended["budget"] == 300  # after --, words are arguments


def test_a_wrong_option_after_the_positional_arguments_is_named():
    with pytest.raises(ConfigError, match=r"^doit bisect: option --bogus not recognized \(`doit help bisect`"):
        options_after(commands.BISECT, _defaults(commands.BISECT, subject=["conv_a", "--bogus"]))
    with pytest.raises(ConfigError) as err:
        options_after(commands.SHRINK, _defaults(commands.SHRINK, cases=["conv_a", "--budget", "soon"]))
    assert (err.value.field, err.value.value) == ("doit shrink --budget", "soon")
    failed = perform(commands.BISECT, RUN, **_defaults(commands.BISECT, subject=["conv_a", "--bogus"]))
    assert failed.message.startswith("conv-sweep: doit bisect: option --bogus not recognized")
