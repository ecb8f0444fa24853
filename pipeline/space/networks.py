"""The networks profile (CONV_SWEEP_PROFILE=networks): the conv layers of well-known networks,
from the table pipeline/space/networks.json (written by pipeline/dev/networks.py from
keras.applications and torchvision.models; read here without TensorFlow or torch).

Each distinct geometry is swept once, whichever layers use it; `layers()` lists them all, and
`net:<network>` selects a network's cases (pipeline/engine/selection.py). A network's conv
layers that no geometry expresses are not swept: `skipped()` lists them, with the reason.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from pipeline.core.errors import ConfigError
from pipeline.space.geometry import Geometry

TABLE = Path(__file__).with_name("networks.json")
CATEGORY = "net_"  # a geometry's category: net_<the first network that uses it>


@lru_cache(maxsize=1)
def table() -> dict:
    return json.loads(TABLE.read_text())["networks"]


@lru_cache(maxsize=1)
def layers() -> tuple[tuple[str, dict, Geometry], ...]:
    """(network, layer record, its geometry) for every conv layer of every network, in order;
    the geometry carries the layer's fused activation."""
    def geometry(name: str, layer: dict) -> Geometry:
        fused = {} if layer["activation"] == "none" else {"activation": layer["activation"]}
        return Geometry.from_dict({**layer["geometry"], **fused}, f"{TABLE.name}: {name}.{layer['layer']}")

    return tuple((name, layer, geometry(name, layer)) for name, net in table().items() for layer in net["layers"])


def skipped(network: str) -> list[dict]:
    """The network's conv layers that no geometry expresses, [{"layer", "kind", "reason"}]: not swept."""
    return table()[network].get("skipped", [])


def by_network() -> dict[str, list[tuple[dict, Geometry]]]:
    """network -> (layer record, its geometry) of each of its conv layers, in order."""
    out: dict[str, list[tuple[dict, Geometry]]] = {}
    for name, layer, g in layers():
        out.setdefault(name, []).append((layer, g))
    return out


def geometries() -> tuple[tuple[str, Geometry], ...]:
    """(category, geometry) of each distinct geometry, in the order the networks first use them."""
    seen: dict[Geometry, str] = {}
    for network, _, g in layers():
        seen.setdefault(g, CATEGORY + network)
    return tuple((category, g) for g, category in seen.items())


def geometry_ids(network: str) -> set[str]:
    """The ids of the geometries a network's conv layers use."""
    if network not in table():
        raise ConfigError("net", network, f"is not a network of the networks profile: {', '.join(table())}")
    return {g.id for _, g in by_network()[network]}
