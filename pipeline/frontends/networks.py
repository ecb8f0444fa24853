"""The conv layers of a network, read from its definition (keras.applications, `weights=None`:
random weights, nothing downloaded). pipeline/dev/networks.py writes them to the networks
profile's table (pipeline/space/networks.json), which the sweep reads without TensorFlow.

Each Conv2D and DepthwiseConv2D layer (the convs inside squeeze-and-excite blocks included)
becomes one geometry, from the layer's own input shape, kernel, stride, padding, dilation,
groups and channels, with the activation a converter fuses into it: the layer's own, or the
one right after it and its batch norm (TFLite folds the batch norm into the conv, then fuses a
ReLU or ReLU6 that follows). Other activations (swish, hard-swish, sigmoid) are not fused:
`none`.

The torch networks (torchvision.models, `weights=None`) go the same way: each nn.Conv2d, with
the shapes a forward hook sees on a zero 1x3x224x224 input in eval mode, and the activation
that is the single user of the conv (or of its BatchNorm2d) in the torch.fx graph. A torch conv
pads symmetrically; one whose pads are neither zero nor TF SAME's on that input (a 3x3 stride-2
conv with padding 1 on an even input: TF SAME pads (0, 1)) has no Geometry, and is listed as
skipped, with the pads that differ.
"""
from __future__ import annotations

from pipeline.space.geometry import Geometry, same_padding

# network -> (keras.applications constructor, input shape H x W x C)
KERAS_NETWORKS = {
    "mobilenet_v2": ("MobileNetV2", (224, 224, 3)),
    "mobilenet_v3_small": ("MobileNetV3Small", (224, 224, 3)),
    "efficientnet_b0": ("EfficientNetB0", (224, 224, 3)),
    "resnet50": ("ResNet50", (224, 224, 3)),
}
# network -> (torchvision.models constructor, input shape H x W x C)
TORCH_NETWORKS = {
    "resnet18": ("resnet18", (224, 224, 3)),
    "mobilenet_v3_large": ("mobilenet_v3_large", (224, 224, 3)),
}
FUSED = ("relu", "relu6")  # the activations a conv carries fused (TFLite's fused activation)


def build_keras(network: str):
    """The network's keras model, random weights (nothing is downloaded)."""
    import keras

    constructor, shape = KERAS_NETWORKS[network]
    return getattr(keras.applications, constructor)(weights=None, input_shape=shape)


def is_conv(layer) -> bool:
    import keras

    return isinstance(layer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D))


def conv_layers(model) -> list[dict]:
    """Every conv layer of a keras model, in the model's order: {"layer", "kind", "geometry"
    (Geometry.to_dict()), "activation" (one of none, relu, relu6), "output" ([H, W, C], as keras
    gives it)}."""
    return [{"layer": layer.name, "kind": type(layer).__name__, "geometry": geometry(layer).to_dict(),
             "activation": activation(model, layer), "output": [int(v) for v in layer.output.shape[1:]]}
            for layer in model.layers if is_conv(layer)]


def geometry(layer) -> Geometry:
    """The layer's convolution, from its input shape and configuration."""
    import keras

    _, h, w, c_in = (int(v) if v is not None else None for v in layer.input.shape)
    if isinstance(layer, keras.layers.DepthwiseConv2D):
        groups, c_out = c_in, c_in * layer.depth_multiplier
    else:
        groups, c_out = layer.groups, layer.filters
    dilation = tuple(layer.dilation_rate)
    return Geometry(2, (h, w), tuple(layer.kernel_size), tuple(layer.strides), c_in, c_out, layer.padding,
                    None if dilation == (1, 1) else dilation, groups).validate(f"layer {layer.name}")


def _followers(model, layer) -> list:
    """The layers that read the layer's output."""
    out = []
    for other in model.layers:
        inputs = other.input if isinstance(other.input, (list, tuple)) else [other.input]
        if any(t is layer.output for t in inputs):
            out.append(other)
    return out


def _named(layer) -> str | None:
    """The activation a layer applies, by name: relu, relu6, or another name; None for none."""
    import keras

    if isinstance(layer, keras.layers.ReLU):
        slope = float(layer.negative_slope) if layer.negative_slope is not None else 0.0
        if slope or float(layer.threshold or 0.0):
            return "leaky or thresholded relu"
        return "relu6" if layer.max_value is not None and float(layer.max_value) == 6.0 else \
            "relu" if layer.max_value is None else "clipped relu"
    if isinstance(layer, keras.layers.Activation):
        return getattr(layer.activation, "__name__", str(layer.activation))
    return None


def activation(model, layer) -> str:
    """The activation fused into the conv (FUSED), or none."""
    import keras

    own = getattr(layer.activation, "__name__", "linear")
    if own != "linear":
        return own if own in FUSED else "none"
    after = _followers(model, layer)
    if len(after) == 1 and isinstance(after[0], keras.layers.BatchNormalization):
        after = _followers(model, after[0])
    name = _named(after[0]) if len(after) == 1 else None
    return name if name in FUSED else "none"


