"""Cases: one geometry in one backend and flavor, named as the artifact folder,
the doit subtask and the pytest id alike.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from pipeline.core.errors import ConfigError
from pipeline.space.expected import Expectation, match
from pipeline.space.refusal import refusal
from pipeline.space.geometry import Geometry
from pipeline.space.given import SUFFIX_DIGITS, GivenWeights

# backend -> its flavors, in sweep order
FLAVORS = {
    "tflite": ("f32", "w8if32", "w8i8"),
    "onnx": ("f32", "bf16"),
}
VARIANTS = tuple(f"{b}_{f}" for b, flavors in FLAVORS.items() for f in flavors)
MODEL_FILE = {"tflite": "model.tflite", "onnx": "model.onnx"}
DATA_MODES = ("random", "adversarial", "structured")  # pipeline/space/data.py
ADVERSARIAL_SUFFIX = "_adv"  # a case of the adversarial data mode: conv_..._adv
DATA_SUFFIXES = {"random": "", "adversarial": ADVERSARIAL_SUFFIX, "structured": "_str"}  # case names per mode


def geometry_id(name: str) -> str:
    """The geometry id in a case's name (conv_<backend>_<flavor>_<id>[<data suffix>][<weights
    suffix>]); empty for a name that is no case's."""
    import re

    name = re.sub(rf"_w[0-9a-f]{{{SUFFIX_DIGITS}}}$", "", name)
    for suffix in DATA_SUFFIXES.values():
        if suffix and name.endswith(suffix):
            name = name[:-len(suffix)]
    parts = name.split("_", 3)
    return parts[3] if len(parts) == 4 and parts[0] == "conv" else ""


def check_data_mode(mode: str, field: str = "data") -> str:
    if mode not in DATA_MODES:
        raise ConfigError(field, mode, f"must be one of {', '.join(DATA_MODES)}")
    return mode


@dataclass(frozen=True)
class Case:
    """One geometry in one backend and flavor."""

    geometry: Geometry  # the convolution
    backend: str  # "tflite" (built from tf.keras) or "onnx" (built from torch)
    flavor: str  # one of FLAVORS[backend]
    category: str = "custom"  # the sweep category that drew the geometry
    compile_only: bool = False  # verify checks that it compiles and runs, not the numbers
    expected: Expectation | None = None  # its entry in the target's expected-failures list
    target: str = "llvm-cpu"  # the target profile it is compiled for and run on
    # `doit shrink --keep-data`: the geometry whose seeded weights and input this case crops
    data_from: Geometry | None = None
    data: str = "random"  # the data mode (pipeline/space/data.py): random, adversarial or structured
    weights: GivenWeights | None = None  # a model's own weights (pipeline/space/given.py); None: seeded ones

    def __post_init__(self) -> None:
        check_variant(self.backend, self.flavor)
        check_data_mode(self.data)

    @property
    def expect_stage(self) -> str | None:
        """The stage it is listed to fail at, if listed."""
        return self.expected.stage if self.expected else None

    @property
    def variant(self) -> str:
        return f"{self.backend}_{self.flavor}"

    @cached_property
    def name(self) -> str:
        base = f"conv_{self.backend}_{self.flavor}_{self.geometry.id}"
        base = f"{base}_data_{self.data_from.id}" if self.data_from is not None else base
        return base + DATA_SUFFIXES[self.data] + (self.weights.suffix if self.weights else "")

    @cached_property
    def key(self) -> str:
        """The case on its target: the name of its vmfb:/verify: tasks and its pytest id."""
        return f"{self.name}@{self.target}"

    @property
    def model_file(self) -> str:
        return MODEL_FILE[self.backend]

    @property
    def convs(self) -> int:
        """The conv ops its imported MLIR holds: the TFLite converter writes a grouped conv that
        is not depthwise as one conv per group (slices, the convs, a concat); every other case
        is one conv (tests/test_model_tflite.py counts them in the importer's MLIR). A stage's
        time follows its convs as well as its MACs (pipeline/targets/cost.py)."""
        g = self.geometry
        return g.groups if self.backend == "tflite" and g.groups > 1 and not g.depthwise else 1

    @property
    def seed(self) -> int:
        """Seed of this case's inputs: stable across runs and machines (a case cropping another's
        data: that case's)."""
        if self.data_from is not None:
            return _stable_hash(f"conv_{self.backend}_{self.flavor}_{self.data_from.id}{DATA_SUFFIXES[self.data]}")
        return _stable_hash(self.name)

    @property
    def weight_seed(self) -> int:
        """Seed of the model's weights: one per geometry and data mode, shared by every flavor."""
        geometry = (self.data_from or self.geometry).id
        return _stable_hash(geometry + DATA_SUFFIXES[self.data])


def _stable_hash(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())


def check_variant(backend: str, flavor: str, field: str = "flavor") -> None:
    if backend not in FLAVORS:
        raise ConfigError("backend", backend, f"must be one of {', '.join(FLAVORS)}")
    if flavor not in FLAVORS[backend]:
        raise ConfigError(field, flavor, f"is not a {backend} flavor; known: {', '.join(FLAVORS[backend])}")


def parse_variants(text: str, field: str) -> frozenset[str]:
    """Comma-separated backend_flavor names (e.g. "onnx_bf16,tflite_w8i8"), each checked."""
    out = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item not in VARIANTS:
            raise ConfigError(field, item, f"is not a known flavor; known: {', '.join(VARIANTS)}")
        out.add(item)
    return frozenset(out)


def make_cases(sampled: list[tuple[str, Geometry, GivenWeights | None]], compile_only: frozenset[str] = frozenset(),
               expectations: tuple = (), target: str = "llvm-cpu", variants: tuple[str, ...] = VARIANTS,
               data: str = "random") -> list[Case]:
    """Every (category, geometry, given weights) in every backend and flavor the target supports
    and the backend's frontend can build (see `refused`), with its expected failure if listed."""
    cases = []
    for category, geometry, *given in sampled:  # (the weights may be left out: seeded ones)
        given = given[0] if given else None
        for backend, flavors in FLAVORS.items():
            for flavor in flavors:
                if f"{backend}_{flavor}" not in variants or refusal(geometry, backend, flavor):
                    continue
                case = Case(geometry, backend, flavor, category, f"{backend}_{flavor}" in compile_only,
                            target=target, data=data, weights=given)
                expected = match(case.name, expectations) if expectations else None
                if expected:
                    case = replace(case, expected=expected)
                cases.append(case)
    return cases


@dataclass(frozen=True)
class Refused:
    """A case the sweep would have had, were its frontend able to build the geometry."""

    name: str  # the case name it would have had
    variant: str  # backend_flavor
    category: str
    reason: str


def refused(sampled: list[tuple[str, Geometry, GivenWeights | None]], data: str = "random") -> list[Refused]:
    """The cases not generated because their frontend refuses the geometry or their flavor cannot check it."""
    out = []
    for category, geometry, *given in sampled:
        given = given[0] if given else None
        for backend, flavors in FLAVORS.items():
            for flavor in flavors:
                reason = refusal(geometry, backend, flavor)
                if reason:
                    out.append(Refused(Case(geometry, backend, flavor, category, data=data, weights=given).name,
                                       f"{backend}_{flavor}",
                                       category, reason))
    return out
