"""The Torq toolchain: torq-compile and torq-run-module (and IREE's module tools built with
them) from the pinned PyPI wheels, installed into a folder outside the sources by
`doit toolchain`.

The wheels are cp312 / manylinux_2_39 only, but their native tools need no Python: they are
fetched as files (never installed into the venv) and unpacked. They need glibc >= 2.38 and
GLIBCXX_3.4.32; where the host's C runtime is older, Debian 13's libc6, libstdc++6 and
libgcc-s1 are fetched through a private apt configuration (apt checks the suite's signed
Release file against the system's Debian keyring, then every package's hash), unpacked with
`dpkg -x`, and each tool gets a launcher that starts it through that runtime's loader.
Nothing on the system changes.

An install is built in a temporary folder and renamed into place once complete, its manifest
(`toolchain.json`: wheel versions and digests, C runtime package versions) written last: a
killed install leaves no folder that is trusted. A second install finds it and does nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pipeline.core.executables import cannot_start

NAME = "torq"
WHEELS = {  # distribution -> (version, sha256 of its cp312 manylinux_2_39_x86_64 wheel)
    "torq-compiler": ("2.3.0", "b809e13f1b3d16784bea5e63e12b2846d718f1dba55f0248ed46278f6bd51d7d"),
    "torq-runtime": ("2.3.0", "62998ab18edf59c53362d7ea250664ebb5d3fe02b271529f936dca58deb3af4c"),
}
PLATFORM, PYTHON_VERSION = "manylinux_2_39_x86_64", "3.12"
# tool -> its path inside the unpacked wheels; the libraries they load sit in LIBRARY_DIRS
TOOLS = {
    "torq-compile": "torq/_compiler_libs/torq-compile",
    "torq-run-module": "torq/_runtime_libs/torq-run-module",
    "iree-dump-module": "iree/_runtime_libs/iree-dump-module",
    "iree-benchmark-module": "iree/_runtime_libs/iree-benchmark-module",
}
LIBRARY_DIRS = ("iree/compiler/_mlir_libs", "iree/_runtime_libs")
MEMBERS = (*TOOLS.values(), "iree/compiler/_mlir_libs/libIREECompiler.so",
           "iree/_runtime_libs/libcoralnpu_simulator_mpact.so")
NEEDED_GLIBC = (2, 38)
C_RUNTIME = ("libc6", "libstdc++6", "libgcc-s1")
DEBIAN_SUITE, DEBIAN_MIRROR = "trixie", "http://deb.debian.org/debian"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
LOADER = "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
MULTIARCH_LIB = "usr/lib/x86_64-linux-gnu"
MANIFEST = "toolchain.json"
FORMAT = 1  # of the manifest and the install folder's layout
INSTALL_COMMAND = "doit toolchain"


class ToolchainError(Exception):
    """The install failed: nothing was installed."""


def default_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "conv-sweep" / "toolchain"


def root_from_env(environ=None) -> Path:
    env = os.environ if environ is None else environ
    raw = env.get("CONV_SWEEP_TOOLCHAIN_DIR")
    return Path(raw).expanduser().absolute() if raw else default_root()


def install_dir(root: Path) -> Path:
    """One folder per pinned set of wheels: changing a pin installs beside the old one."""
    h = hashlib.sha256(json.dumps(WHEELS, sort_keys=True).encode()).hexdigest()[:12]
    return Path(root) / f"{NAME}-{WHEELS['torq-compiler'][0]}-{h}"


def host_glibc() -> tuple[int, int] | None:
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    except (ValueError, OSError, AttributeError):
        return None
    return tuple(int(p) for p in version.split(".")[:2]) if name == "glibc" else None


def manifest(root: Path | None = None) -> dict | None:
    """The installed toolchain's manifest, or None when it is not (completely) installed."""
    folder = install_dir(root or root_from_env())
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("wheels") == _pins() and data.get("format") == FORMAT else None


def _pins() -> dict:
    return {dist: {"version": v, "sha256": d} for dist, (v, d) in WHEELS.items()}


