"""Where a bucket lives (pipeline/results/region.py): a shallow tree over geometry features finds a
hidden rule, names a flavor, says "too thin" on three cases, prints integer bounds as integers;
results.json, report.html and a bug report's section carry the rule. No compiler runs."""
import html
import json
import random

from pipeline.results.region import describe, features, learn, matches
from pipeline.space.cases import VARIANTS

FLAVORS = (("tflite", "f32"), ("onnx", "f32"))


def _geometry(rng: random.Random) -> dict:
    rank = rng.choice([1, 2])
    kernel = [rng.randint(1, 5) for _ in range(rank)]
    return {"rank": rank, "spatial": [rng.randint(k, 24) for k in kernel], "kernel": kernel,
            "stride": [rng.randint(1, 5) for _ in range(rank)], "c_in": rng.randint(1, 16),
            "c_out": rng.randint(1, 16), "padding": "valid"}


def _hidden(geometry: dict) -> bool:
    """The bucket's own rule: stride_w > kernel_w and c_in odd."""
    return geometry["stride"][-1] > geometry["kernel"][-1] and geometry["c_in"] % 2 == 1


def _entry(name: str, backend: str, flavor: str, geometry: dict, failing: bool) -> dict:
    """A result entry as report.collect makes it."""
    return {"case": name, "target": "llvm-cpu", "backend": backend, "flavor": flavor, "category": "random",
            "geometry": geometry, "status": "error" if failing else "pass", "stage": "compile" if failing else None,
            "reason": "iree-compile exit status 1: error: injected failure" if failing else "",
            "metrics": {}, "notes": {}, "stages": {}, "perf": {}, "log": None, "repro": f"/cases/{name}/repro.sh",
            "issue": ""}


def _entries(rule=_hidden, count: int = 300, seed: int = 0, flavors=FLAVORS) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        g = _geometry(rng)
        for backend, flavor in flavors:
            out.append(_entry(f"conv_{backend}_{flavor}_{i}", backend, flavor, g, rule(g, backend, flavor)))
    return out


def _by_hidden(g, backend, flavor) -> bool:
    return _hidden(g)


def _signature(entry: dict) -> str:
    return "compile: injected"


def test_features_one_table_for_every_case():
    x = features({"rank": 1, "spatial": [20], "kernel": [5], "stride": [7], "c_in": 3, "c_out": 8,
                  "padding": "valid"}, "tflite", "w8i8")
    assert (x["h"], x["w"], x["kernel_w"], x["stride_w"], x["out_w"], x["out_h"]) == (1, 20, 5, 7, 3, 1)
    assert x["c_in_odd"] == 1 and x["c_out_odd"] == 0 and x["stride_gt_kernel"] == 1
    assert x["stride_w/kernel_w"] == 7 / 5 and x["stride_h/kernel_h"] == 1 and x["reduction"] == 15
    assert x["flavor=tflite_w8i8"] == 1 and sum(x[f"flavor={v}"] for v in VARIANTS) == 1


def test_learn_finds_a_hidden_rule_and_holds_on_fresh_geometries():
    region = learn(_entries(_by_hidden), _signature)["compile: injected"]
    assert region["status"] == "learned", region
    assert region["held_out"]["accuracy"] >= 0.95 and region["held_out"]["positives"] >= 1
    assert "c_in odd" in region["rule"] and "stride" in region["rule"] and "kernel" in region["rule"]
    rng = random.Random(99)
    fresh = [_geometry(rng) for _ in range(500)]
    agree = sum(matches(region["conditions"], features(g, "tflite", "f32")) == _hidden(g) for g in fresh)
    assert agree >= 0.95 * len(fresh)
    assert describe(region).startswith(region["rule"] + " (held-out accuracy ")


def test_a_condition_the_tree_chose_alone_is_swapped_for_the_one_that_fits():
    """A hunt's cases crowd at one channel: the tree's first split picks the few cases apart
    (here "reduction <= 3", whose rule agrees with the hidden one on 90% of fresh geometries);
    swapped for "c_in odd", the rule is the hidden one."""
    def geometry(rng: random.Random) -> dict:
        k, s = rng.randint(1, 3), rng.randint(1, 4)
        c_in = 1 if rng.random() < 0.5 else rng.randint(1, 8)
        return {"rank": 1, "spatial": [rng.randint(6, 16)], "kernel": [k], "stride": [s], "c_in": c_in,
                "c_out": rng.randint(1, 8), "padding": "valid"}

    rng = random.Random(37)
    entries = []
    for i in range(80):
        g = geometry(rng)
        entries.append(_entry(f"conv_onnx_f32_{i}", "onnx", "f32", g, _hidden(g)))
    region = learn(entries, _signature)["compile: injected"]
    assert region["rule"] == "c_in odd and stride_w/kernel_w > 1.17", region
    rng = random.Random(99)
    fresh = [geometry(rng) for _ in range(500)]
    assert all(matches(region["conditions"], features(g, "onnx", "f32")) == _hidden(g) for g in fresh)


