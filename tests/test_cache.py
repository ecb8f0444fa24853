"""What invalidates what: exact task counts from doit's own JSON report, through the real
doit command, on five tiny categories. The tests run in order on one build folder."""
import hashlib
import stat

import pytest

from pipeline.core.chain import TASKS

from helpers import by_stage, clean_env, doit, executed, real_compiler, results, tiny_categories, write_categories

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
    modules = sorted((sweep["tmp"] / "build").glob("cases/*/llvm-cpu/model.vmfb"))
    before = {p: _md5(p) for p in modules}
    ran = sweep["run"](CONV_SWEEP_COMPILE_FLAGS=FLAGS)
    counts = by_stage(ran)
    assert counts["model"] == 0 and counts["mlir"] == 0
    assert counts["vmfb"] == 25
    differ = sum(_md5(p) != digest for p, digest in before.items())
    assert len(before) == 25 and differ > 0
    assert counts["verify"] == differ  # exactly where the new module's bytes differ
    assert sweep["run"]() == []


def test_another_compiler_executable_reruns_the_compile_stage(sweep):
    wrapper = sweep["tmp"] / "my-iree-compile"
    wrapper.write_text(f'#!/bin/sh\nexec {real_compiler()} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    counts = by_stage(sweep["run"](CONV_SWEEP_IREE_COMPILE=wrapper))
    assert counts == {"model": 0, "mlir": 0, "vmfb": 25, "verify": 0}  # same compiler, same bytes


def test_raising_n_runs_only_the_new_geometries(sweep):
    before = set(results(sweep["tmp"] / "build"))
    ran = sweep["run"](CONV_SWEEP_N=2)
    assert by_stage(ran) == {"model": 25, "mlir": 25, "vmfb": 25, "verify": 25}  # 5 geometries x 5 flavors
    assert not {name.split(":")[1].split("@")[0] for name in ran} & before


def test_changing_one_category_reruns_only_its_cases(sweep):
    old = {name for name, r in results(sweep["tmp"] / "build").items() if r["category"] == "t1"}
    write_categories(sweep["spec"], tiny_categories(t1={"seed": 999}))
    ran = sweep["run"]()
    assert ran, "the changed category produced no new tasks"
    cases = {name.split(":")[1].split("@")[0] for name in ran}
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
    located = {"model.vmfb": "llvm-cpu/model.vmfb"}  # the module is the target's, the rest shared
    plan = []
    for artifact, stage, consumer, damage in DAMAGE:
        case = next(p for p in free if (p / located.get(artifact, artifact)).exists())
        free.remove(case)
        path = case / located.get(artifact, artifact)
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
        assert _task(stage, case) in ran, (path, sorted(ran))
        expected.add(_task(stage, case))
        if _md5(path) != original:  # consumers re-run only if the rebuilt bytes differ
            expected |= {_task(s, case) for s in STAGES[STAGES.index(consumer):]}
    assert ran == expected
    assert sweep["run"]() == []


STAGES = TASKS


def _task(stage, case):
    """model: and mlir: are shared by a model's cases on every target; vmfb: and verify: are per target."""
    return f"{stage}:{case}@llvm-cpu" if stage in ("vmfb", "verify") else f"{stage}:{case}"


def test_switching_targets_shares_models_and_keeps_both_results(sweep):
    """A torq sweep of the same cases builds no model or MLIR; switching back to llvm-cpu runs
    nothing; each target keeps its results, report and expected-failures list."""
    # torq with its own compiler and flags; the llvm-cpu knobs of the tests above stay for the switch back
    env = {k: v for k, v in sweep["env"].items() if k not in ("CONV_SWEEP_IREE_COMPILE", "CONV_SWEEP_COMPILE_FLAGS")}
    env["CONV_SWEEP_TARGET"] = "torq"
    torq = doit("-n", "2", "-r", "json", "sweep", env=env)
    ran = executed(torq)
    counts = by_stage(ran)
    assert counts["model"] == 0 and counts["mlir"] == 0, sorted(ran)
    assert counts["vmfb"] == 50  # N=2: 10 geometries x 5 flavors
    assert all(name.endswith("@torq") for name in ran)
    assert sweep["run"]() == []  # back on llvm-cpu: everything is up to date
    build = sweep["tmp"] / "build"
    on_torq, on_cpu = results(build, "torq"), results(build, "llvm-cpu")
    assert len(on_torq) == 50 and set(on_torq) <= set(on_cpu)
    assert all(r["target"] == "torq" for r in on_torq.values())
    assert all(r["status"] in ("pass", "error", "fail") for r in on_torq.values())
    assert sum(r["status"] == "pass" for r in on_torq.values()) > 0
    for target in ("llvm-cpu", "torq"):
        assert (build / "report" / target / "results.json").is_file()
    assert (torq.returncode == 0) == all(r["status"] == "pass" for r in on_torq.values())
