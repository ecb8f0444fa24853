"""A model's own weights for one conv layer (`doit extract --weights`): an .npz file beside the
spec file, named in the spec's geometry entry as `"weights": "<file>.npz"`.

The file holds `kernel` (c_out, c_in / groups, *kernel) and `bias` (c_out,), float64, the
values the model computes with (an int8 model's dequantized: stored integer x its scale). A case
built from them is keyed on the file's digest: its name ends `_w<first 12 hex digits>`, and the
model stage's keys hold the whole digest, so a model's weights never share a store entry with
random ones, nor with another file's. The input data stays the sweep's, unless the file also
holds `input` (batch, c_in, *spatial), float64: the values the layer read when the model ran on
a sample input (`doit extract --weights --input`); then the case runs on it
(pipeline/space/data.py).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import ConfigError
from pipeline.space.geometry import Geometry

SUFFIX_DIGITS = 12  # hex digits of the digest in a case name


@dataclass(frozen=True)
class GivenWeights:
    """One layer's weights, as a spec file names them."""

    path: str  # the .npz file, absolute
    digest: str  # sha256 of its bytes
    has_input: bool = False  # it holds the layer's input on a sample too

    @property
    def suffix(self) -> str:
        return f"_w{self.digest[:SUFFIX_DIGITS]}"

    def read(self):
        """(kernel, bias), float64; the file must still be the one the case was named for."""
        import numpy as np

        with self._arrays() as arrays:
            return arrays["kernel"].astype(np.float64), arrays["bias"].astype(np.float64)

    def read_input(self):
        """The layer's input on the sample, float64, channels first (batch, c_in, *spatial)."""
        import numpy as np

        with self._arrays() as arrays:
            return arrays["input"].astype(np.float64)

    def _arrays(self):
        """The file's arrays (np.load), once its bytes are checked against the digest."""
        import io

        import numpy as np

        data = Path(self.path).read_bytes()
        if hashlib.sha256(data).hexdigest() != self.digest:
            raise ConfigError("weights", self.path, "changed since the sweep read it (its digest differs)")
        return np.load(io.BytesIO(data))


def write(file, kernel, bias, sample_input=None) -> None:
    """The layer's weights (and its input on a sample, channels first) as an .npz `load` reads,
    to an open binary file (uncompressed: the same arrays give the same bytes)."""
    import numpy as np

    arrays = {"kernel": np.asarray(kernel, dtype=np.float64), "bias": np.asarray(bias, dtype=np.float64)}
    if sample_input is not None:
        arrays["input"] = np.asarray(sample_input, dtype=np.float64)
    np.savez(file, **arrays)


def load(value, base: Path, geometry: Geometry, where: str) -> GivenWeights:
    """The spec entry's `weights` (a path, relative to the spec file's folder), checked against
    its geometry before any work: a readable .npz whose kernel and bias have the geometry's
    shapes and finite values. (numpy is imported here: listing the tasks does not pay for it.)"""
    import numpy as np

    if not isinstance(value, str) or not value:
        raise ConfigError(where, value, "must be the path of an .npz file (doit extract --weights writes them)")
    path = (Path(base) / value).resolve()
    try:
        data = path.read_bytes()
        with np.load(path) as arrays:
            kernel, bias = arrays["kernel"], arrays["bias"]
            sample = arrays["input"] if "input" in arrays.files else None
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(where, value, f"cannot be read as weights (.npz with kernel and bias): "
                          f"{type(err).__name__}: {str(err)[:120]}") from None
    g = geometry
    want = {"kernel": (g.c_out, g.c_in // g.groups, *g.kernel), "bias": (g.c_out,),
            "input": (g.batch, g.c_in, *g.spatial)}
    for name, array in (("kernel", kernel), ("bias", bias), *((("input", sample),) if sample is not None else ())):
        if tuple(array.shape) != want[name]:
            raise ConfigError(f"{where} ({name})", list(array.shape), f"must have the geometry's shape {list(want[name])}")
        if not np.isfinite(array).all():
            raise ConfigError(f"{where} ({name})", value, "holds a value that is not finite")
    return GivenWeights(str(path), hashlib.sha256(data).hexdigest(), sample is not None)
