"""Time limits that follow a case's cost (pipeline/targets/cost.py): the envelope of measured
times, the prediction and its range, the limit rule (floor, margin, hard limits), the reason a
predicted cut gives and its bucket, the profile's rules checked field by field, calibration
files, and a run's own observations."""
import json
import pickle
import time

import pytest

from pipeline.config import DEFAULT_TIMEOUT
from pipeline.core.errors import ConfigError
from pipeline.outcome.bucket import signature
from pipeline.outcome.result import ERROR, TIMEOUT
from pipeline.targets import cost
from pipeline.targets.cost import SPAN, Envelope, Rule, limit, parse_rules


def test_the_envelope_keeps_the_slowest_time_at_or_below_each_size():
    envelope = Envelope.of([(100, 1.0), (100, 0.5), (1000, 0.8), (5000, 3.0), (4000, 2.0), (10_000, 2.5)])
    assert envelope.points == ((100, 1.0), (4000, 2.0), (5000, 3.0), (10_000, 3.0))  # the range's end last


def test_a_prediction_covers_cases_up_to_half_a_decade_larger_and_no_further():
    envelope = Envelope.of([(100, 1.0), (10_000, 4.0)])
    assert envelope.predict(10) == 1.0  # below the smallest point: the smallest point's time
    assert envelope.predict(100) == 1.0
    assert envelope.predict(10_000 / SPAN + 1) == 4.0  # within SPAN of the larger point: its time
    assert envelope.predict(3000) == 1.0
    assert envelope.predict(int(10_000 * SPAN)) == 4.0
    assert envelope.predict(int(10_000 * SPAN) + 1) is None  # beyond the calibrated range
    assert Envelope().predict(5) is None


def test_widening_only_raises_the_envelope():
    envelope = Envelope.of([(100, 1.0), (10_000, 4.0)])
    wider = envelope.widened([(50, 0.1), (1000, 9.0)])
    assert wider.points == ((50, 1.0), (1000, 9.0), (10_000, 9.0))  # the fast small case counts at its prediction
    for count in (1, 10, 50, 100, 1000, 10_000, 20_000):
        assert wider.predict(count) >= envelope.predict(count)
    assert wider.predict(1000) == 9.0
    assert envelope.widened([]) is envelope


def test_the_limit_is_the_predicted_one_within_the_floor_and_the_hard_limits():
    envelope = Envelope.of([(100, 0.05), (10**9, 100.0)])
    rule = Rule(limit=600, margin=5, floor=20)
    tiny = limit(rule, envelope, 270, timeout=600)
    assert tiny.seconds == 20 and tiny.predicted == 0.05 and tiny.cut_early  # the floor
    big = limit(rule, envelope, 10**9, timeout=600)
    assert big.seconds == 500 and big.predicted == 100.0  # margin x predicted
    capped = limit(rule, envelope, 10**9, timeout=300)
    assert capped.seconds == 300 and not capped.cut_early  # CONV_SWEEP_TIMEOUT stays the hard limit
    outside = limit(rule, envelope, 10**11, timeout=600)
    assert outside.seconds == 600 and outside.predicted is None and outside.cut_note() == "its compile budget is 600 s (no prediction for 100000000000 MACs)"
    assert limit(Rule(limit=100), envelope, 270, timeout=600).seconds == 100  # no margin: the hard limit
    assert limit(None, envelope, 270, timeout=600).seconds == 600


def test_a_cut_says_which_limit_and_its_bucket_holds_no_number():
    envelope = Envelope.of([(100, 0.05), (10**9, 100.0)])
    early = limit(Rule(limit=600, margin=5, floor=20), envelope, 270, timeout=600, stage="run")
    assert early.cut_note() == ("its predicted limit (max(floor 20 s, 5 x 0.05 s predicted for 270 MACs)), "
                                "under its run budget of 600 s")
    budget = limit(Rule(limit=300, margin=5, floor=60), envelope, 10**9, timeout=3600, stage="compile")
    assert budget.seconds == 300 and not budget.cut_early and budget.unbudgeted == 500
    assert budget.cut_note() == ("its compile budget is 300 s (100 s predicted for 1000000000 MACs; "
                                 "without the budget: 500 s = max(floor 60 s, 5 x predicted))")
    # whichever limit cut it, and however long it had: one bucket per stage
    for cut in (early, budget):
        reason = f"some-tool timed out after {cut.seconds:g} s: {cut.cut_note()}"
        assert signature(cut.stage, reason, TIMEOUT) == f"{cut.stage}: timeout"
    # the same words from a tool that ended by itself are not a timeout
    assert signature("run", "torq-run-module exit status 1: timed out", ERROR) != "run: timeout"


