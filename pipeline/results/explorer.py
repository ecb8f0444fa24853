"""report.html's case table: every case as a row, with filters (target, flavor, category,
status, bucket), a search on the case id, sorting by any column, "N of M" shown (element
`shown`), the view kept in the URL fragment (`report.html#status=xfail&flavor=tflite_w8i8`,
`#case=<name>` opens one case; a link with a view opens scrolled to it: to the open case, else
to the table's heading), and a case's own view: geometry, checks with error and tolerance,
performance, stage durations, the failing log's tail, the repro command and, for a numeric
failure, where the output is wrong. Plain JS (explorer.js), inlined with its data: the page
stays one file with nothing to fetch."""
from __future__ import annotations

import json
import math
from pathlib import Path

JS = Path(__file__).with_name("explorer.js")
LOG_TAIL = 20  # lines of a failing case's log, each cut at LOG_WIDTH characters
LOG_WIDTH = 160
MAP_SIDE = 24  # an error map's positions per side at most (max-pooled)
MAP_PANELS = 4  # channel groups drawn


def check_arrays(case_dir: Path):
    """(expected, actual, tolerance per element), as float64, of the check repro.sh runs
    (check.json, repro-expected.bin, actual.npy); None without those files, or where the
    output's size is what failed."""
    import numpy as np

    from pipeline.checks.compare import CHECK, EXPECTED_BIN
    from pipeline.targets.runner import load_npy

    try:
        check = json.loads((case_dir / CHECK).read_text())
        actual = load_npy(case_dir / "actual.npy")
        raw = np.fromfile(case_dir / EXPECTED_BIN, dtype=np.uint8)
    except (OSError, ValueError):
        return None
    if check["type"] == "bf16":
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    else:
        dtype = {"f32": np.float32, "i8": np.int8}[check["type"]]
    if raw.size != actual.size * np.dtype(dtype).itemsize:
        return None
    want = raw.view(dtype).reshape(actual.shape).astype(np.float64)
    limit = check["atol"] + check["rtol"] * np.abs(want) if check["mode"] == "approximate" else np.zeros_like(want)
    return want, actual.astype(np.float64), limit


def error_map(case_dir: Path, channels_last: bool) -> dict | None:
    """|actual - expected| / tolerance of the check repro.sh runs, over the output positions:
    up to MAP_PANELS channel groups (the max over each group's channels), each max-pooled to at
    most MAP_SIDE x MAP_SIDE, in hundredths (100: the limit), capped at 1000; None without the
    files. `channels_last`: the output is NHWC/NWC (TFLite), else NCHW/NCW (ONNX)."""
    import numpy as np

    arrays = check_arrays(case_dir)
    if arrays is None or arrays[0].ndim < 3:
        return None
    want, got, limit = arrays
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.abs(got - want) / limit
    ratio = np.where(np.isfinite(got) & np.isfinite(want), np.nan_to_num(ratio, nan=0.0, posinf=10.0), 10.0)
    ratio = ratio[0]  # the first batch element
    grid = np.moveaxis(ratio, -1, 0) if channels_last else ratio  # (channels, *spatial)
    if grid.ndim == 2:
        grid = grid[:, None, :]  # Conv1D: one row
    channels = grid.shape[0]
    groups = np.array_split(np.arange(channels), min(MAP_PANELS, channels))
    panels = []
    for group in groups:
        plane = grid[group].max(axis=0)
        plane = _pool(plane, MAP_SIDE)
        panels.append({"label": f"channels {group[0]}-{group[-1]}" if len(group) > 1 else f"channel {group[0]}",
                       "values": np.minimum(np.round(plane * 100), 1000).astype(int).tolist()})
    height, width = len(panels[0]["values"]), len(panels[0]["values"][0])
    return {"width": width, "height": height, "panels": panels}


def _pool(plane, side: int):
    """Max-pool a 2-D array to at most side x side."""
    import numpy as np

    rows = math.ceil(plane.shape[0] / side)
    cols = math.ceil(plane.shape[1] / side)
    h, w = math.ceil(plane.shape[0] / rows), math.ceil(plane.shape[1] / cols)
    padded = np.zeros((h * rows, w * cols))
    padded[:plane.shape[0], :plane.shape[1]] = plane
    return padded.reshape(h, rows, w, cols).max(axis=(1, 3))


def _tail(path: str | None) -> str:
    if not path:
        return ""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()[-LOG_TAIL:]
    except OSError:
        return ""
    return "\n".join(line if len(line) <= LOG_WIDTH else line[:LOG_WIDTH] + " …" for line in lines)


def record(entry: dict, bucket: str, with_detail: bool) -> dict:
    """One case's row (and, `with_detail`, what its own view shows beyond the row)."""
    from pipeline.space.geometry import Geometry, macs
    from pipeline.targets.perf import mac_rate

    metrics = list((entry.get("metrics") or {}).values())
    first = metrics[0].get("error_to_tolerance") if metrics else None
    perf = entry.get("perf") or {}
    rate = mac_rate(perf) if entry["status"] == "pass" else None
    row = {"case": entry["case"], "target": entry["target"], "flavor": f"{entry['backend']}_{entry['flavor']}",
           "category": entry["category"], "status": entry["status"], "stage": entry.get("stage"),
           "bucket": bucket, "reason": (entry.get("reason") or "")[:600], "issue": entry.get("issue") or "",
           "ratio": first if isinstance(first, (int, float)) and math.isfinite(first) else None,
           "macs": macs(Geometry.from_dict(entry["geometry"])), "rate": rate[0] if rate else None,
           "compile": perf.get("compile_seconds"), "vmfb": perf.get("vmfb_bytes"),
           "geometry": entry["geometry"], "repro": entry.get("repro"), "log": entry.get("log"),
           "stages": {k: v.get("seconds") for k, v in (entry.get("stages") or {}).items() if isinstance(v, dict)},
           "perf": {k: v for k, v in perf.items() if not isinstance(v, (dict, list))},
           "checks": [{k: m.get(k) for k in ("name", "passed", "max_abs_error", "max_tolerance", "error_to_tolerance",
                                             "mismatches", "elements")} for m in metrics]}
    if with_detail:
        row["log_tail"] = _tail(entry.get("log"))
        if entry.get("stage") == "verify" and entry.get("repro"):
            row["map"] = error_map(Path(entry["repro"]).parent, entry["backend"] == "tflite")
    return row


def records(entries: list[dict]) -> list[dict]:
    """Every case's row; a failing case's with its view's detail (log tail, error map)."""
    from pipeline.outcome.bucket import signature
    from pipeline.outcome.result import RED, XFAIL

    failed = (*RED, XFAIL)
    return [record(e, signature(e.get("stage"), e.get("reason"), (e.get("notes") or {}).get("outcome") or e["status"])
                   if e["status"] in failed else "",
                   e["status"] in failed) for e in entries]


def section(rows: list[dict]) -> str:
    """The case table's HTML from records(): controls, the table, the case view, the data and
    the script."""
    data = json.dumps(rows, separators=(",", ":")).replace("</", "<\\/")  # no </script> inside the data
    return f"""<h2 id="cases-heading">Cases</h2>
<div id="filters"></div>
<p><span id="shown"></span> cases shown <span id="more"></span></p>
<div id="case-view" hidden></div>
<table class="rows" id="cases-table"><thead id="cases-head"></thead><tbody id="cases-body"></tbody></table>
<script type="application/json" id="cases">{data}</script>
<script>
{JS.read_text()}
</script>
"""
