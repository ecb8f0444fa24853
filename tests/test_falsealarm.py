"""The false-alarm simulation (pipeline/dev/falsealarm.py), reduced to a few seconds: correct f32
summations in two orders stay within the f32 bounds on the covered data sets at every K, bf16
partial sums do not (they need the bf16 bound), and the measurement is not vacuous."""
import json
import math

import numpy as np
import pytest

from pipeline.checks import reference, tolerance
from pipeline.dev import falsealarm

ELEMENTS = {9: 4096, 576: 1024, 4_608: 256, 41_472: 256}  # whole channels of 64


@pytest.fixture(scope="module")
def reduced() -> dict:
    """(data, K) -> falsealarm.simulate's counts, every order, on the covered data sets."""
    return {(data, k): falsealarm.simulate(data, k, n, seed=0)
            for data in falsealarm.COVERED for k, n in ELEMENTS.items()}


@pytest.mark.parametrize("order", ["in-order", "pairwise"])
def test_no_false_alarm_on_the_covered_data_in_f32(reduced, order):
    for (data, k), result in reduced.items():
        counts = result[order]["f32"]
        assert counts["elements"] == ELEMENTS[k] and counts["channels"] == ELEMENTS[k] // 64
        assert counts["over"] == 0, (data, k, counts)
        assert counts["channels_over"] == 0, (data, k, counts)
        assert 0 < counts["max_ratio"] < 1 and 0 < counts["max_channel_ratio"] < 1, (data, k, counts)


def test_bf16_partial_sums_exceed_the_f32_bound_but_not_the_bf16_bound(reduced):
    shares = {}
    for (data, k), result in reduced.items():
        bf16_tiles = result["bf16-tiles"]
        assert bf16_tiles["bf16"]["over"] == 0, (data, k, bf16_tiles)
        assert bf16_tiles["bf16"]["max_ratio"] > 0
        if k >= 576:
            shares[data, k] = bf16_tiles["f32"]["over"] / bf16_tiles["f32"]["elements"]
    assert max(shares.values()) > 0.9
    assert all(shares[data, k] > 0.5 for data in falsealarm.COVERED for k in (576, 4_608, 41_472) if data == "random")


def test_the_bf16_accumulation_gets_no_tensor_test_and_its_bound_is_the_worst_case(reduced):
    """A bf16 running sum's roundings may all lose the same way (it stagnates once a tile's sum
    is under half its step): no tensor test, and the element bound is the worst case, which
    holds; at K = 41,472 (2,592 roundings) it exceeds Q itself."""
    for (data, k), result in reduced.items():
        assert result["bf16-tiles"]["bf16"]["channels"] == 0, (data, k)
    q = np.array([1.0])
    assert tolerance.bf16_accumulation_bound(41_472, q, 16)[0] > q[0]
    assert tolerance.bf16_accumulation_bound(576, q, 16)[0] < 0.2


def _chunk(data: str, k: int, rows: int, seed: int = 3):
    w = falsealarm.weights(data, k, np.random.default_rng(seed))
    x = falsealarm.windows(data, k, 0, np.random.default_rng(seed + 1), np.empty((rows, k), dtype=np.float32))
    products = x * w
    total, abs_sum = falsealarm.exact(w, x)
    return w, x, products, total, abs_sum


def test_an_injected_error_is_caught():
    """2 A on one element fails it (and no channel: sqrt(64) A is the channel's scale); A / 4 on
    every element in one direction fails no element and every channel."""
    k = 576
    _, _, products, total, abs_sum = _chunk("random", k, 640)
    error = falsealarm.accumulate(products, "in-order").astype(np.float64) - total
    assert np.count_nonzero(error) > 600
    within, channel_bound = falsealarm.bounds(total, abs_sum, k, "f32")
    clean = falsealarm.judge(error, within, channel_bound)
    assert clean["over"] == 0 and clean["channels_over"] == 0 and clean["channels"] == 10

    one = error.copy()
    one[100] += 2 * within[100] * np.sign(error[100] or 1.0)
    caught = falsealarm.judge(one, within, channel_bound)
    assert caught["over"] == 1 and caught["max_ratio"] >= 1.9

    shifted = falsealarm.judge(error + within / 4, within, channel_bound)
    assert shifted["over"] == 0 and shifted["channels_over"] == 10


def test_the_orders_are_what_they_say():
    k = 100  # 6 whole tiles of 16 and a part tile
    _, _, products, _, _ = _chunk("random", k, 5)
    in_order = falsealarm.accumulate(products, "in-order")
    pairwise = falsealarm.accumulate(products, "pairwise")
    tiles = falsealarm.accumulate(products, "bf16-tiles", tile=16)
    for row in range(products.shape[0]):
        s = np.float32(0)
        for p in products[row]:
            s = np.float32(s + p)
        assert in_order[row] == s
        assert pairwise[row] == np.sum(products[row])
        running = np.float32(0)
        for first in range(0, k, 16):
            for p in products[row, first:first + 16]:
                running = np.float32(running + p)
            running = np.float32(reference.round_to_bf16(np.float64(running)))
        assert tiles[row] == running


def test_the_reference_sums_are_exact_enough():
    _, x, products, total, abs_sum = _chunk("offset-100", 4_608, 3)
    w = falsealarm.weights("offset-100", 4_608, np.random.default_rng(3))
    for row in range(3):
        exact = [float(a) * float(b) for a, b in zip(w, x[row])]
        assert abs(total[row] - math.fsum(exact)) <= 1e-12 * abs_sum[row]
        assert abs(abs_sum[row] - math.fsum(abs(p) for p in exact)) <= 1e-12 * abs_sum[row]


def test_the_data_sets():
    k, a = 576, falsealarm.scale(576)
    w = falsealarm.weights("plus-minus", k, np.random.default_rng(0))
    assert (w[:288] == a).all() and (w[288:] == -a).all()
    assert (np.diff(falsealarm.weights("sorted", k, np.random.default_rng(0))) >= 0).all()
    assert (falsealarm.weights("bright-patch", k, np.random.default_rng(0)) >= 0).all()
    x = falsealarm.windows("bright-patch", k, 0, np.random.default_rng(0), np.empty((1000, k), dtype=np.float32))
    lit = x.min(axis=1) >= 1
    assert lit.sum() == 100 and (lit == falsealarm.bright(0, 1000)).all() and (x[~lit] <= 0.1).all()
    flat = falsealarm.windows("average-flat", k, 0, np.random.default_rng(0), np.empty((10, k), dtype=np.float32))
    assert (flat == flat[:, :1]).all() and len(set(flat[:, 0])) == 10


def test_the_command_writes_rows_and_totals(tmp_path):
    out = tmp_path / "fa.json"
    falsealarm.main(["--elements", "0.0001", "--out", str(out)])
    report = json.loads(out.read_text())
    assert len(report["rows"]) == len(falsealarm.DATASETS) * len(falsealarm.KS) * len(falsealarm.ORDERS)
    covered = report["totals"]["covered"]
    assert covered["in-order"]["elements"] == sum(r["elements"] for r in report["rows"]
                                                  if r["covered"] and r["order"] == "in-order")
    assert {r["elements"] for r in report["rows"] if r["k"] == 41_472} == {64}  # at least one channel
    assert covered["in-order"]["element_false_alarms"] == 0 and covered["pairwise"]["tensor_false_alarms"] == 0
    assert set(report["totals"]["limits"]) == set(falsealarm.ORDERS)
