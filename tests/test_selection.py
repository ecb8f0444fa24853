"""Task selection that forgives: a case's name as the report prints it selects that case on
every selected target, and a pattern that matches no task stops the command, naming it."""
import json

import pytest
from doit.exceptions import InvalidCommand

from pipeline.engine import selection

from helpers import clean_env, doit, write_spec
from test_dodo import IDS, SMALL

NAMES = ["model:conv_onnx_f32_a", "mlir:conv_onnx_f32_a", "vmfb:conv_onnx_f32_a@llvm-cpu", "vmfb:conv_onnx_f32_a@vmvx",
         "verify:conv_onnx_f32_a@llvm-cpu", "verify:conv_onnx_f32_a@vmvx", "verify:conv_onnx_f32_ab@vmvx"]


def _wild(pattern):
    import fnmatch

    return [n for n in NAMES if fnmatch.fnmatch(n, pattern)]


def test_a_case_name_selects_the_case_on_every_target():
    assert selection.expand(["verify:conv_onnx_f32_a"], NAMES, _wild) == \
        ["verify:conv_onnx_f32_a@llvm-cpu", "verify:conv_onnx_f32_a@vmvx"]  # not conv_onnx_f32_ab
    assert selection.expand(["vmfb:conv_onnx_f32_a", "-x"], NAMES, _wild) == \
        ["vmfb:conv_onnx_f32_a@llvm-cpu", "vmfb:conv_onnx_f32_a@vmvx", "-x"]
    same = ["verify:conv_onnx_f32_a@vmvx", "model:conv_onnx_f32_a", "verify:nothing", "verify:conv_*"]
    assert selection.expand(same, NAMES, _wild) == same  # full names, shared stages, the unknown: doit's


def test_a_pattern_matching_nothing_is_an_error_naming_it():
    with pytest.raises(InvalidCommand, match=r'"verify:conv_\*_a" matches no task; a pattern matches whole task '
                                             r"names: end it with \* to match a prefix"):
        selection.expand(["verify:conv_*_a"], NAMES, _wild)
    with pytest.raises(InvalidCommand, match=r'"verify:conv_tflite\*" matches no task; did you mean verify:conv_onnx'):
        selection.expand(["verify:conv_tflite*"], NAMES, _wild)
    with pytest.raises(InvalidCommand, match=r"did you mean verify:conv_onnx_f32_a@llvm-cpu, verify:conv_onnx_f32_a@vmvx"):
        selection.expand(["verify:conv_*_a"], NAMES, _wild)  # the closest: what a trailing * matches


def test_what_follows_a_task_with_positional_arguments_is_its_own():
    args = ["bugreport", "verify:conv_*_a", "verify:conv_onnx_f32_a"]
    assert selection.expand(args, NAMES, _wild, frozenset({"bugreport"})) == args


@pytest.mark.slow
def test_through_doit_a_case_name_runs_on_each_target_and_an_empty_pattern_fails(tmp_path):
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", SMALL), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="llvm-cpu,vmvx")
    case = f"conv_onnx_f32_{IDS[1]}"
    run = doit("-r", "json", f"verify:{case}", env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    started = sorted(t["name"] for t in json.loads(run.stdout)["tasks"] if t["started"])
    assert started == sorted([f"model:{case}", f"mlir:{case}", f"vmfb:{case}@llvm-cpu", f"vmfb:{case}@vmvx",
                              f"verify:{case}@llvm-cpu", f"verify:{case}@vmvx"])
    empty = doit(f"verify:conv_*_{IDS[1]}", env=env)  # no trailing *: the names end in @<target>
    assert empty.returncode != 0
    assert f'"verify:conv_*_{IDS[1]}" matches no task; a pattern matches whole task names' in empty.stderr
