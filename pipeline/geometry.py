"""Convolution geometry: one frozen value, its validation and its case id.

Low-level module: imports nothing from the rest of the package.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .errors import ConfigError

PADDINGS = ("valid", "same")


@dataclass(frozen=True)
class Geometry:
    """One convolution shape; every spatial tuple is (H, W) for Conv2D, (L,) for Conv1D."""

    rank: int  # 1 for Conv1D, 2 for Conv2D
    spatial: tuple[int, ...]  # input size per spatial axis
    kernel: tuple[int, ...]  # kernel size per spatial axis
    stride: tuple[int, ...]  # stride per spatial axis
    c_in: int  # input channels
    c_out: int  # output channels (filters)
    padding: str = "valid"  # "valid" or "same"; "same" with any stride > 1 becomes "valid"

    def __post_init__(self) -> None:
        for field in ("spatial", "kernel", "stride"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        if self.padding == "same" and any(s > 1 for s in self.stride):
            object.__setattr__(self, "padding", "valid")

    def validate(self, where: str = "geometry") -> "Geometry":
        """Raise ConfigError naming the first bad field; return self when valid."""
        if self.rank not in (1, 2):
            raise ConfigError(f"{where}.rank", self.rank, "must be 1 (Conv1D) or 2 (Conv2D)")
        for field in ("spatial", "kernel", "stride"):
            value = getattr(self, field)
            if len(value) != self.rank:
                raise ConfigError(f"{where}.{field}", value, f"needs {self.rank} entries for rank {self.rank}")
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
                raise ConfigError(f"{where}.{field}", value, "every entry must be a positive integer")
        for field in ("c_in", "c_out"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{where}.{field}", value, "must be a positive integer")
        if self.padding not in PADDINGS:
            raise ConfigError(f"{where}.padding", self.padding, f"must be one of {', '.join(PADDINGS)}")
        if self.padding == "valid" and any(k > n for k, n in zip(self.kernel, self.spatial)):
            raise ConfigError(f"{where}.kernel", self.kernel,
                              f"does not fit the input {self.spatial} with padding 'valid'")
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
    def reduction(self) -> int:
        """Number of products summed into one output element: c_in x kernel area."""
        size = self.c_in
        for k in self.kernel:
            size *= k
        return size

    @property
    def out_spatial(self) -> tuple[int, ...]:
        if self.padding == "same":
            return tuple(-(-n // s) for n, s in zip(self.spatial, self.stride))
        return tuple((n - k) // s + 1 for n, k, s in zip(self.spatial, self.kernel, self.stride))

    @cached_property
    def id(self) -> str:
        (h, w), (kh, kw), (sh, sw) = self.hw, self.khw, self.shw
        parts = [f"w{w}_h{h}_f{self.c_out}_k{kh}_c{self.c_in}"]
        if self.rank == 1:
            parts.append("_r1")
        if kh != kw:
            parts.append(f"_khw{kh}x{kw}")
        if (sh, sw) != (1, 1):
            parts.append(f"_s{sh}x{sw}")
        if self.padding != "same":
            parts.append(f"_p{self.padding}")
        return "".join(parts)

    def to_dict(self) -> dict:
        return {"rank": self.rank, "spatial": list(self.spatial), "kernel": list(self.kernel),
                "stride": list(self.stride), "c_in": self.c_in, "c_out": self.c_out,
                "padding": self.padding}

    @classmethod
    def from_dict(cls, data: dict, where: str = "geometry") -> "Geometry":
        known = {"rank", "spatial", "kernel", "stride", "c_in", "c_out", "padding"}
        if not isinstance(data, dict):
            raise ConfigError(where, data, "must be an object with fields " + ", ".join(sorted(known)))
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"{where}.{sorted(unknown)[0]}", data[sorted(unknown)[0]], "is not a geometry field")
        missing = known - {"padding"} - set(data)
        if missing:
            raise ConfigError(f"{where}.{sorted(missing)[0]}", None, "is required")
        for field in ("spatial", "kernel", "stride"):
            if not isinstance(data[field], (list, tuple)):
                raise ConfigError(f"{where}.{field}", data[field], "must be a list of integers")
        return cls(**data).validate(where)
