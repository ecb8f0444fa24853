"""`doit toolchain`: installs the Torq tools outside the sources, once; a failed or killed
install leaves nothing that is trusted; another release installs beside it (shipped digests, or
recorded on its first install and held to after), and one that does not exist is named."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from helpers import DOIT, ROOT, clean_env, doit
from pipeline.config import toolchain_dir
from pipeline.targets import toolchain

pytestmark = pytest.mark.slow


def test_toolchain_command_is_idempotent():
    env = clean_env()
    first = doit("toolchain", env=env, timeout=1800)
    assert first.returncode == 0, first.stdout + first.stderr
    root = toolchain_dir(env)
    manifest = toolchain.install_dir(root) / toolchain.MANIFEST
    before = manifest.stat().st_mtime_ns
    again = doit("toolchain", env=env, timeout=600)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout + again.stderr
    assert manifest.stat().st_mtime_ns == before
    found = toolchain.manifest(root)
    assert {d: w["sha256"] for d, w in found["wheels"].items()} == {d: h for d, (_, h) in toolchain.WHEELS.items()}
    for name, launcher in found["tools"].items():
        started = subprocess.run([launcher, "--help"], capture_output=True, text=True, timeout=120)
        assert "error while loading shared libraries" not in started.stderr, (name, started.stderr)
    if toolchain.host_glibc() < toolchain.NEEDED_GLIBC:
        assert set(found["c_runtime"]) == set(toolchain.C_RUNTIME)


def test_failed_download_installs_nothing(tmp_path):
    env = clean_env(CONV_SWEEP_TOOLCHAIN_DIR=tmp_path / "tc", PIP_INDEX_URL="http://127.0.0.1:9/simple",
                    PIP_NO_CACHE_DIR="1", PIP_RETRIES="0", PIP_TIMEOUT="5")
    run = doit("toolchain", env=env, timeout=300)
    assert run.returncode != 0
    assert "the Torq toolchain was not installed" in run.stdout + run.stderr
    assert "pip download" in run.stdout + run.stderr
    assert sorted(p.name for p in (tmp_path / "tc").iterdir()) == []  # no install, no partial folder


def test_killed_install_leaves_nothing_trusted(tmp_path):
    env = clean_env(CONV_SWEEP_TOOLCHAIN_DIR=tmp_path / "tc")
    root = tmp_path / "tc"
    proc = subprocess.Popen([*DOIT, "toolchain"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # killed once the wheels are downloaded and being unpacked into the install's folder
        deadline = time.monotonic() + 1800
        while not list(root.glob(".*.partial.*/wheels")):
            assert proc.poll() is None, "the install ended before it could be killed"
            assert time.monotonic() < deadline, "the install never started unpacking"
            time.sleep(0.01)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the install and the tools it runs (pip, apt-get)
        except ProcessLookupError:
            pass
        proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed, not ended
    [partial] = root.glob(".*.partial.*")
    assert (partial / "wheels").is_dir() and not (partial / toolchain.MANIFEST).exists()  # half-installed
    assert toolchain.manifest(root) is None  # nothing half-installed is trusted
    run = doit("toolchain", env=env, timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    assert toolchain.manifest(root) is not None
    assert not list(root.glob(".*partial*"))  # the killed run's leftovers are gone


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    """One toolchain folder for the module: the pinned Torq release and torq 2.2.1 beside it,
    installed by `doit toolchain` (the pinned one always, 2.2.1 as CONV_SWEEP_TARGET selects it)."""
    root = tmp_path_factory.mktemp("releases")
    run = doit("toolchain", env=clean_env(CONV_SWEEP_TOOLCHAIN_DIR=root, CONV_SWEEP_TARGET="torq@2.2.1"), timeout=1800)
    assert run.returncode == 0, run.stdout + run.stderr
    return root


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_the_pinned_release_keeps_its_folder_name():
    # the same hashing of the same pins: an install made before versions existed is reused
    assert toolchain.install_dir(toolchain.default_root()).name == "torq-2.3.0-2ba559ef001a"
    assert toolchain.install_dir("/x", "torq", "2.3.0") == toolchain.install_dir("/x")


def test_a_second_torq_release_installs_beside_the_pinned_one_and_reads_the_importers(releases):
    old, pinned = toolchain.manifest(releases, kind="torq", version="2.2.1"), toolchain.manifest(releases)
    assert old and pinned and toolchain.install_dir(releases, "torq", "2.2.1") != toolchain.install_dir(releases)
    assert {w["version"] for w in old["wheels"].values()} == {"2.2.1"}
    assert {w["version"] for w in pinned["wheels"].values()} == {"2.3.0"}
    assert old["wheels"] != pinned["wheels"]
    # both say "IREE compiler version (unknown)", and torq-compile itself is the same driver in
    # both: the compiler that differs is the library it loads
    compilers = [folder / "wheels" / "iree/compiler/_mlir_libs/libIREECompiler.so"
                 for folder in (toolchain.install_dir(releases, "torq", "2.2.1"), toolchain.install_dir(releases))]
    assert _sha256(compilers[0]) != _sha256(compilers[1])
    for found in (old, pinned):
        started = subprocess.run([found["tools"]["torq-compile"], "--version"], capture_output=True, text=True,
                                 timeout=120)
        assert started.returncode == 0 and "LLVM version" in started.stdout, started.stdout + started.stderr
    assert set(old["reads"]) == {p.name for p in toolchain.PROBES.iterdir()}
    assert toolchain.reads(old, "tflite") == (True, "") and toolchain.reads(old, "onnx") == (True, "")
    assert not (releases / toolchain.DIGESTS).exists()  # shipped digests: nothing recorded


def test_a_manifest_from_before_the_probes_is_probed_once_and_stays_trusted(releases):
    path = toolchain.install_dir(releases) / toolchain.MANIFEST
    data = json.loads(path.read_text())
    del data["reads"], data["read_errors"]
    path.write_text(json.dumps(data))
    found = toolchain.manifest(releases)
    assert found is not None and toolchain.reads(found, "tflite") == (True, "")
    assert json.loads(path.read_text())["reads"] == found["reads"]  # written back
    before = path.stat().st_mtime_ns
    assert toolchain.manifest(releases) == found and path.stat().st_mtime_ns == before  # once


def test_a_stock_iree_release_compiles_for_llvm_cpu_and_reads_the_tflite_bytecode(releases, tmp_path):
    folder = toolchain.install(releases, out=open(os.devnull, "w"), kind="iree", version="3.12.0")
    found = toolchain.manifest(releases, kind="iree", version="3.12.0")
    assert found and folder == toolchain.install_dir(releases, "iree", "3.12.0") and found["c_runtime"] == {}
    assert toolchain.recorded(releases).get("iree", {}).get("3.12.0") is None  # shipped digests
    assert found["reads"]["tflite_w8i8.mlirbc"] and found["reads"]["tflite_f32.mlirbc"]
    assert toolchain.reads(found, "tflite") == (True, "") and toolchain.reads(found, "onnx") == (True, "")
    compiled = subprocess.run([found["tools"]["iree-compile"], str(toolchain.PROBES / "onnx_f32.mlir"),
                               "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                               "-o", str(tmp_path / "probe.vmfb")], capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0 and (tmp_path / "probe.vmfb").stat().st_size > 0, compiled.stderr[-2000:]


def test_a_release_without_shipped_digests_records_them_and_holds_later_installs_to_them(tmp_path):
    root = tmp_path / "tc"
    assert ("iree", "3.11.0") not in toolchain.PINS
    folder = toolchain.install(root, out=open(os.devnull, "w"), kind="iree", version="3.11.0")
    recorded = json.loads((root / toolchain.DIGESTS).read_text())["iree"]["3.11.0"]
    installed = toolchain.manifest(root, kind="iree", version="3.11.0")
    assert {d: r["sha256"] for d, r in recorded.items()} == {d: w["sha256"] for d, w in installed["wheels"].items()}
    assert set(installed["reads"]) == {p.name for p in toolchain.PROBES.iterdir()}
    compiled = subprocess.run([installed["tools"]["iree-compile"], str(toolchain.PROBES / "onnx_f32.mlir"),
                               "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                               "-o", str(tmp_path / "probe.vmfb")], capture_output=True, text=True, timeout=300)
    assert compiled.returncode == 0 and (tmp_path / "probe.vmfb").stat().st_size > 0, compiled.stderr[-2000:]
    # another wheel under the same release's name: the recorded digest refuses it
    shutil.rmtree(folder)
    recorded["iree-base-compiler"]["sha256"] = "0" * 64
    (root / toolchain.DIGESTS).write_text(json.dumps({"iree": {"3.11.0": recorded}}))
    assert toolchain.manifest(root, kind="iree", version="3.11.0") is None  # no install of these digests
    with pytest.raises(toolchain.ToolchainError) as err:
        toolchain.install(root, out=open(os.devnull, "w"), kind="iree", version="3.11.0")
    served, date = installed["wheels"]["iree-base-compiler"]["sha256"], recorded["iree-base-compiler"]["recorded"]
    assert (f"iree-base-compiler==3.11.0: the sha256 of the wheel PyPI serves ({served}) differs from the one "
            f"recorded on {date} in {root / toolchain.DIGESTS}") in str(err.value)
    assert not list(root.glob(".*partial*")) and sorted(p.name for p in root.iterdir()) == [toolchain.DIGESTS]
    assert json.loads((root / toolchain.DIGESTS).read_text()) == {"iree": {"3.11.0": recorded}}  # kept as it was


def test_a_release_that_does_not_exist_names_the_ones_that_do(tmp_path):
    with pytest.raises(toolchain.ToolchainError) as err:
        toolchain.install(tmp_path / "tc", out=open(os.devnull, "w"), kind="torq", version="9.9.9")
    assert "torq 9.9.9 does not exist on PyPI" in str(err.value) and "2.3.0, 2.2.1" in str(err.value)
    assert not (tmp_path / "tc").exists() or not list((tmp_path / "tc").iterdir())
