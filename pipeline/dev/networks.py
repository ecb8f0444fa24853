"""Write the networks profile's table (pipeline/space/networks.json) from the installed
keras.applications: every conv layer of each network (pipeline/frontends/networks.py).

    python -m pipeline.dev.networks            write it
    python -m pipeline.dev.networks --check    exit 1 if the checked-in table differs

The table is checked in, so that a sweep reads it without TensorFlow; tests/test_networks.py
checks that it is what the installed keras gives.
"""
from __future__ import annotations

import argparse
import json
import sys

from pipeline.frontends.networks import KERAS_NETWORKS, build_keras, conv_layers
from pipeline.space.networks import TABLE


def extract() -> dict:
    """{"networks": {name: {"source", "input", "layers"}}} from the installed keras."""
    from importlib.metadata import version

    networks = {}
    for name, (constructor, shape) in KERAS_NETWORKS.items():
        networks[name] = {"source": f"keras.applications.{constructor} (keras {version('keras')}, weights=None)",
                          "input": list(shape), "layers": conv_layers(build_keras(name))}
    return {"networks": networks}


def text(table: dict) -> str:
    """The table as written: one layer per line."""
    lines = ['{"networks": {']
    for i, (name, net) in enumerate(table["networks"].items()):
        lines.append(f' {json.dumps(name)}: {{"source": {json.dumps(net["source"])}, "input": {json.dumps(net["input"])}, '
                     '"layers": [')
        lines += [f'  {json.dumps(layer, sort_keys=True)}' + ("," if j < len(net["layers"]) - 1 else "")
                  for j, layer in enumerate(net["layers"])]
        lines.append(" ]}" + ("," if i < len(table["networks"]) - 1 else ""))
    return "\n".join(lines + ["}}"]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the checked-in table, write nothing")
    args = parser.parse_args(argv)
    fresh = text(extract())
    if args.check:
        same = TABLE.read_text() == fresh
        print(f"{TABLE}: {'as extracted' if same else 'differs from what the installed keras gives'}")
        return 0 if same else 1
    TABLE.write_text(fresh)
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
