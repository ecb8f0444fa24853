"""What invalidates what: exact task counts from doit's own JSON report, through the real
doit command, on five tiny categories. The tests run in order on one build folder."""
import hashlib
import stat

import pytest

from helpers import by_stage, clean_env, doit, executed, results, tiny_categories, write_categories

pytestmark = pytest.mark.slow
FLAGS = "--iree-vm-bytecode-module-strip-source-map=true"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cache")
    spec = write_categories(tmp / "spec.json", tiny_categories())
    state = {"tmp": tmp, "spec": spec, "env": clean_env(CONV_SWEEP_SPEC=spec, CONV_SWEEP_N=1,
                                                         CONV_SWEEP_BUILD_DIR=tmp / "build")}

    def run(**knobs):
        state["env"].update({k: str(v) for k, v in knobs.items()})
        done = doit("-n", "2", "-r", "json", "sweep", env=state["env"])
        assert done.returncode == 0, done.stderr[-3000:]
        return executed(done)

    state["run"] = run
    first = run()
    assert by_stage(first) == {"model": 25, "mlir": 25, "vmfb": 25, "verify": 25}
    return state


def _md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_rerun_with_nothing_changed_executes_nothing(sweep):
    assert sweep["run"]() == []


def test_compile_flags_rerun_compile_and_verify_only(sweep):
    ran = sweep["run"](CONV_SWEEP_COMPILE_FLAGS=FLAGS)
    counts = by_stage(ran)
    assert counts["model"] == 0 and counts["mlir"] == 0
    assert counts["vmfb"] == 25
    assert counts["verify"] <= 25  # only where the new module's bytes differ
    assert sweep["run"]() == []


def test_another_compiler_executable_reruns_the_compile_stage(sweep):
    from pipeline.config import Config

    wrapper = sweep["tmp"] / "my-iree-compile"
    wrapper.write_text(f'#!/bin/sh\nexec {Config.from_env(clean_env()).iree_compile} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    counts = by_stage(sweep["run"](CONV_SWEEP_IREE_COMPILE=wrapper))
    assert counts == {"model": 0, "mlir": 0, "vmfb": 25, "verify": 0}  # same compiler, same bytes


def test_raising_n_runs_only_the_new_geometries(sweep):
    before = set(results(sweep["tmp"] / "build"))
    ran = sweep["run"](CONV_SWEEP_N=2)
    assert by_stage(ran) == {"model": 25, "mlir": 25, "vmfb": 25, "verify": 25}  # 5 geometries x 5 flavors
    assert not {name.split(":")[1] for name in ran} & before


def test_changing_one_category_reruns_only_its_cases(sweep):
    old = {name for name, r in results(sweep["tmp"] / "build").items() if r["category"] == "t1"}
    write_categories(sweep["spec"], tiny_categories(t1={"seed": 999}))
    ran = sweep["run"]()
    assert ran, "the changed category produced no new tasks"
    cases = {name.split(":")[1] for name in ran}
    built = results(sweep["tmp"] / "build")
    assert all(built[c]["category"] == "t1" for c in cases)
    assert not cases & old
    assert by_stage(ran) == {stage: len(cases) for stage in ("model", "mlir", "vmfb", "verify")}


DAMAGE = [(artifact, stage, consumer, damage)
          for artifact, stage, consumer in [("model.tflite", "model", "mlir"), ("model.onnx", "model", "mlir"),
                                            ("model.mlir", "mlir", "vmfb"), ("model.vmfb", "vmfb", "verify")]
          for damage in ("truncate", "edit", "delete")]


def test_damaged_artifacts_are_rebuilt_and_cascade_only_if_bytes_differ(sweep):
    """Each (artifact, damage) pair hits its own case; one run must repair all of them."""
    from pipeline.config import Config

    build = sweep["tmp"] / "build" / "cases"
    free = sorted(build / case.name for case in Config.from_env(sweep["env"]).cases())  # not stale folders
    plan = []
    for artifact, stage, consumer, damage in DAMAGE:
        case = next(p for p in free if (p / artifact).exists())
        free.remove(case)
        path = case / artifact
        plan.append((case.name, path, _md5(path), stage, consumer))
        if damage == "truncate":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        elif damage == "edit":
            path.write_bytes(path.read_bytes() + b"\n// edited by hand\n")
        else:
            path.unlink()
    ran = set(sweep["run"]())
    expected = set()
    for case, path, original, stage, consumer in plan:
        assert f"{stage}:{case}" in ran, (path, sorted(ran))
        expected.add(f"{stage}:{case}")
        if _md5(path) != original:  # consumers re-run only if the rebuilt bytes differ
            expected |= {f"{s}:{case}" for s in STAGES[STAGES.index(consumer):]}
    assert ran == expected
    assert sweep["run"]() == []


STAGES = ["model", "mlir", "vmfb", "verify"]
