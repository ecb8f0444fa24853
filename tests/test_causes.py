"""Root causes (pipeline/results/causes.py): buckets sharing a geometry at one stage, or one
explanation of a wrong answer, are one cause; the relation is closed; the rest stand alone.
And the summary, results.json and index.md show them."""
from pipeline.results.causes import describe, root_causes
from pipeline.results.report import cause_lines, causes


def _entry(flavor: str, c_in: int, stage: str, explanation: str | None = None, backend: str = "onnx") -> dict:
    geometry = {"rank": 1, "spatial": [8], "kernel": [3], "stride": [1], "c_in": c_in, "c_out": 4, "padding": "valid"}
    return {"backend": backend, "flavor": flavor, "geometry": geometry, "stage": stage, "explanation": explanation}


def test_a_geometry_failing_in_two_buckets_at_one_stage_joins_them():
    found = root_causes([("compile: a", _entry("f32", 4, "compile")), ("compile: b", _entry("bf16", 4, "compile")),
                         ("compile: a", _entry("f32", 8, "compile")), ("compile: c", _entry("f32", 16, "compile"))])
    assert [c["buckets"] for c in found] == [["compile: a", "compile: b"], ["compile: c"]]
    assert found[0]["flavors"] == ["onnx_bf16", "onnx_f32"] and found[0]["count"] == 3 and found[0]["geometries"] == 2
    assert found[0]["joined_by"] == ["mostly the same geometries fail in both at compile"] and found[1]["joined_by"] == []


def test_buckets_that_only_touch_are_not_one_cause_nor_chained_into_one():
    # a: geometries 1-4, b: 4-7, c: 7-10 (one geometry shared with each neighbour, of four each); d: 2-3, all in a
    failing = [(b, _entry(flavor, g, "compile")) for b, flavor, gs in
               (("compile: a", "f32", range(1, 5)), ("compile: b", "bf16", range(4, 8)),
                ("compile: c", "f32", range(7, 11)), ("compile: d", "bf16", range(2, 4))) for g in gs]
    found = root_causes(failing)
    assert sorted(c["buckets"] for c in found) == [["compile: a", "compile: d"], ["compile: b"], ["compile: c"]]
    # two of four shared is half of the smaller: one cause
    assert len(root_causes(failing[:4] + [("compile: e", _entry("bf16", g, "compile")) for g in (3, 4, 20, 21)])) == 1


def test_the_same_geometry_at_another_stage_is_not_one_cause():
    found = root_causes([("compile: a", _entry("f32", 4, "compile")), ("run: b", _entry("bf16", 4, "run"))])
    assert len(found) == 2


def test_one_explanation_joins_wrong_answers_and_none_matched_joins_nothing():
    found = root_causes([("verify: x", _entry("f32", 4, "verify", "dilation ignored")),
                         ("verify: y", _entry("bf16", 8, "verify", "dilation ignored")),
                         ("verify: p", _entry("f32", 16, "verify", "none matched")),
                         ("verify: q", _entry("bf16", 32, "verify", "none matched"))])
    assert sorted(len(c["buckets"]) for c in found) == [1, 1, 2]
    joined = next(c for c in found if len(c["buckets"]) == 2)
    assert joined["buckets"] == ["verify: x", "verify: y"]
    assert joined["joined_by"] == ["the same wrong answer: dilation ignored"]


def test_links_are_closed_transitively():
    found = root_causes([("verify: x", _entry("f32", 4, "verify", "bias dropped")),
                         ("verify: y", _entry("bf16", 4, "verify")),  # x, y: one geometry at verify
                         ("verify: z", _entry("w8i8", 8, "verify", "bias dropped", "tflite"))])  # x, z: one explanation
    assert len(found) == 1 and found[0]["buckets"] == ["verify: x", "verify: y", "verify: z"]
    assert "3 buckets, 3 cases (2 geometries) in onnx_bf16, onnx_f32, tflite_w8i8 at verify" in describe(found[0])


def test_the_summary_shows_causes_only_where_some_join_buckets():
    def result(flavor, c_in, reason):
        return {**_entry(flavor, c_in, "compile"), "case": f"conv_{flavor}_{c_in}", "status": "xfail",
                "reason": reason, "notes": {"outcome": "error"}}

    alone = [result("f32", 4, "iree-compile exit status 1: error: one"), result("f32", 8, "iree-compile exit status 1: error: two")]
    assert cause_lines(causes(alone)) == []
    joined = alone + [result("bf16", 4, "iree-compile exit status 1: error: three")]
    lines = cause_lines(causes(joined))
    assert lines[0] == "root causes: 2 (of 3 buckets)" and lines[1].startswith("  cause 1: 2 buckets, 2 cases (1 geometries)")
    assert sum("error: one" in line or "error: three" in line for line in lines[2:4]) == 2
