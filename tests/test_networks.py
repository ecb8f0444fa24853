"""The networks profile: the conv layers of keras.applications' and torchvision's networks
(pipeline/frontends/networks.py, the table pipeline/space/networks.json, pipeline/space/networks.py),
checked against the frameworks' own layer counts and output shapes; the `net:` selector."""
import fnmatch

import pytest

from pipeline.engine.selection import expand, geometry_id
from pipeline.frontends.networks import KERAS_NETWORKS, TORCH_NETWORKS
from pipeline.space import networks
from pipeline.space.cases import make_cases
from pipeline.space.geometry import Geometry, macs
from pipeline.space.sweep import profile_spec

# the architectures' own conv counts (Conv2D, DepthwiseConv2D), from their papers' block tables
KNOWN_COUNTS = {"mobilenet_v2": (35, 17), "resnet50": (53, 0)}


@pytest.mark.slow
@pytest.mark.parametrize("network", sorted(KERAS_NETWORKS))
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


@pytest.mark.slow
@pytest.mark.parametrize("network", sorted(TORCH_NETWORKS))
def test_each_torch_conv_module_is_one_geometry_with_its_output_shape_or_skipped_with_a_reason(network):
    import torch

    from pipeline.frontends.networks import build_torch, torch_conv_layers

    model = build_torch(network)
    convs = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)}
    seen = {}

    def record(name):
        def hook(module, args, out):  # returns None: the output stands
            seen.setdefault(name, (args[0].shape, out.shape))
        return hook

    hooks = [m.register_forward_hook(record(name)) for name, m in convs.items()]
    with torch.no_grad():
        model(torch.zeros(1, 3, 224, 224))
    for h in hooks:
        h.remove()
    net = networks.table()[network]
    layers, skipped = net["layers"], networks.skipped(network)
    assert len(convs) == len(layers) + len(skipped) and skipped == net.get("skipped", [])
    assert sorted(r["layer"] for r in layers + skipped) == sorted(convs)
    for record in layers:
        g = Geometry.from_dict(record["geometry"])
        x, y = seen[record["layer"]]
        assert [*g.out_spatial, g.c_out] == [y[2], y[3], y[1]] == record["output"], record["layer"]
        assert [*g.spatial, g.c_in] == [x[2], x[3], x[1]], record["layer"]
    assert all(s["kind"] == "Conv2d" and "padding_mode" in s["reason"] for s in skipped)
    explicit = [r for r in layers if r["geometry"]["padding"] == "explicit"]  # torch's (p, p) where TF SAME differs
    assert explicit and all(a == b > 0 for r in explicit for a, b in r["geometry"]["pads"])
    # the checked-in table holds exactly this extraction
    assert torch_conv_layers(model) == (layers, skipped)


