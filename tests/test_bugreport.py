"""`doit bugreport`: on torq at N=1, one report per failure bucket, each with a repro.sh that
reproduces its failure with a bare PATH and a report.md naming the versions and commands; a
second run reuses the shrinks. And the pieces: slugs, titles, bucket selection, ranges."""
import json
import re
import subprocess

import pytest

from helpers import clean_env, doit
from pipeline.core.errors import ConfigError
from pipeline.triage.bugreport import _geometry_range, select, slug, title

BUCKET = ("compile: torq-compile exit status <n>: <path>:<n>:<n>: error: "
          "'linalg.generic' op unsupported in function body")


def _message(bucket: str) -> re.Pattern:
    """What a tool prints for the bucket: its last error message, placeholders as wildcards."""
    text = bucket.split("error: ")[-1] if "error: " in bucket else bucket.split(": ", 1)[1]
    parts = re.split(r"<(?:n|\.\.\.|path|unknown|hex)>", text)
    return re.compile(".*?".join(re.escape(p) for p in parts))


@pytest.mark.slow
def test_bugreport_on_torq_one_report_per_bucket_each_reproducing(tmp_path):
    build = tmp_path / "build"
    env = clean_env(CONV_SWEEP_TARGET="torq", CONV_SWEEP_N=1, CONV_SWEEP_BUILD_DIR=build)
    doit("-n", "2", "sweep", env=env, timeout=1800)
    document = json.loads((build / "report" / "torq" / "results.json").read_text())
    buckets = {b["signature"]: b["count"] for b in document["buckets"]}
    assert buckets, "torq-compile 2.3.0 fails some N=1 cases"

    run = doit("bugreport", "--budget", "15", env=env, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    root = build / "bugreports" / "torq"
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(slug(b) for b in buckets)
    index = (root / "index.md").read_text()
    toolchain = json.loads(document["tools"]["toolchain"])
    for bucket, count in buckets.items():
        assert f"| [{slug(bucket)}]({slug(bucket)}/report.md) | {count} | {title(bucket, 'torq')} |" in index
        folder = root / slug(bucket)
        report = (folder / "report.md").read_text()
        assert report.startswith(f"# {title(bucket, 'torq')}\n") and f"Bucket: `{bucket}`" in report
        assert f"## The sweep's cases in this bucket: {count}" in report
        for wheel in ("torq-compiler", "torq-runtime"):  # versions and wheel digests
            assert toolchain["wheels"][wheel]["sha256"] in report
        assert "torq-compile" in report and "--torq-hw=SL2610" in report  # the exact command
        # outside the project: a bare PATH, no virtual environment, nothing but the toolchain
        repro = subprocess.run(["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "HOME=" + str(tmp_path),
                                "/bin/bash", str(folder / "repro.sh")], capture_output=True, text=True, timeout=900)
        assert repro.returncode != 0, (bucket, repro.stderr[-2000:])
        assert _message(bucket).search(repro.stdout + repro.stderr), (bucket, repro.stderr[-2000:])

    again = doit("bugreport", "--budget", "15", env=env, timeout=1800)
    assert again.returncode == 0
    assert again.stdout.count("reusing the shrink of") == len(buckets)


def test_slug_is_a_short_folder_name_unique_per_bucket():
    assert slug(BUCKET) == "compile-torq-compile-linalg-generic-op-unsupported-in-function-b-a516c8c8"
    assert slug(BUCKET) != slug(BUCKET.replace("generic", "conv_2d_nchw_fchw"))
    assert re.fullmatch(r"[a-z0-9-]{1,73}", slug("verify: " + "x" * 500))


def test_title_drops_placeholders_and_boilerplate():
    assert title(BUCKET, "torq") == "[torq] compile: torq-compile 'linalg.generic' op unsupported in function body"
    assert title("compile: torq-compile killed by signal SIGABRT: #<n> <hex> (<path>)", "torq") == \
        "[torq] compile: torq-compile killed by signal SIGABRT"


def test_select_by_slug_signature_part_or_case_and_refuse_what_matches_nothing():
    groups = {BUCKET: [{"case": "conv_onnx_f32_a"}], "verify: x: elements outside tolerance": [{"case": "conv_b"}]}
    assert select(groups, [], "torq") == groups
    assert list(select(groups, [slug(BUCKET)], "torq")) == [BUCKET]
    assert list(select(groups, ["conv_b@torq"], "torq")) == ["verify: x: elements outside tolerance"]
    assert list(select(groups, ["linalg.generic"], "torq")) == [BUCKET]
    with pytest.raises(ConfigError, match="names no failure bucket of torq"):
        select(groups, ["no-such-bucket"], "torq")


def test_geometry_range_spans_every_field():
    entries = [{"geometry": {"rank": 2, "spatial": [4, 9], "kernel": [3, 3], "stride": [1, 1], "c_in": 2, "c_out": 8, "padding": "valid"}},
               {"geometry": {"rank": 2, "spatial": [6, 9], "kernel": [1, 3], "stride": [1, 1], "c_in": 2, "c_out": 16, "padding": "same"}}]
    rows = _geometry_range(entries)
    assert rows[:2] == ["| rank | 2 |", "| spatial | 4-6 x 9 |"]
    assert "| c_out | 8-16 |" in rows and "| padding | same, valid |" in rows and rows[-1].startswith("| MACs | ")
