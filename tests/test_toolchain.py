"""`doit toolchain`: installs the Torq tools outside the sources, once; a failed or killed
install leaves nothing that is trusted."""
import os
import signal
import subprocess
import time

import pytest

from helpers import DOIT, ROOT, clean_env, doit
from pipeline.targets import toolchain

pytestmark = pytest.mark.slow


def test_toolchain_command_is_idempotent():
    env = clean_env()
    first = doit("toolchain", env=env, timeout=1800)
    assert first.returncode == 0, first.stdout + first.stderr
    root = toolchain.root_from_env(env)
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