@pytest.mark.parametrize("value, field, problem", [
    ([], "t.timeouts", "must be an object"),
    ({"model": {"limit": 5}}, "t.timeouts.model", "is not a timed stage"),
    ({"run": {"margin": 5}}, "t.timeouts.run", "must be an object with limit"),
    ({"run": {"limit": 5, "speed": 1}}, "t.timeouts.run", "must be an object with limit"),
    ({"run": {"limit": 0}}, "t.timeouts.run.limit", "must be a positive number"),
    ({"run": {"limit": 5, "margin": -1}}, "t.timeouts.run.margin", "must be a number >= 0"),
    ({"run": {"limit": 5, "floor": "x"}}, "t.timeouts.run.floor", "must be a positive number"),
])
def test_every_bad_rule_field_is_named(value, field, problem):
    with pytest.raises(ConfigError) as caught:
        parse_rules(value, "t.timeouts")
    assert caught.value.field == field and problem in caught.value.problem


def test_the_built_in_profiles_have_rules_for_compile_and_run():
    from pipeline.targets.profiles import load_profiles

    for profile in load_profiles().values():
        assert {stage for stage, _ in profile.timeouts} == set(cost.TIMED), profile.name
        assert all(rule.margin > 1 and rule.floor >= 20 for _, rule in profile.timeouts)
        budgets = {stage: rule.limit for stage, rule in profile.timeouts}
        if profile.name == "torq":  # upstream's harness's: --torq-compiler-timeout, --torq-runtime-timeout
            assert budgets == {"compile": 300, "run": 240}
            continue
        # elsewhere the budget is at least twice the slowest calibrated invocation (a machine twice
        # as busy cuts no legitimate case), and CONV_SWEEP_TIMEOUT's default leaves it in force
        for stage, rule in profile.timeouts:
            slowest = max(seconds for _, seconds in cost.calibrated(profile.calibration_file, stage).points)
            assert 2 * slowest <= rule.limit <= DEFAULT_TIMEOUT, (profile.name, stage, slowest, rule.limit)


def test_a_calibration_file_round_trips_and_a_bad_one_is_named(tmp_path):
    path = cost.write_calibration("t", {"compile": [(10, 1.0), (100, 0.5), (1000, 2.0)], "run": []}, "by hand",
                                  tmp_path / "t.json")
    data = json.loads(path.read_text())
    assert data["stages"]["compile"] == {"invocations": 3, "points": [[10, 1.0], [1000, 2.0]]}
    assert cost.Envelope.of([(10, 1.0), (100, 0.5)]).points == ((10, 1.0), (100, 1.0))
    assert cost.calibrated(path, "compile").points == ((10, 1.0), (1000, 2.0))
    assert cost.calibrated(path, "run").points == ()
    assert cost.calibrated(tmp_path / "absent.json", "run").points == ()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stages": {"run": {"points": [[1]]}}}))
    with pytest.raises(ConfigError, match="stages.run"):
        cost.calibrated(bad, "run")


def test_the_limit_book_counts_what_was_recorded_before_the_run_and_skips_a_torn_line(tmp_path):
    calibration = tmp_path / "absent.json"  # no calibration: the envelope is the observations'
    cost.observe(tmp_path, "run", 100, 1.5)
    cost.observe(tmp_path, "compile", 100, 0.7)
    with open(tmp_path / cost.OBSERVED, "a") as f:
        f.write('{"stage": "run", "macs": 3')  # a run killed while writing its line
    book = cost.LimitBook(before=time.time() + 1)
    assert book.envelope(calibration, tmp_path, "run").points == ((100, 1.5),)
    assert book.envelope(calibration, tmp_path, "compile").points == ((100, 0.7),)
    assert book.envelope(calibration, tmp_path / "nothing", "run").points == ()