# --- installing ----------------------------------------------------------------------------------

def install(root: Path | None = None, out=None) -> Path:
    """Install the toolchain unless it is already there; return its folder."""
    out = out or sys.stdout
    root = Path(root or root_from_env())
    final = install_dir(root)
    if manifest(root) is not None:
        print(f"conv-sweep: the Torq toolchain is installed in {final}: nothing to do", file=out)
        return final
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial.", dir=root))
    try:
        data = _build(work, out)
        if final.exists():  # an incomplete earlier install (no valid manifest): never trusted
            shutil.rmtree(final)
        os.rename(work, final)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    for stale in root.glob(f".{final.name}.partial.*"):  # left by an install that was killed
        shutil.rmtree(stale, ignore_errors=True)
    print(f"conv-sweep: installed the Torq toolchain in {final}\n  " +
          "\n  ".join(f"{t}: {p}" for t, p in data["tools"].items()), file=out)
    return final


def _build(work: Path, out) -> dict:
    downloads = work / "downloads"
    downloads.mkdir()
    print(f"conv-sweep: fetching {', '.join(f'{d}=={v}' for d, (v, _) in WHEELS.items())} ...", file=out)
    wheels = _download_wheels(downloads)
    tree = work / "wheels"
    for wheel in wheels:
        _unpack(wheel, tree)
    glibc = host_glibc()
    runtime: dict = {}
    sysroot = None
    if glibc is None or glibc < NEEDED_GLIBC:
        print(f"conv-sweep: host glibc {'.'.join(map(str, glibc or ())) or 'unknown'} < "
              f"{'.'.join(map(str, NEEDED_GLIBC))}: fetching Debian {DEBIAN_SUITE}'s C runtime ...", file=out)
        sysroot = work / "sysroot"
        runtime = _fetch_c_runtime(work / "apt", sysroot)
    bin_dir = work / "bin"
    bin_dir.mkdir()
    for name, member in TOOLS.items():
        _write_launcher(bin_dir / name, member, sysroot is not None)
    shutil.rmtree(downloads)
    final = install_dir(work.parent)
    data = {"format": FORMAT, "wheels": _pins(), "platform": PLATFORM, "host_glibc": ".".join(map(str, glibc or ())),
            "c_runtime": runtime, "tools": {name: str(final / "bin" / name) for name in TOOLS},
            "commands": {name: _direct_command(final, member, sysroot is not None) for name, member in TOOLS.items()}}
    _smoke_test(bin_dir)
    (work / MANIFEST).write_text(json.dumps(data, indent=1) + "\n")  # last: marks the install complete
    return data


def _run(argv: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kwargs)
    except OSError as err:
        raise ToolchainError(f"{what}: cannot start {argv[0]}: {err.strerror}") from None
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{what}: {argv[0]} timed out") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise ToolchainError(f"{what} failed (exit status {proc.returncode}):\n{tail}")
    return proc


