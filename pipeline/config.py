"""Run configuration, resolved once from the environment at the edge: dodo.py (through
pipeline/engine/tasks.py's load) and the pytest front end, tests/test_conv_sweep.py.

The knobs are the environment variables declared in KNOBS below (docs/knobs.md explains each and
tests/test_knobs.py checks its table against KNOBS); any other CONV_SWEEP_* variable is refused.
"""
from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

from pipeline.space import expected
from pipeline.space.cases import DATA_MODES, Case, Refused, check_data_mode, make_cases, parse_variants, refused
from pipeline.core.chain import MLIR, MLIR_BYTECODE
from pipeline.core.errors import ConfigError
from pipeline.core.executables import resolve
from pipeline.core.tools import fixed_addresses_launch
from pipeline.space.sweep import DEFAULT_N, PROFILES, SweepSpec, joined, load_spec, profile_spec
from pipeline.space.geometry import macs as geometry_macs
from pipeline.core.layout import Layout
from pipeline.targets import cost
from pipeline.targets.cost import Limit
from pipeline.targets.profiles import DEFAULT_TARGET, Profile, installed_toolchain, load_profiles, resolve_tool, select

DEFAULT_TIMEOUT = 3600.0  # at least every built-in profile's hard limits (docs/targets.md: time limits)
SHARED, SHIPPED = "shared", "shipped"  # how Dask workers reach the build folder
ARTIFACT_MODES = ("auto", SHARED, SHIPPED)
TIMEOUT_MODES = ("predicted", "fixed")  # CONV_SWEEP_TIMEOUTS
ORDERS = ("chains", "breadth")  # CONV_SWEEP_ORDER
DEFAULT_PROFILE = "seed"  # CONV_SWEEP_PROFILE: a key of PROFILES
DEFAULT_PROGRESS_INTERVAL = 5.0
DEFAULT_JOBS = 2


class Knob(NamedTuple):
    name: str
    default: str  # as docs/knobs.md's table shows it
    meaning: str


# Every knob, in docs/knobs.md's order: the one list of them (tests/test_knobs.py checks the doc's
# table and a bad value of each against it).
KNOBS = (
    Knob("CONV_SWEEP_N", str(DEFAULT_N), "geometries per category"),
    Knob("CONV_SWEEP_BUILD_DIR", "build/ beside dodo.py (git-ignored)", "artifact root; doit's database too"),
    Knob("CONV_SWEEP_TARGET", DEFAULT_TARGET, "target profile (or <profile>@<version>), or a comma-separated list swept in one run"),
    Knob("CONV_SWEEP_TARGETS_FILE", "none", "JSON file adding or overriding target profiles"),
    Knob("CONV_SWEEP_TOOLCHAIN_DIR", "~/.cache/conv-sweep/toolchain", "where `doit toolchain` installs Torq's tools"),
    Knob("CONV_SWEEP_COMPILE_FLAGS", "empty", "extra compile flags, after the target's own, split like a shell would"),
    Knob("CONV_SWEEP_IREE_COMPILE", "the target's compiler", "the compiler, replacing the selected targets'"),
    Knob("CONV_SWEEP_TIMEOUT", f"{DEFAULT_TIMEOUT:g}", "seconds per tool invocation: the cap of every limit"),
    Knob("CONV_SWEEP_CACHE_DIR", "~/.cache/conv-sweep/store ($XDG_CACHE_HOME/conv-sweep/store)",
         "the store of stage outputs shared by build folders; off: none"),
    Knob("CONV_SWEEP_TOOL_FILES", "none", "files (separated like PATH) identifying a launcher script's tool"),
    Knob("CONV_SWEEP_BUDGET", "the profiles'", "compile=S,run=S: every selected target's budgets"),
    Knob("CONV_SWEEP_TIMEOUTS", TIMEOUT_MODES[0], "predicted (limits follow a case's predicted cost) or fixed"),
    Knob("CONV_SWEEP_PROFILE", DEFAULT_PROFILE, "built-in geometry profile: seed, extended or networks"),
    Knob("CONV_SWEEP_SPEC", "built-in categories", "JSON file replacing the sweep definition"),
    Knob("CONV_SWEEP_INCLUDE", "none", "spec files (separated like PATH) whose geometries join the sweep's, e.g. build/hunt/found.json"),
    Knob("CONV_SWEEP_COMPILE_ONLY", "empty", "flavors only compiled, e.g. onnx_bf16,tflite_w8i8"),
    Knob("CONV_SWEEP_SCHEDULER", "unset", "run the stages on Dask: local:N or tcp://host:port"),
    Knob("CONV_SWEEP_ARTIFACTS", ARTIFACT_MODES[0], "with a scheduler: how workers reach the build folder"),
    Knob("CONV_SWEEP_SHARD", "unset", "i/N: only shard i of N of the cases"),
    Knob("CONV_SWEEP_BENCHMARK", "0", "1: time every passing module with its target's benchmark tool"),
    Knob("CONV_SWEEP_EXPECTED_FAILURES", "pipeline/space/expected_failures/<target>.json",
         "the expected-failures list; {target} in it is replaced by the target's name"),
    Knob("CONV_SWEEP_ORDER", ORDERS[0], "chains (each case's chain as early as it can) or breadth"),
    Knob("CONV_SWEEP_PROGRESS_INTERVAL", f"{DEFAULT_PROGRESS_INTERVAL:g}", "seconds between progress lines"),
    Knob("CONV_SWEEP_JOBS", str(DEFAULT_JOBS), "doit workers of the pytest front end"),
    Knob("CONV_SWEEP_DATA", DATA_MODES[0], "the data: random (zero-mean uniform), adversarial (cases named _adv) or structured (_str)"),
)
KNOB_PREFIX = "CONV_SWEEP_"


