"""Task selection that forgives: a case's name as the report prints it selects that case on
every selected target, and a pattern that matches no task or a misspelt name stops the command,
naming it and the closest task names."""
import fnmatch
import json

import pytest
from doit.exceptions import InvalidCommand

from pipeline.engine import selection

from helpers import clean_env, doit, write_spec
from test_dodo import IDS, SMALL

NAMES = ["model:conv_onnx_f32_a", "mlir:conv_onnx_f32_a", "vmfb:conv_onnx_f32_a@llvm-cpu", "vmfb:conv_onnx_f32_a@vmvx",
         "verify:conv_onnx_f32_a@llvm-cpu", "verify:conv_onnx_f32_a@vmvx", "verify:conv_onnx_f32_ab@vmvx"]


def _wild(pattern):
    return [n for n in NAMES if fnmatch.fnmatch(n, pattern)]


def test_a_case_name_selects_the_case_on_every_target():
    assert selection.expand(["verify:conv_onnx_f32_a"], NAMES, _wild) == \
        ["verify:conv_onnx_f32_a@llvm-cpu", "verify:conv_onnx_f32_a@vmvx"]  # not conv_onnx_f32_ab
    assert selection.expand(["vmfb:conv_onnx_f32_a", "-x"], NAMES, _wild) == \
        ["vmfb:conv_onnx_f32_a@llvm-cpu", "vmfb:conv_onnx_f32_a@vmvx", "-x"]
    same = ["verify:conv_onnx_f32_a@vmvx", "model:conv_onnx_f32_a", "verify", "sweep", "build/a.npy"]
    assert selection.expand(same, NAMES, _wild) == same  # full names, shared stages; the rest: doit's


def test_a_pattern_is_matched_once_into_the_names_it_selects():
    matched = []
    wild = lambda pattern: matched.append(pattern) or _wild(pattern)  # noqa: E731
    assert selection.expand(["verify:conv_*", "sweep"], NAMES, wild) == \
        ["verify:conv_onnx_f32_a@llvm-cpu", "verify:conv_onnx_f32_a@vmvx", "verify:conv_onnx_f32_ab@vmvx", "sweep"]
    assert matched == ["verify:conv_*"]  # doit and the run command read the names


def test_a_name_under_a_task_that_is_no_task_is_an_error_naming_the_closest():
    with pytest.raises(InvalidCommand, match=r'^"verify:conv_onnx_f32_b" is not a task; did you mean '
                                             r"verify:conv_onnx_f32_ab@vmvx, verify:conv_onnx_f32_a@vmvx, "
                                             r"verify:conv_onnx_f32_a@llvm-cpu\? \(`doit list --all` lists them\)$"):
        selection.expand(["verify:conv_onnx_f32_b"], NAMES, _wild)
    with pytest.raises(InvalidCommand, match=r'^"vmfb:conv_onnx_f32_a@llvm" is not a task; did you mean '
                                             r"vmfb:conv_onnx_f32_a@llvm-cpu\? \(`doit list --all` lists them\)$"):
        selection.expand(["vmfb:conv_onnx_f32_a@llvm"], NAMES, _wild)  # a target's name cut short
    with pytest.raises(InvalidCommand, match=r'^"mlir:conv_onnx_f23_a" is not a task; did you mean mlir:conv_onnx_f32_a\?'):
        selection.expand(["mlir:conv_onnx_f23_a"], NAMES, _wild)  # a shared stage's case
    with pytest.raises(InvalidCommand, match=r'^"verify:xyz" is not a task \(`doit list --all` lists them\)$'):
        selection.expand(["verify:xyz"], NAMES, _wild)  # nothing close: no guess


def test_suggestions_rank_by_the_literal_parts_typed_then_the_common_start():
    geometries = ["w52_h44_f512_k4_c256_s4x4_pvalid", "w35_h44_f512_k4_c256_s4x4_pvalid",
                  "w56_h44_f512_k4_c256_s4x4_pvalid", "w51_h44_f512_k4_c256_s4x4_pvalid", "w51_h12_f8_k4_c16_r1"]
    names = [f"{stage}:conv_tflite_f32_{g}@torq" for stage in ("vmfb", "verify") for g in geometries]
    wild = lambda pattern: fnmatch.filter(names, pattern)  # noqa: E731
    near = selection.closest("verify:conv_tflite_f32_w51*pvalidx*", names, wild)
    assert near[0] == "verify:conv_tflite_f32_w51_h44_f512_k4_c256_s4x4_pvalid@torq"
    assert near[1] == "verify:conv_tflite_f32_w51_h12_f8_k4_c16_r1@torq"  # the w51 prefix typed, then the rest
    assert all(n.startswith("verify:") for n in near)  # the stage typed
    # more of the parts typed, in order, before a longer common start
    assert selection.closest("verify:conv_tflite_f32_w5*c16*", names, wild)[0] == \
        "verify:conv_tflite_f32_w51_h12_f8_k4_c16_r1@torq"
    assert "verify:conv_tflite_f32_w51_h12_f8_k4_c16_r1@torq" not in \
        selection.closest("verify:conv_tflite_f32_w5*pvalid*", names, wild)  # holds one part of two


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


def test_through_doit_a_misspelt_case_stops_before_any_task_naming_the_case(tmp_path):
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", SMALL), CONV_SWEEP_N=0,
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="llvm-cpu,vmvx")
    typo = f"verify:conv_onnx_f23_{IDS[1]}"
    run = doit(typo, env=env, timeout=120)
    assert run.returncode != 0
    line, = run.stderr.splitlines()
    assert f'"{typo}" is not a task; did you mean verify:conv_onnx_f32_{IDS[1]}@' in line, line
    assert f"verify:conv_onnx_f32_{IDS[1]}@llvm-cpu" in line and f"verify:conv_onnx_f32_{IDS[1]}@vmvx" in line, line
    assert not (tmp_path / "build" / "cases").exists()


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