def torchvision_models():
    """torchvision.models, without running torchvision's package __init__, which loads its
    compiled ops: the torchvision wheel on PyPI links them against CUDA torch (libc10_cuda.so),
    so with the CPU torch wheel `import torchvision` fails ("operator torchvision::nms does not
    exist"). The model definitions are plain Python and need none of them. Where torchvision is
    already imported, its own module."""
    import importlib
    import importlib.util
    import sys

    if "torchvision" not in sys.modules:
        spec = importlib.util.find_spec("torchvision")
        if spec is None:
            raise ModuleNotFoundError("torchvision is not installed", name="torchvision")
        sys.modules["torchvision"] = importlib.util.module_from_spec(spec)  # the package, its __init__ not run
    return importlib.import_module("torchvision.models")


def build_torch(network: str):
    """The network's torch model in eval mode, random weights (nothing is downloaded)."""
    constructor, _ = TORCH_NETWORKS[network]
    return getattr(torchvision_models(), constructor)(weights=None).eval()


def torch_padding(conv, spatial) -> tuple[str | None, object]:
    """(padding, pads) of an nn.Conv2d on an input of `spatial` (H, W): ("valid", None) where it
    pads nothing, ("same", None) where its pads (p, p) are TF SAME's on every axis, else
    ("explicit", its pads per axis); (None, why) for a padding mode other than zeros."""
    if conv.padding_mode != "zeros":
        return None, f"padding_mode {conv.padding_mode!r}; the geometry pads with zeros only"
    if conv.padding == "valid":
        return "valid", None
    if conv.padding == "same":  # torch allows it at stride 1 only: (k - 1) d in all, the odd one after, as TF
        return "same", None
    pads = tuple(conv.padding)
    if not any(pads):
        return "valid", None
    axes = list(zip(spatial, conv.kernel_size, conv.stride, conv.dilation, pads))
    if all(same_padding(n, k, s, d) == (p, p) for n, k, s, d, p in axes):
        return "same", None
    return "explicit", tuple((p, p) for p in pads)


def _torch_activation(users: dict, node) -> str:
    """The activation fused into the conv at fx `node` (FUSED), or none: the single user of the
    conv, or of its single user when that is a BatchNorm2d (`users`: node -> its users)."""
    import torch
    import torch.nn.functional as F

    after = users(node)
    if len(after) == 1 and isinstance(after[0][1], torch.nn.BatchNorm2d):
        after = users(after[0][0])
    if len(after) != 1:
        return "none"
    user, module = after[0]
    if isinstance(module, torch.nn.Hardtanh):  # ReLU6 is Hardtanh(0, 6)
        return "relu6" if (module.min_val, module.max_val) == (0.0, 6.0) else "none"
    if isinstance(module, torch.nn.ReLU):
        return "relu"
    if user.op == "call_function" and user.target in (F.relu, torch.relu, torch.relu_):
        return "relu"
    if user.op == "call_function" and user.target is F.relu6:
        return "relu6"
    if user.op == "call_method" and user.target in ("relu", "relu_"):
        return "relu"
    return "none"


def torch_conv_layers(model, shape=(224, 224, 3)) -> tuple[list[dict], list[dict]]:
    """Every nn.Conv2d of a torch model, in the model's order, as (layers, skipped): layers as
    conv_layers' records ("output" [H, W, C]), from a forward hook on a zero input of `shape`
    (H x W x C) in eval mode; skipped [{"layer", "kind", "reason"}] for the convs no Geometry
    expresses (torch_padding), or that the forward pass does not run exactly once."""
    import torch
    from torch import fx

    convs = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]
    seen: dict[str, list] = {name: [] for name, _ in convs}

    def record(name):
        def hook(module, args, out):  # returns None: the output stands
            seen[name].append((args[0].shape, out.shape))
        return hook

    hooks = [m.register_forward_hook(record(name)) for name, m in convs]
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, shape[2], shape[0], shape[1]))
    finally:
        for h in hooks:
            h.remove()
    graph = fx.symbolic_trace(model).graph
    modules = dict(model.named_modules())
    nodes = {n.target: n for n in graph.nodes if n.op == "call_module" and n.target in seen}

    def users(node):
        return [(u, modules.get(u.target) if u.op == "call_module" else None) for u in node.users]

    layers, skipped = [], []
    for name, conv in convs:
        if len(seen[name]) != 1 or name not in nodes:
            skipped.append({"layer": name, "kind": "Conv2d",
                            "reason": f"runs {len(seen[name])} times in one forward pass in eval mode"})
            continue
        (x, y), = seen[name]
        padding, pads = torch_padding(conv, tuple(x[2:]))
        if padding is None:
            skipped.append({"layer": name, "kind": "Conv2d", "reason": pads})
            continue
        dilation = tuple(conv.dilation)
        g = Geometry(2, tuple(x[2:]), tuple(conv.kernel_size), tuple(conv.stride), conv.in_channels,
                     conv.out_channels, padding, None if dilation == (1, 1) else dilation,
                     conv.groups, explicit_pads=pads).validate(f"layer {name}")
        layers.append({"layer": name, "kind": "Conv2d", "geometry": g.to_dict(),
                       "activation": _torch_activation(users, nodes[name]), "output": [y[2], y[3], y[1]]})
    return layers, skipped
