"""Convolution geometry: one frozen value, its validation and its case id.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from pipeline.core.errors import ConfigError

PADDINGS = ("valid", "same")  # what a category draws
PADDING_MODES = (*PADDINGS, "explicit")  # and given pads (before, after) per axis, as torch's nn.Conv2d pads
ACTIVATIONS = ("none", "relu", "relu6")  # fused after the sum: none, max(v, 0), min(max(v, 0), 6)
FIELDS = ("rank", "spatial", "kernel", "stride", "c_in", "c_out", "padding", "dilation", "groups", "batch",
          "activation", "pads")  # pads: explicit_pads, as a spec file names it
REQUIRED = ("rank", "spatial", "kernel", "stride", "c_in", "c_out")


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TF's SAME on one axis: total = max((ceil(in/s) - 1) s + (k - 1) d + 1 - in, 0), with
    floor(total / 2) before and the rest (one more when the total is odd) after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


@dataclass(frozen=True)
class Geometry:
    """One convolution shape; every spatial tuple is (H, W) for Conv2D, (L,) for Conv1D.

    The fields after `padding` default to a plain convolution (dilation 1, one group, batch 1,
    no fused activation), and a case id names them only when they depart from it, so the seed
    sweep's ids stand.
    Depthwise is groups == c_in (> 1), with c_out = c_in x the depth multiplier.
    """

    rank: int  # 1 for Conv1D, 2 for Conv2D
    spatial: tuple[int, ...]  # input size per spatial axis
    kernel: tuple[int, ...]  # kernel size per spatial axis
    stride: tuple[int, ...]  # stride per spatial axis
    c_in: int  # input channels
    c_out: int  # output channels (filters)
    padding: str = "valid"  # "valid", "same" (TF's SAME, at any stride and dilation), or "explicit"
    dilation: tuple[int, ...] | None = None  # dilation per spatial axis; None is 1 on every axis
    groups: int = 1  # channel groups: c_in and c_out are multiples of it
    batch: int = 1  # batch size
    activation: str = "none"  # fused activation (ACTIVATIONS), as each frontend fuses it into the conv
    explicit_pads: tuple[tuple[int, int], ...] | None = None  # padding "explicit": (before, after) per axis

    def __post_init__(self) -> None:
        for field in ("spatial", "kernel", "stride"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        dilation = self.dilation
        if dilation is None:
            dilation = (1,) * (self.rank if self.rank in (1, 2) else len(self.spatial))
        object.__setattr__(self, "dilation", tuple(dilation))
        if self.explicit_pads is not None:
            object.__setattr__(self, "explicit_pads", tuple(tuple(pair) for pair in self.explicit_pads))

    def validate(self, where: str = "geometry") -> "Geometry":
        """Raise ConfigError naming the first bad field; return self when valid."""
        if self.rank not in (1, 2):
            raise ConfigError(f"{where}.rank", self.rank, "must be 1 (Conv1D) or 2 (Conv2D)")
        for field in ("spatial", "kernel", "stride", "dilation"):
            value = getattr(self, field)
            if len(value) != self.rank:
                raise ConfigError(f"{where}.{field}", value, f"needs {self.rank} entries for rank {self.rank}")
            if not all(_positive_int(v) for v in value):
                raise ConfigError(f"{where}.{field}", value, "every entry must be a positive integer")
        for field in ("c_in", "c_out", "groups", "batch"):
            value = getattr(self, field)
            if not _positive_int(value):
                raise ConfigError(f"{where}.{field}", value, "must be a positive integer")
        if self.c_in % self.groups or self.c_out % self.groups:
            raise ConfigError(f"{where}.groups", self.groups,
                              f"must divide both c_in ({self.c_in}) and c_out ({self.c_out})")
        if self.padding not in PADDING_MODES:
            raise ConfigError(f"{where}.padding", self.padding, f"must be one of {', '.join(PADDING_MODES)}")
        if (self.padding == "explicit") != (self.explicit_pads is not None):
            raise ConfigError(f"{where}.pads", self.explicit_pads, "goes with padding 'explicit', and only with it")
        if self.explicit_pads is not None:
            pairs = self.explicit_pads
            if len(pairs) != self.rank or not all(len(p) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                       and v >= 0 for v in p) for p in pairs):
                raise ConfigError(f"{where}.pads", [list(p) for p in pairs],
                                  f"needs {self.rank} pairs [before, after] of integers >= 0")
            if any(w > n + b + a for w, n, (b, a) in zip(self.window, self.spatial, pairs)):
                raise ConfigError(f"{where}.pads", [list(p) for p in pairs],
                                  f"the window {self.window} does not fit the padded input")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"{where}.activation", self.activation, f"must be one of {', '.join(ACTIVATIONS)}")
        if self.padding == "valid" and any(w > n for w, n in zip(self.window, self.spatial)):
            field = "kernel" if self.dilation == (1,) * self.rank else "dilation"
            raise ConfigError(f"{where}.{field}", getattr(self, field),
                              f"does not fit the input {self.spatial} with padding 'valid' (window "
                              f"(kernel - 1) x dilation + 1 = {self.window})")
        return self

    @property
    def hw(self) -> tuple[int, int]:
        """(H, W) as in the case id: Conv1D is H = 1, W = L."""
        return (1, self.spatial[0]) if self.rank == 1 else self.spatial

    @property
    def khw(self) -> tuple[int, int]:
        """(KH, KW) as in the case id: Conv1D is KH = KW = kernel."""
        return (self.kernel[0], self.kernel[0]) if self.rank == 1 else self.kernel

    @property
    def shw(self) -> tuple[int, int]:
        """(SH, SW) as in the case id: Conv1D is (1, stride)."""
        return (1, self.stride[0]) if self.rank == 1 else self.stride

    @property
    def dhw(self) -> tuple[int, int]:
        """(DH, DW) as in the case id: Conv1D is (1, dilation)."""
        return (1, self.dilation[0]) if self.rank == 1 else self.dilation

    @property
    def depthwise(self) -> bool:
        """One group per input channel (and more than one channel)."""
        return self.groups == self.c_in > 1

    @property
    def depth_multiplier(self) -> int:
        """Output channels per group (depthwise: per input channel)."""
        return self.c_out // self.groups

    @property
    def window(self) -> tuple[int, ...]:
        """Input extent one output element reads, per axis: (kernel - 1) x dilation + 1."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilation))

    @property
    def reduction(self) -> int:
        """Number of products summed into one output element: (c_in / groups) x kernel area."""
        size = self.c_in // self.groups
        for k in self.kernel:
            size *= k
        return size

    @property
    def pads(self) -> tuple[tuple[int, int], ...]:
        """(before, after) zero padding per spatial axis."""
        if self.padding == "same":
            return tuple(same_padding(n, k, s, d)
                         for n, k, s, d in zip(self.spatial, self.kernel, self.stride, self.dilation))
        if self.padding == "explicit":
            return self.explicit_pads
        return ((0, 0),) * self.rank

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return tuple((n + before + after - w) // s + 1
                     for n, (before, after), w, s in zip(self.spatial, self.pads, self.window, self.stride))

    @cached_property
    def id(self) -> str:
        (h, w), (kh, kw), (sh, sw), (dh, dw) = self.hw, self.khw, self.shw, self.dhw
        parts = [f"w{w}_h{h}_f{self.c_out}_k{kh}_c{self.c_in}"]
        if self.rank == 1:
            parts.append("_r1")
        if kh != kw:
            parts.append(f"_khw{kh}x{kw}")
        if (sh, sw) != (1, 1):
            parts.append(f"_s{sh}x{sw}")
        if self.padding == "explicit":
            parts.append("_pad" + "x".join(f"{b}-{a}" for b, a in self.explicit_pads))
        elif self.padding != "same":
            parts.append(f"_p{self.padding}")
        if (dh, dw) != (1, 1):
            parts.append(f"_d{dh}x{dw}")
        if self.depthwise:
            parts.append(f"_dw{self.depth_multiplier}")
        elif self.groups != 1:
            parts.append(f"_g{self.groups}")
        if self.batch != 1:
            parts.append(f"_b{self.batch}")
        if self.activation != "none":
            parts.append(f"_a{self.activation}")
        return "".join(parts)

    def to_dict(self) -> dict:
        """The geometry as a spec file lists it; fields at their defaults are left out."""
        out = {"rank": self.rank, "spatial": list(self.spatial), "kernel": list(self.kernel),
               "stride": list(self.stride), "c_in": self.c_in, "c_out": self.c_out, "padding": self.padding}
        if self.dilation != (1,) * self.rank:
            out["dilation"] = list(self.dilation)
        if self.groups != 1:
            out["groups"] = self.groups
        if self.batch != 1:
            out["batch"] = self.batch
        if self.activation != "none":
            out["activation"] = self.activation
        if self.explicit_pads is not None:
            out["pads"] = [list(p) for p in self.explicit_pads]
        return out

    @classmethod
    def from_dict(cls, data: dict, where: str = "geometry") -> "Geometry":
        if not isinstance(data, dict):
            raise ConfigError(where, data, "must be an object with fields " + ", ".join(FIELDS))
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}", data[unknown[0]], "is not a geometry field")
        missing = [f for f in REQUIRED if f not in data]
        if missing:
            raise ConfigError(f"{where}.{missing[0]}", None, "is required")
        for field in ("spatial", "kernel", "stride", "dilation"):
            if field in data and not isinstance(data[field], (list, tuple)):
                raise ConfigError(f"{where}.{field}", data[field], "must be a list of integers")
        data = dict(data)
        pads = data.pop("pads", None)
        if pads is not None and (not isinstance(pads, (list, tuple)) or
                                 not all(isinstance(p, (list, tuple)) for p in pads)):
            raise ConfigError(f"{where}.pads", pads, "must be a list of [before, after] per spatial axis")
        return cls(**data, explicit_pads=pads).validate(where)

def macs(geometry) -> int:
    """Multiply-accumulates of one call: every output element sums `reduction` products."""
    outputs = geometry.batch * geometry.c_out
    for size in geometry.out_spatial:
        outputs *= size
    return outputs * geometry.reduction