def check_names(env) -> None:
    """Every CONV_SWEEP_* variable of `env` is a knob: a misspelt one is an error, not ignored."""
    import difflib

    names = {k.name.removeprefix(KNOB_PREFIX): k.name for k in KNOBS}
    for var in sorted(v for v in env if v.startswith(KNOB_PREFIX) and v not in names.values()):
        near = difflib.get_close_matches(var.removeprefix(KNOB_PREFIX).upper(), names, n=1)  # the prefix is shared
        guess = f"; did you mean {names[near[0]]}?" if near else ""
        raise ConfigError(var, env[var], f"is not a knob{guess} (docs/knobs.md lists them)")


@dataclass(frozen=True)
class Scheduler:
    """Where the stages run: an existing scheduler, or a LocalCluster started for the run."""

    address: str | None  # tcp://host:port; None for a local cluster
    local_workers: int = 0  # local:N

    @property
    def slots(self) -> int:
        """Worker threads: one per local worker (an existing cluster: its doit slots, `doit -n` to set)."""
        return self.local_workers or 4


def parse_scheduler(text: str | None) -> Scheduler | None:
    text = (text or "").strip()
    if not text:
        return None
    if text.startswith("local:"):
        count = text[len("local:"):]
        if not count.isdigit() or int(count) < 1:
            raise ConfigError("CONV_SWEEP_SCHEDULER", text, "local:N needs N >= 1 worker processes")
        return Scheduler(None, int(count))
    if text.startswith(("tcp://", "tls://")) and len(text) > len("tcp://"):
        return Scheduler(text)
    raise ConfigError("CONV_SWEEP_SCHEDULER", text, "must be local:N or a scheduler address tcp://host:port")


def parse_artifacts(text: str | None) -> str:
    text = (text or "").strip() or ARTIFACT_MODES[0]
    if text not in ARTIFACT_MODES:
        raise ConfigError("CONV_SWEEP_ARTIFACTS", text, f"must be one of {', '.join(ARTIFACT_MODES)}")
    return text


