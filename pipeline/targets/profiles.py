"""Target profiles: everything about a case that depends on the target it is compiled for.

A profile names the compiler and its base flags, extra flags per flavor, the MLIR form the
compiler reads, the run tool with its flags and entry-function rule, how inputs and outputs
are passed, the toolchain its tools come from, the flavors it supports, the int8 rounding its
requantization follows, and whether the compiler reports an estimated execution time.

Built-in profiles live in pipeline/targets/targets.json (llvm-cpu, vmvx, torq); a JSON file in the
same format (CONV_SWEEP_TARGETS_FILE) adds profiles or overrides fields of existing ones.
A profile may name a `base` whose fields it inherits.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

from pipeline.space.cases import VARIANTS
from pipeline.targets.cost import calibration_path, parse_rules
from pipeline.core.errors import ConfigError, load_json
from pipeline.core.executables import resolve

BUILTIN_FILE = Path(__file__).parent / "targets.json"
DEFAULT_TARGET = "llvm-cpu"
MLIR_FORMS = ("text", "bytecode")  # text MLIR as IREE 3.13 prints it, or the importer's bytecode
IO_MODES = ("npy", "bin")  # .npy files where the dtype allows (bf16 always as raw bytes), or always raw
INT8_ROUNDING = ("tflite", "single-round")  # see tolerance.py
BF16_BIAS_ADD = ("fused", "padded-space-to-depth")  # see tolerance.py
ACCUMULATIONS = ("f32", "bf16")  # the format its conv's partial sums are rounded to (see tolerance.py)
TOOLCHAINS = ("torq",)  # a profile's own toolchain (`doit toolchain`); a versioned stock IREE profile gets "iree"
VERSION = re.compile(r"[0-9][0-9A-Za-z.+!-]*")  # a release as PyPI spells it
TRACKER = re.compile(r"https://\S+")  # an issue tracker's address


@dataclass(frozen=True)
class Profile:
    """One compilation target."""

    name: str  # e.g. "torq"; selects it in CONV_SWEEP_TARGET and names its folders
    doc: str  # one line
    compiler: str  # executable: a name on PATH or in the toolchain, or a path
    flags: tuple[str, ...]  # base compile flags, after `IN -o OUT`
    flavor_flags: tuple[tuple[str, tuple[str, ...]], ...]  # (backend_flavor, extra flags) pairs
    mlir: str  # the MLIR form the compiler reads for TFLite models: "text" or "bytecode"
    runner: str  # run tool executable
    run_flags: tuple[str, ...]  # run flags before --function/--input/--output
    functions: tuple[tuple[str, str], ...]  # (backend, entry function name) pairs
    io: str  # "npy" or "bin"
    dump_tool: str  # the module dumper that reads the compiled module's signature
    flavors: tuple[str, ...]  # backend_flavor names this target supports
    compile_only: tuple[str, ...] = ()  # flavors only compiled, not run or compared
    expected_output: bool = True  # its run tool's --expected_output takes approximate checks (repro.sh)
    int8_rounding: str = "tflite"  # how its int8 requantization rounds
    converts_weights: bool = False  # running an f32 model in bf16, its compiler rounds weights and bias too
    bf16_bias_add: str = "fused"  # "padded-space-to-depth": where, the bias-free sum is rounded to bf16 before the bias is added
    accumulation: str = "f32"  # "bf16": its running sum is rounded to bf16 (pipeline/checks/tolerance.py)
    accumulation_tile: int = 1  # with "bf16": the terms summed in f32 before each bf16 rounding
    profiling: tuple[str, ...] = ()  # compile flags that write the compiler's estimated timeline to {csv}
    benchmark_tool: str | None = None  # times the module (iree-benchmark-module) under CONV_SWEEP_BENCHMARK=1
    toolchain: str | None = None  # the installed toolchain its tools come from (`doit toolchain`)
    timeouts: tuple = ()  # (stage, cost.Rule) pairs: budget (hard limit), margin and floor of compile and run
    calibration: str | None = None  # the cost calibration file; None: pipeline/targets/costs/<name>.json
    fixed_addresses: bool = False  # start the compiler with address-space randomization off (compiler.py)
    # compile flags that each turn one optional transformation off: `doit bugreport` tries each
    # on a failure bucket's cases, to name a culprit pass and a workaround (never in a sweep)
    toggle_flags: tuple[str, ...] = ()
    version: str | None = None  # the toolchain's version (`torq@2.2.1`); None: the pinned one
    tracker: str | None = None  # the issue tracker (URL) where its compiler's and run tool's bugs are filed

    @property
    def base(self) -> str:
        """The profile's name without its version."""
        return self.name.partition("@")[0]

    def rule(self, stage: str):
        """The limit rule of a timed stage (pipeline/targets/cost.py), or None."""
        return dict(self.timeouts).get(stage)

    @property
    def calibration_file(self) -> Path:
        """Its cost calibration: the profile's own file, else pipeline/targets/costs/<name>.json."""
        return Path(self.calibration) if self.calibration else calibration_path(self.name)

    def flags_for(self, variant: str) -> tuple[str, ...]:
        return self.flags + dict(self.flavor_flags).get(variant, ())

    def function(self, backend: str) -> str:
        return dict(self.functions)[backend]

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("flavor_flags", "functions"):
                value = {k: list(v) if isinstance(v, tuple) else v for k, v in value}
            elif f.name == "timeouts":
                value = {stage: rule.to_dict() for stage, rule in value}
            elif isinstance(value, tuple):
                value = list(value)
            elif f.name == "version" and value is None:
                continue  # the pinned release: a bare profile's dict (and the keys made of it) as before
            elif f.name == "tracker":
                continue  # where bugs are filed changes no result: not in the keys made of this dict
            out[f.name] = value
        return out


