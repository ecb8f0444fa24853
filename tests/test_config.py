import os

import pytest

from pipeline.config import Config
from pipeline.errors import ConfigError


def test_defaults(tmp_path):
    cfg = Config.from_env({}, default_build_dir=tmp_path)
    assert cfg.n == 50 and cfg.build_dir == tmp_path and cfg.compile_flags == ()
    assert os.path.basename(cfg.iree_compile) == "iree-compile"
    assert len(cfg.cases()) == 1250


def test_knobs_are_read(tmp_path):
    cfg = Config.from_env({"CONV_SWEEP_N": "2", "CONV_SWEEP_BUILD_DIR": str(tmp_path / "b"),
                           "CONV_SWEEP_COMPILE_FLAGS": "--a='x y' --b", "CONV_SWEEP_TIMEOUT": "7.5"})
    assert cfg.n == 2 and cfg.build_dir == tmp_path / "b"
    assert cfg.compile_flags == ("--a=x y", "--b") and cfg.timeout == 7.5
    assert len(cfg.cases()) == 50


@pytest.mark.parametrize("env, field", [
    ({"CONV_SWEEP_N": "ten"}, "CONV_SWEEP_N"),
    ({"CONV_SWEEP_N": "-1"}, "CONV_SWEEP_N"),
    ({"CONV_SWEEP_TIMEOUT": "0"}, "CONV_SWEEP_TIMEOUT"),
    ({"CONV_SWEEP_IREE_COMPILE": "/no/such/iree-compile"}, "CONV_SWEEP_IREE_COMPILE"),
    ({"CONV_SWEEP_COMPILE_FLAGS": "--x='unclosed"}, "CONV_SWEEP_COMPILE_FLAGS"),
    ({"CONV_SWEEP_COMPILE_ONLY": "tflite_f16"}, "CONV_SWEEP_COMPILE_ONLY"),
    ({"CONV_SWEEP_SPEC": "/no/such/spec.json"}, "CONV_SWEEP_SPEC"),
])
def test_bad_knob_names_field_and_value(tmp_path, env, field):
    with pytest.raises(ConfigError) as err:
        Config.from_env({"CONV_SWEEP_BUILD_DIR": str(tmp_path), **env})
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}=")


def test_unwritable_build_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError) as err:
        Config.from_env({"CONV_SWEEP_BUILD_DIR": str(blocker / "build")})
    assert err.value.field == "CONV_SWEEP_BUILD_DIR" and "not a writable folder" in str(err.value)