@dataclass(frozen=True)
class Target:
    """A selected profile with its tools resolved and its expected failures loaded."""

    profile: Profile
    compiler: str  # absolute path of the compiler (CONV_SWEEP_IREE_COMPILE overrides the profile's)
    runner: str  # absolute path of the run tool
    dump_tool: str  # absolute path of the module dumper (reads the module's signature)
    extra_flags: tuple[str, ...] = ()  # CONV_SWEEP_COMPILE_FLAGS, after the profile's flags
    expectations: tuple = ()  # expected.Expectation entries of this target
    expected_path: Path = expected.DEFAULT_DIR / "llvm-cpu.json"  # where they came from
    toolchain: dict | None = None  # the manifest of the profile's installed toolchain, if it uses one
    benchmark_tool: str | None = None  # absolute path of the profile's benchmark tool, if it has one
    compile_launch: tuple[str, ...] = ()  # before the compiler: setarch -R for a profile with fixed_addresses
    tool_files: tuple[str, ...] = ()  # CONV_SWEEP_TOOL_FILES: files that identify a launcher script's tool

    @property
    def launchers(self) -> dict:
        """What tells a launcher script's tool (pipeline/core/fingerprint.py, launched_identity):
        the toolchain's own launchers, identified by its wheel digests, and the user's files."""
        tools = (self.toolchain or {}).get("tools") or {}
        return {"trusted": frozenset(os.path.realpath(p) for p in tools.values()), "extra": self.tool_files}

    @property
    def name(self) -> str:
        return self.profile.name

    def compile_flags(self, variant: str) -> tuple[str, ...]:
        return self.profile.flags_for(variant) + self.extra_flags

    def tools(self, benchmark: bool) -> tuple[tuple[str, str], ...]:
        """(role, path) of every executable a run uses: compiler, runner, module dumper, and the
        benchmark tool when modules are timed (CONV_SWEEP_BENCHMARK=1) and the profile has one."""
        timed = (("benchmark_tool", self.benchmark_tool),) if benchmark and self.benchmark_tool else ()
        return (("compiler", self.compiler), ("runner", self.runner), ("dump_tool", self.dump_tool), *timed)