_FIELDS = {f.name for f in fields(Profile)} - {"name", "version"}
_REQUIRED = _FIELDS - {"compile_only", "expected_output", "converts_weights", "int8_rounding", "bf16_bias_add", "accumulation", "accumulation_tile", "profiling", "toolchain", "flavor_flags", "benchmark_tool",
                       "doc", "timeouts", "calibration", "fixed_addresses", "toggle_flags", "tracker"}


def _merge(raw: dict[str, dict], where: str, base: dict[str, dict] | None = None) -> dict[str, dict]:
    """Resolve `base` inheritance and field overrides into one flat dict per profile."""
    out = dict(base or {})
    pending = dict(raw)
    while pending:
        progressed = False
        for name, entry in list(pending.items()):
            here = f"{where}.targets.{name}"
            if not isinstance(entry, dict):
                raise ConfigError(here, entry, "must be an object of profile fields")
            unknown = set(entry) - _FIELDS - {"base"}
            if unknown:
                field = sorted(unknown)[0]
                raise ConfigError(f"{here}.{field}", entry[field], "is not a profile field; known: "
                                  + ", ".join(sorted(_FIELDS | {"base"})))
            parent = entry.get("base")
            if parent is not None and parent in pending and parent != name:
                continue  # inherit once the parent is resolved
            if parent is not None and parent not in out and parent != name:
                raise ConfigError(f"{here}.base", parent, "names no known profile")
            start = dict(out.get(parent if parent is not None else name, {}))
            start.update({k: v for k, v in entry.items() if k != "base"})
            out[name] = start
            del pending[name]
            progressed = True
        if not progressed:
            raise ConfigError(f"{where}.targets", sorted(pending), "profiles inherit from each other in a cycle")
    return out


