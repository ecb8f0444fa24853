"""Predicted time limits through `doit` (pipeline/targets/cost.py, the profile's `timeouts`): a
run tool that hangs on a tiny case is cut at that case's predicted limit, seconds, not the
hard limit, and its reason and bucket say so; a slow but legitimate case, well over the floor,
is not cut; the run's completed invocations are observed; with CONV_SWEEP_TIMEOUTS=fixed the
same hang runs to the hard limit and is a bucket of its own."""
import json
import time

import pytest

from helpers import clean_env, doit, results, write_spec

pytestmark = pytest.mark.slow
TINY = {"category": "tiny", "rank": 1, "spatial": [8], "kernel": [3], "stride": [1], "c_in": 1, "c_out": 1}
SLOW = {"category": "slow", "rank": 2, "spatial": [24, 24], "kernel": [3, 3], "stride": [1, 1], "c_in": 16,
        "c_out": 16}
# The run tool: hangs on the tiny case, takes 4 s more than the real one on the slow one.
RUNNER = """#!/bin/sh
case "$*" in
  *_c1_r1_*) sleep 600;;
  *_c16_*) sleep 4;;
esac
exec {real} "$@"
"""
# A calibration that says a run of the tiny case takes 0.3 s and one of the slow case 2.5 s; with
# margin 3 and floor 3 s the tiny case's limit is max(3 s, 3 x 0.3 s) = 3 s, the slow one's
# 3 x 2.5 s = 7.5 s, which its 4 s of sleep plus the real run stays well within.
RULES = {"run": {"limit": 600, "margin": 3, "floor": 3}}


def _macs(geometry: dict) -> int:
    from pipeline.space.geometry import Geometry, macs

    return macs(Geometry.from_dict({k: v for k, v in geometry.items() if k != "category"}, "test"))


def _env(tmp_path, **knobs):
    from helpers import real_compiler  # noqa: F401  (the toolchain must resolve)
    from pipeline.config import Config

    real_runner = Config.from_env(clean_env()).target("llvm-cpu").runner
    runner = tmp_path / "hanging-run-module"
    runner.write_text(RUNNER.format(real=real_runner))
    runner.chmod(0o755)
    calibration = {"measured": "by hand", "stages": {"run": {"points": [[_macs(TINY), 0.3], [_macs(SLOW), 2.5]]}}}
    (tmp_path / "cal.json").write_text(json.dumps(calibration))
    profile = {"base": "llvm-cpu", "runner": str(runner), "flavors": ["onnx_f32"], "calibration": "cal.json",
               "timeouts": RULES}
    (tmp_path / "targets.json").write_text(json.dumps({"targets": {"cut": profile}}))
    return clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", [TINY, SLOW]), CONV_SWEEP_N=0,
                     CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGETS_FILE=tmp_path / "targets.json",
                     CONV_SWEEP_TARGET="cut", **knobs)


def test_a_hang_on_a_tiny_case_is_cut_at_its_predicted_limit(tmp_path):
    start = time.monotonic()
    run = doit("-n", "2", "sweep", env=_env(tmp_path), timeout=300)
    elapsed = time.monotonic() - start
    assert run.returncode != 0  # the hang is not listed: a red case
    found = {r["category"]: r for r in results(tmp_path / "build", "cut").values()}
    tiny, slow = found["tiny"], found["slow"]
    assert (tiny["status"], tiny["stage"]) == ("error", "run")
    assert tiny["reason"].startswith("hanging-run-module timed out after 3 s: cut at its predicted limit "
                                     f"(3 s = max(floor 3 s, 3 x 0.3 s predicted for {_macs(TINY)} MACs); hard limit 600 s)"), \
        tiny["reason"]
    assert elapsed < 60, elapsed  # not the 600 s of the hard limit
    assert slow["status"] == "pass", slow["reason"]
    assert slow["stages"]["run"]["seconds"] > 4  # slow, and not cut: its limit is 3 x 2.5 s
    report = json.loads((tmp_path / "build" / "report" / "cut" / "results.json").read_text())
    assert any("cut at its predicted limit" in b["signature"] for b in report["buckets"]), report["buckets"]
    observed = [json.loads(line) for line in
                (tmp_path / "build" / "report" / "cut" / "observed-costs.jsonl").read_text().splitlines()]
    seen = {(o["stage"], o["macs"]) for o in observed}
    # a cut run says nothing of its cost; compile has no rule in this profile, so is not observed
    assert seen == {("run", _macs(SLOW))}


def test_fixed_timeouts_wait_for_the_hard_limit(tmp_path):
    run = doit("-n", "2", "sweep", env=_env(tmp_path, CONV_SWEEP_TIMEOUTS="fixed", CONV_SWEEP_TIMEOUT=6),
               timeout=300)
    assert run.returncode != 0
    found = {r["category"]: r for r in results(tmp_path / "build", "cut").values()}
    assert found["tiny"]["reason"] == "hanging-run-module timed out after 6 s", found["tiny"]["reason"]
    assert found["slow"]["status"] == "pass"