@dataclass(frozen=True)
class Config:
    n: int = DEFAULT_N  # geometries per category
    build_dir: Path = Path("build")  # artifact root; one folder per case under cases/
    compile_flags: tuple[str, ...] = ()  # extra compile flags, after each target's own
    timeout: float = DEFAULT_TIMEOUT  # seconds per tool invocation
    spec: SweepSpec = field(default_factory=SweepSpec)  # categories and listed geometries
    spec_path: str | None = None  # where the spec came from, None for the built-in one
    compile_only: frozenset[str] = frozenset()  # backend_flavor names not checked numerically
    targets: tuple[Target, ...] = ()  # the selected targets, in CONV_SWEEP_TARGET's order
    scheduler: Scheduler | None = None  # run the stages on Dask (None: in doit's own workers)
    artifacts: str = "auto"  # with a scheduler: how workers reach the build folder
    shard: tuple[int, int] | None = None  # (i, N): shard i of N of the cases
    benchmark: bool = False  # time each passing module with its target's benchmark tool
    predicted_timeouts: bool = True  # compile and run limits follow the case's predicted cost
    cache_dir: Path | None = None  # the content-addressed store shared by build folders; None: off
    budgets: tuple[tuple[str, float], ...] = ()  # CONV_SWEEP_BUDGET: (stage, seconds) replacing the profiles' budgets
    order: str = ORDERS[0]  # the order case chains start in: chains (depth first) or breadth (doit's own)
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL  # seconds between progress lines off a terminal
    data: str = DATA_MODES[0]  # the data mode of every case (pipeline/space/data.py)
    profiles: tuple[Profile, ...] = ()  # the selected target profiles, in CONV_SWEEP_TARGET's order
    # what selects and resolves targets, kept for the Config of another release (at_version)
    targets_file: Path | None = None  # CONV_SWEEP_TARGETS_FILE, resolved; None: the built-in profiles alone
    toolchain_dir: Path | None = None  # CONV_SWEEP_TOOLCHAIN_DIR, resolved; None: the default folder
    compiler: str | None = None  # CONV_SWEEP_IREE_COMPILE, resolved: every target's compiler; None: each its own
    # re-run the tool invocations a previous run cut at the same limit (else a known timeout is a
    # result like any other, taken from the store: pipeline/run/stages.py)
    retry_timeouts: bool = False
    # the run's start (time.time()): the limits count the invocations the build folder recorded
    # before it (pipeline/targets/cost.py's LimitBook); None: all of them
    observed_before: float | None = None

    @classmethod
    def from_env(cls, environ=None, default_build_dir: Path | None = None, base_dir: Path | None = None,
                 install_to=None, backends=None) -> "Config":
        """Relative paths in the knobs are taken from `base_dir` (the user's working directory).
        A selected compiler version not yet installed is installed, its progress written to
        `install_to`, where that stream is given (a run); else it is an error naming the
        command that installs it. A release must read today's importers' MLIR of every backend,
        or of `backends` where given."""
        env = os.environ if environ is None else environ
        base = Path(base_dir or os.getcwd())
        check_names(env)
        n = _parse_int(env, "CONV_SWEEP_N", DEFAULT_N, minimum=0)
        jobs(env)  # read by the pytest front end; checked here before any work
        timeout = _parse_float(env, "CONV_SWEEP_TIMEOUT", DEFAULT_TIMEOUT)
        build_dir = base / (env.get("CONV_SWEEP_BUILD_DIR") or default_build_dir or "build")
        try:
            flags = tuple(shlex.split(env.get("CONV_SWEEP_COMPILE_FLAGS", "")))
        except ValueError as err:
            raise ConfigError("CONV_SWEEP_COMPILE_FLAGS", env["CONV_SWEEP_COMPILE_FLAGS"], str(err)) from None
        compiler = env.get("CONV_SWEEP_IREE_COMPILE") or None
        if compiler:
            resolved = resolve(compiler, base)
            if resolved is None:
                raise ConfigError("CONV_SWEEP_IREE_COMPILE", compiler, "is not an executable file")
            compiler = resolved
        targets_file = base / env["CONV_SWEEP_TARGETS_FILE"] if env.get("CONV_SWEEP_TARGETS_FILE") else None
        profiles = select(env.get("CONV_SWEEP_TARGET", ""), load_profiles(targets_file))
        spec_path = env.get("CONV_SWEEP_SPEC") or None
        profile = env.get("CONV_SWEEP_PROFILE", "").strip() or DEFAULT_PROFILE
        if profile not in PROFILES:
            raise ConfigError("CONV_SWEEP_PROFILE", profile, f"must be one of {', '.join(PROFILES)}")
        if spec_path and env.get("CONV_SWEEP_PROFILE", "").strip():
            raise ConfigError("CONV_SWEEP_PROFILE", profile,
                              "cannot be combined with CONV_SWEEP_SPEC, whose file lists its own categories")
        spec = load_spec(base / spec_path) if spec_path else profile_spec(profile)
        included = [p for p in env.get("CONV_SWEEP_INCLUDE", "").split(os.pathsep) if p.strip()]
        spec = joined(spec, [(f"CONV_SWEEP_INCLUDE ({p})", load_spec(base / p, "CONV_SWEEP_INCLUDE"))
                             for p in included])
        compile_only = parse_variants(env.get("CONV_SWEEP_COMPILE_ONLY", ""), "CONV_SWEEP_COMPILE_ONLY")
        pattern = env.get("CONV_SWEEP_EXPECTED_FAILURES") or None
        if pattern and len(profiles) > 1 and "{target}" not in pattern:
            raise ConfigError("CONV_SWEEP_EXPECTED_FAILURES", pattern,
                              "must contain {target} when several targets are selected (failures differ by target)")
        toolchain_root = toolchain_dir(env)
        if env.get("CONV_SWEEP_TOOLCHAIN_DIR"):  # a folder, or one that can be made (read-only is fine: installed)
            existing = _nearest_existing(toolchain_root)
            if not existing.is_dir():
                raise ConfigError("CONV_SWEEP_TOOLCHAIN_DIR", env["CONV_SWEEP_TOOLCHAIN_DIR"],
                                  f"is not a folder ({existing} is a file)")
        tool_files = _tool_files(env, base)
        targets = []
        for profile in profiles:
            expected_path = base / pattern.replace("{target}", profile.name) if pattern \
                else expected.DEFAULT_DIR / f"{profile.name}.json"
            targets.append(_target(profile, toolchain_root, base, compiler, flags, expected_path, not pattern,
                                   tool_files, install_to, backends))
        scheduler = parse_scheduler(env.get("CONV_SWEEP_SCHEDULER"))
        artifacts = parse_artifacts(env.get("CONV_SWEEP_ARTIFACTS"))
        from pipeline.space import shard

        part = shard.parse(env.get("CONV_SWEEP_SHARD"))
        benchmark = env.get("CONV_SWEEP_BENCHMARK", "").strip() or "0"
        if benchmark not in ("0", "1"):
            raise ConfigError("CONV_SWEEP_BENCHMARK", benchmark, "must be 1 (time each module) or 0")
        timeouts = env.get("CONV_SWEEP_TIMEOUTS", "").strip() or TIMEOUT_MODES[0]
        if timeouts not in TIMEOUT_MODES:
            raise ConfigError("CONV_SWEEP_TIMEOUTS", timeouts, f"must be one of {', '.join(TIMEOUT_MODES)}")
        cache_dir = _cache_dir(env, base)
        _check_writable(build_dir)
        return cls(n, build_dir, flags, timeout, spec, spec_path, compile_only, tuple(targets), scheduler, artifacts,
                   part, benchmark == "1", timeouts == "predicted", cache_dir,
                   profiles=tuple(profiles), budgets=parse_budgets(env.get("CONV_SWEEP_BUDGET", "")), order=order(env),
                   targets_file=targets_file, toolchain_dir=toolchain_root, compiler=compiler,
                   progress_interval=progress_interval(env),
                   data=check_data_mode(env.get("CONV_SWEEP_DATA", "").strip() or DATA_MODES[0], "CONV_SWEEP_DATA"),
                   observed_before=time.time())

    @classmethod
    def for_toolchain(cls, environ=None, base_dir: Path | None = None) -> "Config":
        """What `doit toolchain` needs, and no more: the selected profiles (CONV_SWEEP_TARGET,
        CONV_SWEEP_TARGETS_FILE) and where toolchains go (CONV_SWEEP_TOOLCHAIN_DIR). Every
        CONV_SWEEP_* name is checked (a misspelt knob is an error naming it), no other knob's
        value is read, no tool is resolved and no case is made."""
        env = os.environ if environ is None else environ
        base = Path(base_dir or os.getcwd())
        check_names(env)
        targets_file = base / env["CONV_SWEEP_TARGETS_FILE"] if env.get("CONV_SWEEP_TARGETS_FILE") else None
        profiles = select(env.get("CONV_SWEEP_TARGET", ""), load_profiles(targets_file))
        return cls(profiles=tuple(profiles), targets_file=targets_file, toolchain_dir=toolchain_dir(env))

    @cached_property
    def sampled(self):
        """(category, geometry) pairs of the sweep, in order."""
        return self.spec.sample(self.n)

    def cases(self) -> list[Case]:
        from pipeline.space.shard import select

        cases = []
        for target in self.targets:
            cases += make_cases(self.sampled, self.compile_only | frozenset(target.profile.compile_only),
                                target.expectations, target.name, target.profile.flavors, self.data)
        return select(cases, self.shard)

    def refused(self) -> list[Refused]:
        """The cases not generated because a frontend refuses their geometry (any target)."""
        return refused(self.sampled, self.data)

    def target(self, name: str) -> Target:
        return next(t for t in self.targets if t.name == name)

    def scratch(self, folder) -> "Config":
        """This run building in `folder` (a triage command's own: hunt cases, shrink attempts,
        flag trials, bisected releases), every case in this process: no Dask scheduler, no shard."""
        return replace(self, build_dir=Path(folder), scheduler=None, shard=None)

    def at_version(self, target: str, version: str, expected_failures: Path | None = None,
                   base_dir: Path | None = None, install_to=None, backends=None) -> "Config":
        """This run with one target: `target` at another release of its toolchain, as
        CONV_SWEEP_TARGET=<profile>@<version> selects it (pipeline/targets/profiles.py), its tools
        from that release's install, or the run's compiler where CONV_SWEEP_IREE_COMPILE replaces
        every target's. A release not installed yet is installed, its progress written to
        `install_to`, where that stream is given, else it is an error; a release must read today's
        importers' MLIR of every backend, or of `backends` where given (a ConfigError says it
        cannot read). Its expected failures are `expected_failures`' (a file), else the release's
        own list where there is one. Relative tool paths of a profile start at `base_dir` (the
        user's folder; default: the working folder)."""
        current = self.target(target)
        (profile,) = select(f"{current.profile.base}@{version}", load_profiles(self.targets_file))
        expected_path = expected_failures or expected.DEFAULT_DIR / f"{profile.name}.json"
        from pipeline.targets.toolchain import default_root

        root = self.toolchain_dir or default_root()
        return replace(self, targets=(_target(profile, root, Path(base_dir or os.getcwd()), self.compiler,
                                              current.extra_flags, Path(expected_path), expected_failures is None,
                                              current.tool_files, install_to, backends),))

    def store(self):
        """The store of stage outputs (pipeline/core/store.py), or None where it is off."""
        from pipeline.core.store import Store

        return Store(self.cache_dir) if self.cache_dir else None

    @property
    def layout(self) -> Layout:
        """Where everything lives in the build folder (pipeline/core/layout.py)."""
        return Layout(self.build_dir)

    def report_dir(self, target: str) -> Path:
        return self.layout.report_dir(target)

    @cached_property
    def limits(self) -> cost.LimitBook:
        """This run's limit book: every limit of the run comes from it (pipeline/targets/cost.py)."""
        return cost.LimitBook(self.observed_before)

    def limit(self, case: Case, stage: str) -> Limit:
        """The seconds one `stage` invocation (compile, run) of the case may take: the budget
        (CONV_SWEEP_TIMEOUT, the profile's), lowered to the case's predicted cost
        (pipeline/targets/cost.py) from the target's calibration, widened by what this build
        folder's runs measured before this one started (the run's limit book); a run's, once
        its module is compiled, also from the compiler's estimated cycles where it gives them."""
        profile = self.target(case.target).profile
        rule = profile.rule(stage)
        if rule is not None and stage in dict(self.budgets):
            rule = replace(rule, limit=dict(self.budgets)[stage])
        count = geometry_macs(case.geometry)
        if rule is None or not rule.margin or not self.predicted_timeouts:
            fixed = cost.limit(rule, cost.Envelope(), count, self.timeout, stage, case.convs)
            return fixed if self.predicted_timeouts else replace(fixed, unpredicted="CONV_SWEEP_TIMEOUTS=fixed")
        book, calibration, folder = self.limits, profile.calibration_file, self.report_dir(case.target)
        cycles = self.estimated_cycles(case) if stage in cost.BY_CYCLES else None
        return cost.limit(rule, book.envelope(calibration, folder, stage), count, self.timeout, stage, case.convs,
                          cycles, book.envelope(calibration, folder, stage, "cycles") if cycles else cost.Envelope())

    def estimated_cycles(self, case: Case) -> float | None:
        """The compiler's estimate of the case's compiled module's execution, in cycles, where
        its profile asks the compiler for one and the module is compiled (torq-compile's
        timeline, pipeline/targets/compiler.py); else None."""
        from pipeline.targets.compiler import module_estimate

        return module_estimate(self.target(case.target).profile.profiling, self.case_dir(case))

    def mlir_input(self, case: Case) -> str:
        """The MLIR file the case's target compiler reads: the bytecode where the profile asks for
        it and the importer wrote one (TFLite), else the text."""
        if case.backend == "tflite" and self.target(case.target).profile.mlir == "bytecode":
            return MLIR_BYTECODE
        return MLIR

    def model_dir(self, case: Case) -> Path:
        """The case's target-independent artifacts: model file, MLIR, input."""
        return self.layout.model_dir(case.name)

    def case_dir(self, case: Case) -> Path:
        """The case's artifacts on its target: module, outputs, result.json, logs, repro.sh."""
        return self.layout.case_dir(case.name, case.target)


