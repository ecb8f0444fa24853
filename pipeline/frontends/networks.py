"""The conv layers of a network, read from its definition (keras.applications, `weights=None`:
random weights, nothing downloaded). pipeline/dev/networks.py writes them to the networks
profile's table (pipeline/space/networks.json), which the sweep reads without TensorFlow.

Each Conv2D and DepthwiseConv2D layer (the convs inside squeeze-and-excite blocks included)
becomes one geometry, from the layer's own input shape, kernel, stride, padding, dilation,
groups and channels, with the activation a converter fuses into it: the layer's own, or the
one right after it and its batch norm (TFLite folds the batch norm into the conv, then fuses a
ReLU or ReLU6 that follows). Other activations (swish, hard-swish, sigmoid) are not fused:
`none`.
"""
from __future__ import annotations

from pipeline.space.geometry import Geometry

# network -> (keras.applications constructor, input shape H x W x C)
KERAS_NETWORKS = {
    "mobilenet_v2": ("MobileNetV2", (224, 224, 3)),
    "mobilenet_v3_small": ("MobileNetV3Small", (224, 224, 3)),
    "efficientnet_b0": ("EfficientNetB0", (224, 224, 3)),
    "resnet50": ("ResNet50", (224, 224, 3)),
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