def _download_wheels(dest: Path) -> list[Path]:
    """pip download with --require-hashes: pip refuses a file whose digest differs from the pin."""
    requirements = dest / "requirements.txt"
    requirements.write_text("".join(f"{d}=={v} --hash=sha256:{h}\n" for d, (v, h) in WHEELS.items()))
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform", PLATFORM,
          "--python-version", PYTHON_VERSION, "--require-hashes", "--disable-pip-version-check", "-q",
          "-d", str(dest), "-r", str(requirements)], "downloading the Torq wheels (pip download)", timeout=1800)
    wheels = []
    for dist, (version, digest) in WHEELS.items():
        matches = list(dest.glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
        if len(matches) != 1:
            raise ToolchainError(f"pip download left no wheel of {dist}=={version} in {dest}")
        actual = hashlib.sha256(matches[0].read_bytes()).hexdigest()
        if actual != digest:  # pip checked it already; checked again before anything is unpacked
            raise ToolchainError(f"{matches[0].name}: sha256 {actual} differs from the pinned {digest}")
        wheels.append(matches[0])
    return wheels


def _unpack(wheel: Path, tree: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.filename in MEMBERS:
                target = tree / info.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                mode = (info.external_attr >> 16) & 0o777
                target.chmod(mode | 0o444 if mode else 0o755)


def _fetch_c_runtime(apt_dir: Path, sysroot: Path) -> dict:
    """Debian 13's C runtime through a private apt configuration; returns package versions."""
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    sources = apt_dir / "sources.list"
    sources.write_text(f"deb [signed-by={DEBIAN_KEYRING}] {DEBIAN_MIRROR} {DEBIAN_SUITE} main\n")
    options = ["-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=/dev/null",
               "-o", f"Dir::State::Lists={apt_dir / 'lists'}", "-o", f"Dir::Cache={apt_dir / 'cache'}",
               "-o", "Dir::State::status=/dev/null", "-o", "APT::Architecture=amd64",
               "-o", "Debug::NoLocking=1", "-q"]
    if not os.path.isfile(DEBIAN_KEYRING):
        raise ToolchainError(f"{DEBIAN_KEYRING} is missing (Debian's debian-archive-keyring package): "
                             "the C runtime's packages cannot be verified")
    _run(["apt-get", *options, "update"], f"apt-get update ({DEBIAN_MIRROR} {DEBIAN_SUITE})", timeout=900)
    _run(["apt-get", *options, "download", *C_RUNTIME], "apt-get download " + " ".join(C_RUNTIME),
         cwd=apt_dir / "debs", timeout=900)
    versions = {}
    for package in C_RUNTIME:
        debs = list((apt_dir / "debs").glob(f"{package}_*.deb"))
        if len(debs) != 1:
            raise ToolchainError(f"apt-get download left no {package} package")
        versions[package] = _run(["dpkg-deb", "-f", str(debs[0]), "Version"], f"reading {debs[0].name}").stdout.strip()
        _run(["dpkg", "-x", str(debs[0]), str(sysroot)], f"unpacking {debs[0].name}")
    shutil.rmtree(apt_dir)
    if not (sysroot / LOADER).exists():
        raise ToolchainError(f"the C runtime has no loader at {LOADER}")
    return versions


def _direct_command(top: Path, member: str, through_loader: bool) -> list[str]:
    """What the launcher runs, spelled out (repro.sh writes it, needing no launcher)."""
    libs = ":".join(str(top / "wheels" / d) for d in LIBRARY_DIRS)
    if through_loader:
        return [str(top / "sysroot" / LOADER), "--library-path", f"{top / 'sysroot' / MULTIARCH_LIB}:{libs}",
                str(top / "wheels" / member)]
    return ["env", f"LD_LIBRARY_PATH={libs}", str(top / "wheels" / member)]


def _write_launcher(path: Path, member: str, through_loader: bool) -> None:
    """A shell launcher that finds everything relative to itself (the install folder is
    renamed into place after it is written)."""
    libs = ":".join(f'$top/wheels/{d}' for d in LIBRARY_DIRS)
    if through_loader:
        command = (f'exec "$top/sysroot/{LOADER}" --library-path "$top/sysroot/{MULTIARCH_LIB}:{libs}" '
                   f'"$top/wheels/{member}" "$@"')
    else:
        command = f'LD_LIBRARY_PATH="{libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec "$top/wheels/{member}" "$@"'
    path.write_text("#!/bin/sh\n# conv-sweep launcher of the Torq toolchain's " + path.name + "\n"
                    'top=$(cd "$(dirname "$0")/.." && pwd)\n' + command + "\n")
    path.chmod(0o755)


def _smoke_test(bin_dir: Path) -> None:
    """Every tool starts: a missing library is an install failure, not 1,250 failed cases."""
    for name in TOOLS:
        proc = subprocess.run([str(bin_dir / name), "--help"], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        text = proc.stdout + proc.stderr
        if cannot_start(text) or ("USAGE" not in text.upper() and "OVERVIEW" not in text.upper()
                                  and proc.returncode != 0):
            raise ToolchainError(f"{name} does not start: {text.strip().splitlines()[-1] if text.strip() else ''}")