def _target(profile: Profile, root: Path, base: Path, compiler: str | None, flags: tuple[str, ...],
            expected_path: Path, missing_ok: bool, tool_files: tuple[str, ...], install_to=None,
            backends=None) -> Target:
    """A selected profile as a Target: its toolchain's install found in `root` (installed on demand
    where `install_to` is given: installed_toolchain), its tools resolved (the `compiler` given
    replaces its own), its expected failures loaded from `expected_path` (a missing file is an
    empty list where `missing_ok`)."""
    manifest = installed_toolchain(profile, root, install_to, backends)
    return Target(
        profile, compiler or resolve_tool(profile, profile.compiler, base, manifest),
        resolve_tool(profile, profile.runner, base, manifest),
        resolve_tool(profile, profile.dump_tool, base, manifest),
        flags, expected.load(expected_path, missing_ok=missing_ok), expected_path, manifest,
        resolve_tool(profile, profile.benchmark_tool, base, manifest) if profile.benchmark_tool else None,
        fixed_addresses_launch(f"target {profile.name}: fixed_addresses") if profile.fixed_addresses else (),
        tool_files)


def toolchain_dir(env) -> Path:
    """CONV_SWEEP_TOOLCHAIN_DIR: where toolchains are installed (default: the user cache's)."""
    from pipeline.targets.toolchain import default_root

    raw = env.get("CONV_SWEEP_TOOLCHAIN_DIR")
    return Path(raw).expanduser().absolute() if raw else default_root(env)