def test_a_torch_conv_is_valid_same_or_explicit_by_its_pads_against_tf_same():
    import torch

    from pipeline.frontends.networks import torch_padding

    assert torch_padding(torch.nn.Conv2d(8, 8, 3, stride=1, padding=1), (56, 56)) == ("same", None)
    assert torch_padding(torch.nn.Conv2d(8, 8, 1, padding=0), (56, 56)) == ("valid", None)
    # TF SAME on 56 at stride 2 pads (0, 1): torch's (1, 1) is a conv of its own
    assert torch_padding(torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), (56, 56)) == ("explicit", ((1, 1), (1, 1)))
    assert torch_padding(torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), (57, 57)) == ("same", None)  # odd: (1, 1)
    assert torch_padding(torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), (57, 56)) == ("explicit", ((1, 1), (1, 1)))
    assert torch_padding(torch.nn.Conv2d(8, 8, 3, padding="same"), (56, 56)) == ("same", None)
    kind, why = torch_padding(torch.nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect"), (56, 56))
    assert kind is None and "reflect" in why


def test_torch_networks_fuse_relu_only_where_a_relu_alone_follows_the_conv_and_its_batch_norm():
    resnet = {l["layer"]: l["activation"] for l in networks.table()["resnet18"]["layers"]}
    assert all(a == ("relu" if name.endswith("conv1") else "none") for name, a in resnet.items())  # conv2 -> bn -> add
    mobilenet = networks.table()["mobilenet_v3_large"]["layers"]
    assert {l["activation"] for l in mobilenet} == {"relu", "none"}  # its hard-swish is not fused
    assert all(l["activation"] == "relu" for l in mobilenet if l["layer"].endswith("fc1"))  # squeeze-and-excite


def test_mobilenet_v2_fuses_relu6_everywhere_but_its_linear_bottlenecks():
    layers = networks.table()["mobilenet_v2"]["layers"]
    project = [l for l in layers if l["layer"].endswith("_project")]
    assert len(project) == 17 and all(l["activation"] == "none" for l in project)
    assert all(l["activation"] == "relu6" for l in layers if l not in project)


def test_the_profile_sweeps_each_distinct_geometry_once_and_every_layer_is_listed():
    sampled = profile_spec("networks").sample(50)
    geometries = [g for _, g, _ in sampled]
    assert len(geometries) == len(set(geometries))
    used = {g for _, _, g in networks.layers()}
    assert set(geometries) == used
    assert len(networks.layers()) == sum(len(n["layers"]) for n in networks.table().values()) > len(used)
    assert all(category.startswith("net_") for category, _, _ in sampled)


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


def test_the_view_counts_layers_per_use_names_failing_layers_and_sums_cycles_over_uses():
    from pipeline.results import networks as view
    from pipeline.results.html import _networks_section
    from pipeline.results.report import signature, summary

    used = [(layer, g) for name, layer, g in networks.layers() if name == "resnet50"]
    distinct = list(dict.fromkeys(g for _, g in used))
    shared = max(distinct, key=lambda g: sum(x == g for _, x in used))  # a geometry several layers use
    uses = sum(g == shared for _, g in used)
    assert uses > 1
    entries = []
    for i, g in enumerate(distinct):
        failing = g == shared
        entries.append({"case": f"c{i}", "backend": "tflite", "flavor": "w8i8", "geometry": g.to_dict(), "category": "net_resnet50",
                        "status": "error" if failing else "pass", "stage": "compile" if failing else None,
                        "reason": "torq-compile exit status 1: error: no lowering" if failing else "ok",
                        "perf": {"macs": macs(g)} if failing else
                        {"macs": macs(g), "estimated_npu_cycles": 1000.0 + i, "macs_per_cycle": macs(g) / (1000.0 + i)}})
    (row,) = view.view(entries, signature)  # only resnet50 has cases here
    f = row["flavors"]["tflite_w8i8"]
    assert row["network"] == "resnet50" and f["layers"] == len(used) == 53
    assert f["pass"] == len(used) - uses and len(f["failing"]) == uses and f["missing"] == 0
    assert {x["layer"] for x in f["failing"]} == {layer["layer"] for layer, g in used if g == shared}
    assert all(x["bucket"] == signature(entries[distinct.index(shared)]) for x in f["failing"])
    cycles = {g: e["perf"].get("estimated_npu_cycles") for g, e in zip(distinct, entries)}
    c = row["cycles"]["tflite_w8i8"]
    assert c["total"] == sum(cycles[g] for _, g in used if cycles[g]) and c["layers"] == len(used) - uses
    assert [t["cycles"] for t in c["per_layer"]] == sorted((cycles[g] for _, g in used if cycles[g]), reverse=True)
    assert c["top"] == c["per_layer"][:5]
    assert row["cases"] == {layer["layer"]: g.id for layer, g in used}  # network -> layer -> case
    text = summary(entries)
    assert f"resnet50 (53 conv layers):\n  tflite_w8i8: {len(used) - uses} of 53 pass; {uses} fail:" in text
    page = _networks_section([row])
    assert "<h2>Networks</h2>" in page and f"<td>{len(used) - uses} of 53</td>" in page and "costliest" in page
    # a layer with no case of a flavor, or one not run yet, is missing, not passing; one compiled only is neither
    first = sum(g == distinct[0] for _, g in used)
    assert view.view(entries[1:], signature) == []  # a sweep without one of its layers does not hold the network
    (row,) = view.view([{**entries[0], "status": "not run"}, *entries[1:]], signature)
    assert row["flavors"]["tflite_w8i8"]["missing"] == first
    (row,) = view.view([{**entries[0], "status": "compiled"}, *entries[1:]], signature)
    f = row["flavors"]["tflite_w8i8"]
    assert f["compiled"] == first and f["missing"] == 0 and f["pass"] == len(used) - uses - first
    assert len(f["failing"]) == uses
    assert view.view([{**e, "status": "not run"} for e in entries], signature) == []  # nothing ran: no row
    page = _networks_section([row])
    assert f"<td>{len(used) - uses - first} of 53, {first} compiled only</td>" in page


def test_the_view_names_a_network_s_skipped_layers_in_its_summary_and_page(monkeypatch):
    """(No network of the profile has a conv it cannot express: one is listed as if skipped.)"""
    from pipeline.results import networks as view
    from pipeline.results.html import _networks_section
    from pipeline.results.report import signature

    listed = {"resnet18": [{"layer": "conv9", "kind": "Conv2d", "reason": "padding_mode 'reflect'"}]}
    monkeypatch.setattr(networks, "skipped", lambda name: listed.get(name, []))
    used = [g for name, _, g in networks.layers() if name == "resnet18"]
    entries = [{"case": f"c{i}", "backend": "onnx", "flavor": "f32", "geometry": g.to_dict(), "status": "pass"}
               for i, g in enumerate(dict.fromkeys(used))]
    row = next(r for r in view.view(entries, signature) if r["network"] == "resnet18")
    skipped = [x["layer"] for x in networks.skipped("resnet18")]
    assert skipped and row["skipped"] == skipped and row["layers"] == len(used)
    text = "\n".join(view.lines([row]))
    assert f"  {len(skipped)} conv layers not expressible (skipped), listed in the table: {skipped[0]}" in text
    assert f"({len(skipped)} conv layers not expressible, skipped)" in _networks_section([row])
    assert networks.skipped("mobilenet_v2") == []


def test_compare_lists_each_network_s_verdict_changes_and_its_stack_s_cycle_ratio():
    from pipeline.results import networks as view

    used = [(layer, g) for name, layer, g in networks.layers() if name == "mobilenet_v2"]
    distinct = list(dict.fromkeys(g for _, g in used))

    def run(failing: Geometry | None, scale: float) -> list[dict]:
        return [{"case": f"c{i}", "backend": "onnx", "flavor": "bf16", "geometry": g.to_dict(),
                 "status": "fail" if g == failing else "pass", "perf": {"estimated_npu_cycles": scale * (100 + i)}}
                for i, g in enumerate(distinct)]

    rows = view.compare(run(None, 1.0), run(distinct[1], 2.0))  # other networks share some of its geometries
    row = next(r for r in rows if r["network"] == "mobilenet_v2")
    assert row["network"] == "mobilenet_v2" and row["flavor"] == "onnx_bf16" and row["layers"] == 52
    broken = [layer["layer"] for layer, g in used if g == distinct[1]]
    assert row["old_pass"] == 52 and row["new_pass"] == 52 - len(broken) and row["newly_failing"] == broken
    assert row["newly_passing"] == [] and row["cycles_ratio"] == 2.0 and row["costed_in_both"] == 52
    assert row["cycles_old"] == sum(100 + distinct.index(g) for _, g in used)
    assert f"52 -> {52 - len(broken)} of 52 layers pass; newly failing: {broken[0]}" in view.compare_lines([row])[0]


def test_doit_selects_a_whole_network_by_its_selector(tmp_path):
    from helpers import clean_env, doit

    env = clean_env(CONV_SWEEP_PROFILE="networks", CONV_SWEEP_TARGET="llvm-cpu", CONV_SWEEP_BUILD_DIR=tmp_path)
    run = doit("clean", "--dry-run", "verify:net:mobilenet_v3_small", env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    cleaned = {line.split(" - ")[0] for line in run.stdout.splitlines() if line.startswith("verify:")}
    ids = networks.geometry_ids("mobilenet_v3_small")
    assert {geometry_id(n) for n in cleaned} == ids and len(cleaned) == 5 * len(ids)
    wrong = doit("clean", "--dry-run", "verify:net:mobilenet", env=env)
    assert wrong.returncode != 0 and "is not a network of the networks profile" in wrong.stdout + wrong.stderr
