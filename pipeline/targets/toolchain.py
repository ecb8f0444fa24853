"""Toolchains from PyPI wheels, installed into a folder outside the sources: the Torq
toolchain (torq-compile and torq-run-module, and IREE's module tools built with them) by
`doit toolchain`, and any release of a kind of toolchain (KINDS: torq, or stock IREE's
iree-base-compiler / iree-base-runtime) that a `<target>@<version>` selects, on demand.

Each release has its own folder. The digests of the releases in PINS are shipped; another
release's digests are recorded on its first install (DIGESTS, in the toolchain folder) and
every later install of it must match them.

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

The install also records whether the release's compiler reads the MLIR today's importers
write (PROBES; `reads`). A manifest written before the probes existed (the pinned Torq
release's, FORMAT 1 too) is probed on its first read and the answer written back into it:
the folder stays trusted and is reused, where a format bump would have installed it again.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.executables import cannot_start
from pipeline.core.layout import user_cache

NAME = "torq"
WHEELS = {  # the pinned Torq toolchain: distribution -> (version, sha256 of its cp312 manylinux_2_39_x86_64 wheel)
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


@dataclass(frozen=True)
class Kind:
    """A kind of toolchain: its two wheels (compiler first), where their tools sit, the
    platform its wheels are fetched for, the glibc its tools need, and the release a bare
    target uses (None: the venv's own tools)."""

    name: str
    dists: tuple[str, str]
    platform: str
    python: str
    tools: dict  # tool -> member
    library_dirs: tuple[str, ...]
    members: tuple[str, ...]  # every member unpacked: the tools and the libraries they load
    needed_glibc: tuple[int, int]
    pinned: str | None

    @property
    def compiler(self) -> str:
        return next(iter(self.tools))


IREE_TOOLS = {
    "iree-compile": "iree/compiler/_mlir_libs/iree-compile",
    "iree-run-module": "iree/_runtime_libs/iree-run-module",
    "iree-dump-module": "iree/_runtime_libs/iree-dump-module",
    "iree-benchmark-module": "iree/_runtime_libs/iree-benchmark-module",
}
KINDS = {
    "torq": Kind("torq", ("torq-compiler", "torq-runtime"), PLATFORM, PYTHON_VERSION, TOOLS, LIBRARY_DIRS, MEMBERS,
                 NEEDED_GLIBC, WHEELS["torq-compiler"][0]),
    # the native tools need no Python: any of the wheel's Python versions serves; pip takes
    # the platform's older manylinux tags too. iree-lld links llvm-cpu's executables.
    "iree": Kind("iree", ("iree-base-compiler", "iree-base-runtime"), "manylinux_2_28_x86_64", "3.11", IREE_TOOLS,
                 LIBRARY_DIRS, (*IREE_TOOLS.values(), "iree/compiler/_mlir_libs/libIREECompiler.so",
                                "iree/compiler/_mlir_libs/iree-lld"), (2, 28), None),
}
PINS = {  # (kind, version) -> {distribution: sha256 of its wheel}, shipped
    ("torq", "2.3.0"): {d: h for d, (_, h) in WHEELS.items()},
    ("torq", "2.2.1"): {"torq-compiler": "37b8d56f6e148db0dda229b7b231cc6ad06ab699639d9cc3ac459cb9680da259",
                        "torq-runtime": "c7032eed918384bba3091dc191b5e488bdb8f4fdcf6cfefd76f8c39fb26bef6d"},
    ("iree", "3.12.0"): {"iree-base-compiler": "6025f62f5b941eca0c4521f0ebd7533cb0f3ff406cbbe00befdb679aea6f99e7",
                         "iree-base-runtime": "21ea20fed5005c7969553f24dd405ca7eda4e9d6c002665c173456d73d16a9de"},
}
DIGESTS = "digests.json"  # in the toolchain folder: the digests of releases first installed here
PROBES = Path(__file__).parent / "probes"  # MLIR of today's importers: what a release's compiler must read
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


def default_root(environ=None) -> Path:
    """Where toolchains are installed unless CONV_SWEEP_TOOLCHAIN_DIR says (pipeline/config.py
    reads it): the user cache's toolchain folder."""
    return user_cache(environ) / "toolchain"


def _release(kind: str, version: str | None) -> tuple[Kind, str]:
    if kind not in KINDS:
        raise ToolchainError(f"unknown kind of toolchain {kind!r}: one of {', '.join(KINDS)}")
    spec = KINDS[kind]
    version = version or spec.pinned
    if version is None:
        raise ToolchainError(f"{kind} has no pinned release: name one")
    return spec, version


def recorded(root: Path) -> dict:
    """The digests recorded on first installs here: {kind: {version: {dist: sha256}}}."""
    try:
        data = json.loads((Path(root) / DIGESTS).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def digests(root: Path, kind: str = NAME, version: str | None = None) -> dict | None:
    """The release's wheel digests: shipped, or recorded on its first install here; None
    for a release installed nowhere yet."""
    spec, version = _release(kind, version)
    if (kind, version) in PINS:
        return PINS[(kind, version)]
    found = recorded(root).get(kind, {}).get(version)
    return {d: found[d]["sha256"] for d in spec.dists} if found else None


def _origin(root: Path, kind: str, version: str) -> str:
    """Where the release's digests come from, for a message about a wheel that differs."""
    if (kind, version) in PINS:
        return "the one shipped with conv-sweep (PINS in pipeline/targets/toolchain.py)"
    if digests(root, kind, version) is None:
        return "none yet"
    dates = sorted({r.get("recorded", "?") for r in recorded(root).get(kind, {}).get(version, {}).values()})
    return f"the one recorded on {', '.join(dates)} in {Path(root) / DIGESTS} (its first install here)"


def install_dir(root: Path, kind: str = NAME, version: str | None = None) -> Path:
    """One folder per release and set of digests: changing a pin installs beside the old one."""
    spec, version = _release(kind, version)
    pins = digests(root, kind, version) or {}
    h = hashlib.sha256(json.dumps({d: [version, pins.get(d, "")] for d in spec.dists},
                                  sort_keys=True).encode()).hexdigest()[:12]
    return Path(root) / f"{kind}-{version}-{h}"


def host_glibc() -> tuple[int, int] | None:
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    except (ValueError, OSError, AttributeError):
        return None
    return tuple(int(p) for p in version.split(".")[:2]) if name == "glibc" else None


def manifest(root: Path | None = None, kind: str = NAME, version: str | None = None) -> dict | None:
    """The installed release's manifest, or None when it is not (completely) installed."""
    root = Path(root or default_root())
    pins = digests(root, kind, version)
    if pins is None:
        return None
    folder = install_dir(root, kind, version)
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if data.get("wheels") != _pins(kind, version, pins) or data.get("format") != FORMAT:
        return None
    if "reads" not in data:  # installed before the probes: probed now, once
        _probe_late(folder, data, KINDS[kind].compiler)
    return data


# Module state that stays, and why: an install's probe answers where they could not be written
# back to its read-only manifest, so that this process probes it once; a fact about files on
# disk that holds for the process's life, not a run's knowledge or configuration.
_probed: dict[str, tuple[dict, dict]] = {}  # install folder -> its probes, where they could not be written back


def _probe_late(folder: Path, data: dict, compiler: str) -> None:
    """Probe an install whose manifest predates the probes and write the answer into its
    manifest (atomically: a reader sees the old manifest or the new, both trusted)."""
    from pipeline.core.tools import write_text

    if str(folder) not in _probed:
        with tempfile.TemporaryDirectory(prefix="conv-sweep-probe.") as scratch:
            _probed[str(folder)] = _probe(folder / "bin" / compiler, Path(scratch))
    data["reads"], data["read_errors"] = _probed[str(folder)]
    try:
        write_text(folder / MANIFEST, json.dumps(data, indent=1) + "\n")
    except OSError:  # a folder this user cannot write: the answer holds for this process
        return
    del _probed[str(folder)]


def _pins(kind: str = NAME, version: str | None = None, pins: dict | None = None) -> dict:
    spec, version = _release(kind, version)
    pins = pins or PINS[(kind, version)]
    return {dist: {"version": version, "sha256": pins[dist]} for dist in spec.dists}


def reads(found: dict, backend: str) -> tuple[bool, str]:
    """Whether the release's compiler reads every probe of today's `backend` importer (tflite,
    onnx), and the first error where it does not; recorded by the install."""
    probes = {name: ok for name, ok in (found.get("reads") or {}).items() if name.startswith(backend + "_")}
    if not probes:
        return False, "not probed: reinstall it"
    bad = sorted(name for name, ok in probes.items() if not ok)
    return (not bad, f"{bad[0]}: {found.get('read_errors', {}).get(bad[0], '')}" if bad else "")


def available_versions(kind: str) -> list[str]:
    """The releases of the kind's compiler on PyPI, newest first."""
    dist = KINDS[kind].dists[0]
    proc = _run([sys.executable, "-m", "pip", "index", "versions", dist, "--disable-pip-version-check",
                 "--only-binary=:all:", "--platform", KINDS[kind].platform, "--python-version", KINDS[kind].python],
                "asking PyPI for the releases of " + dist + " (pip index versions)", timeout=300)
    match = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if not match:
        raise ToolchainError(f"pip index versions {dist} listed no releases")
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


# --- installing ----------------------------------------------------------------------------------

def install(root: Path | None = None, out=None, kind: str = NAME, version: str | None = None) -> Path:
    """Install the release unless it is already there; return its folder. A release without
    shipped or recorded digests must exist on PyPI; its digests are recorded once installed."""
    out = out or sys.stdout
    root = Path(root or default_root())
    spec, version = _release(kind, version)
    what = "the Torq toolchain" if (kind, version) == (NAME, KINDS[NAME].pinned) else f"{kind} {version}"
    if manifest(root, kind, version) is not None:
        print(f"conv-sweep: {what} is installed in {install_dir(root, kind, version)}: nothing to do", file=out)
        return install_dir(root, kind, version)
    pins = digests(root, kind, version)
    if pins is None:  # neither shipped nor recorded: asked of PyPI before anything is downloaded
        available = available_versions(kind)
        if version not in available:
            raise ToolchainError(f"{kind} {version} does not exist on PyPI ({spec.dists[0]}); "
                                 f"available: {', '.join(available)}")
    origin = _origin(root, kind, version)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{kind}-{version}.partial.", dir=root))
    try:
        data, pins = _build(work, out, spec, version, pins, origin)
        if pins is not None and digests(root, kind, version) is None:
            _record(root, kind, version, pins)  # first install of this release: later ones must match
        final = install_dir(root, kind, version)
        if final.exists():  # an incomplete earlier install (no valid manifest): never trusted
            shutil.rmtree(final)
        _finish(work, final, data)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    for stale in root.glob(f".{kind}-{version}.partial.*"):  # left by an install that was killed
        shutil.rmtree(stale, ignore_errors=True)
    print(f"conv-sweep: installed {what} in {final}\n  " +
          "\n  ".join(f"{t}: {p}" for t, p in data["tools"].items()), file=out)
    return final


def _record(root: Path, kind: str, version: str, pins: dict) -> None:
    """Add a release's digests to DIGESTS (atomically, under a lock: two installs of different
    releases at once both stay recorded; the first install of a release wins)."""
    from pipeline.core.tools import write_text

    lock = os.open(root, os.O_RDONLY)  # the toolchain folder itself is the lock: no lock file
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = recorded(root)
        data.setdefault(kind, {}).setdefault(version, {d: {"sha256": h, "recorded": time.strftime("%Y-%m-%d")}
                                                       for d, h in pins.items()})
        write_text(Path(root) / DIGESTS, json.dumps(data, indent=1, sort_keys=True) + "\n")
    finally:
        os.close(lock)  # and the lock with it


def _finish(work: Path, final: Path, data: dict) -> None:
    """The manifest names the final folder's tools, written last (it marks the install
    complete), then the folder is renamed into place."""
    data["tools"] = {name: str(final / "bin" / name) for name in data["tools"]}
    data["commands"] = {name: [arg.replace(str(work), str(final)) for arg in argv]
                        for name, argv in data["commands"].items()}
    (work / MANIFEST).write_text(json.dumps(data, indent=1) + "\n")
    os.rename(work, final)


def _build(work: Path, out, spec: Kind, version: str, pins: dict | None,
           origin: str = "the pinned one") -> tuple[dict, dict]:
    downloads = work / "downloads"
    downloads.mkdir()
    print(f"conv-sweep: fetching {', '.join(f'{d}=={version}' for d in spec.dists)} ...", file=out)
    wheels, pins = _download_wheels(downloads, spec, version, pins, origin)
    tree = work / "wheels"
    for wheel in wheels:
        _unpack(wheel, tree, spec.members)
    glibc = host_glibc()
    runtime: dict = {}
    sysroot = None
    if glibc is None or glibc < spec.needed_glibc:
        print(f"conv-sweep: host glibc {'.'.join(map(str, glibc or ())) or 'unknown'} < "
              f"{'.'.join(map(str, spec.needed_glibc))}: fetching Debian {DEBIAN_SUITE}'s C runtime ...", file=out)
        sysroot = work / "sysroot"
        runtime = _fetch_c_runtime(work / "apt", sysroot)
    bin_dir = work / "bin"
    bin_dir.mkdir()
    for name, member in spec.tools.items():
        _write_launcher(bin_dir / name, member, sysroot is not None, spec.library_dirs)
    shutil.rmtree(downloads)
    _smoke_test(bin_dir, spec.tools)
    print(f"conv-sweep: does {spec.compiler} {version} read today's importers' MLIR? ({len(list(PROBES.iterdir()))} "
          "probes)", file=out)
    readable, errors = _probe(bin_dir / spec.compiler, work)
    data = {"format": FORMAT, "wheels": _pins(spec.name, version, pins), "platform": spec.platform,
            "host_glibc": ".".join(map(str, glibc or ())), "c_runtime": runtime,
            "tools": {name: str(bin_dir / name) for name in spec.tools},
            "commands": {name: _direct_command(work, member, sysroot is not None, spec.library_dirs)
                         for name, member in spec.tools.items()},
            "reads": readable, "read_errors": errors}
    return data, pins


def _probe(compiler: Path, work: Path) -> tuple[dict, dict]:
    """Each probe through the compiler's parsing and input conversion only
    (`--compile-to=input`, the earliest phase; torq-compile takes it too, well under a second
    a probe): a release that cannot parse today's importers' MLIR fails here, not as a
    confusing compile failure of every case. A probe that fails is recorded, never fails
    the install: {probe: read?}, {probe: its first error line}."""
    readable, errors = {}, {}
    for probe in sorted(PROBES.iterdir()):
        try:
            proc = subprocess.run([str(compiler), str(probe), "--compile-to=input", "-o", str(work / "probe.out")],
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        except subprocess.TimeoutExpired:
            readable[probe.name], errors[probe.name] = False, "timed out after 120 s"
            continue
        except OSError as err:
            readable[probe.name], errors[probe.name] = False, f"cannot start {compiler}: {err.strerror}"
            continue
        readable[probe.name] = proc.returncode == 0
        if proc.returncode:
            text = (proc.stderr + proc.stdout).splitlines()
            lines = [line for line in text if "error:" in line] or [line for line in text if "error" in line.lower()]
            errors[probe.name] = (lines[0] if lines else f"exit status {proc.returncode}").strip()[:300]
    (work / "probe.out").unlink(missing_ok=True)
    return readable, errors


def _run(argv: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kwargs)
    except OSError as err:
        raise ToolchainError(f"{what}: cannot start {argv[0]}: {err.strerror}") from None
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{what}: {argv[0]} timed out") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        err = ToolchainError(f"{what} failed (exit status {proc.returncode}):\n{tail}")
        err.output = proc.stderr + proc.stdout  # all of it, for a caller that reads it
        raise err
    return proc


def _download_wheels(dest: Path, spec: Kind, version: str, pins: dict | None,
                     origin: str = "the pinned one") -> tuple[list[Path], dict]:
    """pip download, with --require-hashes where the digests are known (shipped or recorded,
    `origin` says which): pip refuses a file whose digest differs. Returns the wheels and
    their digests."""
    requirements = dest / "requirements.txt"
    requirements.write_text("".join(f"{d}=={version}" + (f" --hash=sha256:{pins[d]}" if pins else "") + "\n"
                                    for d in spec.dists))
    try:
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform",
              spec.platform, "--python-version", spec.python, *(["--require-hashes"] if pins else []),
              "--disable-pip-version-check", "-q", "-d", str(dest), "-r", str(requirements)],
             f"downloading the {spec.name} {version} wheels (pip download)", timeout=1800)
    except ToolchainError as err:
        # pip: "Expected sha256 <pin>" then "Got <digest>" for each wheel that differs
        differs = re.findall(r"Expected sha256 ([0-9a-f]{64})\s+Got\s+([0-9a-f]{64})", getattr(err, "output", ""))
        if not pins or not differs:
            raise
        names = {h: d for d, h in pins.items()}
        raise ToolchainError("; ".join(f"{names.get(want, 'a wheel')}=={version}: the sha256 of the wheel PyPI "
                                       f"serves ({got}) differs from {origin} ({want})" for want, got in differs)
                             + ": refused (pip download --require-hashes)"
                             + ("" if (spec.name, version) in PINS else
                                f". If the release was replaced on purpose, remove its entry from {DIGESTS} and "
                                "install it again")) from None
    wheels, found = [], {}
    for dist in spec.dists:
        matches = list(dest.glob(f"{dist.replace('-', '_')}-{version}-*.whl"))
        if len(matches) != 1:
            raise ToolchainError(f"pip download left no wheel of {dist}=={version} in {dest}")
        actual = hashlib.sha256(matches[0].read_bytes()).hexdigest()
        if pins and actual != pins[dist]:  # pip checked it already; checked again before anything is unpacked
            raise ToolchainError(f"{matches[0].name}: its sha256 ({actual}) differs from {origin} ({pins[dist]})")
        wheels.append(matches[0])
        found[dist] = actual
    return wheels, found


def _unpack(wheel: Path, tree: Path, members=MEMBERS) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.filename in members:
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


def _direct_command(top: Path, member: str, through_loader: bool, library_dirs=LIBRARY_DIRS) -> list[str]:
    """What the launcher runs, spelled out (repro.sh writes it, needing no launcher)."""
    libs = ":".join(str(top / "wheels" / d) for d in library_dirs)
    if through_loader:
        return [str(top / "sysroot" / LOADER), "--library-path", f"{top / 'sysroot' / MULTIARCH_LIB}:{libs}",
                str(top / "wheels" / member)]
    return ["env", f"LD_LIBRARY_PATH={libs}", str(top / "wheels" / member)]


def _write_launcher(path: Path, member: str, through_loader: bool, library_dirs=LIBRARY_DIRS) -> None:
    """A shell launcher that finds everything relative to itself (the install folder is
    renamed into place after it is written)."""
    libs = ":".join(f'$top/wheels/{d}' for d in library_dirs)
    if through_loader:
        command = (f'exec "$top/sysroot/{LOADER}" --library-path "$top/sysroot/{MULTIARCH_LIB}:{libs}" '
                   f'"$top/wheels/{member}" "$@"')
    else:
        command = f'LD_LIBRARY_PATH="{libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec "$top/wheels/{member}" "$@"'
    path.write_text("#!/bin/sh\n# conv-sweep launcher of the toolchain's " + path.name + "\n"
                    'top=$(cd "$(dirname "$0")/.." && pwd)\n' + command + "\n")
    path.chmod(0o755)


def _smoke_test(bin_dir: Path, tools=TOOLS) -> None:
    """Every tool starts: a missing library is an install failure, not 1,250 failed cases."""
    for name in tools:
        proc = subprocess.run([str(bin_dir / name), "--help"], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        text = proc.stdout + proc.stderr
        if cannot_start(text) or ("USAGE" not in text.upper() and "OVERVIEW" not in text.upper()
                                  and proc.returncode != 0):
            raise ToolchainError(f"{name} does not start: {text.strip().splitlines()[-1] if text.strip() else ''}")

