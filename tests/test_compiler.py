import hashlib
import zipfile

import numpy as np
import pytest

from pipeline.targets.compiler import PROFILE, check_vmfb, compile_mlir, estimated_time
from pipeline.core.errors import StageError


def test_check_vmfb_rejects_empty_and_invalid(tmp_path):
    empty = tmp_path / "empty.vmfb"
    empty.write_bytes(b"")
    with pytest.raises(StageError, match="empty or missing"):
        check_vmfb(empty, "cc")
    junk = tmp_path / "junk.vmfb"
    junk.write_bytes(b"not a zip")
    with pytest.raises(StageError, match="invalid .vmfb"):
        check_vmfb(junk, "cc")
    with zipfile.ZipFile(tmp_path / "fake.vmfb", "w") as z:
        z.writestr("module.fb", b"\0" * 16)
    with pytest.raises(StageError, match="no IREE module identifier"):
        check_vmfb(tmp_path / "fake.vmfb", "cc")


def test_estimated_time_is_the_timeline_span(tmp_path):
    csv = tmp_path / "p.csv"
    csv.write_text("taskId, elapsed_time(us), timestamp(us), event, location, bytes\n"
                   "0,135,10,DMA In,loc(unknown),640\n1,43,145,DMA In,loc(unknown),204\n4,800,100,Slice 0,x,0\n")
    assert estimated_time(csv) == 900 - 10
    assert estimated_time(tmp_path / "missing.csv") is None


@pytest.mark.slow
def test_torq_profiling_leaves_the_module_unchanged(tmp_path):
    """torq-compile's profiling flags write the estimated timeline in the same compile: the
    module computes the same output as one compiled without them (started with address-space
    randomization on, as here, its bytes vary by a few from any compile to the next, profiling
    or not), so no second compile is needed."""
    from helpers import clean_env
    from pipeline.run import stages
    from pipeline.space.cases import Case
    from pipeline.config import Config
    from pipeline.space.geometry import Geometry
    from pipeline.targets.runner import run_vmfb
    from pipeline.targets.signature import read

    cfg = Config.from_env(clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="torq"))
    target = cfg.targets[0]
    case = Case(Geometry(2, (12, 10), (3, 3), (1, 1), 16, 8), "tflite", "w8i8", target="torq")
    assert stages.model([case], cfg) is None and stages.mlir([case], cfg) is None
    mlir = cfg.model_dir(case) / cfg.mlir_input(case)
    outputs, sizes = [], []
    for name, profiling in (("plain", ()), ("profiled", target.profile.profiling)):
        folder = tmp_path / name
        folder.mkdir()
        compile_mlir(mlir, folder / "model.vmfb", compiler=target.compiler, flags=target.compile_flags(case.variant),
                     timeout=300, log=folder / "compile.log", profiling=profiling)
        assert (folder / PROFILE).is_file() == bool(profiling)
        sig = read(target.dump_tool, folder / "model.vmfb", mlir, "main", stage="run", timeout=60,
                   log=folder / "run.log")
        actual, _ = run_vmfb(target.runner, target.profile.run_flags, folder / "model.vmfb", sig,
                             [cfg.model_dir(case) / "input.npy"], "npy", timeout=300, log=folder / "run.log")
        outputs.append(actual)
        sizes.append((folder / "model.vmfb").stat().st_size)
    assert sizes[0] == sizes[1]
    assert np.array_equal(outputs[0], outputs[1])
    assert estimated_time(tmp_path / "profiled" / PROFILE) > 0


@pytest.mark.slow
def test_torq_fixed_addresses_write_the_same_module_in_any_folder(tmp_path, monkeypatch):
    """With address-space randomization off (the torq profile's fixed_addresses), torq-compile
    writes the same bytes for the same command in build folders at different paths and under
    another environment: the module and the failure a case gets do not vary from one compile to
    the next (without it, 10 compiles of one case gave 6 different modules)."""
    import shutil

    from helpers import clean_env
    from pipeline.run import stages
    from pipeline.space.cases import Case
    from pipeline.config import Config
    from pipeline.space.geometry import Geometry

    cfg = Config.from_env(clean_env(CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="torq"))
    target = cfg.targets[0]
    assert target.compile_launch[0] == "setarch" and target.compile_launch[-1] == "-R"
    case = Case(Geometry(2, (20, 14), (3, 3), (1, 1), 32, 16), "tflite", "w8i8", target="torq")
    assert stages.model([case], cfg) is None and stages.mlir([case], cfg) is None
    mlir = cfg.model_dir(case) / cfg.mlir_input(case)
    digests = []
    for i, folder in enumerate((tmp_path / "a", tmp_path / "a-much-longer-folder" / "deeper" / "still")):
        for run in range(2):
            if run:
                monkeypatch.setenv("CONV_SWEEP_SOMETHING_ELSE", "x" * (1000 * (i + 1)))
            case_dir = folder / f"run{run}" / case.name
            case_dir.mkdir(parents=True)
            shutil.copy(mlir, case_dir / mlir.name)  # read as ../model.mlirbc, as the sweep does
            vmfb = case_dir / "torq" / "model.vmfb"
            compile_mlir(case_dir / mlir.name, vmfb, compiler=target.compiler, flags=target.compile_flags(case.variant),
                         timeout=300, log=case_dir / "torq" / "compile.log", launch=target.compile_launch)
            assert (case_dir / "torq" / "compile.log").read_text().startswith(f"$ {' '.join(target.compile_launch)} ")
            digests.append(hashlib.sha256(vmfb.read_bytes()).hexdigest())
    assert len(digests) == 4 and len(set(digests)) == 1