def _cache_dir(env, base: Path) -> Path | None:
    """CONV_SWEEP_CACHE_DIR: the store's folder, the default one where unset, None for `off`."""
    from pipeline.core.store import DISABLED, default_dir

    raw = env.get("CONV_SWEEP_CACHE_DIR", "").strip()
    if raw.lower() in DISABLED:
        return None
    folder = base / Path(raw).expanduser() if raw else default_dir(env)
    _check_writable(folder, "CONV_SWEEP_CACHE_DIR")
    return folder


def _nearest_existing(path: Path) -> Path:
    """The path itself where it exists, else its nearest existing parent (what would hold it)."""
    existing = Path(os.path.abspath(path))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def _check_writable(build_dir: Path, knob: str = "CONV_SWEEP_BUILD_DIR") -> None:
    """The build folder, or the folder it will be made in, is a writable folder; else the error
    names the knob. Nothing is created here: the first task (or doit's DB) makes the folder."""
    if "@" in str(build_dir) and knob == "CONV_SWEEP_BUILD_DIR":
        raise ConfigError(knob, str(build_dir),
                          "must not contain '@': IREE's run tools read it as a separator in a module's path")
    existing = _nearest_existing(build_dir)
    if not existing.is_dir():
        raise ConfigError(knob, str(build_dir), f"is not a writable folder ({existing} is a file)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(knob, str(build_dir),
                          f"is not a writable folder (no permission to write in {existing})")


