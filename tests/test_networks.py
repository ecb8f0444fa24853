"""The networks profile: the conv layers of keras.applications' networks (pipeline/frontends/
networks.py, the table pipeline/space/networks.json, pipeline/space/networks.py), checked
against the frameworks' own layer counts and output shapes; the `net:` selector."""
import fnmatch

import pytest

from pipeline.engine.selection import expand, geometry_id
from pipeline.space import networks
from pipeline.space.cases import make_cases
from pipeline.space.geometry import Geometry
from pipeline.space.sweep import profile_spec

# the architectures' own conv counts (Conv2D, DepthwiseConv2D), from their papers' block tables
KNOWN_COUNTS = {"mobilenet_v2": (35, 17), "resnet50": (53, 0)}


@pytest.mark.slow
@pytest.mark.parametrize("network", sorted(networks.table()))
def test_each_keras_conv_layer_is_one_geometry_with_the_layer_s_output_shape(network):
    import keras

    from pipeline.dev.networks import text
    from pipeline.frontends.networks import build_keras, conv_layers

    model = build_keras(network)
    extracted = conv_layers(model)
    convs = [l for l in model.layers if isinstance(l, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D))]
    assert [r["layer"] for r in extracted] == [l.name for l in convs]
    if network in KNOWN_COUNTS:
        depthwise = sum(isinstance(l, keras.layers.DepthwiseConv2D) for l in convs)
        assert (len(convs) - depthwise, depthwise) == KNOWN_COUNTS[network]
    for record, layer in zip(extracted, convs):
        g = Geometry.from_dict(record["geometry"])
        assert [*g.out_spatial, g.c_out] == [int(v) for v in layer.output.shape[1:]], layer.name
        assert [*g.spatial, g.c_in] == [int(v) for v in layer.input.shape[1:]], layer.name
    # the checked-in table holds exactly this extraction
    assert networks.table()[network]["layers"] == extracted


def test_mobilenet_v2_fuses_relu6_everywhere_but_its_linear_bottlenecks():
    layers = networks.table()["mobilenet_v2"]["layers"]
    project = [l for l in layers if l["layer"].endswith("_project")]
    assert len(project) == 17 and all(l["activation"] == "none" for l in project)
    assert all(l["activation"] == "relu6" for l in layers if l not in project)


def test_the_profile_sweeps_each_distinct_geometry_once_and_every_layer_is_listed():
    sampled = profile_spec("networks").sample(50)
    geometries = [g for _, g in sampled]
    assert len(geometries) == len(set(geometries))
    used = {g for _, _, g in networks.layers()}
    assert set(geometries) == used
    assert len(networks.layers()) == sum(len(n["layers"]) for n in networks.table().values()) > len(used)
    assert all(category.startswith("net_") for category, _ in sampled)


def test_a_network_selector_picks_exactly_its_layers_cases_on_every_target():
    sampled = profile_spec("networks").sample(50)
    names = [f"verify:{c.name}@{t}" for t in ("llvm-cpu", "torq")
             for c in make_cases(sampled, frozenset(), (), t, ("tflite_w8i8", "onnx_f32"), "random")]
    picked = expand(["verify:net:resnet50"], names, lambda p: fnmatch.filter(names, p))
    ids = networks.geometry_ids("resnet50")
    assert picked and {geometry_id(n) for n in picked} == ids
    assert len(picked) == len(ids) * 2 * 2  # two flavors, two targets
    with pytest.raises(Exception, match="is not a network of the networks profile"):
        expand(["verify:net:resnet5"], names, lambda p: fnmatch.filter(names, p))
    with pytest.raises(Exception, match="matches no task"):
        expand(["verify:net:resnet50"], [n for n in names if geometry_id(n) not in ids], lambda p: [])
