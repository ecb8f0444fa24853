import os

import pytest

from pipeline.config import Config
from pipeline.core.errors import ConfigError


def test_defaults(tmp_path):
    cfg = Config.from_env({}, default_build_dir=tmp_path)
    assert cfg.n == 50 and cfg.build_dir == tmp_path and cfg.compile_flags == ()
    assert [t.name for t in cfg.targets] == ["llvm-cpu"]
    assert os.path.basename(cfg.targets[0].compiler) == "iree-compile"
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
    ({"CONV_SWEEP_TARGET": "gpu"}, "CONV_SWEEP_TARGET"),
    ({"CONV_SWEEP_TARGET": "vmvx,vmvx"}, "CONV_SWEEP_TARGET"),
    ({"CONV_SWEEP_TARGET": "llvm-cpu,vmvx", "CONV_SWEEP_EXPECTED_FAILURES": "x.json"}, "CONV_SWEEP_EXPECTED_FAILURES"),
    ({"CONV_SWEEP_TARGETS_FILE": "/no/such/targets.json"}, "CONV_SWEEP_TARGETS_FILE"),
    ({"CONV_SWEEP_TIMEOUTS": "sometimes"}, "CONV_SWEEP_TIMEOUTS"),
    ({"CONV_SWEEP_CACHE_DIR": "/dev/null/store"}, "CONV_SWEEP_CACHE_DIR"),
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


