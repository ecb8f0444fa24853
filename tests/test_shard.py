"""Shards (CONV_SWEEP_SHARD=i/N): together exactly the sweep, each model in one shard, balanced
by estimated cost; merged reports of the shards equal the unsharded report (through doit)."""
import json

import pytest

from helpers import clean_env, doit, write_spec
from pipeline.space import shard
from pipeline.space.cases import make_cases
from pipeline.core.errors import ConfigError
from pipeline.space.sweep import SweepSpec
from test_dodo import SMALL


def _sweep():
    sampled = SweepSpec().sample(50)
    return make_cases(sampled) + make_cases(sampled, target="vmvx")


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_partition_the_sweep_and_balance_cost(count):
    cases = _sweep()
    parts = [shard.select(cases, (i, count)) for i in range(1, count + 1)]
    keys = [c.key for part in parts for c in part]
    assert sorted(keys) == sorted(c.key for c in cases) and len(set(keys)) == len(keys)
    for part in parts:  # a model's cases (every flavor's model is shared by its targets) stay together
        names = {c.name for c in part}
        assert all(c.name not in names for other in parts if other is not part for c in other)
    loads = [sum(shard.cost(c) for c in part) for part in parts]
    biggest_model = max(sum(shard.cost(c) for c in cases if c.name == name) for name in {c.name for c in cases})
    assert max(loads) - min(loads) <= biggest_model
    assert shard.select(cases, (2, count) if count > 1 else (1, 1)) == parts[1 if count > 1 else 0]  # deterministic


def test_cost_counts_macs_and_flavor():
    case = next(c for c in make_cases(SweepSpec().sample(1)[:1]) if c.variant == "onnx_bf16")
    assert shard.macs(case) == 1 * 512 * 12 * 11 * (256 * 4 * 4)  # w51_h44_f512_k4_c256_s4x4: out 11 x 12
    assert shard.cost(case) > shard.FIXED_SECONDS["onnx_bf16"]


@pytest.mark.parametrize("text", ["0/3", "4/3", "1", "a/b", "1/0"])
def test_bad_shard_names_the_knob(text):
    with pytest.raises(ConfigError, match="CONV_SWEEP_SHARD"):
        shard.parse(text)


@pytest.mark.slow
def test_merged_shard_reports_equal_the_unsharded_one(tmp_path):
    spec = write_spec(tmp_path / "spec.json", SMALL)
    whole = clean_env(CONV_SWEEP_SPEC=spec, CONV_SWEEP_N=0, CONV_SWEEP_BUILD_DIR=tmp_path / "whole")
    assert doit("-n", "2", "sweep", env=whole).returncode == 0
    for i in (1, 2, 3):
        env = {**whole, "CONV_SWEEP_BUILD_DIR": str(tmp_path / f"shard{i}"), "CONV_SWEEP_SHARD": f"{i}/3"}
        assert doit("-n", "2", "sweep", env=env).returncode == 0
    merged = {**whole, "CONV_SWEEP_BUILD_DIR": str(tmp_path / "merged")}
    run = doit("report", "--merge", str(tmp_path / "shard1"), "--merge", str(tmp_path / "shard2"),
               "--merge", str(tmp_path / "shard3" / "report" / "llvm-cpu" / "results.json"), env=merged)
    assert run.returncode == 0, run.stderr

    def load(folder):
        return json.loads((tmp_path / folder / "report" / "llvm-cpu" / "results.json").read_text())

    ours, theirs = load("merged"), load("whole")
    assert ours["summary"] == theirs["summary"]
    assert {c["case"]: c["status"] for c in ours["cases"]} == {c["case"]: c["status"] for c in theirs["cases"]}
    assert len(ours["cases"]) == 10
    twice = doit("report", "--merge", str(tmp_path / "shard1"), "--merge", str(tmp_path / "shard1"), env=merged)
    assert twice.returncode != 0 and "repeats conv_" in twice.stdout + twice.stderr
