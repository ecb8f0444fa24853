"""The runner (pipeline/run/runner.py): cases through the sweep's own stages on two lanes, with
the real toolchain on a tiny geometry, a model's cases in order on one lane, and a journal that
keeps every case that finished from running again; a line torn by a kill; a search that feeds
the lanes; the deadline; a failure of the work, which ends the run."""
import json
import threading
import time

import pytest

from helpers import clean_env, write_spec

from pipeline.config import Config
from pipeline.run.runner import Journal, run_cases, run_chain

TINY = [{"category": "tiny", "rank": 1, "spatial": [16], "kernel": [3], "stride": [1], "c_in": 2, "c_out": 2}]


def _config(tmp_path) -> Config:
    return Config.from_env(clean_env(CONV_SWEEP_SPEC=write_spec(tmp_path / "spec.json", TINY), CONV_SWEEP_N=0,
                                     CONV_SWEEP_BUILD_DIR=tmp_path / "build", CONV_SWEEP_TARGET="llvm-cpu,vmvx"))


def _case(cfg: Config, variant: str, target: str):
    return next(c for c in cfg.cases() if c.variant == variant and c.target == target)


@pytest.mark.slow
def test_cases_run_on_two_lanes_and_a_journal_keeps_them_from_running_again(tmp_path):
    cfg = _config(tmp_path)
    onnx, tflite, onnx_vmvx = (_case(cfg, "onnx_f32", "llvm-cpu"), _case(cfg, "tflite_f32", "llvm-cpu"),
                               _case(cfg, "onnx_f32", "vmvx"))
    chosen = [onnx, tflite, onnx_vmvx]
    assert onnx.name == onnx_vmvx.name  # one model on two targets
    ran = []

    def work(case, config):  # the default work (each case's chain), timed and its lane noted
        start = time.monotonic()
        result = run_chain(case, config)
        ran.append((case.key, threading.get_ident(), start, time.monotonic()))
        return result

    journal = Journal(tmp_path / "hunt" / "journal.jsonl")
    lines = []
    done = run_cases(cfg, chosen, lanes=2, work=work, journal=journal,
                     on_done=lambda case, result, line: lines.append(line))
    assert sorted(case.key for case, _ in done) == sorted(c.key for c in chosen)
    assert [result for _, result in done] == [{"status": "pass", "stage": None, "reason": ""}] * 3
    for case in chosen:  # each verified by the sweep's own stages, in the build folder
        assert json.loads((cfg.case_dir(case) / "result.json").read_text())["status"] == "pass"
    # two lanes at once; the model's two cases on one of them, one after the other
    lane = {key: thread for key, thread, _, _ in ran}
    assert len(set(lane.values())) == 2 and lane[onnx.key] == lane[onnx_vmvx.key] != lane[tflite.key]
    first, second = (next(r for r in ran if r[0] == c.key) for c in (onnx, onnx_vmvx))
    assert first[3] <= second[2]
    # the journal: a line per case as it finished, on disk
    written = [json.loads(line) for line in journal.path.read_text().splitlines()]
    assert written == lines and [w["key"] for w in written] == [case.key for case, _ in done]
    assert next(w for w in written if w["key"] == tflite.key) == {
        "key": tflite.key, "case": tflite.name, "target": "llvm-cpu", "variant": "tflite_f32",
        "geometry": tflite.geometry.to_dict(), "status": "pass", "stage": None}
    # called again with the journal (reopened, as by a command started again), it runs nothing
    stamps = {c.key: (cfg.case_dir(c) / "result.json").stat().st_mtime_ns for c in chosen}
    assert run_cases(cfg, chosen, lanes=2, work=work, journal=Journal(journal.path)) == []
    assert len(ran) == 3 and len(journal.path.read_text().splitlines()) == 3
    assert stamps == {c.key: (cfg.case_dir(c) / "result.json").stat().st_mtime_ns for c in chosen}


def test_a_torn_line_is_skipped_and_the_next_line_starts_on_its_own(tmp_path):
    path = tmp_path / "hunt" / "journal.jsonl"
    assert len(Journal(path)) == 0 and path.read_text() == ""  # made where it is new
    path.write_text(json.dumps({"key": "a@llvm-cpu", "status": "pass"}) + "\n" + '{"key": "b@llvm-cpu", "sta')
    journal = Journal(path)
    assert list(journal.entries) == ["a@llvm-cpu"] and "b@llvm-cpu" not in journal
    journal.append({"key": "b@llvm-cpu", "status": "error"})
    assert path.read_text().splitlines()[2] == json.dumps({"key": "b@llvm-cpu", "status": "error"})
    assert Journal(path).entries == {"a@llvm-cpu": {"key": "a@llvm-cpu", "status": "pass"},
                                     "b@llvm-cpu": {"key": "b@llvm-cpu", "status": "error"}}


def test_a_search_feeds_the_lanes_and_a_journaled_case_is_left_out(tmp_path):
    cfg = _config(tmp_path)
    cases = cfg.cases()  # five models on llvm-cpu, then the same five on vmvx
    batches, asked = [cases[:4], cases[4:]], []

    def more():  # the next cases, asked for when a lane is free and no case waits
        asked.append(len(batches))
        return batches.pop(0) if batches else None

    journal = Journal(tmp_path / "journal.jsonl")
    journal.append({"key": cases[5].key, "status": "pass"})
    lanes = []

    def work(case, config):
        lanes.append((case.key, threading.get_ident()))
        return {"status": "pass", "stage": None}

    done = run_cases(cfg, more, lanes=2, work=work, journal=journal)
    assert sorted(c.key for c, _ in done) == sorted(c.key for c in cases if c.key != cases[5].key)
    assert len(journal) == len(cases)
    # asked again while cases run, after it gave none; the run ends when none runs and it gives none
    assert asked[:3] == [2, 1, 0] and set(asked[3:]) <= {0}
    # the second batch's model on both targets: one lane, in the batch's order
    model = [(key, thread) for key, thread in lanes if key.startswith(cases[4].name + "@")]
    assert [key for key, _ in model] == [cases[4].key, cases[9].key] and len({t for _, t in model}) == 1


def test_no_case_starts_after_the_deadline_or_after_the_work_failed(tmp_path):
    cfg = _config(tmp_path)
    cases, started = cfg.cases(), []

    def work(case, config):
        started.append(case.key)
        if len(started) == 2:
            raise RuntimeError("the work failed")
        return case.key

    assert run_cases(cfg, cases, lanes=2, work=work, deadline=time.monotonic()) == [] and started == []
    with pytest.raises(RuntimeError, match="the work failed"):
        run_cases(cfg, cases, lanes=1, work=work)
    assert started == [cases[0].key, cases[5].key]  # the first model on both targets; nothing after