def test_the_store_defaults_to_the_user_cache_and_can_be_turned_off(tmp_path):
    base = {"CONV_SWEEP_BUILD_DIR": str(tmp_path / "b"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert Config.from_env(base).cache_dir == tmp_path / "cache" / "conv-sweep" / "store"
    assert Config.from_env({**base, "CONV_SWEEP_CACHE_DIR": "off"}).store() is None
    assert Config.from_env({**base, "CONV_SWEEP_CACHE_DIR": "s"}, base_dir=tmp_path).cache_dir == tmp_path / "s"
    assert not (tmp_path / "cache").exists()  # made by the first stage that stores, not by configuration


def test_several_targets_share_the_geometries(tmp_path):
    cfg = Config.from_env({"CONV_SWEEP_N": "1", "CONV_SWEEP_BUILD_DIR": str(tmp_path), "CONV_SWEEP_TARGET": "vmvx,llvm-cpu"})
    cases = cfg.cases()
    assert [t.name for t in cfg.targets] == ["vmvx", "llvm-cpu"]
    assert len(cases) == 50 and len({c.key for c in cases}) == 50 and len({c.name for c in cases}) == 25
    case = cases[0]
    assert cfg.case_dir(case) == cfg.model_dir(case) / "vmvx"
    assert cfg.target("vmvx").compile_flags(case.variant)[:2] == ("--iree-hal-target-device=local",
                                                                    "--iree-hal-local-target-device-backends=vmvx")


def test_compiler_override_applies_to_the_selected_target(tmp_path):
    fake = tmp_path / "my-compile"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    cfg = Config.from_env({"CONV_SWEEP_BUILD_DIR": str(tmp_path), "CONV_SWEEP_TARGET": "vmvx",
                           "CONV_SWEEP_IREE_COMPILE": str(fake), "CONV_SWEEP_COMPILE_FLAGS": "--extra"})
    target = cfg.targets[0]
    assert target.compiler == str(fake)
    assert target.compile_flags("tflite_f32")[-1] == "--extra"
    assert "--iree-hal-local-target-device-backends=vmvx" in target.compile_flags("tflite_f32")


def test_scratch_is_the_run_building_elsewhere_in_this_process(tmp_path):
    from dataclasses import replace

    cfg = Config.from_env({"CONV_SWEEP_BUILD_DIR": str(tmp_path / "b"), "CONV_SWEEP_SCHEDULER": "local:2",
                           "CONV_SWEEP_SHARD": "1/2"})
    scratch = cfg.scratch(str(tmp_path / "s"))
    assert (scratch.build_dir, scratch.scheduler, scratch.shard) == (tmp_path / "s", None, None)
    assert replace(scratch, build_dir=cfg.build_dir, scheduler=cfg.scheduler, shard=cfg.shard) == cfg


def test_another_release_is_the_target_its_name_selects(tmp_path):
    from pipeline.targets.profiles import pinned_version

    fake = tmp_path / "my-compile"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    env = {"CONV_SWEEP_BUILD_DIR": str(tmp_path / "b"), "CONV_SWEEP_TARGET": "vmvx,llvm-cpu",
           "CONV_SWEEP_COMPILE_FLAGS": "--extra", "CONV_SWEEP_TOOLCHAIN_DIR": str(tmp_path / "toolchains"),
           "CONV_SWEEP_N": "1"}
    cfg = Config.from_env(env)
    pinned = cfg.at_version("llvm-cpu", pinned_version("iree"))  # the pinned release is the bare profile
    assert pinned.targets == (cfg.target("llvm-cpu"),) and pinned.build_dir == cfg.build_dir
    assert [c.key for c in pinned.cases()] == [c.key for c in cfg.cases() if c.target == "llvm-cpu"]
    # a release not installed: the error that selecting it by name gives, naming the install command
    with pytest.raises(ConfigError) as err:
        cfg.at_version("llvm-cpu", "3.12.0")
    with pytest.raises(ConfigError) as named:
        Config.from_env({**env, "CONV_SWEEP_TARGET": "llvm-cpu@3.12.0"})
    assert str(err.value) == str(named.value) and "doit toolchain" in str(err.value)
    with pytest.raises(ConfigError, match="must be <target>@<version>"):
        cfg.at_version("llvm-cpu", "latest")
    # the run's compiler replaces the release's where it replaces every target's; expected failures from a file
    listed = tmp_path / "listed.json"
    listed.write_text('{"expected_failures": [{"case": "conv_*", "stage": "compile", "bucket": "compile: x"}]}')
    replaced = Config.from_env({**env, "CONV_SWEEP_IREE_COMPILE": str(fake)})
    there = replaced.at_version("vmvx", pinned_version("iree"), expected_failures=listed).targets[0]
    assert there.compiler == str(fake) and there.extra_flags == ("--extra",)
    assert there.expected_path == listed and len(there.expectations) == 1


def test_torq_without_its_toolchain_names_the_install_command(tmp_path):
    with pytest.raises(ConfigError) as err:
        Config.from_env({"CONV_SWEEP_BUILD_DIR": str(tmp_path), "CONV_SWEEP_TARGET": "torq",
                         "CONV_SWEEP_TOOLCHAIN_DIR": str(tmp_path / "none")})
    assert err.value.field == "CONV_SWEEP_TARGET" and "doit toolchain" in str(err.value)


def test_build_folder_with_an_at_sign_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        Config.from_env({"CONV_SWEEP_BUILD_DIR": str(tmp_path / "runs@host")})
    assert err.value.field == "CONV_SWEEP_BUILD_DIR" and "must not contain '@'" in str(err.value)
    assert not (tmp_path / "runs@host").exists()


def test_a_budget_replaces_the_profiles_and_a_bad_one_is_named(tmp_path):
    from pipeline.config import Config, parse_budgets
    from pipeline.core.errors import ConfigError

    assert parse_budgets("") == ()
    assert parse_budgets("run=600, compile=3600") == (("compile", 3600.0), ("run", 600.0))
    for bad in ("compile", "link=5", "compile=0", "run=-1", "run=soon", "run=inf"):
        with pytest.raises(ConfigError) as err:
            parse_budgets(bad)
        assert err.value.field == "CONV_SWEEP_BUDGET"
    env = {"CONV_SWEEP_N": "1", "CONV_SWEEP_TARGET": "llvm-cpu", "CONV_SWEEP_CACHE_DIR": "off",
           "CONV_SWEEP_TIMEOUTS": "fixed"}
    cfg = Config.from_env(env, default_build_dir=tmp_path / "b", base_dir=tmp_path)
    case = cfg.cases()[0]
    assert cfg.limit(case, "compile").seconds == 600  # the profile's budget
    raised = Config.from_env({**env, "CONV_SWEEP_BUDGET": "compile=1800"}, default_build_dir=tmp_path / "b",
                             base_dir=tmp_path)
    assert raised.limit(case, "compile").seconds == 1800 and raised.limit(case, "run").seconds == 600
    capped = Config.from_env({**env, "CONV_SWEEP_BUDGET": "compile=1800", "CONV_SWEEP_TIMEOUT": "900"},
                             default_build_dir=tmp_path / "b", base_dir=tmp_path)
    assert capped.limit(case, "compile").seconds == 900  # CONV_SWEEP_TIMEOUT caps every limit


def test_a_variable_that_is_no_knob_is_refused_naming_the_closest_knob(tmp_path):
    for env, problem in [({"CONV_SWEEP_TARGT": "torq"}, "is not a knob; did you mean CONV_SWEEP_TARGET?"),
                         ({"CONV_SWEEP_build_dir": "b"}, "is not a knob; did you mean CONV_SWEEP_BUILD_DIR?"),
                         ({"CONV_SWEEP_COLOUR": "red"}, "is not a knob"),  # nothing close
                         ({"CONV_SWEEP_TIMOUT": "9", "CONV_SWEEP_N": "ten"}, "is not a knob; did you mean "
                                                                             "CONV_SWEEP_TIMEOUT?")]:  # before N
        with pytest.raises(ConfigError) as err:
            Config.from_env({"CONV_SWEEP_BUILD_DIR": str(tmp_path), **env})
        name = next(k for k in env if k != "CONV_SWEEP_N")
        assert (err.value.field, err.value.value) == (name, env[name])
        assert err.value.problem == f"{problem} (docs/knobs.md lists them)"
    assert Config.from_env({"CONV_SWEEP": "x", "CONV_SWEEPS_N": "x", "CONV_SWEEP_N": "1"}, tmp_path).n == 1


def test_the_declared_defaults_are_the_defaults(tmp_path):
    from pipeline.config import KNOBS, jobs

    default = {k.name: k.default for k in KNOBS}
    assert len(default) == len(KNOBS) and all(name.startswith("CONV_SWEEP_") for name in default)
    cfg = Config.from_env({"CONV_SWEEP_CACHE_DIR": "off"}, default_build_dir=tmp_path)
    assert cfg.n == int(default["CONV_SWEEP_N"]) and cfg.timeout == float(default["CONV_SWEEP_TIMEOUT"])
    assert [t.name for t in cfg.targets] == [default["CONV_SWEEP_TARGET"]]
    assert cfg.predicted_timeouts == (default["CONV_SWEEP_TIMEOUTS"] == "predicted")
    assert (cfg.progress_interval, cfg.order, jobs({})) == (float(default["CONV_SWEEP_PROGRESS_INTERVAL"]),
                                                            default["CONV_SWEEP_ORDER"], int(default["CONV_SWEEP_JOBS"]))
    set_ = Config.from_env({"CONV_SWEEP_CACHE_DIR": "off", "CONV_SWEEP_ORDER": "breadth",
                            "CONV_SWEEP_PROGRESS_INTERVAL": "0"}, default_build_dir=tmp_path)
    assert (set_.order, set_.progress_interval) == ("breadth", 0.0)
    assert cfg.artifacts == default["CONV_SWEEP_ARTIFACTS"] and cfg.benchmark == (default["CONV_SWEEP_BENCHMARK"] == "1")


def test_the_toolchain_s_config_reads_the_targets_alone(tmp_path):
    env = {"CONV_SWEEP_TARGET": "torq@2.2.1,llvm-cpu", "CONV_SWEEP_N": "ten", "CONV_SWEEP_BUILD_DIR": "/dev/null/b",
           "CONV_SWEEP_TOOLCHAIN_DIR": str(tmp_path / "tc")}  # a bad sweep knob is not its business
    cfg = Config.for_toolchain(env)
    assert [(p.name, p.toolchain, p.version) for p in cfg.profiles] == [("torq@2.2.1", "torq", "2.2.1"),
                                                                         ("llvm-cpu", None, None)]
    assert cfg.toolchain_dir == tmp_path / "tc" and cfg.targets == () and not (tmp_path / "tc").exists()
    assert Config.for_toolchain({"XDG_CACHE_HOME": str(tmp_path)}).toolchain_dir == \
        tmp_path / "conv-sweep" / "toolchain"
    for env, field in [({"CONV_SWEEP_TARGT": "torq"}, "CONV_SWEEP_TARGT"), ({"CONV_SWEEP_TARGET": "gpu"},
                                                                             "CONV_SWEEP_TARGET"),
                       ({"CONV_SWEEP_TARGETS_FILE": str(tmp_path / "none.json")}, "CONV_SWEEP_TARGETS_FILE")]:
        with pytest.raises(ConfigError) as err:
            Config.for_toolchain(env)
        assert err.value.field == field


def test_a_config_holds_its_selected_profiles_and_toolchain_folder(tmp_path):
    cfg = Config.from_env({"CONV_SWEEP_TARGET": "vmvx,llvm-cpu", "XDG_CACHE_HOME": str(tmp_path / "cache"),
                           "CONV_SWEEP_CACHE_DIR": "off"}, default_build_dir=tmp_path / "b")
    assert cfg.profiles == tuple(t.profile for t in cfg.targets)
    assert cfg.toolchain_dir == tmp_path / "cache" / "conv-sweep" / "toolchain"