def _parse_int(env, name: str, default: int, minimum: int) -> int:
    raw = env.get(name, "")
    if raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, raw, "must be an integer") from None
    if value < minimum:
        raise ConfigError(name, raw, f"must be at least {minimum}")
    return value


def progress_interval(env) -> float:
    """CONV_SWEEP_PROGRESS_INTERVAL: seconds between progress lines off a terminal (0: every change)."""
    raw = env.get("CONV_SWEEP_PROGRESS_INTERVAL", "")
    if raw.strip() == "":
        return DEFAULT_PROGRESS_INTERVAL
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError("CONV_SWEEP_PROGRESS_INTERVAL", raw, "must be a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise ConfigError("CONV_SWEEP_PROGRESS_INTERVAL", raw, "must be a number of seconds >= 0")
    return value


def order(env) -> str:
    """CONV_SWEEP_ORDER: chains (depth first, the default) or breadth (doit's own order)."""
    value = env.get("CONV_SWEEP_ORDER", "").strip() or ORDERS[0]
    if value not in ORDERS:
        raise ConfigError("CONV_SWEEP_ORDER", env["CONV_SWEEP_ORDER"], f"must be one of {', '.join(ORDERS)}")
    return value


def jobs(env) -> int:
    """CONV_SWEEP_JOBS: doit workers of the pytest front end (default 2)."""
    return _parse_int(env, "CONV_SWEEP_JOBS", DEFAULT_JOBS, minimum=1)


def _tool_files(env, base: Path) -> tuple[str, ...]:
    """CONV_SWEEP_TOOL_FILES: existing files, separated like PATH."""
    raw = env.get("CONV_SWEEP_TOOL_FILES", "")
    files = []
    for item in (p for p in raw.split(os.pathsep) if p.strip()):
        path = base / item
        if not path.is_file():
            raise ConfigError("CONV_SWEEP_TOOL_FILES", raw, f"{item} is not a file")
        files.append(str(path.resolve()))
    return tuple(files)


def parse_budgets(text: str) -> tuple[tuple[str, float], ...]:
    """CONV_SWEEP_BUDGET: `compile=S,run=S` (either or both), seconds > 0."""
    budgets = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        stage, sep, seconds = item.partition("=")
        if not sep or stage.strip() not in cost.TIMED:
            raise ConfigError("CONV_SWEEP_BUDGET", text,
                              f"{item!r} must be stage=seconds with a stage of {', '.join(cost.TIMED)}")
        try:
            value = float(seconds)
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf"):
            raise ConfigError("CONV_SWEEP_BUDGET", text, f"{item!r}: seconds must be a positive number")
        budgets[stage.strip()] = value
    return tuple(sorted(budgets.items()))


def _parse_float(env, name: str, default: float) -> float:
    raw = env.get(name, "")
    if raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(name, raw, "must be a number of seconds") from None
    if not value > 0:
        raise ConfigError(name, raw, "must be positive")
    return value
