"""The detection script's figures for a missed mutant: its effect, the clean module's error and
the clean check's bound, and the kind of miss they make."""
import numpy as np

from pipeline.dev.detection import miss_figures


def _case(folder, actual, exact=None):
    folder.mkdir(parents=True)
    np.save(folder / "actual.npy", np.asarray(actual, dtype=np.float32))
    if exact is not None:
        np.save(folder / "exact.npy", np.asarray(exact, dtype=np.float64))
    return folder


def test_a_miss_is_named_by_its_effect_against_the_bound(tmp_path):
    clean = _case(tmp_path / "clean", [1.0, 2.0], [1.0, 2.0 + 1e-7])
    result = {"metrics": {"vs float64 conv": {"max_tolerance": 1e-3}}}
    below = miss_figures(_case(tmp_path / "below", [1.0, 2.0005]), clean, result)
    assert below["kind"] == "below the bound" and below["effect"] == np.float32(2.0005) - np.float32(2.0)
    assert abs(below["noise"] - 1e-7) < 1e-9 and below["bound"] == 1e-3
    assert miss_figures(_case(tmp_path / "same", [1.0, 2.0]), clean, result)["kind"] == "cannot show"
    assert miss_figures(_case(tmp_path / "above", [1.0, 2.5]), clean, result)["kind"] == "above the bound"
    assert miss_figures(tmp_path / "none", clean, result) == {"kind": "no output"}