def test_the_limit_book_gives_one_answer_per_run_whatever_finishes_during_it(tmp_path):
    """Invocations recorded once the run started count from the next run on: a book read
    before them and a book read after them (another process of the same run) agree."""
    calibration = tmp_path / "absent.json"
    cost.observe(tmp_path, "compile", 100, 0.7)
    started = time.time() + 0.01
    time.sleep(0.02)
    early = cost.LimitBook(started)
    assert early.envelope(calibration, tmp_path, "compile").points == ((100, 0.7),)
    cost.observe(tmp_path, "compile", 1000, 9.0)  # finished during the run
    late = pickle.loads(pickle.dumps(cost.LimitBook(started)))  # a Dask worker's copy, read later
    assert late.envelope(calibration, tmp_path, "compile") == early.envelope(calibration, tmp_path, "compile")
    copied = pickle.loads(pickle.dumps(early))  # the driver's book, shipped with its Config
    assert copied.envelope(calibration, tmp_path, "compile").points == ((100, 0.7),)
    assert cost.LimitBook(time.time() + 1).envelope(calibration, tmp_path, "compile").points == \
        ((100, 0.7), (1000, 9.0))  # the next run counts it


def test_observations_name_their_case_where_the_line_does(tmp_path):
    cost.observe(tmp_path, "compile", 100, 0.7, "conv_a")
    cost.observe(tmp_path, "compile", 200, 0.9)  # a line written without its case
    cost.observe(tmp_path, "run", 100, 1.5, "conv_a")
    with open(tmp_path / cost.OBSERVED, "a") as f:
        f.write('{"stage": "compile", "macs": 3')
    assert cost.observations(tmp_path, "compile") == [("conv_a", 100, 0.7), ("", 200, 0.9)]
    assert cost.observations(tmp_path / "nothing", "run") == []


def test_a_case_of_several_convs_is_predicted_as_that_many_convs_of_its_share():
    """A TFLite conv of 102 groups (102 convs of 180 MACs each) is predicted at 102 times a
    180-MAC conv, not at its 18,360 MACs: the limit no longer sits at the floor its compile
    nears under load."""
    envelope = Envelope.of([(192, 0.9), (43_008, 1.85), (908_328_960, 2.97)])  # llvm-cpu's compile corners
    rule = Rule(limit=600, margin=5, floor=60)
    alone = limit(rule, envelope, 18_360, timeout=600)
    assert alone.predicted == 1.85 and alone.seconds == 60  # one conv of 18,360 MACs: the floor
    split = limit(rule, envelope, 18_360, timeout=600, convs=102)
    assert split.predicted == pytest.approx(102 * 0.9) and split.seconds == pytest.approx(459.0)
    assert split.cut_note() == ("its predicted limit (max(floor 60 s, 5 x 91.8 s predicted for 18360 MACs in "
                                "102 convs)), under its compile budget of 600 s")
    assert envelope.predict(10**9, convs=2) == 2 * 2.97  # each conv within the range
    assert envelope.predict(10**10, convs=2) is None  # each conv beyond it: the budget
    assert limit(rule, envelope, 10**10, timeout=600, convs=2).cut_note() == \
        "its compile budget is 600 s (no prediction for 10000000000 MACs in 2 convs)"


def test_a_run_of_several_convs_enters_the_envelope_per_conv(tmp_path):
    """Observed and calibrated alike: an invocation's sample is one of its convs, (MACs / convs,
    seconds / convs), so the 102-conv case above does not raise the limit of a one-conv case of
    its MACs to its own time."""
    assert cost.per_conv(18_360, 35.8, 102) == (180, pytest.approx(35.8 / 102))
    assert cost.per_conv(100, 0.7) == (100, 0.7)
    cost.observe(tmp_path, "compile", 18_360, 35.8, "conv_g102", convs=102)
    cost.observe(tmp_path, "compile", 100, 0.7, "conv_a")
    line = json.loads((tmp_path / cost.OBSERVED).read_text().splitlines()[0])
    assert line["macs"] == 18_360 and line["convs"] == 102 and line["seconds"] == 35.8
    assert cost.observations(tmp_path, "compile") == [("conv_g102", 180, pytest.approx(35.8 / 102)),
                                                      ("conv_a", 100, 0.7)]
    book = cost.LimitBook(before=time.time() + 1)
    assert book.envelope(tmp_path / "absent.json", tmp_path, "compile").points == ((100, 0.7), (180, 0.7))


