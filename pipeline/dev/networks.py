"""Write the networks profile's table (pipeline/space/networks.json) from the installed
keras.applications and torchvision: every conv layer of each network (pipeline/frontends/networks.py).

    python -m pipeline.dev.networks            write it
    python -m pipeline.dev.networks --check    exit 1 if the checked-in table differs

The table is checked in, so that a sweep reads it without TensorFlow; tests/test_networks.py
checks that it is what the installed keras and torchvision give. A torch network's convs that no
geometry expresses (their padding) are listed under its "skipped", with the reason.
"""
from __future__ import annotations

import argparse
import json
import sys

from pipeline.frontends.networks import (KERAS_NETWORKS, TORCH_NETWORKS, build_keras, build_torch, conv_layers,
                                         torch_conv_layers)
from pipeline.space.networks import TABLE


def extract() -> dict:
    """{"networks": {name: {"source", "input", "layers", and "skipped" where any}}} from the
    installed keras and torchvision: the keras networks, then the torch ones."""
    from importlib.metadata import version

    networks = {}
    for name, (constructor, shape) in KERAS_NETWORKS.items():
        networks[name] = {"source": f"keras.applications.{constructor} (keras {version('keras')}, weights=None)",
                          "input": list(shape), "layers": conv_layers(build_keras(name))}
    for name, (constructor, shape) in TORCH_NETWORKS.items():
        layers, skipped = torch_conv_layers(build_torch(name), shape)
        networks[name] = {"source": f"torchvision.models.{constructor} (torchvision {version('torchvision')}, weights=None)",
                          "input": list(shape), "layers": layers, **({"skipped": skipped} if skipped else {})}
    return {"networks": networks}


def text(table: dict) -> str:
    """The table as written: one layer per line, and one skipped layer per line."""
    def listed(records: list[dict]) -> list[str]:
        return [f'  {json.dumps(r, sort_keys=True)}' + ("," if j < len(records) - 1 else "") for j, r in enumerate(records)]

    lines = ['{"networks": {']
    for i, (name, net) in enumerate(table["networks"].items()):
        lines.append(f' {json.dumps(name)}: {{"source": {json.dumps(net["source"])}, "input": {json.dumps(net["input"])}, '
                     '"layers": [')
        lines += listed(net["layers"])
        if net.get("skipped"):
            lines += [' ], "skipped": [', *listed(net["skipped"])]
        lines.append(" ]}" + ("," if i < len(table["networks"]) - 1 else ""))
    return "\n".join(lines + ["}}"]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the checked-in table, write nothing")
    args = parser.parse_args(argv)
    fresh = text(extract())
    if args.check:
        same = TABLE.read_text() == fresh
        print(f"{TABLE}: {'as extracted' if same else 'differs from what the installed keras and torchvision give'}")
        return 0 if same else 1
    TABLE.write_text(fresh)
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
