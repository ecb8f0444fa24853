"""bf16 outputs are saved as numbers: np.load gives float32 values equal to the bf16 ones (not
2-byte void), other dtypes are saved as they are, and the readers of a case folder (the
explorer's and the bug report's check_arrays) still read them. A bf16 input stays bf16: the
run tools read it as the module's input."""
import ml_dtypes
import numpy as np

from pipeline.checks.compare import write_check
from pipeline.checks.verify import save_npy, save_numbers
from pipeline.results.explorer import check_arrays


def _bf16_values() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.uniform(-3, 3, (1, 4, 5)).astype(ml_dtypes.bfloat16)


def test_a_bf16_output_loads_as_the_same_numbers(tmp_path):
    values = _bf16_values()
    save_numbers(tmp_path / "actual.npy", values)
    loaded = np.load(tmp_path / "actual.npy")
    assert loaded.dtype == np.float32 and loaded.shape == values.shape
    assert np.array_equal(loaded, values.astype(np.float32))
    assert np.array_equal(loaded.astype(ml_dtypes.bfloat16).view(np.uint16), values.view(np.uint16))  # bit for bit


def test_other_dtypes_are_saved_as_they_are_and_a_bf16_input_stays_bf16(tmp_path):
    for values in (np.arange(6, dtype=np.int8), np.linspace(-1, 1, 5, dtype=np.float32), np.linspace(0, 1, 3)):
        save_numbers(tmp_path / "a.npy", values)
        loaded = np.load(tmp_path / "a.npy")
        assert loaded.dtype == values.dtype and np.array_equal(loaded, values)
    values = _bf16_values()
    save_npy(tmp_path / "input.npy", values)
    raw = np.load(tmp_path / "input.npy")
    assert raw.dtype.itemsize == 2 and np.array_equal(raw.view(np.uint16), values.view(np.uint16))


def test_the_case_folder_readers_read_a_bf16_case(tmp_path):
    expected = _bf16_values()
    actual = expected.astype(np.float64)
    actual.flat[3] += 1.0
    save_numbers(tmp_path / "actual.npy", actual.astype(ml_dtypes.bfloat16))
    write_check(tmp_path, expected, "approximate", 0.01, 0.0, "--input=@x.bin")
    want, got, limit = check_arrays(tmp_path)
    assert np.array_equal(want, expected.astype(np.float64))
    assert np.array_equal(got, actual.astype(ml_dtypes.bfloat16).astype(np.float64))
    assert (np.abs(got - want) > limit).sum() == 1
