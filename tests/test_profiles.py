import json

import pytest

from pipeline.core.errors import ConfigError
from pipeline.targets.profiles import DEFAULT_TARGET, load_profiles, select

# The compile command llvm-cpu had before targets were profiles: it must stay byte for byte (the
# compiler's own checks on: no --verify=false, docs/targets.md).
LLVM_CPU_FLAGS = ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                  "--iree-llvmcpu-target-cpu=host", "--mlir-disable-threading")
# flags that switch off a compiler's own checks: no built-in profile passes one
CHECKS_OFF = ("--verify=false", "--verify-each=false", "--mlir-disable-verifier", "--disable-verify",
              "--no-verify", "--disable-assertions")


def test_no_builtin_profile_switches_off_a_compiler_check():
    for profile in load_profiles().values():
        flags = {flag for variant in profile.flavors for flag in profile.flags_for(variant)}
        assert not flags & set(CHECKS_OFF), profile.name
        assert not any("verif" in flag and flag.endswith(("=false", "=0")) for flag in flags), profile.name


@pytest.mark.slow
def test_the_verifier_refuses_the_fold_unit_extent_dims_geometries(tmp_path):
    """IREE 3.13.0's verifier refuses ONNX convs with one output column and unused trailing input
    (1 x 9 kernel, stride 9, width 10, 16, 17): compile failures in their own bucket, listed as
    expected on llvm-cpu and vmvx, in both ONNX flavors. Width 18 (two columns) and the TFLite
    models of the same geometries compile and pass."""
    from helpers import clean_env, doit, results, write_spec

    geometries = [{"category": "fold", "rank": 2, "spatial": [1, w], "kernel": [1, 9], "stride": [1, 9], "c_in": 1,
                   "c_out": 1} for w in (10, 16, 17, 18)]
    env = clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", geometries),
                    CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="llvm-cpu")
    run = doit("-n", "2", "sweep", env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    got = results(tmp_path / "build")
    for name, result in got.items():
        refused = name.startswith("conv_onnx_") and "_w18_" not in name
        if refused:
            assert (result["status"], result["stage"]) == ("xfail", "compile"), name
            assert "op inferred input/output operand #1 has shape's dimension #0 to be" in result["reason"], name
        else:
            assert result["status"] == "pass", (name, result["reason"])
    assert sum(r["status"] == "xfail" for r in got.values()) == 6 and len(got) == 20


def test_builtin_profiles():
    profiles = load_profiles()
    assert {"llvm-cpu", "vmvx", "torq"} <= set(profiles)
    assert DEFAULT_TARGET == "llvm-cpu"
    llvm = profiles["llvm-cpu"]
    assert llvm.flags_for("onnx_bf16") == LLVM_CPU_FLAGS and llvm.runner == "iree-run-module"
    assert llvm.run_flags == ("--device=local-sync",) and llvm.toolchain is None
    vmvx = profiles["vmvx"]  # inherits everything but the flags from llvm-cpu
    assert "--iree-hal-local-target-device-backends=vmvx" in vmvx.flags and vmvx.runner == llvm.runner
    torq = profiles["torq"]
    assert torq.toolchain == "torq" and torq.compiler == "torq-compile" and torq.mlir == "bytecode"
    assert torq.flags_for("tflite_f32")[-2:] == ("--torq-convert-dtypes", "--torq-convert-io-dtype")
    assert "--torq-convert-dtypes" not in torq.flags_for("tflite_w8i8")
    assert torq.function("onnx") == "main_graph" and torq.function("tflite") == "main"
    # torq-compile writes the same module twice only with address-space randomization off
    assert torq.fixed_addresses and not llvm.fixed_addresses and not vmvx.fixed_addresses
    assert all(p.compile_only == () for p in profiles.values())  # every built-in flavor is numeric
    # CPU modules are timed by iree-benchmark-module; torq's time is its compiler's estimate
    assert llvm.benchmark_tool == vmvx.benchmark_tool == "iree-benchmark-module" and torq.benchmark_tool is None


def test_each_builtin_profile_names_the_tracker_of_its_tools():
    profiles = load_profiles()
    assert profiles["torq"].tracker == "https://github.com/synaptics-torq/torq-compiler/issues"
    assert profiles["llvm-cpu"].tracker == profiles["vmvx"].tracker == "https://github.com/iree-org/iree/issues"
    # where bugs are filed changes no result: the profile's dict that task keys are made of leaves it out
    assert all("tracker" not in p.to_dict() for p in profiles.values())


def test_user_file_overrides_and_adds_profiles(tmp_path):
    user = tmp_path / "targets.json"
    user.write_text(json.dumps({"targets": {
        "llvm-cpu": {"run_flags": ["--device=local-task"]},
        "znver4": {"base": "llvm-cpu", "doc": "cross-compiled", "flags": ["--iree-llvmcpu-target-cpu=znver4"]},
    }}))
    profiles = load_profiles(user)
    assert profiles["llvm-cpu"].run_flags == ("--device=local-task",)
    assert profiles["llvm-cpu"].flags == LLVM_CPU_FLAGS  # fields not named stay
    assert profiles["znver4"].flags == ("--iree-llvmcpu-target-cpu=znver4",)
    assert profiles["znver4"].run_flags == ("--device=local-task",)  # inherits the overridden base
    assert [p.name for p in select("znver4, llvm-cpu", profiles)] == ["znver4", "llvm-cpu"]


@pytest.mark.parametrize("profile, field", [
    ({"base": "llvm-cpu", "flags": "--one-string"}, "flags"),
    ({"base": "llvm-cpu", "io": "hdf5"}, "io"),
    ({"base": "llvm-cpu", "flavors": ["onnx_int4"]}, "flavors"),
    ({"base": "llvm-cpu", "colour": "red"}, "colour"),
    ({"base": "nowhere"}, "base"),
    ({"doc": "no compiler"}, "compiler"),
    ({"base": "llvm-cpu", "profiling": ["--dump"]}, "profiling"),
    ({"base": "llvm-cpu", "benchmark_tool": ["iree-benchmark-module"]}, "benchmark_tool"),
    ({"base": "llvm-cpu", "fixed_addresses": "yes"}, "fixed_addresses"),
    ({"base": "llvm-cpu", "accumulation": "f16"}, "accumulation"),
    ({"base": "llvm-cpu", "accumulation": "bf16", "accumulation_tile": 0}, "accumulation_tile"),
    ({"base": "llvm-cpu", "tracker": "github.com/iree-org/iree/issues"}, "tracker"),
])
def test_bad_profile_names_file_and_field(tmp_path, profile, field):
    user = tmp_path / "targets.json"
    user.write_text(json.dumps({"targets": {"mine": profile}}))
    with pytest.raises(ConfigError) as err:
        load_profiles(user)
    assert err.value.field.startswith(f"CONV_SWEEP_TARGETS_FILE ({user}).targets.mine.{field}")


def test_selection_is_checked():
    profiles = load_profiles()
    assert [p.name for p in select("", profiles)] == ["llvm-cpu"]
    with pytest.raises(ConfigError, match="CONV_SWEEP_TARGET='gpu'"):
        select("gpu", profiles)