def test_a_run_s_limit_follows_the_compiler_s_estimated_cycles_where_they_predict_longer():
    """torq's simulator runs as long as the NPU program it simulates: a conv of many MACs but
    more cycles still gets the cycles' longer limit. The larger prediction counts; the cycles
    never lower a limit, and past their calibrated range give the budget."""
    by_macs = Envelope.of([(10_000_000, 5.74), (52_428_800, 8.4), (146_800_640, 37.26)])
    by_cycles = Envelope.of([(100_000, 0.3), (1_000_000, 4.0), (4_000_000, 20.0)])
    rule = Rule(limit=240, margin=5, floor=20)
    alone = limit(rule, by_macs, 33_554_304, timeout=3600, stage="run")
    assert alone.predicted == 8.4 and alone.seconds == 42
    slow = limit(rule, by_macs, 33_554_304, timeout=3600, stage="run", cycles=3_530_567, by_cycles=by_cycles)
    assert slow.predicted == 20.0 and slow.seconds == 100 and slow.cycles == 3_530_567
    assert slow.cut_note() == ("its predicted limit (max(floor 20 s, 5 x 20 s predicted for 33554304 MACs and "
                               "3530567 estimated cycles)), under its run budget of 240 s")
    fast = limit(rule, by_macs, 33_554_304, timeout=3600, stage="run", cycles=50_000, by_cycles=by_cycles)
    assert fast.predicted == 8.4 and fast.seconds == 42  # the cycles predict less: the MACs' limit stands
    beyond = limit(rule, by_macs, 33_554_304, timeout=3600, stage="run", cycles=10**8, by_cycles=by_cycles)
    assert beyond.predicted is None and beyond.seconds == 240  # past SPAN x the largest calibrated cycles
    assert limit(rule, by_macs, 33_554_304, timeout=3600, stage="run", cycles=3_530_567).seconds == 42  # none calibrated


def test_cycles_are_calibrated_and_observed_beside_the_macs(tmp_path):
    path = cost.write_calibration("t", {"compile": [(10, 1.0)], "run": [(10, 0.5), (1000, 2.0)]}, "by hand",
                                  tmp_path / "t.json", cycles={"run": [(5000, 0.5), (90_000, 2.0), (60_000, 1.0)]})
    data = json.loads(path.read_text())
    assert data["stages"]["run"]["cycles"] == [[5000, 0.5], [60000, 1.0], [90000, 2.0]]
    assert "cycles" not in data["stages"]["compile"]
    assert cost.calibrated(path, "run", "cycles").points == ((5000, 0.5), (60_000, 1.0), (90_000, 2.0))
    assert cost.calibrated(path, "compile", "cycles").points == ()
    assert cost.calibrated(path, "run").points == ((10, 0.5), (1000, 2.0))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stages": {"run": {"points": [[1, 1.0]], "cycles": [[1]]}}}))
    with pytest.raises(ConfigError, match="stages.run"):
        cost.calibrated(bad, "run", "cycles")
    cost.observe(tmp_path, "run", 1000, 30.0, "conv_slow", cycles=200_000)
    cost.observe(tmp_path, "run", 10, 0.2, "conv_fast")  # no estimate: a MAC sample only
    assert json.loads((tmp_path / cost.OBSERVED).read_text().splitlines()[0])["cycles"] == 200_000
    book = cost.LimitBook(before=time.time() + 1)
    assert book.envelope(path, tmp_path, "run", "cycles").points == \
        ((5000, 0.5), (60_000, 1.0), (90_000, 2.0), (200_000, 30.0))
    assert book.envelope(path, tmp_path, "run").points == ((10, 0.5), (1000, 30.0))