def test_learn_names_the_one_flavor_of_a_flavor_bucket():
    flavors = (("tflite", "w8i8"), ("onnx", "f32"))
    region = learn(_entries(lambda g, b, f: f == "w8i8", 150, 1, flavors), _signature)["compile: injected"]
    assert region["status"] == "learned"
    assert region["rule"] == "flavor tflite_w8i8"
    assert region["conditions"] == [[["flavor=tflite_w8i8", "==", 1]]]


def test_learn_too_thin_on_three_cases():
    entries = _entries(lambda g, b, f: False, 20)
    for e in entries[:6:2]:
        e["status"], e["stage"] = "fail", "verify"
    region = learn(entries, _signature)["compile: injected"]
    assert region["status"] == "too thin" and region["positives"] == 3 and "rule" not in region
    assert region["why"].startswith("3 cases in this bucket")
    assert describe(region).startswith("too thin: 3 cases")


def test_learn_prints_a_split_at_one_and_a_half_as_at_least_two():
    region = learn(_entries(lambda g, b, f: g["stride"][-1] >= 2, 200, 2), _signature)["compile: injected"]
    assert region["rule"] == "stride_w >= 2"
    assert region["conditions"] == [[["stride_w", ">=", 2]]]


def test_learn_leaves_out_other_buckets_and_unrun_cases():
    entries = _entries(_by_hidden, 200, 3)
    for e in entries[:40]:
        if e["status"] == "pass":
            e["status"] = "not run"
    other = dict(entries[1], case="other", status="fail", stage="verify")
    regions = learn(entries + [other], lambda e: e["stage"])
    assert set(regions) == {"compile", "verify"}
    assert regions["verify"]["status"] == "too thin" and regions["verify"]["positives"] == 1
    counted = regions["compile"]["positives"] + regions["compile"]["negatives"]
    assert counted == sum(e["status"] in ("pass", "error") for e in entries)


def test_matches_any_conjunction_all_conditions():
    x = {"a": 2.0, "b": 0.0}
    assert matches([[["a", ">=", 2], ["b", "==", 0]]], x)
    assert not matches([[["a", ">=", 3]], [["b", "==", 1]]], x)
    assert matches([[["a", ">=", 3]], [["a", "<=", 2]]], x)


def test_write_report_gives_each_bucket_its_region_in_json_and_html(tmp_path):
    from pipeline.results.report import write_report

    entries = _entries(_by_hidden, 150, 4)
    write_report(entries, tmp_path, {"compiler": "iree-compile"})
    doc = json.loads((tmp_path / "results.json").read_text())
    region = doc["buckets"][0]["region"]
    assert region["status"] == "learned" and "c_in odd" in region["rule"]
    page = (tmp_path / "report.html").read_text()
    buckets = page[page.index("<h2>Failure buckets</h2>"):page.index("<h2>Where cases fail</h2>")]
    assert "<th>region</th>" in buckets and html.escape(describe(region)) in buckets


def test_write_report_keeps_the_report_when_learning_fails(tmp_path, monkeypatch):
    import pipeline.results.report as report

    def broken(entries, signature):
        raise ValueError("no tree today")

    monkeypatch.setattr(report, "learn", broken)
    report.write_report(_entries(_by_hidden, 40, 5), tmp_path, {})
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["buckets"][0]["region"] == {"status": "error", "why": "ValueError: no tree today"}
    assert "error: ValueError: no tree today" in (tmp_path / "report.html").read_text()


def test_region_section_of_a_bug_report_rule_and_too_thin():
    from pipeline.triage.bugreport import region_section

    region = learn(_entries(_by_hidden), _signature)["compile: injected"]
    lines = region_section(region)
    assert lines[0] == "## Where this bucket lives" and describe(region) in lines
    assert "- c_in odd" in lines or any(line.startswith("- ") and "c_in odd" in line for line in lines)
    held = region["held_out"]
    assert any(f"On {held['cases']} cases held out" in line for line in lines)
    assert any(f"learned from {region['train']['cases']} cases" in line for line in lines)
    thin = region_section({"status": "too thin", "why": "3 cases in this bucket", "positives": 3, "negatives": 9})
    assert thin == ["## Where this bucket lives", "", "Too thin: 3 cases in this bucket.", ""]