def _profile(name: str, data: dict, where: str) -> Profile:
    here = f"{where}.targets.{name}"
    missing = _REQUIRED - set(data)
    if missing:
        raise ConfigError(f"{here}.{sorted(missing)[0]}", None, "is required")

    def strings(field, value):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{here}.{field}", value, "must be a list of strings")
        return tuple(value)

    for field in ("compiler", "runner", "dump_tool"):
        if not isinstance(data[field], str) or not data[field]:
            raise ConfigError(f"{here}.{field}", data[field], "must be an executable name or path")
    if data.get("benchmark_tool") is not None and (not isinstance(data["benchmark_tool"], str)
                                                   or not data["benchmark_tool"]):
        raise ConfigError(f"{here}.benchmark_tool", data["benchmark_tool"], "must be an executable name or path, or null")
    flavor_flags = data.get("flavor_flags", {})
    if not isinstance(flavor_flags, dict):
        raise ConfigError(f"{here}.flavor_flags", flavor_flags, "must map flavors to lists of flags")
    for variant, flags in flavor_flags.items():
        if variant not in VARIANTS:
            raise ConfigError(f"{here}.flavor_flags", variant, f"is not a flavor; known: {', '.join(VARIANTS)}")
        strings(f"flavor_flags.{variant}", flags)
    functions = data["functions"]
    if not isinstance(functions, dict) or set(functions) != {"tflite", "onnx"} or \
            not all(isinstance(v, str) and v for v in functions.values()):
        raise ConfigError(f"{here}.functions", functions, 'must name the entry function of "tflite" and "onnx"')
    for field, allowed in (("mlir", MLIR_FORMS), ("io", IO_MODES), ("int8_rounding", INT8_ROUNDING),
                           ("bf16_bias_add", BF16_BIAS_ADD), ("accumulation", ACCUMULATIONS)):
        if field in data and data[field] not in allowed:
            raise ConfigError(f"{here}.{field}", data[field], f"must be one of {', '.join(allowed)}")
    tile = data.get("accumulation_tile", 1)
    if not isinstance(tile, int) or isinstance(tile, bool) or tile < 1:
        raise ConfigError(f"{here}.accumulation_tile", tile, "must be a positive integer")
    for field in ("flavors", "compile_only"):
        for variant in strings(field, data.get(field, [])):
            if variant not in VARIANTS:
                raise ConfigError(f"{here}.{field}", variant, f"is not a flavor; known: {', '.join(VARIANTS)}")
    if not data["flavors"]:
        raise ConfigError(f"{here}.flavors", data["flavors"], "names no flavor")
    if data.get("toolchain") not in (None, *TOOLCHAINS):
        raise ConfigError(f"{here}.toolchain", data["toolchain"], f"must be one of {', '.join(TOOLCHAINS)} or null")
    for field in ("expected_output", "converts_weights", "fixed_addresses"):
        if not isinstance(data.get(field, True), bool):
            raise ConfigError(f"{here}.{field}", data[field], "must be true or false")
    calibration = data.get("calibration")
    if calibration is not None and (not isinstance(calibration, str) or not calibration):
        raise ConfigError(f"{here}.calibration", calibration, "must be the path of a calibration file, or null")
    tracker = data.get("tracker")
    if tracker is not None and not (isinstance(tracker, str) and TRACKER.fullmatch(tracker)):
        raise ConfigError(f"{here}.tracker", tracker, "must be the https:// address of an issue tracker, or null")
    profiling = strings("profiling", data.get("profiling", []))
    if profiling and not any("{csv}" in flag for flag in profiling):
        raise ConfigError(f"{here}.profiling", data["profiling"], "must name the timeline file as {csv}")
    return Profile(
        name=name, doc=str(data.get("doc", "")), compiler=data["compiler"], flags=strings("flags", data["flags"]),
        flavor_flags=tuple((v, tuple(f)) for v, f in sorted(flavor_flags.items())), mlir=data["mlir"],
        runner=data["runner"], run_flags=strings("run_flags", data["run_flags"]),
        functions=tuple(sorted(functions.items())), io=data["io"], dump_tool=data["dump_tool"],
        flavors=tuple(data["flavors"]), compile_only=tuple(data.get("compile_only", [])),
        expected_output=data.get("expected_output", True), converts_weights=data.get("converts_weights", False),
        int8_rounding=data.get("int8_rounding", "tflite"), bf16_bias_add=data.get("bf16_bias_add", "fused"),
        accumulation=data.get("accumulation", "f32"), accumulation_tile=tile,
        profiling=profiling, benchmark_tool=data.get("benchmark_tool"),
        toolchain=data.get("toolchain"), timeouts=parse_rules(data.get("timeouts", {}), f"{here}.timeouts"),
        calibration=calibration, fixed_addresses=data.get("fixed_addresses", False),
        toggle_flags=strings("toggle_flags", data.get("toggle_flags", [])), tracker=tracker)


def _read(path: Path, field: str) -> dict:
    data = load_json(path, field)
    if not isinstance(data, dict) or set(data) != {"targets"} or not isinstance(data["targets"], dict):
        raise ConfigError(field, str(path), 'must be an object {"targets": {name: profile, ...}}')
    return data["targets"]


def load_profiles(user_file: Path | None = None) -> dict[str, Profile]:
    """The built-in profiles, with the user's file (if any) adding or overriding profiles."""
    merged = _merge(_read(BUILTIN_FILE, "targets.json"), "targets.json")
    where = "targets.json"
    if user_file is not None:
        where = f"CONV_SWEEP_TARGETS_FILE ({user_file})"
        raw = _read(user_file, "CONV_SWEEP_TARGETS_FILE")
        for entry in raw.values():  # a calibration file is named relative to the targets file
            if isinstance(entry, dict) and isinstance(entry.get("calibration"), str) and entry["calibration"]:
                entry["calibration"] = str(Path(user_file).parent / entry["calibration"])
        merged = _merge(raw, where, merged)
    return {name: _profile(name, data, where) for name, data in merged.items()}


def select(text: str, profiles: dict[str, Profile]) -> tuple[Profile, ...]:
    """CONV_SWEEP_TARGET: one target or a comma-separated list, in that order. A target is a
    profile's name, or `<profile>@<version>`: the profile with another release of its
    toolchain (see versioned)."""
    names = [part.strip() for part in (text or DEFAULT_TARGET).split(",") if part.strip()]
    if not names:
        names = [DEFAULT_TARGET]
    selected = []
    for item in names:
        name, at, version = item.partition("@")
        if name not in profiles:
            raise ConfigError("CONV_SWEEP_TARGET", name, f"is not a target; known: {', '.join(sorted(profiles))}")
        if not all(c.isalnum() or c in "-_." for c in name):
            raise ConfigError("CONV_SWEEP_TARGET", name, "target names may hold letters, digits, '-', '_', '.'")
        selected.append(versioned(profiles[name], version, item) if at else profiles[name])
    from pipeline.core.layout import folder

    if len({folder(p.name) for p in selected}) != len(selected):
        raise ConfigError("CONV_SWEEP_TARGET", text, "names a target twice")
    return tuple(selected)


def toolchain_kind(profile: Profile) -> str:
    """The toolchain a version of the profile comes from: its own (torq), else stock IREE's wheels."""
    return profile.toolchain or "iree"


def pinned_version(kind: str) -> str:
    """The release a bare profile of this toolchain uses: the Torq pin, or the venv's IREE."""
    from importlib.metadata import version

    from pipeline.targets import toolchain

    return toolchain.KINDS[kind].pinned or version("iree-base-compiler")


def versioned(profile: Profile, version: str, item: str) -> Profile:
    """`<profile>@<version>`: the profile with that release of its toolchain's wheels
    (installed on demand beside the pinned one). The pinned release is the bare profile.
    A stock IREE profile of another release reads the TFLite importer's bytecode, never the
    text today's iree-opt prints: older IREE releases cannot parse the text of today's TOSA
    dialect, while MLIR bytecode is versioned (docs/targets.md#compiler-versions)."""
    if not VERSION.fullmatch(version):
        raise ConfigError("CONV_SWEEP_TARGET", item, "must be <target>@<version>, e.g. torq@2.2.1 or llvm-cpu@3.12.0")
    kind = toolchain_kind(profile)
    if version == pinned_version(kind):
        return profile
    return replace(profile, name=f"{profile.name}@{version}", version=version, toolchain=kind,
                   mlir="bytecode", calibration=str(profile.calibration_file))


def installed_toolchain(profile: Profile, root: Path, install_to=None, backends=None) -> dict | None:
    """The manifest of the profile's toolchain, or a ConfigError naming the command that
    installs it; None for a profile without one. A version's toolchain is installed on
    demand where `install_to` (a stream for the install's progress) is given. A version
    whose compiler cannot read today's importers' MLIR (the install's probes) is refused:
    for every backend of its flavors, or for `backends` where given (one case's)."""
    if not profile.toolchain:
        return None
    from pipeline.targets import toolchain

    found = toolchain.manifest(root, kind=profile.toolchain, version=profile.version)
    if found is None and profile.version and install_to is not None:
        try:
            toolchain.install(root, out=install_to, kind=profile.toolchain, version=profile.version)
        except toolchain.ToolchainError as err:
            raise ConfigError("CONV_SWEEP_TARGET", profile.name, str(err)) from None
        found = toolchain.manifest(root, kind=profile.toolchain, version=profile.version)
    if found is not None and profile.version:
        for backend in sorted(backends or {flavor.split("_")[0] for flavor in profile.flavors}):
            readable, error = toolchain.reads(found, backend)
            if not readable:
                raise ConfigError("CONV_SWEEP_TARGET", profile.name,
                                  f"{profile.toolchain} {profile.version}'s compiler cannot read the MLIR today's "
                                  f"{backend} importer writes ({error}): choose a later release")
    if found is None:
        what = f"{profile.toolchain} {profile.version}" if profile.version else "the Torq toolchain"
        raise ConfigError("CONV_SWEEP_TARGET", profile.name,
                          f"needs {what}, which is not installed in "
                          f"{toolchain.install_dir(root, kind=profile.toolchain, version=profile.version)}; "
                          f"install it with `{toolchain.INSTALL_COMMAND}`")
    return found


def resolve_tool(profile: Profile, name: str, base: Path, manifest: dict | None = None) -> str:
    """The absolute command of one of the profile's tools: from its toolchain when it has
    one, else a path (relative to the user's folder) or a name looked up like tool_path."""
    path = resolve(name, base, manifest["tools"] if manifest else None)
    if path is None:
        raise ConfigError(f"target {profile.name}", name, "is not an executable file")
    return path


def toolchain_identity(manifest: dict | None) -> dict:
    """What identifies a toolchain (wheel versions and digests, C runtime package versions);
    empty for stock IREE, whose package versions are in the stage fingerprints."""
    if not manifest:
        return {}
    return {"wheels": manifest.get("wheels"), "c_runtime": manifest.get("c_runtime")}

